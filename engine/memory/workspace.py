"""Convolution workspace under a memory plan: free(s) = capacity - live(s) at every conv tick.

Workspace rules (the policy's default, or ``--workspace``):

* ``m`` / ``p`` / ``heuristic``: one plan per kernel, undivided: memory-optimal (the fastest plan
  of least workspace, ideally implicit GEMM with none), performance-optimal (the fastest), or the
  framework's default: PyTorch without ``cudnn.benchmark`` takes the first plan in cuDNN's heuristic
  order whose workspace it can allocate in free(s), plans the profiler did not time included (their
  time: the kernel's fastest measured, ``Profile.framework_first``). Allocated per tick: a backward
  conv tick runs BackwardData and BackwardFilter one after the other on one buffer, so it needs their max.
* ``shared-m`` / ``shared-p``: vDNN's baseline, one buffer of the largest workspace, static.
* ``per-layer-heuristic``: Caffe, each conv layer owns a buffer of its largest kernel's
  workspace, all static. ``per-kernel-p``: SuperNeurons' baseline, one buffer per kernel, static.
* ``fit``: SuperNeurons' dynamic rule (arXiv:1801.04380 §3.5; superneurons-release
  ``find_best_*_algo``): the fastest plan whose workspace fits free(s); backward picks
  BackwardData first and BackwardFilter within what is left, both buffers allocated together.
* ``fit-seq``: vDNN_dyn's greedy downgrade (arXiv:1602.08124 §III-C step 3): per kernel the fastest plan
  that fits free(s), kernels one after the other.
* ``wr``: what none of the papers has: per kernel, mu-cuDNN's WR micro-batching with limit
  free(s) (mu-cuDNN arXiv:1804.04806 §III-B), kernels one after the other. The configuration is the one
  ``engine.planner.make_plan`` gives that kernel at that limit (the same function,
  ``kernel_sets.fastest_within`` over the kernel's desirable set, with every micro-batch size the
  profile measured: batch-size policy ``all``), so ``steps.step_plan`` turns the choices into a Plan.

* ``plan`` / ``plan-arena`` (``plan_memory(conv_plan=...)``, never chosen by name): the kernels of a Plan applied
  with ``engine.pytorch.apply_plan`` take its configurations; per call (each kernel's workspace from the caching
  allocator while it runs, at most the largest of a tick's kernels) or from one arena held all iteration (a WD
  plan's ``arena_size``, a WR plan's largest kernel workspace, as apply_plan allocates it). Kernels the plan does
  not hold, and the layers apply_plan leaves to stock PyTorch (engine.stock), run stock: the ``heuristic`` rule
  with a profile, uncounted without one.

Stock PyTorch (``heuristic``, and the kernels a ``plan`` does not hold) runs a depthwise convolution (groups = input
channels) in fp32/TF32 NCHW with ATen's own CUDA kernels, not cuDNN (ATen's ``use_cudnn_depthwise`` takes cuDNN for
it only in channels_last or half precision): no workspace. Its time is the layer's calibrated one where the time
model has it (timemodel.py), else cuDNN's plan's as a stand-in. On an H100 (benchmarks/reports/memory_training.md,
code 797ceaa) EfficientNet-B0 and MobileNetV3-Large under vDNN measured peaks 13 % and 5 % below predictions that
counted a cuDNN backward workspace (up to 644 MiB) at depthwise ticks; the same per-tick predictions without it
match both measured peaks to 0.1 %.

A profile that did not measure the mini-batch itself (``plan`` takes any mini-batch its sizes can
make) offers every rule the kernel's desirable set over the measured sizes instead of undivided
plans, and the result says so in a note; except ``heuristic``: PyTorch runs the mini-batch undivided,
so it takes cuDNN's order at the largest measured size below it, extrapolated
(``framework_first_beyond``).
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass

from ..configuration import Configuration, MicroConfig
from ..errors import EngineError, InfeasibleBudgetError
from ..kernel_sets import fastest_within, kernel_set
from ..kernels import KernelKind
from ..network import Kernel
from ..optimize.desirable import desirable_set
from ..policies import batch_sizes
from ..profile import Profile
from ..stock import stock_layers
from .timeline import MemoryPlan

# per profile: {(signature key, batch): desirable set} for mini-batches the profile did not measure
_DIVIDED: "weakref.WeakKeyDictionary[Profile, dict]" = weakref.WeakKeyDictionary()

RULES = ("m", "p", "heuristic", "shared-m", "shared-p", "per-layer-heuristic", "per-kernel-p", "fit", "fit-seq", "wr")
DYNAMIC = ("fit", "fit-seq", "wr")
PLAN_RULES = {"per-call": "plan", "arena": "plan-arena"}  # apply_plan's workspace -> the rule that counts it
STOCK_RULES = ("heuristic", "plan", "plan-arena")  # rules under which unplanned kernels run as stock PyTorch's
WR_POLICY = "all"  # the batch-size policy of the ``wr`` rule: every micro-batch size the profile measured


@dataclass(frozen=True)
class KernelChoice:
    tick: int
    layer: str
    kind: KernelKind
    key: str
    free: float  # bytes free for workspace when the kernel runs (inf without a capacity)
    config: Configuration
    fits: bool  # False when even the smallest workspace exceeds free(s)
    aten: bool = False  # run by stock PyTorch with ATen's depthwise kernels: no workspace, cuDNN's time a stand-in

    @property
    def workspace(self) -> int:
        return self.config.workspace

    @property
    def time_ms(self) -> float:
        return self.config.time_ms


def _held(conv_plan) -> dict:
    """{kernel id: PlanKernel} of the kernels apply_plan runs planned: all but the layers it leaves to stock PyTorch
    (engine.stock, as decided with ``cudnn.benchmark`` off, PyTorch's default and the ``heuristic`` rule's)."""
    if conv_plan is None:
        return {}
    stock = stock_layers(conv_plan, benchmark=False)
    return {k.id: k for k in conv_plan.kernels if k.layer not in stock}


def tick_kernels(plan: MemoryPlan, precision: str = "tf32", layout: str = "NCHW"):
    """(tick, layer, kind, signature) of every conv kernel, in tick order. Re-forwards of a conv
    run its Forward kernel again; a BackwardData kernel exists when the input needs a gradient, as
    in ``Network.kernels`` (superneurons-release also computes the input batch's gradient: its
    memory is counted, its time is not, since no profile measures that kernel)."""
    inv = plan.inventory
    net = inv.net
    out = []
    for t in plan.ticks:
        layer = net.layer(t.layer)
        if layer.op != "conv":
            continue
        if t.phase in ("F", "R"):
            kinds = [KernelKind.FORWARD]
        else:
            src = layer.inputs[0]
            kinds = [KernelKind.BACKWARD_DATA] if net.needs_grad[src] else []
            kinds.append(KernelKind.BACKWARD_FILTER)
        for kind in kinds:
            out.append((t.index, t.layer, kind, net.signature(layer, kind, precision, layout)))
    return out


def _single(m: MicroConfig) -> Configuration:
    return Configuration((m,))


def _options(profile: Profile, key: str, batch: int) -> list[Configuration]:
    """A kernel's configurations at mini-batch ``batch``: its measured plans, undivided. A profile without that
    size (``plan`` accepts any mini-batch its sizes can make) offers mu-cuDNN's desirable set over the measured
    sizes instead, so a framework's rules still have plans to choose from."""
    cands = profile.candidates(key, [batch]).get(batch)
    if cands:
        return [_single(m) for m in cands]
    cache = _DIVIDED.setdefault(profile, {})
    if (key, batch) not in cache:
        try:
            cache[key, batch] = desirable_set(profile.candidates(key), batch)
        except InfeasibleBudgetError:
            cache[key, batch] = []
    if not cache[key, batch]:
        raise EngineError(
            f"profile {profile.source or '(in memory)'} cannot make mini-batch {batch} for {key} from "
            f"its measured micro-batch sizes {profile.sizes(key)}; profile this network at this "
            f"mini-batch size first"
        )
    return cache[key, batch]


