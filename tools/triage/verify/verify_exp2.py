"""verify fails VGG-16 WR-64 kernels whose planned output is right when run alone. Lazy vs upfront executors; and PyTorch VGG-16 planned vs stock."""

import json
import cupy as cp
import engine.gpu.verify as V
from engine.gpu import runtime
from engine.gpu.executor import KernelExecutor, Arena
from engine.gpu.graphs import ExecutionPlans
from engine.planner import make_plan
from engine.profile import Profile, resolve_profile
from engine.zoo import get_network

prof = Profile.load(resolve_profile("h100-vgg16-b64-tf32-nchw-powerOfTwo"))
plan = make_plan(prof, get_network("vgg16", 64), mode="wr", budget=64 << 20, policy="powerOfTwo")
mode, runs, d = V.runs_from_plan(plan)
IDS = ("conv1_1:BF", "conv1_2:F", "conv1_2:BD", "conv2_2:BF")
sel = [r for r in runs if r.id in IDS]
ctx = runtime.context()
for variant in ("upfront", "lazy", "upfront-own-cache"):
    plans = ExecutionPlans(ctx, include_rtc=True)
    res = {}
    if variant.startswith("upfront"):
        exs = [
            KernelExecutor(r, ExecutionPlans(ctx, include_rtc=True) if variant.endswith("own-cache") else plans)
            for r in sel
        ]
        arena = Arena(sel, exs, "wr")
        for r, ex in zip(sel, exs):
            res[r.id] = round(V.verify_kernel(r, ex, arena.pointer(r), ctx, repeats=1)["rel_l2"], 6)
    else:
        for r in sel:
            ex = KernelExecutor(r, plans)
            buf = cp.empty(max(ex.workspace_needed, 1), dtype=cp.uint8)
            res[r.id] = round(V.verify_kernel(r, ex, buf.data.ptr, ctx, repeats=1)["rel_l2"], 6)
    print(json.dumps({"variant": variant, **res}), flush=True)

import torch
import torchvision
from engine.pytorch import apply_plan

torch.backends.cudnn.allow_tf32 = True
torch.manual_seed(0)
stock = torchvision.models.vgg16().cuda()
planned = torchvision.models.vgg16().cuda()
planned.load_state_dict(stock.state_dict())
apply_plan(planned, plan)
x = torch.randn(64, 3, 224, 224, device="cuda")
outs = {}
for name, m in (("stock", stock), ("planned", planned)):
    y = m.features[:4](x)
    g = torch.randn_like(y, generator=None) if name == "stock" else outs["stock"][3]
    y.backward(g)
    outs[name] = (y.detach(), m.features[0].weight.grad.clone(), m.features[2].weight.grad.clone(), g)
rel = lambda a, b: float((a - b).norm() / b.norm())
print(
    json.dumps(
        {
            "torch_vgg16_first_block": {
                "out": rel(outs["planned"][0], outs["stock"][0]),
                "dW conv1_1": rel(outs["planned"][1], outs["stock"][1]),
                "dW conv1_2": rel(outs["planned"][2], outs["stock"][2]),
            }
        }
    ),
    flush=True,
)
