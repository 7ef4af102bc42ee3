"""Iteration time of a plan: a compute lane and copy lanes, with each paper's synchronisation rule.

* Convolutions take the measured time of the configuration workspace.py chose for them (a
  ``Profile``; bundled or live), except a depthwise one stock PyTorch runs with ATen's kernels (``KernelSignature
  .aten_depthwise``), which takes its calibrated time where ``TimeParams.layer_ms`` has it. Other layers are
  not in the profile: they take their measured time where ``TimeParams.layer_ms`` has one for this network and
  mini-batch (calibrate.py), else a roofline estimate, max(bytes moved / ``hbm``, flops / ``fc_flops``), whose
  constants are assumed unless calibrated (``TimeParams.measured`` names the calibrated ones).
* A copy takes bytes / ``bandwidth`` (default 54 GB/s: pinned copies on the project's H100 measure
  53-55 GB/s), or the measured rate of its direction (``h2d`` for prefetches,
  ``d2h`` for offloads) when calibrated. It starts when the compute lane reaches its issue point and
  its lane is free; the tick named by its deadline waits for it (vDNN and Layrub synchronise at
  the end of the layer that overlaps the copy, SuperNeurons when the tensor is needed). That wait
  is the stall. With ``duplex`` offloads and prefetches use separate copy engines.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cached_property

from ..errors import EngineError
from .timeline import MemoryPlan
from .workspace import KernelChoice


SOURCES = ("bandwidth", "h2d", "d2h", "duplex", "hbm", "fc_flops")  # what a calibration may measure
# physically possible values, so a typo (1e-300 B/s, a layer of 1e308 ms) is refused rather than giving an
# iteration of inf ms: copies from 1 MB/s to 10 TB/s (PCIe 5 x16 moves 64 GB/s, NVLink-C2C 900 GB/s), device
# memory 1 GB/s to 1 PB/s (HBM3e: 8 TB/s), GEMMs 1 GFLOP/s to 1 EFLOP/s, a layer at most 1000 s
BOUNDS = {"bandwidth": (1e6, 1e13), "h2d": (1e6, 1e13), "d2h": (1e6, 1e13), "hbm": (1e9, 1e15), "fc_flops": (1e9, 1e18)}
MAX_LAYER_MS = 1e6


@dataclass(frozen=True)
class TimeParams:
    bandwidth: float = 54e9  # host <-> device, bytes/s (both directions unless h2d / d2h say otherwise)
    hbm: float = 2.5e12  # effective device-memory bandwidth of non-conv layers, bytes/s [assume]
    fc_flops: float = 40e12  # effective FP32 GEMM rate of FC layers, flop/s [assume]
    duplex: bool = True
    h2d: float | None = None  # prefetch (host -> device) rate, bytes/s; None: ``bandwidth``
    d2h: float | None = None  # offload (device -> host) rate, bytes/s; None: ``bandwidth``
    # measured non-conv layer times: (network key ``name/bB``, layer, phase F or B, ms); see layer_key
    layer_ms: tuple[tuple[str, str, str, float], ...] = ()
    measured: tuple[str, ...] = ()  # which of SOURCES were measured (calibrate.py), the rest assumed
    source: str = ""  # where the measurements come from (GPU, date), for reports

    def __post_init__(self):
        for name in ("bandwidth", "hbm", "fc_flops", "h2d", "d2h"):
            v = getattr(self, name)
            if v is None and name in ("h2d", "d2h"):
                continue
            lo, hi = BOUNDS[name]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not lo <= v <= hi:
                unit = "flop/s" if name == "fc_flops" else "bytes/s"
                raise EngineError(f"time model: {name} must be from {lo:g} to {hi:g} {unit}, got {v!r}")
        for net, layer, phase, ms in self.layer_ms:
            if isinstance(ms, bool) or not isinstance(ms, (int, float)) or not 0 <= ms <= MAX_LAYER_MS:
                raise EngineError(
                    f"time model: layer {layer} ({phase}) of {net} must take 0 to {MAX_LAYER_MS:g} ms, got {ms!r}"
                )
        for name in self.measured:
            if name not in SOURCES:
                raise EngineError(f"time model: unknown measured quantity {name!r}; expected some of {SOURCES}")

    def rate(self, direction: str) -> float:
        """Copy rate of ``offload`` (device -> host) or ``prefetch`` (host -> device), bytes/s."""
        own = self.d2h if direction == "offload" else self.h2d
        return own if own is not None else self.bandwidth

    @cached_property
    def _layers(self) -> dict[tuple[str, str, str], float]:
        return {(net, layer, phase): ms for net, layer, phase, ms in self.layer_ms}

    def measured_layer_ms(self, network_key: str, layer: str, phase: str) -> float | None:
        """A non-conv layer's measured time (a re-forward R is its forward F), or None."""
        return self._layers.get((network_key, layer, "B" if phase == "B" else "F")) if self.layer_ms else None

    def is_measured(self, name: str) -> bool:
        return name in self.measured


def layer_key(name: str, batch: int) -> str:
    """How measured layer times name their network: ``torchvision:alexnet/b256``."""
    return f"{name}/b{batch}"


# bytes moved per element of the output, forward and backward [assume: one read and one write per
# operand; LRN and BN make two passes]
_TRAFFIC = {
    "relu": (2, 3),
    "lrn": (3, 5),
    "bn": (3, 4),
    "dropout": (2.25, 2.25),
    "softmax": (2, 3),
    "concat": (2, 2),
    "add": (3, 0),
}


