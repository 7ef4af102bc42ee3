"""Controls: profile, network, mini-batch, dtype, layout, policy, mode and a log-scale budget slider."""

from __future__ import annotations

import math

import panel as pn
from bokeh.models import CustomJSTickFormatter

from engine.errors import BudgetError
from engine.units import format_size, parse_size

from .base import StateView

MODE_HELP = {"WR": "WR (workspace reuse): the budget is each kernel's own workspace limit.",
             "WD": "WD (workspace division): one network-wide workspace of this total, divided among kernels."}


def budget_label(b: int) -> str:
    return format_size(b) if b else "0 B"


def nearest_step(steps: list[int], budget: int) -> int:
    """The slider position closest to ``budget`` on a log scale (0 B maps to 0 B)."""
    return min(range(len(steps)), key=lambda i: abs(math.log2(steps[i] + 1) - math.log2(budget + 1)))


class BudgetSlider(pn.widgets.IntSlider):
    """An integer slider over the log-spaced budget steps, labelled in bytes by a JS formatter.

    Panel holds every browser change for 50 ms (``Syncable._debounce``, private in Panel 1.9) to merge
    bursts; a key press on this slider sends one change, and that wait is a fifth of the 250 ms budget.
    """

    _debounce = 0


def steps_formatter(steps: list[int]) -> CustomJSTickFormatter:
    labels = [budget_label(b) for b in steps]
    return CustomJSTickFormatter(args={"labels": labels}, code="return labels[Math.round(tick)] ?? '';")


class Controls(StateView):
    _watch = ("analysis", "mode", "budget", "error", "messages")

    def _build(self) -> None:
        s = self.state.param
        self.profile = pn.widgets.Select.from_param(s.profile, label="Profile", sizing_mode="stretch_width")
        self.compare = pn.widgets.Select.from_param(s.compare, label="Compare with (the same network on another GPU)",
                                                    sizing_mode="stretch_width")
        self.network = pn.widgets.Select.from_param(s.network, label="Network", sizing_mode="stretch_width")
        self.batch = pn.widgets.Select.from_param(s.batch, label="Mini-batch size", sizing_mode="stretch_width")
        self.precision = pn.widgets.Select.from_param(s.precision, label="Data type", sizing_mode="stretch_width")
        self.layout = pn.widgets.Select.from_param(s.layout, label="Layout", sizing_mode="stretch_width")
        self.policy = pn.widgets.RadioButtonGroup.from_param(s.policy, sizing_mode="stretch_width",
                                                             variant="outline")
        self.mode = pn.widgets.RadioButtonGroup.from_param(s.mode, sizing_mode="stretch_width",
                                                           variant="outline")
        self.engines = pn.widgets.RadioButtonGroup.from_param(s.engines, sizing_mode="stretch_width",
                                                              variant="outline")
        self.mode_help = pn.pane.Markdown("", styles={"font-size": "0.85em"}, margin=(0, 10))
        self.steps: list[int] = [0]
        self.slider = BudgetSlider(start=0, end=1, value=0, step=1, sizing_mode="stretch_width",
                                   label="Workspace budget", format=steps_formatter([0, 0]))
        self.exact = pn.widgets.TextInput(placeholder="or type a budget, e.g. 120MiB",
                                          sizing_mode="stretch_width")
        self.exact_error = pn.pane.Alert("", alert_type="danger", visible=False, margin=(0, 10))
        self.notes = pn.Column(sizing_mode="stretch_width")
        self._syncing = False
        self.slider.param.watch(self._from_slider, "value")
        self.exact.param.watch(self._from_text, "value")
        self.panel = pn.Column(
            self.notes, self.profile, self.compare, self.network,
            pn.Row(self.batch, self.precision, self.layout, sizing_mode="stretch_width"),
            pn.pane.Markdown("**Batch-size policy**", margin=(5, 10, 0, 10)), self.policy,
            pn.pane.Markdown("**Engines** (all measured / cuDNN's heuristic list / deterministic only)",
                             margin=(5, 10, 0, 10)), self.engines,
            pn.pane.Markdown("**Mode**", margin=(5, 10, 0, 10)), self.mode, self.mode_help,
            self.slider, self.exact, self.exact_error, sizing_mode="stretch_width")

    def _refresh(self, *events) -> None:
        state = self.state
        names = {e.name for e in events} or {"analysis", "mode", "budget", "messages", "error"}
        if names & {"analysis", "mode"}:
            self._set_options()
        if names & {"analysis", "mode", "budget"}:
            self._set_slider()
        if names & {"messages", "error"}:
            notes = [pn.pane.Alert(text, alert_type=level, margin=(0, 10)) for level, text in state.messages]
            if state.error and state.result is None:
                notes.append(pn.pane.Alert(state.error, alert_type="danger", margin=(0, 10)))
            self.notes[:] = notes
        self.mode_help.object = MODE_HELP[state.mode]
        self.compare.visible = len(state.param.compare.objects) > 1
        disabled = state.analysis is None
        for w in (self.slider, self.exact, self.policy, self.mode):
            w.disabled = disabled

    def _set_options(self) -> None:
        steps = self.state.budget_steps()
        self._syncing = True
        try:
            self.steps = steps
            self.slider.param.update(
                label=("Workspace limit per kernel" if self.state.mode == "WR" else "Total workspace budget")
                + " (log scale)", start=0, end=max(len(steps) - 1, 1), format=steps_formatter(steps))
        finally:
            self._syncing = False

    def _set_slider(self) -> None:
        self._syncing = True
        try:
            self.slider.value = nearest_step(self.steps, self.state.budget)
            if self.exact.value:
                self.exact.value = ""
        finally:
            self._syncing = False

    def _from_slider(self, event) -> None:
        if self._syncing or event.new is None or not 0 <= event.new < len(self.steps):
            return
        self.state.budget = int(self.steps[event.new])

    def _from_text(self, event) -> None:
        if self._syncing or not event.new.strip():
            return
        try:
            budget = parse_size(event.new)
        except BudgetError as err:
            self.exact_error.param.update(object=str(err), visible=True)
            return
        self.exact_error.visible = False
        self.state.budget = budget
