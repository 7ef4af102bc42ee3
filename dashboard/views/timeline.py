"""Per-layer timeline (Fig. 3): predicted micro-batch pieces by engine, and measured kernels after verify."""

from __future__ import annotations

import panel as pn

from ..plots import TimelinePlot
from .base import StateView


class TimelineView(StateView):
    """Lives in a tab: its figure is made when the tab first opens (none of its models on a page load)."""

    def _build(self) -> None:
        self.plot: TimelinePlot | None = None
        self.text = self.caption("timeline-caption")
        self.panel = pn.Column(self.text, sizing_mode="stretch_width")

    def _refresh(self, *_events) -> None:
        result = self.state.result
        if result is None:
            return
        first = self.plot is None
        if first:
            self.plot = TimelinePlot()
            self.plot.fig.css_classes = ["ucd-timeline"]
        c = result.choice
        what = "predicted vs measured" if result.measured else "predicted"
        title = f"Timeline of one training step's convolutions ({what})"
        self.plot.update(result.timeline, result.analysis.engine_colors, title)
        if first:  # the figure enters the page with its data
            self.pane = pn.pane.Bokeh(self.plot.fig, sizing_mode="stretch_width")
            self.panel.insert(0, self.pane)
        total = f"{c.time_ms:.2f} ms predicted" if c.feasible else "no plan at this budget"
        if result.measured:
            total += f", {sum(result.measured.values()):.2f} ms measured (grey lanes)"
        self.text.object = (
            f"Kernels in execution order (Forward, then BackwardData and BackwardFilter in reverse), "
            f"each split into its micro-batches and coloured by engine: {total}."
        )
        self._push(self.pane)
