"""``panel serve app.py``: the mu-cuDNN explorer dashboard (see dashboard/ui.py).

Profiles: the bundled ones (assets/profiles) plus any named by UCUDNN_PROFILE (files, os.pathsep-separated)
or UCUDNN_PROFILE_DIR (folders). Serve with one process (GPU jobs are per process); for several visitors
and plan files over 20 MB (Tornado's default websocket message limit, past which a browser session is
dropped without a word):

    panel serve app.py --num-threads 4 --websocket-max-message-size 104857600

Analyses, plans and memory timelines are cached per process and shared by every session.
"""

import panel as pn

from dashboard.ui import EXTENSIONS, Dashboard

pn.extension(*EXTENSIONS, notifications=False)

if pn.state.served:
    dash = Dashboard()
    pn.template.BootstrapTemplate(
        title="ucudnn-explorer: micro-batched convolutions under workspace budgets",
        sidebar=[dash.sidebar],
        main=[dash.main],
        sidebar_width=340,
        header_background="#1f4e79",
    ).servable()
