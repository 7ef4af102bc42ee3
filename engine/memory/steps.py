"""Per-step micro-batched workspace as a Plan: each kernel limited to what the memory plan leaves free.

The memory planner's ``wr`` workspace rule gives every convolution kernel mu-cuDNN's WR configuration at
limit free(s) = capacity - live(s), s the tick the kernel runs at ("dynamic per step + micro-batching":
SuperNeurons' per-step rule with mu-cuDNN's micro-batches). ``step_plan`` turns those limits into an
``engine.plan.Plan`` through ``engine.planner.make_plan(..., limits=...)``, the one planning function, with
the rule's own batch-size policy (``workspace.WR_POLICY``), so the plan holds the very configurations the
memory planner chose, and ``engine.pytorch.apply_plan`` can run them in a model (a plan with per-kernel limits
takes its workspace per call from PyTorch's caching allocator, not as one arena, as the memory plan assumes).

A plan has one configuration per kernel id (``conv1:F``): kernels are keyed by layer, so two layers of the
same signature keep their own limits. A kernel that runs at several ticks (a re-forward under
recomputation) gets the least free(s) of its ticks, so its configuration fits every one of them; the
plan's notes name those kernels.
"""

from __future__ import annotations

import math

from ..errors import EngineError
from ..kernels import KernelKind, KernelSignature
from ..plan import Plan
from ..profile import Profile
from ..units import format_size
from .iteration import MemoryResult
from .workspace import WR_POLICY


def step_limits(result: MemoryResult) -> tuple[dict[str, int], dict[str, int]]:
    """({kernel id: least free(s) over the ticks it runs at, bytes}, {kernel id: how many ticks}) of a
    memory result under a capacity. Negative free(s) (live memory alone above the capacity) is 0."""
    if result.capacity is None:
        raise EngineError(
            "a per-step plan needs a memory plan under a capacity (plan_memory(..., capacity=...)): "
            "without one free(s) is unbounded"
        )
    limits: dict[str, int] = {}
    runs: dict[str, int] = {}
    for r in result.kernels.itertuples():
        kid = f"{r.layer}:{KernelKind(r.kind).short}"
        free = max(0, int(math.floor(r.free)))
        limits[kid] = min(limits.get(kid, free), free)
        runs[kid] = runs.get(kid, 0) + 1
    return limits, runs


def step_plan(result: MemoryResult, profile: Profile, command: str = "") -> Plan:
    """The WR plan whose per-kernel limit is free(s) at that kernel's tick in ``result`` (a memory plan
    with the ``wr`` workspace rule under a capacity, made with ``profile``). Raises
    InfeasibleBudgetError (one line) when some kernel's least workspace exceeds what is free there."""
    from ..planner import make_plan

    if result.workspace_rule != "wr":
        raise EngineError(
            f"a per-step plan is the memory planner's wr workspace rule; this result used "
            f"{result.workspace_rule!r} (plan_memory(..., workspace='wr'))"
        )
    if result.plan is None:
        raise EngineError("this memory result keeps no MemoryPlan (its network is needed for the plan)")
    if not len(result.kernels):
        raise EngineError(f"{result.network} has no convolution kernels to plan (or no profile was given)")
    limits, runs = step_limits(result)
    sig = KernelSignature.from_key(result.kernels.signature.iloc[0])
    net = result.plan.inventory.net
    missing = [k.id for k in net.kernels(sig.precision, sig.layout) if k.id not in limits]
    if missing:  # every kernel must have its own limit: the default would be the largest
        raise EngineError(
            f"the memory result has no free(s) for {', '.join(missing[:5])}; it does not run every "
            f"convolution kernel of {net.name}"
        )
    plan = make_plan(
        profile,
        net,
        mode="wr",
        budget=max(limits.values()),
        policy=WR_POLICY,
        precision=sig.precision,
        layout=sig.layout,
        limits=limits,
        command=command,
    )
    again = [k for k, n in runs.items() if n > 1]
    plan.notes.append(
        f"per-step plan of memory policy {result.policy} under capacity {format_size(result.capacity)}: "
        f"each kernel's limit is the memory free when it runs (workspace rule wr)"
    )
    if again:
        plan.notes.append(
            f"{', '.join(again)} run at several steps (re-forwards): each has the least free "
            f"memory of its steps as its limit"
        )
    return plan
