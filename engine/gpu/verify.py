"""Verification of a plan on the GPU: correctness against an undivided reference, and timing.

For every kernel of the plan: fresh random inputs, outputs poisoned with NaN, the plan's
configuration run through the executor, and the result compared with the same kernel computed
undivided by a different cuDNN engine: the float64 convolution (relative L2 norm, in float64). Every element must have
been written (no NaN left). Then the configuration is timed end-to-end (all pieces and wgrad adds
back-to-back, CUDA events, median of repeats) and set beside the plan's prediction. A wrong result
is a failure, never a warning.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import cupy as cp

from ..errors import EngineError
from ..kernels import KernelSignature
from ..precision import PRECISIONS
from . import runtime
from .executor import Arena, KernelExecutor, KernelRun, to_float32
from .graphs import ExecutionPlans, make_graph, output_role, parse_plan_name, per_sample_bytes
from .profiler import fill_random
from .report import division

REFERENCE_MAX_WORKSPACE = 2 << 30
POISON = 0xFF  # every byte: all-ones bits are a NaN in every IEEE binary format (fp32, fp16, bf16), so no table


def poison(buf: cp.ndarray) -> None:
    """Fill an output with NaN, so that an element no piece writes is caught."""
    buf.view(cp.uint8).fill(POISON)


def runs_from_plan(plan) -> tuple[str, list[KernelRun], dict]:
    """(mode, kernel runs, plan dict) from an engine.plan.Plan, a plan dict, or a path to a plan file."""
    if isinstance(plan, (str, bytes)) or hasattr(plan, "__fspath__"):
        from ..plan import load_plan

        plan = load_plan(plan)
    d = plan.to_dict() if hasattr(plan, "to_dict") else plan
    batch = int(d["network"]["batch"])
    runs = []
    for k in d["kernels"]:
        sig = KernelSignature.from_key(k["signature"], batch)
        runs.append(
            KernelRun(
                k["id"],
                sig,
                [(int(m["batch"]), m["plan"]) for m in k["micro"]],
                int(k.get("workspace", 0)),
                k.get("offset"),
            )
        )
    return d["mode"], runs, d


def reference_plan(sig: KernelSignature, ctx, avoid_engines: set[int]):
    """The undivided reference: the same convolution in float64 through cuDNN (a different engine and
    a far more accurate one), or, if no float64 plan builds, an fp32 plan of an engine the
    configuration does not use. Returns (name, run, workspace, is_float64)."""
    cg = make_graph(sig, sig.n, ctx, include_rtc=False, float64=True)
    for i, name in enumerate(cg.names):
        try:
            ws = cg.build(i)
        except Exception:
            continue
        if ws <= REFERENCE_MAX_WORKSPACE:
            return "float64:" + name, cg.executor(i, ctx), ws, True
    cg = make_graph(sig, sig.n, ctx, include_rtc=False)
    for pass_ in (0, 1):
        for i, name in enumerate(cg.names):
            if pass_ == 0 and parse_plan_name(name)[0] in avoid_engines:
                continue
            try:
                ws = cg.build(i)
            except Exception:
                continue
            if ws <= REFERENCE_MAX_WORKSPACE:
                return name, cg.executor(i, ctx), ws, False
    raise EngineError(f"no undivided cuDNN plan builds for {sig.key} at b={sig.n}; cannot verify it")


def rel_l2(out: cp.ndarray, ref: cp.ndarray) -> float:
    o, r = out.astype(cp.float64), ref.astype(cp.float64)
    den = float(cp.linalg.norm(r))
    return float(cp.linalg.norm(o - r)) / (den if den > 0 else 1.0)


def verify_kernel(
    run: KernelRun, ex: KernelExecutor, ws_ptr: int, ctx, *, repeats: int, accumulate: bool = False
) -> dict:
    sig = run.sig
    per = per_sample_bytes(sig)
    n = sig.n
    engines = {int(name[3:].split("_")[0]) for _, name in run.micro if name.startswith("eng")}
    ref_name, ref_fn, ref_ws, is64 = reference_plan(sig, ctx, engines)
    # every array op on the context's stream: it is non-blocking, so inputs filled on the default stream could
    # still be half-written when the reference reads them (this made large kernels fail against a reference
    # computed from stale data: benchmarks/reports/verify-triage/)
    with ctx.stream:
        x = cp.empty(per["x"] * n, dtype=cp.uint8)
        y = cp.empty(per["y"] * n, dtype=cp.uint8)
        w = cp.empty(per["w"], dtype=cp.uint8)
        out_role = output_role(sig)
        for role, buf in (("x", x), ("y", y), ("w", w)):
            if role != out_role:
                fill_random(buf, sig.precision)
        out = {"x": x, "y": y, "w": w}[out_role]
        ptrs = {"x": x.data.ptr, "y": y.data.ptr, "w": w.data.ptr}
        ref_ws_buf = cp.empty(max(ref_ws, 1), dtype=cp.uint8)
        if is64:  # the same inputs, exactly widened to float64
            bufs64 = {r: to_float32(b, sig.precision).astype(cp.float64) for r, b in (("x", x), ("y", y), ("w", w))}
            bufs64[out_role].fill(cp.nan)
            ref_fn({r: b.data.ptr for r, b in bufs64.items()}, ref_ws_buf.data.ptr if ref_ws else 0)
            ctx.stream.synchronize()
            ref = bufs64[out_role]
            del bufs64
        else:
            poison(out)
            ref_fn(ptrs, ref_ws_buf.data.ptr if ref_ws else 0)
            ctx.stream.synchronize()
            ref = to_float32(out, sig.precision)
        if bool(cp.isnan(ref).any()):
            raise EngineError(f"{run.id}: the reference plan {ref_name} left outputs unwritten")
        base = None
        if accumulate:  # beta = 1: start from a random dW and expect dW + sum of pieces
            fill_random(out, sig.precision)
            base = to_float32(out, sig.precision)
        else:
            poison(out)
        ex.enqueue(ptrs, ws_ptr, ctx, accumulate=accumulate, w_array=w)
        ctx.stream.synchronize()
        got = to_float32(out, sig.precision)
        unwritten = int(cp.isnan(got).sum())
        expect = ref if base is None else ref + base.astype(ref.dtype)
        err = rel_l2(got, expect) if unwritten == 0 else float("nan")
        times = runtime.time_repeats(
            ctx, lambda r: ex.enqueue(ptrs, ws_ptr, ctx, accumulate=False, w_array=w), repeats=repeats, warmup=1
        )
    tol = PRECISIONS[sig.precision].tolerance
    return dict(
        reference_plan=ref_name,
        reference_float64=is64,
        unwritten=unwritten,
        rel_l2=err,
        tolerance=tol,
        passed=bool(unwritten == 0 and err <= tol),
        measured_ms=runtime.median(times),
        measured_min_ms=min(times),
        measured_max_ms=max(times),
        repeats=repeats,
    )


def verify_plan(
    plan,
    *,
    repeats: int = 5,
    command: str = "",
    progress: Callable[[int, int, str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> dict:
    """Run every kernel of a plan on this GPU; returns a JSON-ready report (see module doc)."""
    ctx = runtime.context()
    mode, runs, d = runs_from_plan(plan)
    plans = ExecutionPlans(ctx, include_rtc=True)
    t0 = time.perf_counter()
    executors = [KernelExecutor(r, plans) for r in runs]
    arena = Arena(runs, executors, mode)
    results, seen = [], {}
    for i, (run, ex, k) in enumerate(zip(runs, executors, d["kernels"])):
        if should_stop and should_stop():
            raise EngineError(f"verification cancelled after {i} of {len(runs)} kernels")
        key = (run.sig.key, tuple(run.micro))
        if key not in seen:  # identical kernels with identical configurations are checked once
            seen[key] = verify_kernel(run, ex, arena.pointer(run), ctx, repeats=repeats)
        res = dict(seen[key])
        predicted = sum(float(m["time_ms"]) for m in k["micro"])
        res.update(
            id=run.id,
            signature=run.sig.key,
            division=division([b for b, _ in run.micro]),
            plans=[name for _, name in run.micro],
            predicted_ms=predicted,
            ratio=res["measured_ms"] / predicted if predicted else float("nan"),
            workspace=ex.workspace_needed,
            scratch_bytes=ex.scratch_bytes,
        )
        results.append(res)
        if progress:
            progress(i + 1, len(runs), run.id)
    pred = sum(r["predicted_ms"] for r in results)
    meas = sum(r["measured_ms"] for r in results)
    return {
        "format": "ucudnn-explorer-verify",
        "version": 1,
        "provenance": runtime.provenance(command),
        "plan": {
            "network": d["network"],
            "mode": d["mode"],
            "policy": d.get("policy"),
            "budget": d.get("budget"),
            "profile_gpu": d.get("provenance", {}).get("profile", {}).get("gpu"),
            "profile_cudnn": d.get("provenance", {}).get("profile", {}).get("cudnn_version"),
        },
        "arena_bytes": arena.size,
        "kernels": results,
        "totals": {
            "predicted_ms": pred,
            "measured_ms": meas,
            "ratio": meas / pred if pred else float("nan"),
            "all_passed": all(r["passed"] for r in results),
            "failed": [r["id"] for r in results if not r["passed"]],
            "seconds": round(time.perf_counter() - t0, 2),
        },
    }
