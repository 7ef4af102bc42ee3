"""What the views draw for one set of controls: the plan, its baselines and every view's frame.
Imports no Panel.

``build_result`` is the slider path; ``shared_result`` computes it once per process for what every page
shares (issue 25: ten pages moving to the same budget made the same frames ten times). The plans come
from ``plans.choose`` (engine.planner.make_plan):
the current one, undivided cuDNN at the same memory, and the other mode at the same total (Fig. 14).
Everything else is an index into what the analysis computed once per scope.

A ``Result`` is one consistent snapshot: the views draw only from it (its analysis, policy, mode,
budget, kernel and comparison), never from controls that may already have moved on, so no view can
show one profile's front with another's plan.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from engine.errors import EngineError

from .analysis import Analysis, equivalent_budget
from .cache import LRU
from .compare import Comparison, compare
from .errors import describe_error
from .frames import desirable_frame, plan_frame, timeline_frame, workspace_frame
from .plans import Choice, choose


@dataclass
class Result:
    """Everything the views draw for one (analysis, policy, mode, budget, kernel, measurement)."""

    analysis: Analysis
    choice: Choice  # the current plan
    baseline: Choice  # undivided at the same memory (same mode, same budget)
    wr: Choice  # the current policy under WR and WD at the same total (Fig. 14)
    wd: Choice
    optimum: tuple[float, int]  # unlimited-workspace optimum of the current policy (time_ms, bytes)
    plan: pd.DataFrame
    timeline: pd.DataFrame
    workspace: pd.DataFrame
    kernel: str  # the kernel whose desirable set is shown
    desirable: pd.DataFrame
    pieces: pd.DataFrame
    summary: dict = field(default_factory=dict)
    measured: dict | None = None  # per-kernel measured times of this plan (verification), if any
    comparison: Comparison | None = None  # the same scope on another GPU ("Compare with")
    compare_error: str = ""  # why the chosen comparison cannot be shown
    other: Analysis | None = None  # the other GPU's analysis the comparison was made from
    kernel_asked: str = ""  # the kernel the controls asked for ("" or unknown: the default)

    @property
    def key(self) -> tuple:
        """The inputs this snapshot was made from (the state recomputes only when they change)."""
        c = self.choice
        return result_key(self.analysis, c.policy, c.mode, c.budget, self.kernel_asked, self.measured, self.other)


def result_key(analysis, policy, mode, budget, kernel, measured, other) -> tuple:
    """``Result.key`` of the inputs; measurements compare by content (a dict is unhashable)."""
    return (
        analysis,
        policy,
        mode,
        int(budget),
        kernel,
        None if measured is None else tuple(sorted(measured.items())),
        other,
    )


def build_result(
    analysis: Analysis,
    policy: str,
    mode: str,
    budget: int,
    kernel: str = "",
    measured: dict | None = None,
    verified: dict | None = None,
    other: Analysis | None = None,
    other_name: str = "",
    choose=choose,
) -> Result:
    """The slider path: the engine's plans at ``budget`` and every view's frame; ``other``: the same scope
    from another GPU's profile (named ``other_name``), compared at the plan's total budget."""
    ps = analysis.policies[policy]
    n = len(ps.kernels)
    choice = choose(analysis, policy, mode, budget)
    baseline = choose(analysis, "undivided", mode, budget)
    limit, total = equivalent_budget(mode, budget, n)
    wr = choice if mode == "WR" else choose(analysis, policy, "WR", limit)
    wd = choice if mode == "WD" else choose(analysis, policy, "WD", total)
    optimum = ps.unlimited()
    k = analysis.kernel_index(kernel)
    if k is None:  # default: the kernel that takes longest in the current plan (the paper shows conv2 F)
        k = int(np.argmax([ps.t[i][j] for i, j in enumerate(choice.index)])) if choice.feasible else 0
    points, pieces = desirable_frame(ps, k, choice.index[k] if choice.feasible else None)
    comparison, why = None, ""
    if other is not None:
        try:
            comparison = compare(analysis, other, policy, total)
        except (EngineError, ValueError, KeyError) as err:
            why = f"cannot compare with {other_name}: {describe_error(err)}"
    return Result(
        analysis=analysis,
        measured=measured,
        comparison=comparison,
        compare_error=why,
        kernel_asked=kernel,
        other=other,
        choice=choice,
        baseline=baseline,
        wr=wr,
        wd=wd,
        optimum=optimum,
        plan=plan_frame(ps, choice),
        timeline=timeline_frame(ps, choice, measured),
        workspace=workspace_frame(ps, wr, wd),
        kernel=ps.kernels[k].id,
        desirable=points,
        pieces=pieces,
        summary=summarize(choice, baseline, optimum, n, measured, verified),
    )


RESULTS = LRU(128)  # (analysis, policy, mode, budget, kernel asked) -> Result with no measurement or comparison


def shared_result(
    analysis: Analysis,
    policy: str,
    mode: str,
    budget: int,
    kernel: str = "",
    measured: dict | None = None,
    verified: dict | None = None,
    other: Analysis | None = None,
    other_name: str = "",
) -> Result:
    """``build_result``; without a measurement or a comparison (a page's own) the snapshot is computed once
    per process and shared by every page: read-only, like everything the views draw."""
    if measured is None and verified is None and other is None:
        key = (analysis, policy, mode, int(budget), kernel)
        return RESULTS.get(key, lambda: build_result(analysis, policy, mode, budget, kernel))
    return build_result(analysis, policy, mode, budget, kernel, measured, verified, other, other_name)


def summarize(
    choice: Choice,
    baseline: Choice,
    optimum: tuple[float, int],
    n_kernels: int,
    measured: dict | None = None,
    verified: dict | None = None,
) -> dict:
    """Headline numbers. Speed-up is against undivided under the *same* budget in the same mode, a
    feasible baseline (ucudnn-reference.md §11, bug 8)."""
    t_opt, ws_opt = optimum
    out = {
        "feasible": choice.feasible,
        "reason": choice.reason,
        "mode": choice.mode,
        "policy": choice.policy,
        "budget": choice.budget,
        "n_kernels": n_kernels,
        "time_ms": choice.time_ms,
        "workspace": choice.workspace,
        "baseline_ms": baseline.time_ms,
        "baseline_workspace": baseline.workspace,
        "baseline_reason": baseline.reason,
        "speedup": baseline.time_ms / choice.time_ms if choice.feasible and baseline.feasible else math.nan,
        "optimum_ms": t_opt,
        "optimum_workspace": ws_opt,
        "gap_ms": choice.time_ms - t_opt if choice.feasible else math.nan,
        "gap_pct": 100 * (choice.time_ms / t_opt - 1) if choice.feasible and t_opt > 0 else math.nan,
    }
    if measured:
        out["measured_ms"] = float(sum(measured.values()))
        out["measured_kernels"] = len(measured)
    if verified:
        out["all_passed"] = bool(verified.get("all_passed", False))
        out["failed"] = list(verified.get("failed", []))
    return out
