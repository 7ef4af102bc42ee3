"""The predicted timeline as a PyTorch memory snapshot, so memory_viz shows it beside a measured one.

``torch.cuda.memory._snapshot()`` is a dict of ``segments`` (the allocator's state at the end) and
``device_traces`` (alloc / free_requested / free_completed events); ``torch.cuda._memory_viz`` and
pytorch.org/memory_viz read it from a pickle of plain Python types. Here every GPU residency interval of
a storage is one allocation and every tick's convolution workspace another, laid out by a first-fit
allocator in one predicted segment. Replaying the trace gives, at every tick, the planner's live bytes
plus workspace, so its largest value is the predicted peak. Nothing here imports torch.
"""

from __future__ import annotations

import os
import pickle
from pathlib import Path

from ..errors import EngineError

ALIGN = 512  # the caching allocator's block rounding
BASE = 1 << 40  # where the predicted segment starts (a device-pointer-like address, never 0)


class _FirstFit:
    """Addresses in one predicted segment: lowest free gap that fits, freed gaps merged."""

    def __init__(self) -> None:
        self.free: list[tuple[int, int]] = []  # (address, size), sorted, below ``top``
        self.top = 0
        self.high = 0  # the segment's size: the highest ``top`` reached

    def alloc(self, size: int) -> int:
        size = _rounded(size)
        for i, (addr, gap) in enumerate(self.free):
            if gap >= size:
                self.free[i : i + 1] = [(addr + size, gap - size)] if gap > size else []
                return addr
        addr, self.top = self.top, self.top + size
        self.high = max(self.high, self.top)
        return addr

    def release(self, addr: int, size: int) -> None:
        spans = sorted(self.free + [(addr, _rounded(size))])
        merged: list[tuple[int, int]] = []
        for a, s in spans:
            if merged and merged[-1][0] + merged[-1][1] == a:
                merged[-1] = (merged[-1][0], merged[-1][1] + s)
            else:
                merged.append((a, s))
        if merged and merged[-1][0] + merged[-1][1] == self.top:
            self.top = merged.pop()[0]
        self.free = merged


