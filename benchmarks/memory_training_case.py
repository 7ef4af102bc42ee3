"""One memory_training case in its own process (GPU): the model, its memory runtime and per-step plan installed,
the timed steps, and one more step traced per plan tick."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import json  # noqa: E402

from benchmarks.common import timed_steps  # noqa: E402
from benchmarks.memory_training_predict import (
    STEP,
    _profile,
    calibration,
    memory_result,
    predicted,  # noqa: E402
    predicted_ticks,
    profile_path,
    torch_name,
)
from engine.memory.policies import get_policy  # noqa: E402


def _setup(net: str, batch: int, capacity: int | None):
    import torch
    import torchvision

    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    if capacity:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, capacity / total))
    torch.manual_seed(0)
    model = getattr(torchvision.models, net)(weights=None).cuda().train()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (batch,), device="cuda")
    return torch, model, x, target


def _runtime(model, res, plan=None):
    """Install the memory policy, then apply the per-step plan: the runtime matches plan layers to modules by
    tracing the model with torch.fx, which sees stock ``nn.Conv2d`` leaves only before ``apply_plan`` swaps their
    class (its hooks stay on the same module objects after)."""
    rt = None
    if get_policy(res.policy).pytorch != "stock":  # stock PyTorch: nothing to install
        try:
            from engine.pytorch import apply_memory_policy
        except ImportError as err:
            raise RuntimeError(f"the memory runtime is not available here ({err})") from None
        rt = apply_memory_policy(model, res)
    if plan is not None:
        from engine.pytorch import apply_plan

        apply_plan(model, plan)
    return rt


def _snapshot(rt) -> dict:
    return json.loads(json.dumps(dict(rt.stats), default=str)) if rt is not None else {}


def _steps(torch, model, x, target, rt, warmup: int, steps: int, res=None) -> dict:
    """Warm-up, timed steps (their peak), then with ``res`` one more step traced per plan tick by the memory
    runtime (``trace_memory``; installed for that step alone when the case runs stock PyTorch)."""
    params = list(model.parameters())

    def step():
        for p in params:
            p.grad = None
        # the memory runtime stays installed on the model (its ``with`` form would remove it after one step)
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()

    timed = timed_steps(step, steps, warmup, after=lambda: _snapshot(rt))
    out = {
        "step_ms": timed["step_ms"],
        "step_ms_p10": timed["step_ms_p10"],
        "step_ms_p90": timed["step_ms_p90"],
        "peak": torch.cuda.max_memory_allocated(),
        "peak_reserved": torch.cuda.max_memory_reserved(),
        "steps": steps,
        "stats": timed["after"],
    }
    if res is not None:
        try:
            _trace(torch, model, step, rt, res, out)
        except torch.OutOfMemoryError:
            raise
        except Exception as err:  # the measured steps stand; a runtime that cannot trace this model says why
            out["trace_error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return out


def _trace(torch, model, step, rt, res, out: dict) -> None:
    """One more step traced per plan tick by the memory runtime (installed for that step alone when the case runs
    stock PyTorch)."""
    from engine.pytorch import apply_memory_policy

    tracer = rt if rt is not None else apply_memory_policy(model, res)
    tracer.trace_memory()
    torch.cuda.reset_peak_memory_stats()
    step()
    torch.cuda.synchronize()
    tracer.trace_memory(False)
    out["memory_trace"] = [[r["tick"], r["end"], r["allocated"], r["peak"]] for r in tracer.memory_trace]
    out["deviations"] = tracer.deviations
    if rt is None:
        tracer.remove()


def gpu_uuid() -> str:
    import torch

    return str(torch.cuda.get_device_properties(0).uuid)


def measure_profile(net: str, batch: int, profiles: Path) -> dict:
    """A MODERN model's profile (memory_training_predict.profile_name): every convolution at the undivided batch,
    cuDNN's heuristic list only (what the ``heuristic`` workspace rule reads: its order, each plan's workspace and
    time), through the profiler's resumable cache in ``profiles`` (a call cut short goes on where it stopped)."""
    import time

    from engine.gpu.profiler import profile_network
    from engine.pytorch.loader import load_network

    profiles.mkdir(parents=True, exist_ok=True)
    t0 = time.perf_counter()
    network = load_network(torch_name(net), batch)
    prof = profile_network(
        network,
        policy="undivided",
        precision="tf32",
        layout="NCHW",
        cache_path=str(profiles / "profile-cache.sqlite"),
        engines="heuristics",
        command=f"benchmarks/memory_training.py case profile {net} - {batch} 0 --profiles {profiles}",
    )
    path = prof.save(profile_path(net, profiles))
    return dict(
        profile=str(path), rows=len(prof.table), seconds=round(time.perf_counter() - t0, 1), **depthwise(network)
    )


