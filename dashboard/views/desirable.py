"""Desirable set of one kernel (Fig. 8), picked here, in the plan table or on a workspace bar."""

from __future__ import annotations

import pandas as pd
import panel as pn

from engine.units import format_size

from ..frames import KIND_NAMES
from ..plots import DesirablePlot
from .base import StateView
from .widgets import Choice


class DesirableView(StateView):
    def _build(self) -> None:
        self.plot = DesirablePlot()
        self.plot.fig.css_classes = ["ucd-desirable"]
        self.pane = pn.pane.Bokeh(self.plot.fig, sizing_mode="stretch_width")
        self.picker = Choice(label="Kernel", options=[], width=210)
        self.listen(self.picker, "value", self._pick)
        self._syncing = False
        self._options_of = None
        self.text = self.caption("desirable-caption")
        self.panel = pn.Column(
            self.pane, pn.Row(self.picker, self.text, sizing_mode="stretch_width"), sizing_mode="stretch_width"
        )

    def _pick(self, event) -> None:
        if not self._syncing and event.new:
            self.state.kernel = event.new

    def _refresh(self, *_events) -> None:
        result = self.state.result
        if result is None or not result.choice.feasible:
            self.plot.update(pd.DataFrame(), pd.DataFrame(), {}, "Desirable set (no plan at this budget)", None)
            self.text.object = ""
            self._push(self.pane)
            return
        analysis, c = result.analysis, result.choice
        self._syncing = True
        try:
            if self._options_of is not analysis:  # options and value in one update: never a value not offered
                self.picker.param.update(
                    options={f"{k.id} ({k.kind.value})": k.id for k in analysis.kernels}, value=result.kernel
                )
                self._options_of = analysis
            elif self.picker.value != result.kernel:
                self.picker.value = result.kernel
        finally:
            self._syncing = False
        kernel = result.kernel
        chosen = result.desirable[result.desirable.chosen]
        title = f"Desirable set of {kernel} ({c.policy})"
        limit = c.budget if c.mode == "WR" else None
        self.plot.update(result.desirable, result.pieces, analysis.engine_colors, title, limit)
        pick = (
            f"The plan uses {chosen.division.iloc[0]} ({chosen.engines.iloc[0]}), "
            f"{chosen.time_ms.iloc[0]:.3f} ms with {format_size(chosen.workspace_mib.iloc[0] * 2**20)} (red)."
            if len(chosen)
            else ""
        )
        self.text.object = (
            f"{KIND_NAMES[kernel.split(':')[1]]} of {kernel.split(':')[0]}: "
            f"{len(result.desirable)} desirable configurations. {pick} Bars: micro-batch division, "
            f"coloured by engine" + ("; dotted line: the WR limit." if limit is not None else ".")
        )
        self._push(self.pane)
