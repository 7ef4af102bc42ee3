"""The per-page model: what the controls chose and everything the views show. Imports no Panel.

``PlannerState`` puts together the page's parts, each one job with its own derivation:
``SelectionState`` (profile, engine set, scope, comparison -> the ``Analysis``, cached per process),
``PlanningState`` (policy, mode, budget, kernel, verification -> the ``Result`` snapshot the views draw)
and ``MemoryState`` (the memory tab's controls). GPU jobs run in ``jobs.JobRunner`` (one per process).
The flat attributes (``state.budget``, ``state.network``, ...) read and set the part that owns them, for
notebooks and scripts.
"""

from __future__ import annotations

import threading

import param

from engine.errors import EngineError
from engine.profile import ENGINE_SETS
from engine.netnames import is_torch_name
from engine.units import format_size

from .analysis import Analysis
from .memory_runs import Measured
from .memory_state import MemoryState
from .planning import DEFAULT_LIMIT, PlanningState
from .profiles import PROFILE_ENV
from .result import Result
from .scopes import Scope, complete_policies
from .selection import NO_PROFILE, SCOPE, SelectionState

__all__ = ["DEFAULT_LIMIT", "NO_PROFILE", "PROFILE_ENV", "PlannerState"]

SELECTION = ("profile", "engines", *SCOPE, "compare")
PLANNING = ("policy", "mode", "budget", "kernel", "measured", "verified")
MEMORY = ("memory_policy", "capacity", "memory_results")


def _delegate(part: str, name: str) -> property:
    def get(self):
        return getattr(getattr(self, part), name)

    def set_(self, value):
        setattr(getattr(self, part), name, value)

    return property(get, set_, doc=f"``{part}.{name}``")


