"""Controls: profile, network, mini-batch, dtype, layout, policy, mode and a log-scale budget slider."""

from __future__ import annotations

import math
import time

import panel as pn
from bokeh.models import CustomJSTickFormatter

from engine.errors import BudgetError
from engine.units import format_size, parse_size

from ..errors import literal
from ..selection import SCOPE
from .base import StateView
from .busy import SLOW, BusyVeil
from .widgets import Buttons, Choice

MODE_HELP = {
    "WR": "WR (workspace reuse): the budget is each kernel's own workspace limit.",
    "WD": "WD (workspace division): one network-wide workspace of this total, divided among kernels.",
}


RESEND_S = 5.0  # a slider move this soon after the page moved the handle may have started from the old spot


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


SELECTS = {
    "profile": "Profile",
    "compare": "Compare with (the same network on another GPU)",
    "network": "Network",
    "batch": "Mini-batch size",
    "precision": "Data type",
    "layout": "Layout",
}


class Controls(StateView):
    """Widgets are set from the state in one ``param.update(options=..., value=...)`` each, so a widget
    never holds a value its options lack (which would make Panel send None back to the state); a widget's
    change is passed on only when the state offers it."""

    _watch = {
        "selection": ("profile", "engines", *SCOPE, "model", "compare", "analysis", "messages", "error"),
        "planning": ("policy", "mode", "budget", "result", "error"),
    }

    def _build(self) -> None:
        sel, plan = self.state.selection, self.state.planning
        self.widgets: dict[str, tuple] = {}  # name -> (widget, owning part)
        for name, label in SELECTS.items():
            self.widgets[name] = (Choice(label=label, sizing_mode="stretch_width", css_classes=[SLOW]), sel)
        radio = dict(sizing_mode="stretch_width", variant="outline", css_classes=[SLOW])
        self.widgets["engines"] = (Buttons(**radio), sel)
        for name in ("policy", "mode"):
            self.widgets[name] = (Buttons(**radio), plan)
        for name, (widget, part) in self.widgets.items():
            setattr(self, name, widget)
            self.listen(widget, "value", lambda e, part=part, name=name: self._to_state(part, name, e.new))
        self.mode_help = pn.pane.Markdown("", styles={"font-size": "0.85em"}, margin=(0, 10))
        self.steps: list[int] = [0]
        self._moved_at = -math.inf  # when the page last moved the slider's handle
        self._steps_key: tuple | None = None  # (analysis, mode) the steps were made for
        self.slider = BudgetSlider(
            start=0,
            end=1,
            value=0,
            step=1,
            sizing_mode="stretch_width",
            show_value=False,
            label="Workspace budget",
            format=steps_formatter([0, 0]),
        )
        self.exact = pn.widgets.TextInput(
            placeholder="or type a budget with its unit, e.g. 120MiB", sizing_mode="stretch_width"
        )
        self.exact_error = pn.pane.Alert("", alert_type="danger", visible=False, margin=(0, 10))
        self.model = pn.widgets.TextInput(
            name="Another model",
            placeholder="torchvision:resnet101 (planned if this profile measured its kernels)",
            sizing_mode="stretch_width",
            css_classes=[SLOW],
        )
        self.listen(self.model, "value", lambda e: setattr(sel, "model", e.new))
        self.veil = BusyVeil()
        self.listen(self.veil, "asked", self.veil.answer)
        self.notes = pn.Column(sizing_mode="stretch_width")
        self._syncing = False
        self.listen(self.slider, "value", self._from_slider)
        self.listen(self.exact, "value", self._from_text)
        self.panel = pn.Column(
            self.notes,
            self.profile,
            self.compare,
            self.network,
            self.model,
            pn.Row(self.batch, self.precision, self.layout, sizing_mode="stretch_width"),
            pn.pane.Markdown("**Batch-size policy**", margin=(5, 10, 0, 10)),
            self.policy,
            pn.pane.Markdown(
                "**Engines** (all measured / cuDNN's heuristic list / deterministic only)", margin=(5, 10, 0, 10)
            ),
            self.engines,
            pn.pane.Markdown("**Mode**", margin=(5, 10, 0, 10)),
            self.mode,
            self.mode_help,
            self.slider,
            self.exact,
            self.exact_error,
            sizing_mode="stretch_width",
        )

    def _to_state(self, part, name: str, value) -> None:
        """A widget's choice, passed on only when the state offers it (a transient None never is)."""
        if self._syncing or value is None or value == getattr(part, name):
            return
        if value not in part.param[name].objects:
            return
        setattr(part, name, value)

    def _refresh(self, *events) -> None:
        state, plan = self.state, self.state.planning
        names = {e.name for e in events} or {"analysis", "mode", "budget", "messages", "error", "result"}
        self._syncing = True
        try:
            for name, (widget, part) in self.widgets.items():
                options = dict(part.param[name].get_range())
                value = getattr(part, name)
                if (
                    list(widget.options.values() if isinstance(widget.options, dict) else widget.options)
                    != list(options.values())
                    or widget.value != value
                ):
                    widget.param.update(options=options, value=value)
            if names & {"analysis", "mode", "result"}:
                self._set_options()
            if names & {"analysis", "mode", "budget", "result"}:
                self._set_slider()
        finally:
            self._syncing = False
        if names & {"messages", "error", "analysis", "result"}:
            notes = [pn.pane.Alert(literal(text), alert_type=level, margin=(0, 10)) for level, text in state.messages]
            if plan.error and plan.result is None:
                notes.append(pn.pane.Alert(literal(plan.error), alert_type="danger", margin=(0, 10)))
            self.notes[:] = notes
        self.mode_help.object = MODE_HELP[plan.mode]
        self.compare.visible = len(state.selection.param.compare.objects) > 1
        disabled = state.analysis is None
        for w in (self.slider, self.exact, self.policy, self.mode):
            w.disabled = disabled

    def _set_options(self) -> None:
        """The slider's steps follow the analysis and mode only; reckoning them (a pass over every kernel's
        configurations) on each budget move cost ~15 ms of the slider's time (issue 25)."""
        key = (self.state.analysis, self.state.planning.mode)
        if self._steps_key is not None and key[0] is self._steps_key[0] and key[1] == self._steps_key[1]:
            return
        self._steps_key = key
        steps = self.state.budget_steps()
        if steps != self.steps:
            self.steps = steps
            self.slider.param.update(start=0, end=max(len(steps) - 1, 1), format=steps_formatter(steps))

    def _set_slider(self) -> None:
        """The slider sits on the step nearest the budget; its label shows the budget itself, exactly."""
        plan = self.state.planning
        what = "Workspace limit per kernel" if plan.mode == "WR" else "Total workspace budget"
        step = nearest_step(self.steps, plan.budget)
        if step != self.slider.value:
            self._moved_at = time.monotonic()
        self.slider.param.update(value=step, label=f"{what}: {budget_label(plan.budget)} (log scale)")
        typed = self.exact.value.strip()
        if typed:
            try:
                keep = parse_size(typed) == plan.budget
            except BudgetError:
                keep = False
            if not keep:
                self.exact.value = ""

    def _from_slider(self, event) -> None:
        if self._syncing or event.new is None or not 0 <= event.new < len(self.steps):
            return
        self.state.planning.budget = int(self.steps[event.new])
        if time.monotonic() - self._moved_at < RESEND_S:
            self._resend_handle()

    def _resend_handle(self) -> None:
        """Put the browser's handle back on the step it just sent. The page had moved the handle (a typed
        budget, another profile, an earlier resend) and a key press made before that arrived moved it from
        where it was: the browser then showed the page's older step under the new budget's label. Panel sends
        nothing (the value is the one the browser sent), so the value is sent again at the Bokeh model
        (``_models``: Panel's own record of them); a browser already showing that step ignores it."""
        self._moved_at = time.monotonic()
        for model, _parent in list(self.slider._models.values()):
            model.trigger("value", model.value, model.value)

    def _from_text(self, event) -> None:
        if not event.new.strip():
            self.exact_error.visible = False  # the text the error quoted is gone
            return
        if self._syncing:
            return
        try:
            budget = parse_size(event.new)
        except BudgetError as err:
            self.exact_error.param.update(object=literal(err), visible=True)
            return
        self.exact_error.visible = False
        self.state.planning.budget = budget
