"""The whole dashboard as one Viewer: the same components in ``panel serve app.py`` and in Jupyter.

``Dashboard.__panel__`` returns a plain layout (templates do not render in notebooks, panel#2677), which
``app.py`` serves too, under a header: no layout level that adds nothing (each one is a model a page pays
for on the server and in the browser).
"""

from __future__ import annotations

import threading

import panel as pn
import param

from .state import PlannerState
from .views.base import page_hold, session_doc
from .views.controls import Controls
from .views.desirable import DesirableView
from .views.gpu import GPUView
from .views.memory import MemoryView
from .views.pareto import ParetoView
from .views.plan import PlanView
from .views.summary import SummaryView
from .views.timeline import TimelineView
from .views.workspace import WorkspaceView

EXTENSIONS = ("tabulator", "filedropper")
MAIN_MIN_WIDTH = 770  # px beside the 330 px sidebar: the views as drawn in a 1100 px window


def rule() -> pn.pane.HTML:
    """A horizontal rule. Not ``pn.layout.Divider``, whose stylesheet names Panel's CDN unless the page is
    written after it is made (app.py builds the dashboard after its page is written)."""
    return pn.pane.HTML("<hr>", sizing_mode="stretch_width", margin=(0, 5))


class Dashboard(pn.viewable.Viewer):
    state = param.ClassSelector(class_=PlannerState, constant=True)

    def __init__(self, state: PlannerState | None = None, gpu: tuple[bool, str] | None = None, runner=None, **params):
        super().__init__(state=state if state is not None else PlannerState(), **params)
        s = self.state
        doc = session_doc()
        if doc is not None:  # one websocket message per change instead of one per model (panel-patterns §3)
            thread = threading.get_ident()
            s.planning.hold = lambda: page_hold(doc, thread)
        self.controls = Controls(state=s)
        self.gpu = GPUView(state=s, gpu=gpu, runner=runner)
        self.summary = SummaryView(state=s)
        self.pareto = ParetoView(state=s)
        self.desirable = DesirableView(state=s)
        # the tabs' views: only the open tab's view is refreshed on a change (views/base.py: StateView.set_shown)
        self.workspace = WorkspaceView(state=s)
        self.timeline = TimelineView(state=s, shown=False)
        self.plan = PlanView(state=s, shown=False)
        self.sidebar = pn.Column(self.controls, rule(), self.plan.files, rule(), self.gpu, width=330)
        # dynamic tabs: only the shown tab's plots are in the page, so a budget change redraws what is seen
        # (the hidden ones are drawn from the current state when their tab opens)
        self.memory = MemoryView(state=s, shown=False)
        self.tabs = pn.Tabs(
            ("Workspace division (Fig. 14)", self.workspace),
            ("Timeline (Fig. 3)", self.timeline),
            ("Plan", self.plan),
            ("Memory (vDNN, Layrub, SuperNeurons)", self.memory),
            dynamic=True,
            sizing_mode="stretch_width",
        )
        views = (self.workspace, self.timeline, self.plan, self.memory)
        for i, v in enumerate(views):
            v.tab_open = lambda i=i: self.tabs.active == i
        self.tabs.param.watch(lambda e: [v.locked(v.set_shown, i == e.new) for i, v in enumerate(views)], "active")
        # narrower than MAIN_MIN_WIDTH the page scrolls sideways: squeezed beside the fixed sidebar, the plots'
        # legends covered their curves and captions wrapped a word a line. A strut, because Panel replaces a
        # layout's own min_width with its children's
        strut = pn.Spacer(height=0, margin=0, min_width=MAIN_MIN_WIDTH, sizing_mode="stretch_width")
        self.main = pn.Column(
            self.controls.veil,  # over the views only (dashboard/views/busy.py)
            strut,
            self.summary,
            pn.Row(self.pareto, self.desirable, sizing_mode="stretch_width"),
            self.tabs,
            sizing_mode="stretch_width",
        )

    def __panel__(self):
        return pn.Row(self.sidebar, self.main, sizing_mode="stretch_width")
