"""``panel serve app.py``: the mu-cuDNN explorer dashboard (see dashboard/ui.py).

Profiles: the bundled ones (assets/profiles) plus any named by UCUDNN_PROFILE (files, os.pathsep-separated)
or UCUDNN_PROFILE_DIR (folders). Serve with one process (GPU jobs are per process). Plan files of any size up
to the engine's limit upload in chunks, so no websocket option is needed. For several visitors at once:

    panel serve app.py --num-threads 4 --unused-session-lifetime 60000

(threads keep one page's update from queueing behind another's; a page whose websocket connects more than
15 s after it was requested, as on a loaded machine, would otherwise be built twice.)

Analyses, plans and memory timelines are cached per process and shared by every session.
"""

import panel as pn
from panel.io.resources import get_dist_path

from dashboard.ui import EXTENSIONS, Dashboard

pn.extension(*EXTENSIONS, notifications=False)

if pn.state.served:
    # Panel names its stylesheets' folder when it writes the page; a session made when its websocket connects
    # (after Bokeh dropped an unused one) never gets the page, and would fetch them from a CDN instead
    pn.state.curdoc._template_variables.setdefault("dist_url", get_dist_path())
    dash = Dashboard()
    pn.template.BootstrapTemplate(
        title="ucudnn-explorer: micro-batched convolutions under workspace budgets",
        sidebar=[dash.sidebar],
        main=[dash.main],
        sidebar_width=340,
        header_background="#1f4e79",
        busy_indicator=None,  # Panel's is one per process: every page would spin (and get a message) on any
        # page's update, ten pages' traffic on each move
    ).servable()