def layer_time_ms(plan: MemoryPlan, layer_name: str, phase: str, params: TimeParams) -> float:
    """A non-conv layer's forward (F, R) or backward (B) time: measured where ``params`` has it, else the
    roofline estimate (``roofline_ms``)."""
    net = plan.inventory.net
    got = params.measured_layer_ms(layer_key(net.name, net.batch), layer_name, phase)
    return got if got is not None else roofline_ms(plan, layer_name, phase, params)


def roofline_ms(plan: MemoryPlan, layer_name: str, phase: str, params: TimeParams) -> float:
    """Roofline estimate of a non-conv layer's forward (F, R) or backward (B) time."""
    inv = plan.inventory
    net = inv.net
    layer = net.layer(layer_name)
    n, item = net.batch, inv.itemsize
    y = n * layer.out_elems * item
    x = sum(n * net.layer(s).out_elems * item for s in layer.inputs)
    back = phase == "B"
    if layer.op == "generic":
        return _generic_ms(inv, layer, back, params)
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


def _generic_ms(inv, layer, back: bool, params: TimeParams) -> float:
    """A generic layer: a view moves nothing; otherwise its inputs, output and kept extra are read or
    written once forward, twice backward [assume], and its matmul/convolution flops (trace.py's count; the
    backward twice the forward's) run at ``fc_flops``."""
    net, p = inv.net, layer.params
    if p["alias"] is not None and not p["inplace"]:
        return 0.0
    n, item = net.batch, inv.itemsize
    y = layer.elems(n) * p.get("itemsize", item)
    x = sum(
        net.layer(s).elems(n) * net.layer(s).params.get("itemsize", item)
        if net.layer(s).op == "generic"
        else n * net.layer(s).out_elems * item
        for s in layer.inputs
        if net.layer(s).op != "data" or True
    )
    extra = p["extra_bytes"][0] * n + p["extra_bytes"][1]
    flops = (p["flops"][0] * n + p["flops"][1]) * (2 if back else 1)
    moved = (x + y + extra) * (2 if back else 1)
    return 1e3 * max(moved / params.hbm, flops / params.fc_flops)


@dataclass
class Timing:
    start_ms: list[float]
    end_ms: list[float]
    compute_ms: list[float]
    stall_ms: list[float]
    copy_start_ms: list[float]
    copy_end_ms: list[float]
    source: list[str]  # per tick: profile (conv), measured or roofline (other layers)

    @property
    def iteration_ms(self) -> float:
        return self.end_ms[-1] if self.end_ms else 0.0


def simulate(plan: MemoryPlan, choices: list[KernelChoice], params: TimeParams) -> Timing:
    conv_ms: dict[int, float] = {}
    for c in choices:
        conv_ms[c.tick] = conv_ms.get(c.tick, 0.0) + c.time_ms
    # stock PyTorch's depthwise convolutions run ATen's kernels: their measured time where calibrated, not cuDNN's
    on_aten = {c.tick for c in choices if c.aten}
    compute, source = [], []
    net = plan.inventory.net
    key = layer_key(net.name, net.batch)
    for t in plan.ticks:
        if net.layer(t.layer).op == "conv":
            got = params.measured_layer_ms(key, t.layer, t.phase) if t.index in on_aten else None
            if got is not None:
                compute.append(got)
                source.append("measured")
                continue
            if t.index not in conv_ms:
                raise EngineError(f"no convolution time for {t.layer} ({t.phase}); give a profile")
            compute.append(conv_ms[t.index])
            source.append("profile")
        else:
            got = params.measured_layer_ms(key, t.layer, t.phase)
            compute.append(got if got is not None else roofline_ms(plan, t.layer, t.phase, params))
            source.append("roofline" if got is None else "measured")
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
        ce[i] = cs[i] + c.nbytes / params.rate(c.direction) * 1e3
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
    return Timing(start, end, compute, stall, cs, ce, source)


def time_note(params: TimeParams, measured_runs: int | None = None, modelled_runs: int | None = None) -> str:
    """One line saying which of the time model's numbers are measured and which modelled (assumed)."""

    def tag(name: str) -> str:
        return "measured" if params.is_measured(name) else "assumed"

    if params.h2d is not None or params.d2h is not None:
        copies = (
            f"copies {params.rate('prefetch') / 1e9:.1f} GB/s host->device ({tag('h2d')}), "
            f"{params.rate('offload') / 1e9:.1f} GB/s device->host ({tag('d2h')})"
        )
    else:
        copies = f"copies {params.bandwidth / 1e9:.1f} GB/s ({tag('bandwidth')})"
    copies += f", {'duplex' if params.duplex else 'one copy engine'} ({tag('duplex')})"
    roof = (
        f"roofline HBM {params.hbm / 1e12:.2f} TB/s ({tag('hbm')}), FC {params.fc_flops / 1e12:.1f} TFLOP/s "
        f"({tag('fc_flops')})"
    )
    if measured_runs is None:
        layers = (
            (f"other layers measured where calibrated ({len(params.layer_ms)} layer times held), else by {roof}")
            if params.layer_ms
            else f"other layers by {roof}"
        )
    else:
        layers = f"other layers: {measured_runs} runs measured, {modelled_runs} modelled by {roof}"
    where = f" [measurements: {params.source}]" if params.source else ""
    return f"time model: convolutions from the profile (measured); {layers}; {copies}{where}"
