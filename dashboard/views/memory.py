"""Memory tab: the memory planner's timeline (vDNN, Layrub, SuperNeurons) for the chosen network.

Planned on demand: only while the tab is shown, and again when the network, profile or the tab's own
controls change (a plan takes up to a second; the budget slider must stay fast).
"""

from __future__ import annotations

import html

import panel as pn

from engine.errors import BudgetError, EngineError
from engine.units import GiB, format_size, parse_size

from ..errors import describe_error
from ..memory_plot import MemoryPlot
from .base import StateView

CAPACITIES = {"12 GiB (K40, TITAN X: the papers' GPUs)": 12 * GiB, "16 GiB (P100)": 16 * GiB,
              "32 GiB (V100)": 32 * GiB, "80 GiB (H100)": 80 * GiB, "unbounded": None}


class MemoryView(StateView):
    _watch = ("analysis", "memory_policy", "capacity")

    def _build(self) -> None:
        self.plot = MemoryPlot()
        self.plot.fig.css_classes = ["ucd-memory"]
        self.policy = pn.widgets.Select.from_param(self.state.param.memory_policy, width=220)
        self.capacity = pn.widgets.Select(label="GPU capacity", options=CAPACITIES, value=self.state.capacity,
                                          width=260)
        self.exact = pn.widgets.TextInput(label="or exactly", placeholder="e.g. 24GiB", width=140)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False, sizing_mode="stretch_width")
        self.capacity.param.watch(lambda e: setattr(self.state, "capacity", e.new), "value")
        self.exact.param.watch(self._exact, "value")
        self.text = self.caption("memory-caption")
        self.active = False
        self._stale = True
        self.panel = pn.Column(pn.Row(self.policy, self.capacity, self.exact), self.error,
                               pn.pane.Bokeh(self.plot.fig, sizing_mode="stretch_width"),
                               pn.pane.Bokeh(self.plot.lanes, sizing_mode="stretch_width"), self.text,
                               sizing_mode="stretch_width")

    def show(self, active: bool) -> None:
        """Called by the Dashboard when the memory tab opens or closes."""
        self.active = active
        if active and self._stale:
            self._refresh()

    def _exact(self, event) -> None:
        if not event.new.strip():
            return
        try:
            self.state.capacity = parse_size(event.new) or None
        except BudgetError as err:
            self.error.param.update(object=str(err), visible=True)
            return
        self.error.visible = False

    def _refresh(self, *_events) -> None:
        self._stale = True
        if not self.active or self.state.scope is None:
            return
        try:
            frames = self.state.memory()
        except (EngineError, ValueError, KeyError) as err:
            self.error.param.update(object=f"Memory planner: {describe_error(err)}", visible=True)
            return
        self.error.visible = False
        self._stale = False
        s = frames["summary"].iloc[0]
        cap = self.state.capacity
        title = (f"Memory timeline: {s['network']} B={s['batch']}, {s['policy']}, "
                 f"capacity {format_size(cap) if cap else 'unbounded'}")
        self.plot.update(frames, title)
        fits = "fits" if s["fits"] else "does NOT fit"
        timing = (f"; iteration {s['iteration_ms']:.1f} ms (convolutions {s['conv_ms']:.1f} ms, stalls "
                  f"{s['stall_ms']:.1f} ms)" if s["iteration_ms"] == s["iteration_ms"] else "")
        moved = (f"; offloaded {format_size(s['offload_bytes'])}, prefetched {format_size(s['prefetch_bytes'])}, "
                 f"{int(s['recompute_count'])} steps recomputed")
        notes = " ".join(frames["notes"].note) if "notes" in frames and len(frames["notes"]) else ""
        times = s.get("time_note") or "no time modelled (no profile)"
        self.text.object = (f"Peak {format_size(s['peak'])} at {s['peak_layer']} ({s['peak_phase']}), {fits}"
                            f"{timing}{moved}. Convolution workspaces and times come from the selected profile. "
                            f"{notes}<br><b>Predicted times</b>: {html.escape(times)}")
        self._push(self.panel)
