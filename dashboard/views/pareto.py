"""Network Pareto front view (total convolution time vs total workspace, every policy)."""

from __future__ import annotations

import math

import panel as pn

from engine.units import format_size

from ..palette import POLICY_COLORS
from ..plots import ParetoPlot
from .base import StateView


def comparison_text(cmp) -> str:
    """The other GPU beside this one: unlimited optima and WD times at the plan's total budget."""

    def ms(v: float) -> str:
        return "nothing fits" if math.isnan(v) else f"{v:.2f} ms"

    ratio = f", {cmp.here_optimum_ms / cmp.optimum_ms:.2f}x as fast" if cmp.optimum_ms > 0 else ""
    return (
        f" Dash-dotted: {cmp.gpu}'s WD front from its own profile. Unlimited optimum {cmp.optimum_ms:.2f} ms "
        f"there against {cmp.here_optimum_ms:.2f} ms on {cmp.here_gpu}{ratio}; WD at {format_size(cmp.budget)} "
        f"in total: {ms(cmp.at_budget_ms)} there, {ms(cmp.here_at_budget_ms)} here."
    )


class ParetoView(StateView):
    def _build(self) -> None:
        self.plot = ParetoPlot()
        self.plot.fig.css_classes = ["ucd-pareto"]
        self.pane = pn.pane.Bokeh(self.plot.fig, sizing_mode="stretch_width")
        self.text = self.caption("pareto-caption")
        self._fronts_of = None
        self.panel = pn.Column(self.pane, self.text, sizing_mode="stretch_width")

    def _refresh(self, *_events) -> None:
        result = self.state.result
        if result is None:
            self.plot.update_marks([], None)
            self.plot.update_other(None, "")
            self.text.object = ""
            self._push(self.pane)
            return
        analysis, policy = result.analysis, result.choice.policy
        scope = analysis.scope
        if self._fronts_of is None or self._fronts_of[0] is not analysis or self._fronts_of[1] != policy:
            title = f"Network Pareto front: {scope.network}, B={scope.batch}, {scope.precision}, {scope.layout}"
            self.plot.update_fronts(analysis.fronts, analysis.policies[policy].sweep, policy, title)
            self._fronts_of = (analysis, policy)
        c, base, (t_opt, ws_opt) = result.choice, result.baseline, result.optimum
        marks = []
        if c.feasible:
            marks.append(
                dict(
                    what="current plan",
                    detail=f"({c.mode}, {c.policy})",
                    workspace=c.workspace,
                    time_ms=c.time_ms,
                    marker="star",
                    color="#d62728",
                    size=18,
                )
            )
        if base.feasible:
            marks.append(
                dict(
                    what="undivided, same memory",
                    detail=f"({base.mode})",
                    workspace=base.workspace,
                    time_ms=base.time_ms,
                    marker="square",
                    color=POLICY_COLORS["undivided"],
                    size=12,
                )
            )
        marks.append(
            dict(
                what="unlimited optimum",
                detail=f"({c.policy})",
                workspace=ws_opt,
                time_ms=t_opt,
                marker="diamond",
                color="#9467bd",
                size=15,
            )
        )
        n = len(analysis.kernels)
        total = c.budget * n if c.mode == "WR" else c.budget
        self.plot.update_marks(marks, total)
        cmp = result.comparison
        self.plot.update_other(cmp.front if cmp else None, f"WD front, {policy}, {cmp.gpu}" if cmp else "")
        fronts = ", ".join(f"{name} {len(ps.front.workspace)} points" for name, ps in analysis.policies.items())
        budget = (
            f"WR limit {format_size(c.budget)} x {n} kernels = {format_size(total)}"
            if c.mode == "WR"
            else f"WD total {format_size(total)}"
        )
        self.text.object = (
            f"Sum over {n} kernels of time and workspace. Dotted line: {budget}. "
            f"WD fronts: {fronts}."
            + (comparison_text(cmp) if cmp else "")
            + (f" {result.compare_error}." if result.compare_error else "")
        )
        self._push(self.pane)
