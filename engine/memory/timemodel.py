"""Iteration time of a plan: a compute lane and copy lanes, with each paper's synchronisation rule.

* Convolutions take the measured time of the configuration workspace.py chose for them (a
  ``Profile``; bundled or live). Other layers are not in the profile: they get a roofline estimate,
  max(bytes moved / ``hbm``, flops / ``fc_flops``), whose constants are switches [assume].
* A copy takes bytes / ``bandwidth`` (default 54 GB/s: pinned copies on the project's H100 measure
  53-55 GB/s, memory-systems.md §6). It starts when the compute lane reaches its issue point and
  its lane is free; the tick named by its deadline waits for it (vDNN and Layrub synchronise at
  the end of the layer that overlaps the copy, SuperNeurons when the tensor is needed). That wait
  is the stall. With ``duplex`` offloads and prefetches use separate copy engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..errors import EngineError
from .timeline import MemoryPlan
from .workspace import KernelChoice


@dataclass(frozen=True)
class TimeParams:
    bandwidth: float = 54e9     # host <-> device, bytes/s
    hbm: float = 2.5e12         # effective device-memory bandwidth of non-conv layers, bytes/s [assume]
    fc_flops: float = 40e12     # effective FP32 GEMM rate of FC layers, flop/s [assume]
    duplex: bool = True

    def __post_init__(self):
        for name in ("bandwidth", "hbm", "fc_flops"):
            if not getattr(self, name) > 0:
                raise EngineError(f"time model: {name} must be positive, got {getattr(self, name)!r}")


# bytes moved per element of the output, forward and backward [assume: one read and one write per
# operand; LRN and BN make two passes]
_TRAFFIC = {"relu": (2, 3), "lrn": (3, 5), "bn": (3, 4), "dropout": (2.25, 2.25), "softmax": (2, 3),
            "concat": (2, 2), "add": (3, 0)}


def layer_time_ms(plan: MemoryPlan, layer_name: str, phase: str, params: TimeParams) -> float:
    """Roofline estimate of a non-conv layer's forward (F, R) or backward (B) time."""
    inv = plan.inventory
    net = inv.net
    layer = net.layer(layer_name)
    n, item = net.batch, inv.itemsize
    y = n * layer.out_elems * item
    x = sum(n * net.layer(s).out_elems * item for s in layer.inputs)
    back = phase == "B"
    if layer.op == "fc":
        p = layer.params
        flops = 2 * n * p["in_features"] * p["out_features"] * (2 if back else 1)
        moved = layer.param_count * item * (2 if back else 1) + x + y
        return 1e3 * max(moved / params.hbm, flops / params.fc_flops)
    if layer.op == "pool":
        moved = 2 * (x + y) if back else x + y
    else:
        f, b = _TRAFFIC.get(layer.op, (2, 3))
        moved = (b if back else f) * max(x, y)
    return 1e3 * moved / params.hbm


@dataclass
class Timing:
    start_ms: list[float]
    end_ms: list[float]
    compute_ms: list[float]
    stall_ms: list[float]
    copy_start_ms: list[float]
    copy_end_ms: list[float]

    @property
    def iteration_ms(self) -> float:
        return self.end_ms[-1] if self.end_ms else 0.0


def simulate(plan: MemoryPlan, choices: list[KernelChoice], params: TimeParams) -> Timing:
    conv_ms: dict[int, float] = {}
    for c in choices:
        conv_ms[c.tick] = conv_ms.get(c.tick, 0.0) + c.time_ms
    compute = []
    for t in plan.ticks:
        if plan.inventory.net.layer(t.layer).op == "conv":
            if t.index not in conv_ms:
                raise EngineError(f"no convolution time for {t.layer} ({t.phase}); give a profile")
            compute.append(conv_ms[t.index])
        else:
            compute.append(layer_time_ms(plan, t.layer, t.phase, params))
    by_issue: dict[int, list[int]] = {}
    by_deadline: dict[int, list[int]] = {}
    for i, c in enumerate(plan.copies):
        by_issue.setdefault(c.issue, []).append(i)
        if c.deadline is not None:
            if c.deadline < c.issue:
                raise EngineError(f"copy of {c.storage} has deadline tick {c.deadline} before its issue tick {c.issue}")
            by_deadline.setdefault(c.deadline, []).append(i)
    n = len(plan.ticks)
    cs = [math.nan] * len(plan.copies)
    ce = [math.nan] * len(plan.copies)
    lane_free = {"offload": 0.0, "prefetch": 0.0}

    def lane(c):
        return c.direction if params.duplex else "offload"

    def run_copy(i, at):
        c = plan.copies[i]
        cs[i] = max(at, lane_free[lane(c)])
        ce[i] = cs[i] + c.nbytes / params.bandwidth * 1e3
        lane_free[lane(c)] = ce[i]

    start, end, stall = [0.0] * n, [0.0] * n, [0.0] * n
    ready = 0.0
    for k in range(n):
        for i in by_issue.get(k, []):
            if plan.copies[i].at == "start":
                run_copy(i, ready)
        begin = max([ready] + [ce[i] for i in by_deadline.get(k, [])])
        start[k], stall[k] = begin, begin - ready
        end[k] = begin + compute[k]
        for i in by_issue.get(k, []):
            if plan.copies[i].at == "end":
                run_copy(i, end[k])
        ready = end[k]
    return Timing(start, end, compute, stall, cs, ce)
