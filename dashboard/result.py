"""What the views draw for one set of controls: the plan, its baselines and every view's frame.
Imports no Panel.

``build_result`` is the slider path. The plans come from the page's ``PlanCache`` (engine.planner.make_plan):
the current one, undivided cuDNN at the same memory, and the other mode at the same total (Fig. 14).
Everything else is an index into what the analysis computed once per scope.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from .analysis import Analysis, equivalent_budget
from .frames import desirable_frame, plan_frame, timeline_frame, workspace_frame
from .plans import Choice, PlanCache


@dataclass
class Result:
    """Everything the views draw for one (analysis, policy, mode, budget, kernel, measurement)."""

    choice: Choice                    # the current plan
    baseline: Choice                  # undivided at the same memory (same mode, same budget)
    wr: Choice                        # the current policy under WR and WD at the same total (Fig. 14)
    wd: Choice
    optimum: tuple[float, int]        # unlimited-workspace optimum of the current policy (time_ms, bytes)
    plan: pd.DataFrame
    timeline: pd.DataFrame
    workspace: pd.DataFrame
    kernel: str                       # the kernel whose desirable set is shown
    desirable: pd.DataFrame
    pieces: pd.DataFrame
    summary: dict = field(default_factory=dict)


def build_result(analysis: Analysis, plans: PlanCache, policy: str, mode: str, budget: int, kernel: str = "",
                 measured: dict | None = None, verified: dict | None = None) -> Result:
    """The slider path: the engine's plans at ``budget`` and every view's frame."""
    ps = analysis.policies[policy]
    n = len(ps.kernels)
    choice = plans.choice(analysis, policy, mode, budget)
    baseline = plans.choice(analysis, "undivided", mode, budget)
    limit, total = equivalent_budget(mode, budget, n)
    wr = choice if mode == "WR" else plans.choice(analysis, policy, "WR", limit)
    wd = choice if mode == "WD" else plans.choice(analysis, policy, "WD", total)
    optimum = ps.unlimited()
    k = analysis.kernel_index(kernel)
    if k is None:  # default: the kernel that takes longest in the current plan (the paper shows conv2 F)
        k = int(np.argmax([ps.t[i][j] for i, j in enumerate(choice.index)])) if choice.feasible else 0
    points, pieces = desirable_frame(ps, k, choice.index[k] if choice.feasible else None)
    return Result(
        choice=choice, baseline=baseline, wr=wr, wd=wd, optimum=optimum,
        plan=plan_frame(ps, choice),
        timeline=timeline_frame(ps, choice, measured),
        workspace=workspace_frame(ps, wr, wd),
        kernel=ps.kernels[k].id, desirable=points, pieces=pieces,
        summary=summarize(choice, baseline, optimum, n, measured, verified),
    )


def summarize(choice: Choice, baseline: Choice, optimum: tuple[float, int], n_kernels: int,
              measured: dict | None = None, verified: dict | None = None) -> dict:
    """Headline numbers. Speed-up is against undivided under the *same* budget in the same mode, a
    feasible baseline (ucudnn-reference.md §11, bug 8)."""
    t_opt, ws_opt = optimum
    out = {"feasible": choice.feasible, "reason": choice.reason, "mode": choice.mode, "policy": choice.policy,
           "budget": choice.budget, "n_kernels": n_kernels,
           "time_ms": choice.time_ms, "workspace": choice.workspace,
           "baseline_ms": baseline.time_ms, "baseline_workspace": baseline.workspace,
           "baseline_reason": baseline.reason,
           "speedup": baseline.time_ms / choice.time_ms if choice.feasible and baseline.feasible else math.nan,
           "optimum_ms": t_opt, "optimum_workspace": ws_opt,
           "gap_ms": choice.time_ms - t_opt if choice.feasible else math.nan,
           "gap_pct": 100 * (choice.time_ms / t_opt - 1) if choice.feasible and t_opt > 0 else math.nan}
    if measured:
        out["measured_ms"] = float(sum(measured.values()))
        out["measured_kernels"] = len(measured)
    if verified:
        out["all_passed"] = bool(verified.get("all_passed", False))
        out["failed"] = list(verified.get("failed", []))
    return out