class PlannerState(param.Parameterized):
    """Controls and derived results of one page. Set controls from code or widgets; read ``result``."""

    selection = param.ClassSelector(class_=SelectionState, constant=True)
    planning = param.ClassSelector(class_=PlanningState, constant=True)
    memory_state = param.ClassSelector(class_=MemoryState, constant=True)

    def __init__(self, profiles: dict | None = None, environ=None, **controls):
        """``profiles``: name -> path or Profile; default: bundled plus the environment's (profiles.py).
        Keywords set controls (profile, network, batch, precision, layout, engines, compare, policy, mode,
        budget, kernel, memory_policy, capacity, memory_results)."""
        unknown = set(controls) - set(SELECTION) - set(PLANNING) - set(MEMORY)
        if unknown:
            raise TypeError(f"PlannerState: unknown control(s) {', '.join(sorted(unknown))}")
        selection = SelectionState(profiles, environ, **{k: v for k, v in controls.items() if k in SELECTION})
        planning = PlanningState(selection, **{k: v for k, v in controls.items() if k in PLANNING})
        memory = MemoryState(selection, environ, **{k: v for k, v in controls.items() if k in MEMORY})
        super().__init__(selection=selection, planning=planning, memory_state=memory)
        self.lock = threading.RLock()  # one event at a time per page (views/base.py: StateView.listen)

    for _name in SELECTION:
        locals()[_name] = _delegate("selection", _name)
    for _name in PLANNING:
        locals()[_name] = _delegate("planning", _name)
    for _name in MEMORY:
        locals()[_name] = _delegate("memory_state", _name)
    del _name

    # --- derived, read-only -------------------------------------------------------------------
    @property
    def analysis(self) -> Analysis | None:
        return self.selection.analysis

    @property
    def result(self) -> Result | None:
        return self.planning.result

    @property
    def error(self) -> str:
        return self.planning.error

    @property
    def messages(self) -> list:
        return self.selection.messages

    @property
    def comparison(self):
        return self.result.comparison if self.result is not None else None

    @property
    def compare_error(self) -> str:
        return self.result.compare_error if self.result is not None else ""

    @property
    def scope(self) -> Scope | None:
        return self.selection.scope

    @property
    def current_profile(self):
        return self.analysis.profile if self.analysis else None

    # --- actions --------------------------------------------------------------------------------
    def update(self, **controls) -> None:
        """Set several controls: the selection's first (in one update), then the planning's, then the memory
        tab's."""
        for part, names in ((self.selection, SELECTION), (self.planning, PLANNING), (self.memory_state, MEMORY)):
            mine = {k: controls.pop(k) for k in names if k in controls}
            if mine:
                part.param.update(**mine)
        if controls:
            raise TypeError(f"PlannerState.update: unknown control(s) {', '.join(sorted(controls))}")

    def add_profile(self, name: str, profile, select: bool = True) -> None:
        self.selection.add_profile(name, profile, select)

    def budget_steps(self) -> list[int]:
        return self.planning.budget_steps()

    def make_plan(self):
        return self.planning.make_plan()

    def plan_json(self) -> str:
        return self.make_plan().to_json()

    def set_verification(self, report: dict) -> None:
        self.planning.set_verification(report)

    def memory(self) -> dict:
        return self.memory_state.frames()

    def memory_measured(self) -> Measured:
        return self.memory_state.measured()

    def _switch_to(self, plan, scope: Scope, engines: str) -> str:
        """The page's profile, model and engine set for ``plan`` (apply_plan); EngineError when none shows it."""
        sel = self.selection
        switched = ""
        if sel.names and scope not in sel.scopes:
            source = sel.profile_of(plan.provenance.get("profile", {}), plan.network, plan.batch)
            if source is not None:  # the listed profile the plan was made from
                sel.profile, switched = source, f"switched to profile {source}, which the plan was made from; "
            if scope not in sel.scopes and is_torch_name(plan.network):
                sel.model = plan.network  # a model the profile does not list may still be covered by it
        if not sel.names or scope not in sel.scopes:
            raise EngineError(
                f"profile {sel.profile!r} has no measurements for {plan.network} at mini-batch "
                f"{plan.batch}, {plan.precision} {plan.layout}"
            )
        policies = complete_policies(sel.get_profile(sel.profile), scope)
        if plan.policy not in policies:
            raise EngineError(
                f"profile {sel.profile!r} cannot plan policy {plan.policy!r} for {plan.network} "
                f"b{plan.batch} (it offers {', '.join(policies)})"
            )
        if engines != sel.engines:  # the engine set the plan was made with (Profile.restrict records it)
            sel.engines = engines
            switched += f"engine set {engines}, as the plan was made; "
        return switched

    def apply_plan(self, plan) -> str:
        """Show a loaded plan (engine.plan.Plan): move the controls to its network, mini-batch, dtype, layout,
        policy, mode and budget, and say how its prediction compares with this profile's. When the current
        profile has no measurements for it, switch to the listed profile the plan was made from, if any. Raises
        EngineError when no listed profile can plan that network."""
        sel = self.selection
        scope = Scope(plan.network, int(plan.batch), plan.precision, plan.layout)
        made_with = plan.provenance.get("profile", {})
        engines = made_with.get("engines", "all") if isinstance(made_with, dict) else "all"
        before = dict(profile=sel.profile, model=sel.model, engines=sel.engines)
        try:
            switched = self._switch_to(plan, scope, engines if engines in ENGINE_SETS else "all")
        except EngineError:
            sel.param.update(**before)  # a plan that cannot be shown changes nothing on the page
            raise
        sel.param.update(network=scope.network, batch=scope.batch, precision=scope.precision, layout=scope.layout)
        self.planning.set_controls(plan.policy, plan.mode.upper(), int(plan.budget))
        c = self.result.choice
        what = switched + (
            f"{plan.network} b{plan.batch} {plan.precision} {plan.layout}, {plan.mode.upper()} {plan.policy}, "
            f"budget {format_size(plan.budget)}; the file predicts {plan.totals.time_ms:.3f} ms"
        )
        if c.feasible:
            return what + f", this profile predicts {c.time_ms:.3f} ms for the same controls"
        return what + f"; this profile finds no plan there: {c.reason}"
