"""``panel serve app.py``: the mu-cuDNN explorer dashboard (see dashboard/ui.py).

Profiles: the bundled ones (assets/profiles) plus any named by UCUDNN_PROFILE (files, os.pathsep-separated)
or UCUDNN_PROFILE_DIR (folders). Plan files of any size up to the engine's limit upload in chunks, so no
websocket option is needed. One visitor, or a few:

    panel serve app.py --num-threads 4 --unused-session-lifetime 60000

(threads keep one page's update from queueing behind another's; a page whose websocket connects more than
15 s after it was requested, as on a loaded machine, would otherwise be built twice.) For many visitors at
once (ten pages opening together), add ``--num-procs 2`` (or one per CPU core): each process builds its own
pages, so page loads use every core instead of one (Python's GIL); the shared analyses, plans and memory
timelines are then cached once per process. GPU jobs (Verify on GPU, the memory tab's runs) are queued per
process, so with several processes two pages may run GPU jobs at once: serve with one process where
measured GPU times matter.

The page is one layout (a header, the sidebar and the views), not one of Panel's templates: a template
added a third of a page's server time (its four roots are preprocessed and themed one by one).
"""

import panel as pn
from panel.io.resources import get_dist_path

from dashboard.ui import EXTENSIONS, Dashboard

TITLE = "ucudnn-explorer: micro-batched convolutions under workspace budgets"

pn.extension(*EXTENSIONS, notifications=False)

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
    pn.Column(header, Dashboard(), sizing_mode="stretch_width", design=pn.theme.Bootstrap).servable(title=TITLE)
