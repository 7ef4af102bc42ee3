"""Workspace division (Fig. 14): every kernel's workspace per layer, WR and WD at the same total."""

from __future__ import annotations

import panel as pn

from engine.units import format_size

from ..plots import WorkspacePlot
from .base import StateView


class WorkspaceView(StateView):
    def _build(self) -> None:
        self.plot = WorkspacePlot()
        self.plot.fig.css_classes = ["ucd-workspace"]
        self.pane = pn.pane.Bokeh(self.plot.fig, sizing_mode="stretch_width")
        self.text = self.caption("workspace-caption")
        self.panel = pn.Column(self.pane, self.text, sizing_mode="stretch_width")
        for kind, src in self.plot.sources.items():
            src.selected.on_change("indices", self._tapped(kind))

    def _tapped(self, kind):
        def cb(_attr, _old, new):
            if new:
                src = self.plot.sources[kind]
                with self.state.lock:
                    self.state.kernel = src.data["kernel"][new[0]]
                src.selected.indices = []

        return cb

    def _refresh(self, *_events) -> None:
        result = self.state.result
        if result is None:
            return
        wr, wd = result.wr, result.wd

        def part(c, what):
            return (
                f"{c.mode} {format_size(c.budget)} {what} (uses {format_size(c.workspace)})"
                if c.feasible
                else f"{c.mode} infeasible"
            )

        self.plot.update(result.workspace)
        self.text.object = (
            f"{result.choice.policy}: {part(wr, 'per kernel')} (light bars); {part(wd, 'in total')} "
            f"(dark bars). Click a bar segment to show that kernel's desirable set."
        )
        self._push(self.pane)
