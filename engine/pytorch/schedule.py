"""A ``MemoryPlan`` as the actions a PyTorch runtime executes, in the plan's tick order (no torch here).

Time is a *point* ``(tick, 0)`` (a tick's start) or ``(tick, 1)`` (its end), ticks as in
engine/memory/timeline.py. Per offloaded storage the plan's copies and residency intervals give
*gaps*, each with three points: the offload (the plan's offload ``Copy``), the release of the
device copy (the end of the tick before the gap; the compute stream waits for the offload there,
which is the plan's offload deadline) and the prefetch (the plan's prefetch ``Copy``, at the
tick after the gap). Recomputation gives one action per re-forward (R) tick, the drops of
re-forwarded outputs at the ends of their residency spans, and the checkpoints the runtime holds
because a re-forward reads them. The runtime (memory.py) observes ticks through module and
autograd hooks and runs every action whose point has passed.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..memory.timeline import MemoryPlan

Point = tuple[int, int]  # (tick, 0 start | 1 end)


@dataclass(frozen=True)
class Gap:
    """One stretch of ticks an offloaded storage spends on the host only."""

    offload: Point
    release: Point
    prefetch: Point
    reason: str = ""


@dataclass(frozen=True)
class Action:
    point: Point
    kind: str  # progress (an offloaded storage) | recompute (an R tick) | drop | unhold
    target: str  # plan storage, layer, or plan tensor name


@dataclass
class Schedule:
    """Everything the runtime needs from a plan, indexed for hooks."""

    plan: MemoryPlan
    tick_f: dict[str, int]  # layer -> its forward tick
    tick_b: dict[str, int]  # layer -> its backward tick
    gaps: dict[str, list[Gap]]  # plan storage -> its gaps, in order
    recomputed: dict[str, list[int]]  # layer -> its R ticks
    held: dict[str, Point]  # checkpoint tensor (Y:L) an R tick reads -> when to let go
    actions: list[Action] = field(default_factory=list)
    ignored: list[str] = field(default_factory=list)  # plan copies with no gap to execute (kept on the device)

    @property
    def first_backward(self) -> int:
        return len(self.plan.inventory.route)

    @property
    def last_tick(self) -> int:
        return len(self.plan.ticks) - 1

    def storage_of(self, tensor: str) -> str | None:
        t = self.plan.inventory.tensors.get(tensor)
        return t.storage if t is not None else None

    def dropped(self, layer: str) -> bool:
        """Whether ``layer``'s output and saved tensors are dropped in forward and re-forwarded."""
        return layer in self.recomputed


def _point(tick: int, at: str) -> Point:
    return (tick, 1 if at == "end" else 0)


def _gaps_of(spans: list[tuple[int, int]]) -> list[tuple[int, int]]:
    spans = sorted(spans)
    return [(a[1] + 1, b[0] - 1) for a, b in zip(spans, spans[1:]) if b[0] > a[1] + 1]


def build_schedule(plan: MemoryPlan) -> Schedule:
    """The runtime's view of ``plan``: gaps per offloaded storage, re-forwards, drops and holds."""
    inv = plan.inventory
    tick_f = {t.layer: t.index for t in plan.ticks if t.phase == "F"}
    tick_b = {t.layer: t.index for t in plan.ticks if t.phase == "B"}
    sched = Schedule(plan, tick_f, tick_b, {}, {}, {})
    # offloads: each prefetch copy ends a gap; its offload is the last offload copy issued before the gap
    by_storage: dict[str, list] = {}
    for c in plan.copies:
        by_storage.setdefault(c.storage, []).append(c)
    for st, copies in by_storage.items():
        offs = sorted((c for c in copies if c.direction == "offload"), key=lambda c: _point(c.issue, c.at))
        pres = sorted((c for c in copies if c.direction == "prefetch"), key=lambda c: c.issue)
        gaps = []
        for g0, g1 in _gaps_of(plan.intervals.get(st, [])):
            pre = next((c for c in pres if c.issue == g1 + 1), None)
            off = [c for c in offs if c.issue <= g0]
            if pre is None or not off:
                continue  # freed without a copy back: the runtime keeps it (autograd frees it after its last use)
            gaps.append(Gap(_point(off[-1].issue, off[-1].at), (g0 - 1, 1), (pre.issue, 0), pre.reason))
        if gaps:
            sched.gaps[st] = gaps
        if len(gaps) < len(pres):
            sched.ignored.append(st)
    for st, gaps in sched.gaps.items():
        for g in gaps:
            for p in (g.offload, g.release, g.prefetch):
                sched.actions.append(Action(p, "progress", st))
    # recomputation: re-forwards, the ends of the re-forwarded outputs' backward spans, held checkpoints
    for t in plan.ticks:
        if t.phase == "R":
            sched.recomputed.setdefault(t.layer, []).append(t.index)
            sched.actions.append(Action((t.index, 0), "recompute", t.layer))
    first_b = len(inv.route)
    for layer in sched.recomputed:
        st = inv.tensors[f"Y:{layer}"].storage
        ends = [b for a, b in plan.intervals.get(st, []) if b >= first_b]
        for b in ends:
            sched.actions.append(Action((b, 1), "drop", f"Y:{layer}"))
        last = max(ends + [tick_b.get(layer, first_b)])
        sched.actions.append(Action((last, 1), "drop", f"X:{layer}"))  # its other saved tensors
    for layer, ticks in sched.recomputed.items():
        for src in inv.net.layer(layer).inputs:
            if src in sched.recomputed:
                continue
            st = inv.tensors[f"Y:{src}"].storage
            last = max([b for _, b in plan.intervals.get(st, [])] + [max(ticks)])
            sched.held[f"Y:{src}"] = max(sched.held.get(f"Y:{src}", (0, 1)), (last, 1))
    for name, p in sched.held.items():
        sched.actions.append(Action(p, "unhold", name))
    order = {"progress": 0, "recompute": 1, "drop": 2, "unhold": 3}
    sched.actions.sort(key=lambda a: (a.point, order[a.kind]))
    return sched
