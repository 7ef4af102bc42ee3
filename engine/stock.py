"""Which planned convolution layers the PyTorch runtime leaves to stock PyTorch: never slower than stock.

A planned convolution launched piece by piece costs the host more than stock PyTorch's (a custom op, the
frontend's execute per micro-batch piece: benchmarks/reports/op-host-cost.md measured ResNet-50 b64 fp16 AMP
eager steps of 30.04 ms planned against 21.01 ms stock on an H100 host, about 57 us more per kernel run, with
predicted convolution times equal). Where the plan's predicted time is no better than what stock PyTorch runs
for that layer, the replacement can only add that cost, so a WR plan replaces a layer (its Forward,
BackwardData and BackwardFilter kernels together: one module) only where it saves more than ``REL_GAIN`` of
stock's time plus ``HOST_MS_PER_PIECE`` per micro-batch piece (none with per-kernel CUDA graphs, apply_plan's
default: a piece then costs the host about 1 us, benchmarks/reports/kernel-graphs.md, and an op call no more
than stock's own), and only where stock PyTorch stays within the plan's workspace
limits: every plan it might take (``StockEstimate.workspace``) fits each kernel's limit. What stock runs is
cuDNN's first heuristic plan with ``cudnn.benchmark`` off, the fastest of the first ``BENCHMARK_LIMIT`` with
it on (``torch.backends.cudnn.benchmark_limit``'s default), both from the profile; where one of those plans was
not timed (its workspace above the profiler's cap, or a runtime-compiled engine left out) stock's time is
unknown, no gain can be shown, and a layer whose stock plans fit its limits stays stock. WD plans divide one total
budget and keep every layer. Depthwise convolutions stock PyTorch runs on ATen's kernels
(``KernelSignature.aten_depthwise``) have no cuDNN estimate and are kept.
"""

from __future__ import annotations

import weakref

from .kernels import KernelSignature
from .plan import Plan, PlanKernel, StockEstimate

BENCHMARK_LIMIT = 10
REL_GAIN = 0.05
HOST_MS_PER_PIECE = 0.05


def stock_estimate(profile, key: str, batch: int) -> StockEstimate | None:
    """What stock PyTorch runs for kernel ``key`` at ``batch`` undivided, from ``profile``; None if unknown."""
    if KernelSignature.from_key(key, batch).aten_depthwise:
        return None
    per_batch = _ESTIMATES.setdefault(profile, {})
    if batch not in per_batch:
        per_batch[batch] = _estimates(profile, batch)
    return per_batch[batch].get(key)


# per profile: {batch: {signature key: StockEstimate}}, built with one pass over the table (make_plan runs on
# every dashboard slider move; a filter of the table per kernel would cost seconds there)
_ESTIMATES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def _estimates(profile, batch: int) -> dict[str, StockEstimate]:
    t = profile.table
    t = t[(t.micro_batch == batch) & (t.heuristic_rank >= 0) & (t.status != "failed")]
    first = t.sort_values("heuristic_rank", kind="stable").groupby("signature", sort=False).head(BENCHMARK_LIMIT)
    out = {}
    for key, rows in first.groupby("signature", sort=False):
        ok = rows[rows.status == "ok"]
        top = rows.iloc[0]
        out[key] = StockEstimate(
            float(top.time_ms) if top.status == "ok" else None,
            float(ok.time_ms.min()) if len(ok) == len(rows) else None,
            int(rows.workspace.max()),
        )
    return out


def stock_layers(plan: Plan, benchmark: bool, graphs: bool = True) -> dict[str, str]:
    """{plan layer: why it stays stock PyTorch} under the rule above, for ``cudnn.benchmark`` on or off and the
    planned kernels launched as CUDA graphs (``graphs``, apply_plan's default) or piece by piece."""
    if plan.mode != "wr":
        return {}
    layers: dict[str, list[PlanKernel]] = {}
    for k in plan.kernels:
        layers.setdefault(k.layer, []).append(k)
    out = {}
    for layer, ks in layers.items():
        why = _stays(plan, ks, benchmark, 0.0 if graphs else HOST_MS_PER_PIECE)
        if why:
            out[layer] = why
    return out


def _stays(plan: Plan, ks: list[PlanKernel], benchmark: bool, per_piece_ms: float) -> str | None:
    ref = []
    for k in ks:
        s = k.stock
        if s is None or s.workspace > plan.limit(k.id):
            return None
        ref.append(s.benchmark_ms if benchmark else s.heuristic_ms)
    if None in ref:
        return "stock PyTorch may run a plan the profile did not time (above its workspace cap, or runtime-compiled)"
    stock_ms, plan_ms = sum(ref), sum(k.time_ms for k in ks)
    pieces = sum(len(k.micro) for k in ks)
    if stock_ms - plan_ms > REL_GAIN * stock_ms + per_piece_ms * pieces:
        return None
    return (
        f"the plan predicts {plan_ms:.3f} ms against stock's {stock_ms:.3f} ms "
        f"(cudnn.benchmark {'on' if benchmark else 'off'}), less gain than "
        + (f"{REL_GAIN:.0%} of stock's time" if not per_piece_ms else "its host cost")
    )