def framework_first_beyond(profile: Profile, key: str, batch: int, limit: float) -> MicroConfig | None:
    """``Profile.framework_first`` at a mini-batch the profile did not measure (a capacity run's): cuDNN's heuristic
    order at the largest measured size below it, each plan's time scaled by the batch and its workspace grown
    along its growth between the two largest measured sizes. A stand-in: at the batch itself cuDNN may rank
    plans otherwise. None when the profile measured no size below ``batch`` or no plan fits ``limit``."""
    t = profile.table
    sizes = sorted(b for b in t.micro_batch[(t.signature == key) & (t.heuristic_rank >= 0)].unique() if b < batch)
    if not sizes:
        return None
    ref = int(sizes[-1])
    below = t[(t.signature == key) & (t.micro_batch == sizes[-2])] if len(sizes) > 1 else t.iloc[:0]
    grown = dict(zip(below.plan, below.workspace))
    fastest = t[(t.signature == key) & (t.micro_batch == ref) & (t.status == "ok")].time_ms.min()
    for r in profile.ranked(key, ref, None, timed_only=False).itertuples():
        slope = (r.workspace - grown[r.plan]) / (ref - sizes[-2]) if r.plan in grown else 0.0
        workspace = int(r.workspace + max(0.0, slope) * (batch - ref))
        time_ms = r.time_ms if r.status == "ok" else fastest  # an untimed plan: as framework_first
        if workspace <= limit and time_ms == time_ms:
            return MicroConfig(batch, r.plan, float(time_ms) * batch / ref, workspace)
    return None


