"""The plans the page shows: ``engine.planner.make_plan`` at the controls, the same object Export writes
and Verify runs. Imports no Panel.

A ``Choice`` is one such plan seen from the dashboard: the indices of its configurations in the
analysis' desirable sets (so views reuse what was computed once per scope), its totals, or why there
is no plan at that budget. ``choose`` keeps the most recent ones per process: every session of a server
shares them, and a slider moved back and forth makes each plan once.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from engine.configuration import Configuration
from engine.errors import InfeasibleBudgetError
from engine.plan import Plan
from engine.planner import make_plan

from .analysis import Analysis, PolicySets
from .cache import LRU

COMMAND = "dashboard"  # provenance.command of every plan the dashboard makes
CHOICES = LRU(512)  # (analysis, policy, mode, budget) -> Choice


@dataclass(frozen=True)
class Choice:
    """Each kernel's configuration under one (policy, mode, budget), from the engine's plan.

    ``budget`` is the per-kernel limit in WR and the network total in WD (mu-cuDNN §III-A).
    ``workspace`` is the sum of the chosen configurations' workspaces, the network total in both modes;
    ``arena`` (WD) is the size of the one aligned WD workspace.
    """

    policy: str
    mode: str
    budget: int
    index: tuple[int, ...] | None
    time_ms: float
    workspace: int
    reason: str = ""
    arena: int | None = None
    plan: Plan | None = None

    @property
    def feasible(self) -> bool:
        return self.index is not None


def choose(analysis: Analysis, policy: str, mode: str, budget: int) -> Choice:
    """``plan_choice``, cached per process (plans are deterministic and read-only)."""
    budget = int(budget)
    return CHOICES.get((analysis, policy, mode, budget), lambda: plan_choice(analysis, policy, mode, budget))


def plan_choice(analysis: Analysis, policy: str, mode: str, budget: int) -> Choice:
    """``make_plan`` at (policy, mode, budget) on the analysis' profile and scope."""
    scope = analysis.scope
    try:
        plan = make_plan(
            analysis.profile,
            analysis.net,
            mode=mode.lower(),
            budget=int(budget),
            policy=policy,
            precision=scope.precision,
            layout=scope.layout,
            command=COMMAND,
        )
    except InfeasibleBudgetError as err:
        return Choice(policy, mode, int(budget), None, math.nan, 0, str(err))
    ps = analysis.policies[policy]
    index = tuple(ps.index_of(k, pk.configuration) for k, pk in enumerate(plan.kernels))
    return Choice(
        policy, mode, int(budget), index, plan.totals.time_ms, plan.totals.workspace, arena=plan.arena_size, plan=plan
    )


def configurations(ps: PolicySets, choice: Choice) -> list[Configuration]:
    return [s[i] for s, i in zip(ps.sets, choice.index)]
