"""Triage: VGG-16 b64 / DenseNet-40 b256 WR 64 MiB kernels that failed verify.
Planned vs cuDNN float64 reference (verify's) vs torch float64 with cuDNN disabled (native CUDA kernels)."""

import json
import cupy as cp
import torch
from engine.planner import make_plan
from engine.profile import Profile, resolve_profile
from engine.zoo import get_network
from engine.gpu import runtime
from engine.gpu.verify import runs_from_plan, reference_plan, poison, rel_l2, verify_plan
from engine.gpu.executor import KernelExecutor, to_float32
from engine.gpu.graphs import ExecutionPlans, per_sample_bytes, output_role
from engine.gpu.profiler import fill_random

CASES = [
    (
        "h100-vgg16-b64-tf32-nchw-powerOfTwo",
        "vgg16",
        64,
        ["conv1_1:BF", "conv1_2:F", "conv1_2:BD", "conv1_2:BF", "conv2_1:BF", "conv2_2:BF"],
    ),
    ("h100-densenet40-b256-tf32-nchw-powerOfTwo", "densenet40", 256, ["block1.layer12.conv:BF", "trans1.conv:BF"]),
]
ctx = runtime.context()
plans = ExecutionPlans(ctx, include_rtc=True)
for pname, net, b, ids in CASES:
    prof = Profile.load(resolve_profile(pname))
    plan = make_plan(prof, get_network(net, b), mode="wr", budget=64 << 20, policy="powerOfTwo")
    mode, runs, d = runs_from_plan(plan)
    sub = dict(d, kernels=[k for k in d["kernels"] if k["id"] in ids])
    rep = verify_plan(sub, repeats=2)
    for k in rep["kernels"]:
        print(
            json.dumps(
                {
                    "verify": k["id"],
                    "passed": k["passed"],
                    "rel_l2": k["rel_l2"],
                    "ref": k["reference_plan"],
                    "ws": k["workspace"],
                    "arena": rep["arena_bytes"],
                }
            ),
            flush=True,
        )
    for run in runs:
        if run.id not in ids:
            continue
        sig = run.sig
        n = sig.n
        with ctx.stream:
            ex = KernelExecutor(run, plans)
            ws = cp.empty(max(ex.workspace_needed, 1) + (1 << 20), dtype=cp.uint8)
            per = per_sample_bytes(sig)
            bufs = {
                "x": cp.empty(per["x"] * n, dtype=cp.uint8),
                "y": cp.empty(per["y"] * n, dtype=cp.uint8),
                "w": cp.empty(per["w"], dtype=cp.uint8),
            }
            orole = output_role(sig)
            for r, bb in bufs.items():
                if r != orole:
                    fill_random(bb, sig.precision)
            ptrs = {r: bb.data.ptr for r, bb in bufs.items()}
            f32 = {r: to_float32(bb, sig.precision) for r, bb in bufs.items()}
            outs = []
            for rep_i in range(2):
                poison(bufs[orole])
                ex.enqueue(ptrs, ws.data.ptr, ctx, accumulate=False, w_array=bufs["w"])
                ctx.stream.synchronize()
                outs.append(to_float32(bufs[orole], sig.precision).astype(cp.float64))
            engines = {int(nm[3:].split("_")[0]) for _, nm in run.micro if nm.startswith("eng")}
            rn, rf, rws, is64 = reference_plan(sig, ctx, engines)
            rwb = cp.empty(max(rws, 1), dtype=cp.uint8)
            b64 = {r: f32[r].astype(cp.float64) for r in ("x", "y", "w")}
            b64[orole].fill(cp.nan)
            rf({r: bb.data.ptr for r, bb in b64.items()}, rwb.data.ptr if rws else 0)
            ctx.stream.synchronize()
            ref = b64[orole]
        cp.cuda.Device().synchronize()
        X = torch.as_tensor(f32["x"], device="cuda").double().view(n, sig.c, sig.h, sig.w)
        Wt = torch.as_tensor(f32["w"], device="cuda").double().view(sig.k, sig.c // sig.groups, sig.r, sig.s)
        Y = torch.as_tensor(f32["y"], device="cuda").double().view(n, sig.k, sig.out_h, sig.out_w)
        kw = dict(
            stride=(sig.stride_h, sig.stride_w),
            padding=(sig.pad_h, sig.pad_w),
            dilation=(sig.dil_h, sig.dil_w),
            groups=sig.groups,
        )
        kind = run.id.split(":")[1]
        with torch.backends.cudnn.flags(enabled=False):
            if kind == "F":
                tref = torch.nn.functional.conv2d(X, Wt, **kw)
            elif kind == "BD":
                tref = torch.nn.grad.conv2d_input(X.shape, Wt, Y, **kw)
            else:
                tref = torch.nn.grad.conv2d_weight(X, Wt.shape, Y, **kw)
        torch.cuda.synchronize()
        tref = cp.asarray(tref.contiguous().view(-1))
        got = outs[0]
        print(
            json.dumps(
                dict(
                    case=net,
                    id=run.id,
                    pieces=len(run.micro),
                    plan=run.micro[0][1],
                    ref=rn,
                    ref_nan=int(cp.isnan(ref).sum()),
                    planned_nan=int(cp.isnan(got).sum()),
                    planned_vs_cudnn64=rel_l2(got, ref),
                    planned_vs_native64=rel_l2(got, tref),
                    cudnn64_vs_native64=rel_l2(ref, tref),
                    repeat_diff=rel_l2(outs[1], outs[0]),
                    exec_ws=ex.workspace_needed,
                    plan_ws=run.workspace,
                )
            ),
            flush=True,
        )
