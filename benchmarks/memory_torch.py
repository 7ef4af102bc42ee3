"""Predicted vs measured peak memory of one PyTorch training step (GPU host with PyTorch).

For AlexNet, ResNet-50 and VGG-16 (torchvision, fp32, train mode) this runs a warm-up step, then
one measured step (forward, cross-entropy, backward, SGD with momentum) between
``torch.cuda.reset_peak_memory_stats`` and ``torch.cuda.max_memory_allocated``, and sets the result
beside the memory planner's prediction for the same network: the ``liveness`` policy with
PyTorch's tensor rules (engine/memory/tensors.py, convention ``pytorch``) and one optimizer copy
(the momentum buffers), and no profile: its peak counts no convolution workspace (a lower bound,
``peak_is_lower_bound``); the measurement includes it. benchmarks/memory_training.py predicts with the profile's
workspace (docs/memory-runtimes.md, "What the prediction counts").

    python benchmarks/memory_torch.py --out docs/memory-torch-h100.md

Writes a markdown report to ``--out`` (and prints it). Needs torch and torchvision; run from the
repository root (or anywhere: the repository is put on ``sys.path``).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import common  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

NETWORKS = {"alexnet": 256, "resnet50": 64, "vgg16": 64}  # zoo default batches
MiB = 2**20


def predict(name: str, batch: int) -> dict:
    from engine.memory import plan_memory
    from engine.zoo import get_network

    net = get_network(name, batch)
    res = plan_memory(net, "liveness", convention="pytorch", optimizer_copies=1)
    s, t = res.summary, res.ticks
    persistent = float((t.weights + t.optimizer + t.bn_stats).iloc[0])
    return {
        "peak": s["peak"],
        "step": s["peak_step"],
        "layer": s["peak_layer"],
        "phase": s["peak_phase"],
        "persistent": persistent,
        "input": float(t.input.iloc[0]),
        "params": net.param_count,
        "by_class": {
            c: float(t[c].iloc[s["peak_tick"]])
            for c in ("weights", "weight_grads", "optimizer", "bn_stats", "input", "activations", "gradients", "masks")
        },
    }


def measure(name: str, batch: int, device) -> dict:
    import torch
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).to(device).train()
    params = sum(p.numel() for p in model.parameters())
    opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    crit = torch.nn.CrossEntropyLoss()
    x = torch.randn(batch, 3, 224, 224, device=device)
    y = torch.randint(0, 1000, (batch,), device=device)

    def step():
        opt.zero_grad(set_to_none=True)
        loss = crit(model(x), y)
        loss.backward()
        opt.step()

    step()  # warm-up: cuDNN heuristics, momentum buffers, allocator
    opt.zero_grad(set_to_none=True)
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    t0 = time.perf_counter()
    step()
    torch.cuda.synchronize()
    elapsed = time.perf_counter() - t0
    peak = torch.cuda.max_memory_allocated()
    after = torch.cuda.memory_allocated()
    return {"peak": peak, "before": before, "after": after, "params": params, "ms": elapsed * 1e3}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="markdown report path")
    ap.add_argument("--networks", default=",".join(NETWORKS), help="comma-separated: alexnet,resnet50,vgg16")
    ap.add_argument("--batch", type=int, default=None, help="one mini-batch for all (default: 256/64/64)")
    args = ap.parse_args(argv)

    import torch

    if not torch.cuda.is_available():
        print("error: no CUDA device; this benchmark needs a GPU", file=sys.stderr)
        return 2
    device = torch.device("cuda")
    torch.backends.cudnn.benchmark = False
    prov = common.provenance(
        "python benchmarks/memory_torch.py " + " ".join(sys.argv[1:] if argv is None else argv),
        commit=common.git_commit(),
    )
    lines = [
        "# Memory planner vs PyTorch: peak memory of one training step",
        "",
        f"- date: {prov['date']}; commit {prov['commit']}; command: `{prov['command']}`",
        f"- GPU: {prov['gpu']}, driver {prov['driver']}; torch {prov['torch']}, cuDNN {prov['cudnn_version']}, "
        f"frontend {prov['frontend_version']}, python {platform.python_version()}",
        "- step: warm-up step, then one measured step (zero_grad(set_to_none), forward, CrossEntropyLoss, "
        "backward, SGD momentum 0.9); fp32 (PyTorch default TF32 settings), cudnn.benchmark=False, "
        "torchvision models, random 224x224 input",
        "- measured: `torch.cuda.max_memory_allocated()` after `reset_peak_memory_stats()` (weights, momentum, "
        "input batch, everything the step allocates, cuDNN workspace included; CUDA context excluded)",
        "- predicted: `plan_memory(net, 'liveness', convention='pytorch', optimizer_copies=1)`: "
        "autograd's saved tensors per layer, liveness from first to last use, no profile: no convolution "
        "workspace (a lower bound)",
        "",
        "| network | batch | params (zoo / torch) | predicted peak | measured peak | ratio pred/meas | "
        "predicted persistent | measured before step | predicted peak at |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    details = []
    names = [n.strip() for n in args.networks.split(",") if n.strip()]
    for name in names:
        batch = args.batch or NETWORKS.get(name, 64)
        try:
            p = predict(name, batch)
            m = measure(name, batch, device)
            torch.cuda.empty_cache()  # the model and batch went out of scope with measure()
            ratio = p["peak"] / m["peak"]
            lines.append(
                f"| {name} | {batch} | {p['params']:,} / {m['params']:,} | {p['peak'] / MiB:,.1f} MiB | "
                f"{m['peak'] / MiB:,.1f} MiB | {ratio:.3f} | {(p['persistent'] + p['input']) / MiB:,.1f} MiB "
                f"| {m['before'] / MiB:,.1f} MiB | step {p['step']} ({p['layer']} {p['phase']}) |"
            )
            details.append(
                f"- {name}: predicted peak by class (MiB): "
                + ", ".join(f"{k} {v / MiB:,.1f}" for k, v in p["by_class"].items())
                + f"; measured after step {m['after'] / MiB:,.1f} MiB; step time {m['ms']:.1f} ms"
            )
        except Exception as err:  # keep going: one network's failure must not hide the others
            lines.append(f"| {name} | {batch} | | | | failed: {type(err).__name__}: {err} | | | |")
            details.append(f"- {name}: " + traceback.format_exc().strip().splitlines()[-1])
    lines += [
        "",
        "Target: ratio within 0.90-1.10. Known differences, all small: the measurement includes cuDNN "
        "and cuBLAS workspaces and allocator rounding to 512 bytes; torchvision's AlexNet/VGG keep an "
        "AdaptiveAvgPool2d that is an identity at 224x224 but still allocates its output and saves its "
        "input; labels and loss scalars are not modelled.",
        "",
        *details,
        "",
    ]
    text = "\n".join(lines)
    atomic_write(args.out, text)
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