def _rounded(size: int) -> int:
    return max(ALIGN, -(-size // ALIGN) * ALIGN)


def _times(result) -> tuple[list[int], list[int]]:
    """Per tick start and end in microseconds: the time model's, or one millisecond per tick without it."""
    t = result.ticks
    if t["start_ms"].notna().all() and t["end_ms"].notna().all():
        return ([int(round(v * 1000)) for v in t["start_ms"]], [int(round(v * 1000)) for v in t["end_ms"]])
    n = len(t)
    return [1000 * i for i in range(n)], [1000 * i + 999 for i in range(n)]


def _allocations(result) -> list[tuple[int, int, int, str, str]]:
    """(first tick, last tick, bytes, name, class) of every predicted allocation."""
    plan = result.plan
    if plan is None:
        raise EngineError("this memory result has no residency plan to export as a snapshot")
    inv = plan.inventory
    sizes, classes = inv.storage_bytes(), inv.storage_class()
    offloaded = {c.storage for c in plan.copies if c.direction == "offload"}
    end = len(plan.ticks) - 1
    out = []
    for storage, spans in plan.intervals.items():
        cls = classes[storage]
        if cls in plan.class_override:
            continue
        label = f"{cls}, offloaded between uses" if storage in offloaded and len(spans) > 1 else cls
        out += [(a, b, sizes[storage], storage, label) for a, b in spans if b >= a and sizes[storage] > 0]
    for cls, nbytes in plan.class_override.items():  # static pools hold a constant amount all iteration
        if nbytes > 0:
            out.append((0, end, int(nbytes), f"{cls} pool", cls))
    for tick, ws in enumerate(result.ticks["workspace"]):
        if ws > 0:
            layer = plan.ticks[tick].layer
            out.append((tick, tick, int(ws), f"{layer} workspace", "workspace"))
    return out


def memory_snapshot(result) -> dict:
    """The ``MemoryResult`` (iteration.py) as a dict in ``torch.cuda.memory._snapshot()``'s format."""
    allocs = sorted(_allocations(result), key=lambda r: (r[0], r[3]))
    ticks = result.plan.ticks
    starts, ends = _times(result)
    source = f"predicted {result.network} b{result.batch} {result.policy}"
    events: list[tuple[int, int, int, dict]] = []  # (tick, 0 alloc / 1 free, order, event)
    heap = _FirstFit()
    pending: list[tuple[int, int, int, list]] = []  # frees not yet issued: (last tick, addr, size, frames)
    live_at_end = []
    for first, last, size, name, cls in allocs:
        for item in sorted(p for p in pending if p[0] < first):
            heap.release(item[1] - BASE, item[2])
            pending.remove(item)
        tick = ticks[first]
        phase = {"F": "forward", "B": "backward", "R": "re-forward"}[tick.phase]
        frames = [
            {"filename": source, "line": tick.step, "name": f"{name} [{cls}]"},
            {"filename": source, "line": tick.step, "name": f"step {tick.step} {phase} {tick.layer}"},
        ]
        addr = BASE + heap.alloc(size)
        events.append(
            (
                first,
                0,
                len(events),
                {
                    "action": "alloc",
                    "addr": addr,
                    "size": size,
                    "stream": 0,
                    "frames": frames,
                    "time_us": starts[first],
                },
            )
        )
        if last == len(ticks) - 1:
            live_at_end.append((addr, size, frames))
        else:
            pending.append((last, addr, size, frames))
            for action in ("free_requested", "free_completed"):
                events.append(
                    (
                        last,
                        1,
                        len(events),
                        {
                            "action": action,
                            "addr": addr,
                            "size": size,
                            "stream": 0,
                            "frames": frames,
                            "time_us": ends[last],
                        },
                    )
                )
    trace = [e for *_, e in sorted(events, key=lambda e: e[:3])]
    return {"segments": [_segment(heap, live_at_end)], "device_traces": [trace], "allocator_settings": {}}


def _segment(heap: _FirstFit, live: list[tuple[int, int, list]]) -> dict:
    """The predicted segment at the end of the iteration: what stays resident, and gaps between."""
    blocks, at = [], BASE
    for addr, size, frames in sorted(live, key=lambda r: r[0]):
        if addr > at:
            blocks.append({"address": at, "size": addr - at, "requested_size": 0, "state": "inactive", "frames": []})
        blocks.append(
            {
                "address": addr,
                "size": _rounded(size),
                "requested_size": size,
                "state": "active_allocated",
                "frames": frames,
            }
        )
        at = addr + _rounded(size)
    end = BASE + max(heap.high, ALIGN)
    if end > at:
        blocks.append({"address": at, "size": end - at, "requested_size": 0, "state": "inactive", "frames": []})
    allocated = sum(b["requested_size"] for b in blocks)
    return {
        "device": 0,
        "address": BASE,
        "total_size": end - BASE,
        "stream": 0,
        "segment_type": "large",
        "segment_pool_id": (0, 0),
        "is_expandable": False,
        "allocated_size": allocated,
        "active_size": allocated,
        "requested_size": allocated,
        "blocks": blocks,
    }


def snapshot_bytes(result) -> bytes:
    """The snapshot pickled as memory_viz loads it (protocol 4, plain Python types only)."""
    return pickle.dumps(memory_snapshot(result), protocol=4)


SUFFIX = ".pickle"


def snapshot_path(path: str, policy: str, several: bool) -> str:
    """One file per policy when several are compared: ``out.pickle`` (or ``out``) -> ``out.vdnn-all.pickle``.
    Only a file name can be split so: a folder, a device or a name ending in a separator is refused."""
    if not several:
        return path
    p = Path(path)
    if str(path).endswith(("/", os.sep)) or p.is_dir() or (p.exists() and not p.is_file()) or not p.name:
        raise EngineError(
            f"--snapshot {path!r}: with several policies each gets its own file named from this one "
            f"(out{SUFFIX} -> out.POLICY{SUFFIX}); give a file name, not a folder or a device"
        )
    stem = p.name[: -len(SUFFIX)] if p.name.endswith(SUFFIX) and len(p.name) > len(SUFFIX) else p.name
    return str(p.with_name(f"{stem}.{policy}{SUFFIX}"))


__all__ = ["memory_snapshot", "snapshot_bytes", "snapshot_path"]
