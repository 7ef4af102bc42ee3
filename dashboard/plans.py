"""The plans the page shows: ``engine.planner.make_plan`` at the controls, the same object Export writes
and Verify runs. Imports no Panel.

A ``Choice`` is one such plan seen from the dashboard: the indices of its configurations in the
analysis' desirable sets (so views reuse what was computed once per scope), its totals, or why there
is no plan at that budget.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass

from engine.configuration import Configuration
from engine.errors import InfeasibleBudgetError
from engine.plan import Plan
from engine.planner import make_plan

from .analysis import Analysis, PolicySets

COMMAND = "dashboard"   # provenance.command of every plan the dashboard makes


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


class PlanCache:
    """The plans one page made, most recent last (a slider moved back and forth makes each once)."""

    def __init__(self, size: int = 64):
        self.size = size
        self._plans: OrderedDict = OrderedDict()

    def choice(self, analysis: Analysis, policy: str, mode: str, budget: int) -> Choice:
        """The engine's plan for these controls as a Choice; an infeasible budget gives the engine's reason."""
        budget = int(budget)
        key = (id(analysis), policy, mode, budget)
        hit = self._plans.pop(key, None) or (analysis, plan_choice(analysis, policy, mode, budget))
        self._plans[key] = hit  # the analysis is kept so its id stays unique
        while len(self._plans) > self.size:
            self._plans.popitem(last=False)
        return hit[1]


def plan_choice(analysis: Analysis, policy: str, mode: str, budget: int) -> Choice:
    """``make_plan`` at (policy, mode, budget) on the analysis' profile and scope."""
    scope = analysis.scope
    try:
        plan = make_plan(analysis.profile, analysis.net, mode=mode.lower(), budget=int(budget), policy=policy,
                         precision=scope.precision, layout=scope.layout, command=COMMAND)
    except InfeasibleBudgetError as err:
        return Choice(policy, mode, int(budget), None, math.nan, 0, str(err))
    ps = analysis.policies[policy]
    index = tuple(ps.index_of(k, pk.configuration) for k, pk in enumerate(plan.kernels))
    return Choice(policy, mode, int(budget), index, plan.totals.time_ms, plan.totals.workspace, arena=plan.arena_size,
                  plan=plan)


def configurations(ps: PolicySets, choice: Choice) -> list[Configuration]:
    return [s[i] for s, i in zip(ps.sets, choice.index)]