def pick(
    profile: Profile, kernel: Kernel, batch: int, algo: str, limit: float = math.inf
) -> tuple[Configuration, bool]:
    """One kernel's configuration under ``algo`` (m, p, heuristic, fit, wr) and a workspace limit.
    Returns (configuration, fits); when nothing fits, the least-workspace configuration and False."""
    if algo == "wr":
        return micro_batched(profile, kernel, batch, limit)
    key = kernel.signature.key
    cands = _options(profile, key, batch)
    least = min(cands, key=lambda c: (c.workspace, c.time_ms))
    if algo == "m":
        return least, least.workspace <= limit
    if algo == "p":
        best = min(cands, key=lambda c: c.time_ms)
        return best, best.workspace <= limit
    if algo == "heuristic":  # PyTorch without cudnn.benchmark: heuristic order, skipping what it cannot allocate
        first = profile.framework_first(key, batch, None)
        if first is None:  # a mini-batch the profile did not measure: the order measured below it, extrapolated
            beyond = framework_first_beyond(profile, key, batch, limit)
            if beyond is not None:
                return _single(beyond), True
            fitting = [c for c in cands if c.workspace <= limit]
            return (min(fitting, key=lambda c: c.time_ms), True) if fitting else (least, False)
        if first[0].workspace > limit:
            first = profile.framework_first(key, batch, limit)
        return (_single(first[0]), True) if first is not None else (least, False)
    if algo == "fit":
        fitting = [c for c in cands if c.workspace <= limit]
        if not fitting:
            return least, False
        return min(fitting, key=lambda c: c.time_ms), True
    raise EngineError(f"unknown workspace algorithm {algo!r}")


def micro_batched(profile: Profile, kernel: Kernel, batch: int, limit: float) -> tuple[Configuration, bool]:
    """The one place the memory planner takes mu-cuDNN's WR: make_plan's rule (``fastest_within`` the
    kernel's desirable set under batch-size policy ``WR_POLICY``) at ``limit``. When nothing fits, the
    set's least-workspace configuration and False."""
    confs = kernel_set(profile, kernel, batch_sizes(WR_POLICY, batch), batch)
    best = fastest_within(confs, limit)
    return (best, True) if best is not None else (confs[0], False)


def unmeasured(profile: Profile, choices: list[KernelChoice], batch: int) -> int:
    """How many chosen kernels the profile never measured at the mini-batch itself."""
    return sum(1 for c in choices if not profile.candidates(c.key, [batch]))


