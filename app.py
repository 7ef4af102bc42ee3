"""``panel serve app.py``: the mu-cuDNN explorer dashboard (see dashboard/ui.py).

Profiles: the bundled ones (assets/profiles) plus any named by UCUDNN_PROFILE (files, os.pathsep-separated)
or UCUDNN_PROFILE_DIR (folders). Serve with one process (GPU jobs are per process), e.g.
``panel serve app.py --num-threads 4 --allow-websocket-origin localhost:5006``.
"""

import panel as pn

from dashboard.ui import EXTENSIONS, Dashboard

pn.extension(*EXTENSIONS, notifications=False)

if pn.state.served:
    dash = Dashboard()
    pn.template.BootstrapTemplate(
        title="ucudnn-explorer: micro-batched convolutions under workspace budgets",
        sidebar=[dash.sidebar], main=[dash.main], sidebar_width=340, header_background="#1f4e79",
    ).servable()
