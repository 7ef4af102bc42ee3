"""The training timeline: steps, ticks, and which storages are resident at each tick.

A *step* is the papers' unit: forward step s = 1..N runs layer ``route[s-1]``, backward step
2N+1-i runs layer i backwards (SuperNeurons arXiv:1801.04380 §4.1: AlexNet's bwd POOL5 is step 32, bwd LRN1
step 44). A *tick* is one layer execution; a step holds one tick, plus the re-forward ticks that
recomputation inserts before it. Memory is evaluated per tick; a step's value is its largest tick.

A policy (policies.py) turns the inventory into a ``MemoryPlan``: the ticks, the GPU residency
intervals of every storage, and the copies it issues. Everything here is plain data.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

import numpy as np

from .tensors import CLASSES, DATA_CLASSES, Inventory


@dataclass(frozen=True)
class Tick:
    index: int
    step: int
    layer: str
    phase: str  # F forward, B backward, R re-forward (recomputation)
    uses: tuple[str, ...]  # tensor names read or written; the tensors "locked" by this tick


@dataclass(frozen=True)
class Copy:
    """One host-device transfer on the copy lane.

    It starts when the compute lane reaches ``issue`` (its start, or its end when ``at == "end"``)
    and the copy lane is free; tick ``deadline`` may not start before it has finished (the paper's
    synchronisation point; ``None`` means no tick waits for it)."""

    storage: str
    direction: str  # offload (device to host) | prefetch (host to device)
    nbytes: int
    issue: int
    at: str = "start"
    deadline: int | None = None
    reason: str = ""


@dataclass
class MemoryPlan:
    """What a memory policy decides for one training iteration: ticks, GPU residency and copies (the
    memory planner's plan; engine.plan.Plan is the workspace plan of mu-cuDNN)."""

    policy: str
    inventory: Inventory
    ticks: list[Tick]
    intervals: dict[str, list[tuple[int, int]]]  # storage -> inclusive tick ranges on the GPU
    copies: list[Copy] = field(default_factory=list)
    workspace_rule: str = "p"
    class_override: dict[str, int] = field(default_factory=dict)  # static pools: constant bytes per class
    notes: list[str] = field(default_factory=list)
    options: dict = field(default_factory=dict)
    recompute_count: int = 0

    @property
    def n_steps(self) -> int:
        return 2 * len(self.inventory.route)


def base_ticks(inv: Inventory) -> list[Tick]:
    """Forward ticks 1..N then backward ticks N+1..2N, one per layer."""
    n = len(inv.route)
    ticks = [Tick(i, i + 1, name, "F", tuple(inv.fwd_uses[name])) for i, name in enumerate(inv.route)]
    for j, name in enumerate(reversed(inv.route)):
        ticks.append(Tick(n + j, n + j + 1, name, "B", tuple(inv.bwd_uses[name])))
    return ticks


def step_of_layer(inv: Inventory, layer: str, phase: str) -> int:
    i = inv.route.index(layer) + 1
    return i if phase == "F" else 2 * len(inv.route) + 1 - i


def first_last_use(inv: Inventory, ticks: Iterable[Tick]) -> tuple[dict[str, int], dict[str, int]]:
    """Per storage, the first and last tick that uses any tensor in it."""
    first: dict[str, int] = {}
    last: dict[str, int] = {}
    for t in ticks:
        for name in t.uses:
            st = inv.tensors[name].storage
            first.setdefault(st, t.index)
            last[st] = t.index
    return first, last


def liveness_intervals(inv: Inventory, ticks: list[Tick]) -> dict[str, list[tuple[int, int]]]:
    """SuperNeurons' liveness (arXiv:1801.04380 §3.2): a storage is resident from the tick that
    first uses it to the last tick that uses it. Persistent tensors stay all iteration; weight
    gradients created by backward (PyTorch) stay until the optimizer step at the end."""
    end = len(ticks) - 1
    first, last = first_last_use(inv, ticks)
    out = {st: [(first[st], last[st])] for st in first}
    for t in inv.tensors.values():
        if t.persistent:
            out[t.storage] = [(0, end)]
        elif t.cls == "weight_grads" and t.storage in out:
            out[t.storage] = [(out[t.storage][0][0], end)]
    return out


def whole_iteration(inv: Inventory, ticks: list[Tick]) -> dict[str, list[tuple[int, int]]]:
    """Network-wide allocation: every storage of the iteration is resident at every tick."""
    end = len(ticks) - 1
    return {st: [(0, end)] for st in inv.storage_bytes()}


@dataclass
class MemoryCurve:
    """Per tick bytes by class (workspace excluded), plus the number of live DATA tensors."""

    by_class: dict[str, np.ndarray]
    live_count: np.ndarray

    @property
    def live(self) -> np.ndarray:
        return sum(self.by_class.values())


def memory_curve(plan: MemoryPlan) -> MemoryCurve:
    inv = plan.inventory
    n = len(plan.ticks)
    sizes = inv.storage_bytes()
    classes = inv.storage_class()
    diff = {c: np.zeros(n + 1, dtype=np.float64) for c in CLASSES}  # workspace: the framework's own, if any
    count = np.zeros(n + 1, dtype=np.int64)
    for st, spans in plan.intervals.items():
        c = classes[st]
        for a, b in spans:
            if b < a:
                continue
            diff[c][a] += sizes[st]
            diff[c][b + 1] -= sizes[st]
            if c in DATA_CLASSES:
                count[a] += 1
                count[b + 1] -= 1
    by_class = {c: np.cumsum(d)[:n] for c, d in diff.items()}
    for c, value in plan.class_override.items():
        by_class[c] = np.full(n, float(value))
    return MemoryCurve(by_class, np.cumsum(count)[:n])


def merge(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Sorted, non-overlapping union of inclusive ranges."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(s for s in spans if s[1] >= s[0]):
        if out and a <= out[-1][1] + 1:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def cut(spans: list[tuple[int, int]], gap: tuple[int, int]) -> list[tuple[int, int]]:
    """Remove the inclusive range ``gap`` from ``spans`` (an offloaded or dropped storage)."""
    g0, g1 = gap
    out = []
    for a, b in spans:
        if b < g0 or a > g1:
            out.append((a, b))
            continue
        if a < g0:
            out.append((a, g0 - 1))
        if b > g1:
            out.append((g1 + 1, b))
    return out
