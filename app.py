"""``panel serve app.py``: the mu-cuDNN explorer dashboard (see dashboard/ui.py).

Profiles: the bundled ones (assets/profiles) plus any named by UCUDNN_PROFILE (files, os.pathsep-separated)
or UCUDNN_PROFILE_DIR (folders). Plan files of any size up to the engine's limit upload in chunks, so no
websocket option is needed. Serve with:

    panel serve app.py --unused-session-lifetime 60000

(a page whose websocket connects more than 15 s after it was requested, as on a loaded machine, would otherwise be
built twice). One process builds every page, one at a time in the order the pages loaded (dashboard/pages.py), each
after its browser shows a header and "Loading...": about 0.8 CPU seconds a page, and a slider move's update about
25 ms (ten pages at once, ResNet-50: 5.1 s median page load, slider p90 0.26 s; benchmarks/reports/dashboard.md).
``--num-threads N`` is turned off, with a warning (dashboard/threads.py: with Panel's pool a quick choice could be
lost, and threads bought no parallelism under Python's GIL). ``--num-procs N`` (one per core) spreads page builds
over the cores: the dashboard is built in the process its websocket reached (only the page's header is made twice
when that is not the process of its first request); measured 2.4 s and 4.0 s median in two runs against 5.1 s.
Analyses, plans, memory timelines and the snapshots the views draw are cached per process and shared by its pages;
GPU jobs (Verify on GPU, the memory tab's runs) are queued per process: serve one process where measured GPU times
matter.

The page is one layout (a header, the sidebar and the views), not one of Panel's templates: a template
added a third of a page's server time (its four roots are preprocessed and themed one by one).
"""

from functools import partial

import panel as pn
from panel.io.resources import get_dist_path

from dashboard.pages import build_in_turn
from dashboard.threads import page_events_on_loop
from dashboard.ui import EXTENSIONS, Dashboard

TITLE = "ucudnn-explorer: micro-batched convolutions under workspace budgets"

pn.extension(*EXTENSIONS, notifications=False)
page_events_on_loop()


def show_dashboard(page: pn.Column) -> None:
    page[1:] = [Dashboard()]  # in place of "Loading..."


if __name__.startswith("bokeh_app_"):  # what pn.state.served tests, without its inspect.stack() (0.1 s a page)
    # Panel names its stylesheets' folder when it writes the page; a session made when its websocket connects
    # (after Bokeh dropped an unused one) never gets the page, and would fetch them from a CDN instead
    pn.state.curdoc._template_variables.setdefault("dist_url", get_dist_path())
    header = pn.pane.HTML(
        f"<span>{TITLE}</span>",
        styles={"background": "#1f4e79", "color": "white", "font-size": "1.3em", "padding": "10px 16px"},
        sizing_mode="stretch_width",
        margin=0,
    )
    loading = pn.pane.HTML("Loading the dashboard...", margin=(10, 16))
    page = pn.Column(header, loading, sizing_mode="stretch_width", design=pn.theme.Bootstrap)
    # built once the browser has the page, in its turn (dashboard/pages.py), not while its request is answered
    doc = pn.state.curdoc
    pn.state.onload(lambda: build_in_turn(doc, partial(show_dashboard, page)))
    page.servable(title=TITLE)
