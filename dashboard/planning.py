"""The budget side of one page: batch-size policy, mode, budget, the kernel whose desirable set is shown and
a verification's measurements; derives ``result`` (dashboard/result.py), the one snapshot every view draws.
Imports no Panel.

``_derive`` is the only place that changes anything: on a new analysis it settles the policy options, the
policy, the budget and the kernel, then sets them with the result in one ``param.update``. It is idempotent
(a result already made from the current inputs is kept), so the events of its own update change nothing.
"""

from __future__ import annotations

import dataclasses

import contextlib
import math

import param

from engine.errors import EngineError
from engine.policies import POLICIES
from engine.units import MiB

from .analysis import MODES, Analysis, budget_range, budget_steps, equivalent_budget
from .errors import describe_error
from .gpu import measured_times
from .plans import plan_choice
from .result import Result, result_key, shared_result
from .selection import SelectionState

DEFAULT_LIMIT = 8 * MiB  # Caffe's default per-kernel workspace, the paper's WR 8 MiB / WD 120 MiB pairing


class PlanningState(param.Parameterized):
    """Policy, mode, budget and kernel of one page over a ``SelectionState``; ``result`` follows them."""

    selection = param.ClassSelector(class_=SelectionState, constant=True)
    policy = param.Selector(default="powerOfTwo", objects=list(POLICIES), label="Batch-size policy")
    mode = param.Selector(
        default="WD", objects=list(MODES), doc="WR: per-kernel workspace limit; WD: one total budget for the network"
    )
    budget = param.Integer(
        default=DEFAULT_LIMIT, bounds=(0, None), doc="Bytes: the per-kernel limit in WR, the network total in WD"
    )
    kernel = param.String(default="", doc="Kernel id (layer:F|BD|BF) whose desirable set is shown")
    measured = param.Dict(
        default=None, allow_None=True, doc="Per-kernel measured times (ms) from verifying the current plan on a GPU"
    )
    verified = param.Dict(
        default=None, allow_None=True, doc="Totals of the verification report (all_passed, failed, measured_ms, ...)"
    )

    result = param.ClassSelector(class_=Result, default=None, allow_None=True, constant=True)
    error = param.String(default="", constant=True, doc="Why there is no plan, in one line")

    def __init__(self, selection: SelectionState, **params):
        self._given = {k for k in ("policy", "budget") if k in params}
        super().__init__(selection=selection, **params)
        self._budget_mode = self.mode  # the mode the budget value is expressed in
        self._switched: tuple | None = None  # (mode, budget, new mode, new budget) of the last mode switch
        self._analysis: Analysis | None = None
        self._profile: str | None = None  # the chosen profile's name at the last rebase
        # set by the page (Dashboard) to send every view's update as one message, e.g. panel's io.hold
        self.hold = contextlib.nullcontext
        self._derive()
        self.param.watch(lambda *_e: self._derive(), ["policy", "mode", "budget", "kernel", "measured"])
        selection.param.watch(lambda *_e: self._derive(), ["analysis", "other", "error"])

    def _derive(self) -> None:
        sel = self.selection
        analysis = sel.analysis
        if analysis is None:
            if self.result is not None or self.error != sel.error:
                with param.edit_constant(self):
                    self.param.update(result=None, error=sel.error)
            self._analysis = None
            return
        updates: dict = {}
        if analysis is not self._analysis:
            updates = self._rebase(analysis)
            self._analysis = analysis
        values = {k: updates.get(k, getattr(self, k)) for k in ("policy", "mode", "budget", "kernel", "measured")}
        if values["mode"] != self._budget_mode:
            updates["budget"] = values["budget"] = self._convert(
                values["budget"], self._budget_mode, values["mode"], len(analysis.kernels)
            )
            self._budget_mode = values["mode"]
        elif self._switched and values["budget"] != self._switched[3]:
            self._switched = None  # the budget moved since the switch: a switch back converts afresh
        if (
            self.measured
            and self.result is not None
            and self.result.key[:5]
            != result_key(analysis, *(values[k] for k in ("policy", "mode", "budget", "kernel")), None, None)[:5]
        ):
            updates.update(measured=None, verified=None)  # a measurement belongs to the plan it verified
            values["measured"] = None
        key = result_key(
            analysis,
            values["policy"],
            values["mode"],
            values["budget"],
            values["kernel"],
            values["measured"],
            sel.other,
        )
        if self.result is not None and self.result.key == key and not updates:
            return
        try:
            result = shared_result(
                analysis,
                values["policy"],
                values["mode"],
                values["budget"],
                values["kernel"],
                values["measured"],
                updates.get("verified", self.verified),
                sel.other,
                sel.compare,
            )
        except (EngineError, ValueError, KeyError) as err:
            result, error = None, describe_error(err)
        else:
            error = "" if result.choice.feasible else result.choice.reason
            if not result.compare_error and sel.other_error:  # a copy: the snapshot may be shared
                result = dataclasses.replace(result, compare_error=sel.other_error)
        with self.hold(), param.edit_constant(self):
            self.param.update(**updates, result=result, error=error)

    def _rebase(self, analysis: Analysis) -> dict:
        """Policy options, policy, budget and kernel for a new analysis: what stays valid is kept; a new
        scope starts on the profile's recorded policy and the default budget (on a slider step)."""
        old = self._analysis
        policies = list(analysis.policies)
        self.param.policy.objects = policies  # nothing watches the options; the value follows in one update
        updates: dict = {"measured": None, "verified": None}
        new_scope = old is None or old.scope != analysis.scope
        recorded = next(
            (n.get("policy") for n in analysis.profile.networks if n.get("name") == analysis.scope.network), None
        )
        # a newly chosen profile, not another engine set of the same one (a new Profile object too): a user's
        # policy chosen before an engine-set click was reset (and the two clicks must agree in either order)
        new_profile, self._profile = self._profile != self.selection.profile, self.selection.profile
        if new_profile and "policy" not in self._given and recorded in policies:
            updates["policy"] = recorded  # what the profile was measured for, e.g. "all"
        elif self.policy not in policies:
            updates["policy"] = "powerOfTwo" if "powerOfTwo" in policies else policies[-1]
        self._given.discard("policy")
        if new_scope and "budget" not in self._given:
            lo, hi = budget_range(analysis, self.mode)
            n = len(analysis.kernels)
            default = min(max(DEFAULT_LIMIT * (n if self.mode == "WD" else 1), lo), hi)
            steps = budget_steps(lo, hi)  # start on a slider step, so slider and summary agree
            updates["budget"] = int(min(steps, key=lambda b: abs(math.log2(b + 1) - math.log2(default + 1))))
            self._budget_mode, self._switched = self.mode, None
        self._given.discard("budget")
        if analysis.kernel_index(self.kernel) is None:
            updates["kernel"] = ""
        return {k: v for k, v in updates.items() if getattr(self, k) != v}

    def _convert(self, budget: int, old: str, new: str, n: int) -> int:
        """WR <-> WD at the same total (Fig. 13 pairs WR and WD bars); switching back before the budget moves
        restores the exact budget (WD 120 B -> WR 15 B per kernel -> WD 120 B, not 15 x 8)."""
        back = self._switched
        if back is not None and back[0] == new and back[2] == old and back[3] == budget:
            self._switched = None
            return back[1]
        limit, total = equivalent_budget(old, budget, n)
        converted = total if new == "WD" else limit
        self._switched = (old, budget, new, converted)
        return converted

    # --- plans and verification -------------------------------------------------------------------
    def budget_steps(self) -> list[int]:
        analysis = self.selection.analysis
        if analysis is None:
            return [0]
        return budget_steps(*budget_range(analysis, self.mode))

    def make_plan(self):
        """The engine's plan for the current controls: the one the page shows, Export writes and Verify runs."""
        analysis = self.selection.analysis
        if analysis is None:
            raise EngineError(self.error or "no profile loaded")
        choice = (
            self.result.choice
            if self.result is not None
            else plan_choice(analysis, self.policy, self.mode, self.budget)
        )
        if not choice.feasible:
            raise EngineError(choice.reason)
        return choice.plan

    def set_controls(self, policy: str, mode: str, budget: int) -> None:
        """Policy, mode and a budget already in that mode's terms (a loaded plan's), in one update."""
        self._budget_mode, self._switched = mode, None
        self.param.update(policy=policy, mode=mode, budget=int(budget))

    def set_verification(self, report: dict) -> None:
        """Show a verification report of the current plan (engine.gpu.verify_plan): measured times in the
        timeline and summary, correctness in the summary."""
        self.param.update(verified=dict(report.get("totals", {})), measured=measured_times(report))