def depthwise(network) -> dict:
    """The network's convolutions and how many are depthwise (groups = input channels): stock PyTorch runs those
    in TF32/fp32 NCHW with its own CUDA kernels, not cuDNN (ATen's ``use_cudnn_depthwise`` takes cuDNN only in
    channels_last or fp16), which the prediction's ``heuristic`` rule does not know: the report says so."""
    from engine.kernels import KernelKind

    forward = [k.signature for k in network.kernels() if k.signature.kind == KernelKind.FORWARD]
    return {"convolutions": len(forward), "depthwise": sum(s.groups == s.c > 1 for s in forward)}


def run_case(
    kind: str,
    net: str,
    variant: str,
    batch: int,
    capacity: int | None,
    time_params: str | None,
    warmup: int,
    steps: int,
    profiles: Path | None = None,
) -> dict:
    """kind: ``step`` (predict and measure), ``try`` (does it fit: 2 steps), ``calibrate-host``,
    ``calibrate-layers``, ``profile`` (a MODERN model's, into ``profiles``). Any failure, a memory runtime's
    refusal included, is the case's one-line ``error``."""
    out = {"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity}
    if kind == "profile":
        return dict(out, **measure_profile(net, batch, profiles), gpu_uuid=gpu_uuid())
    if kind == "calibrate-host":
        from engine.pytorch.calibrate import measure

        return dict(out, doc=measure([], host=True), gpu_uuid=gpu_uuid())
    if kind == "calibrate-layers":
        from engine.pytorch.calibrate import measure

        return dict(out, doc=measure([(torch_name(net), batch)], host=False), gpu_uuid=gpu_uuid())
    import torch

    try:
        tp, framework, calibrated_on = calibration(time_params)
        out["gpu_uuid"], out["calibration_uuid"] = gpu_uuid(), calibrated_on
        # a stock try needs no memory plan (nothing to apply); every other case runs one
        stock = not variant.endswith(STEP) and get_policy(variant).pytorch == "stock"
        res = None if kind == "try" and stock else memory_result(net, batch, variant, capacity, tp, framework, profiles)
        if res is not None and kind == "step":
            out["predicted"] = predicted(res)
            out["predicted_ticks"] = predicted_ticks(res)
        plan = None
        if variant.endswith(STEP):
            from engine.memory import step_plan

            plan = step_plan(
                res, _profile(net), command=f"benchmarks/memory_training.py {kind} {net} {variant} {batch}"
            )
            out["plan"] = {
                "conv_ms": plan.totals.time_ms,
                "max_workspace": plan.totals.max_workspace,
                "divided": sum(len(k.micro) > 1 for k in plan.kernels),
                "kernels": len(plan.kernels),
            }
        torch, model, x, target = _setup(net, batch, capacity)
        rt = _runtime(model, res, plan) if res is not None else None
        got = _steps(
            torch,
            model,
            x,
            target,
            rt,
            1 if kind == "try" else warmup,
            1 if kind == "try" else steps,
            res if kind == "step" else None,
        )
        if rt is not None:
            out["notes"] = rt.notes
        out.update(ok=True, **({} if kind == "try" else got))
        if plan is not None:
            out["fallbacks"] = dict(model.ucudnn.fallbacks)
    except torch.OutOfMemoryError as err:
        # the first line holds what PyTorch had allocated and reserved: kept whole to diagnose a miss
        out.update(ok=False, oom=True, error=f"out of memory: {str(err).splitlines()[0][:600]}")
    except Exception as err:  # recorded, so one failing case does not lose the others
        out.update(ok=False, error=f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}")
    return out