def choose_workspace(
    plan: MemoryPlan,
    live,
    capacity: int | None,
    profile: Profile | None,
    rule: str,
    precision: str = "tf32",
    layout: str = "NCHW",
    conv_plan=None,
) -> tuple[list[KernelChoice], list[float]]:
    """Pick every conv kernel's configuration and return (choices, workspace bytes per tick). A kernel
    whose workspace nothing gives (no profile, not in ``conv_plan``) has no choice and counts 0."""
    if rule not in RULES and rule not in PLAN_RULES.values():
        raise EngineError(f"unknown workspace rule {rule!r}; expected one of {', '.join(RULES)}")
    if (rule in PLAN_RULES.values()) != (conv_plan is not None):
        raise EngineError(f"workspace rule {rule!r} and conv_plan go together (plan_memory(conv_plan=...))")
    n = len(plan.ticks)
    ws = [0.0] * n
    planned = _held(conv_plan)
    if profile is None and not planned:
        return [], ws
    batch = plan.inventory.net.batch
    if profile is not None:
        profile.require_kernels(plan.inventory.net, precision, layout)
    kernels = tick_kernels(plan, precision, layout)
    free_of = (lambda t: math.inf) if capacity is None else (lambda t: capacity - float(live[t]))
    choices: list[KernelChoice] = []
    algo = {
        "shared-m": "m",
        "shared-p": "p",
        "per-layer-heuristic": "heuristic",
        "per-kernel-p": "p",
        "fit-seq": "fit",
        "plan": "heuristic",
        "plan-arena": "heuristic",
    }.get(rule, rule)
    by_tick: dict[int, list] = {}
    for k in kernels:
        by_tick.setdefault(k[0], []).append(k)
    for t, ks in by_tick.items():
        free = free_of(t)
        used = 0
        tick_ws = []
        for tick, layer, kind, sig in ks:
            pk = planned.get(f"{layer}:{kind.short}")
            if pk is not None:
                config = pk.configuration
                choices.append(KernelChoice(tick, layer, kind, sig.key, free, config, config.workspace <= free))
                if rule == "plan-arena":
                    continue  # in the arena
            elif profile is None:
                continue
            else:
                limit = free - used if rule == "fit" else free
                config, ok = pick(profile, Kernel(layer, kind, sig), batch, algo, limit)
                aten = rule in STOCK_RULES and sig.aten_depthwise
                if aten:
                    config, ok = Configuration(tuple(m._replace(workspace=0) for m in config.micro)), True
                choices.append(KernelChoice(tick, layer, kind, sig.key, free, config, ok, aten))
            if rule == "fit":
                used += config.workspace
            tick_ws.append(config.workspace)
        ws[t] = (sum(tick_ws) if rule == "fit" else max(tick_ws)) if tick_ws else 0.0
    if rule.startswith("shared"):
        ws = [max((c.workspace for c in choices), default=0)] * n
    elif rule == "per-layer-heuristic":
        per_layer: dict[str, int] = {}
        for c in choices:
            per_layer[c.layer] = max(per_layer.get(c.layer, 0), c.workspace)
        ws = [float(sum(per_layer.values()))] * n
    elif rule == "per-kernel-p":
        seen = {(c.layer, c.kind): c.workspace for c in choices}
        ws = [float(sum(seen.values()))] * n
    elif rule == "plan-arena":  # apply_plan's arena: allocated when the plan is applied, held all iteration
        wr = max((k.workspace for k in planned.values()), default=0)
        arena = conv_plan.arena_size if conv_plan.mode == "wd" else wr
        ws = [w + float(arena or 0) for w in ws]
    return choices, ws


def least_workspace(
    plan: MemoryPlan, profile: Profile | None, rule: str, precision: str = "tf32", layout: str = "NCHW"
) -> list[float]:
    """Per tick, the least workspace the rule could get away with: what decides the smallest
    capacity at which a dynamic rule still fits."""
    n = len(plan.ticks)
    out = [0.0] * n
    if profile is None:
        return out
    batch = plan.inventory.net.batch
    by_tick: dict[int, list[int]] = {}
    for tick, _layer, _kind, sig in tick_kernels(plan, precision, layout):
        if rule == "wr":
            least = min(
                (m.workspace for ms in profile.candidates(sig.key).values() for m in ms if m.batch <= batch), default=0
            )
        elif rule in STOCK_RULES and sig.aten_depthwise:
            least = 0
        else:
            least = min(c.workspace for c in _options(profile, sig.key, batch))
        by_tick.setdefault(tick, []).append(least)
    for t, vals in by_tick.items():
        out[t] = sum(vals) if rule == "fit" else max(vals)
    return out
