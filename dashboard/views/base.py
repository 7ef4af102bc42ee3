"""Shared base for views: one ``PlannerState``, widgets built after ``super().__init__`` (panel-patterns §2)."""

from __future__ import annotations

import panel as pn
import param

from ..state import PlannerState


class StateView(pn.viewable.Viewer):
    """A view of one page's state. Subclasses build their components once in ``_build`` and refresh them
    in ``_refresh`` whenever one of ``_watch`` changes on the state."""

    state = param.ClassSelector(class_=PlannerState, constant=True)
    _watch: tuple[str, ...] = ("result",)

    def __init__(self, **params):
        super().__init__(**params)
        self._build()
        self.state.param.watch(self._refresh, list(self._watch))
        self._refresh()

    def _build(self) -> None:
        raise NotImplementedError

    def _refresh(self, *_events) -> None:
        raise NotImplementedError

    @staticmethod
    def caption(testid: str) -> pn.pane.HTML:
        """Small text under a plot: the numbers behind its title, readable by people and tests."""
        return pn.pane.HTML("", styles={"font-size": "0.82em", "color": "#444"}, margin=(0, 10, 6, 10),
                            sizing_mode="stretch_width", name=testid)

    def _push(self, *panes) -> None:
        """Raw Bokeh edits reach a notebook only when pushed; on a server this is a no-op."""
        pn.io.push_notebook(*panes)
