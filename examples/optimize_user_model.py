"""Train a model of one's own (examples/user_model.py) with ``engine.pytorch.optimize`` and check each step
against stock PyTorch: the loss and every parameter's gradient, relative L2, beside a float64 reference.

    python examples/optimize_user_model.py --steps 3                    # one line: optimize(model, budget=...)
    python -m engine torch-plan --network examples.user_model:build@3x64x64 --batch 32 --budget 64MiB -o u.json
    python examples/optimize_user_model.py --apply u.json               # the plan file, in a fresh process
    python examples/optimize_user_model.py --model torchvision:mobilenet_v3_large --batch 64   # a torchvision model

Needs a GPU host. Prints what optimize profiled (a second run with the same cache measures nothing).
Each step is also run in float64 (stock PyTorch, the stock model's parameters): under TF32 two convolution
algorithms differ by their rounding, and through the ReLUs that difference reaches the first layer's
gradient, so the planned step passes when each gradient (and the loss) is within the tolerance of stock's or no
farther from float64 than stock's own is (twice stock's distance at most), parameter by parameter. ``--fp32``
runs strict fp32 (no TF32).
Exits 1 otherwise, or if a convolution was not planned or ran stock. Random ops are switched off (dropout and
stochastic depth at p=0, in the three models alike): a float64 copy draws other masks than a float32 model from
the same seed, and the check is of the convolutions; the generator is still reseeded before each forward.
"""

from __future__ import annotations

import argparse
import copy
import json
import sys

import torch

from engine.errors import EngineError
from engine.pytorch import apply_plan, optimize
from user_model import build

TOL = {"tf32": 5e-3, "fp32": 1e-5}  # as tests/test_gpu_torch.py


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def without_random_ops(model: torch.nn.Module) -> int:
    """Dropout and torchvision's stochastic depth at p=0 (the masks of a float64 copy differ); how many."""
    n = 0
    for m in model.modules():
        if isinstance(m, torch.nn.modules.dropout._DropoutNd) or type(m).__name__ == "StochasticDepth":
            m.p, n = 0.0, n + 1
    return n


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument(
        "--model",
        default="user",
        help="user (examples/user_model.py, 3x64x64, 10 classes) or torchvision:NAME (3x224x224, 1000 classes)",
    )
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--budget", default="64MiB")
    ap.add_argument("--engines", default="sweep", choices=["sweep", "heuristics"])
    ap.add_argument("--cache", help="profile cache (default: the engine's)")
    ap.add_argument("--apply", metavar="PLAN", help="apply this plan file instead of optimize()")
    ap.add_argument("--fp32", action="store_true", help="strict fp32 convolutions (TF32 off)")
    args = ap.parse_args()
    precision = "fp32" if args.fp32 else "tf32"
    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = not args.fp32
    if not torch.cuda.is_available():
        print("error: this example trains on a CUDA GPU and this host has none", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    if args.model == "user":
        stock, size, classes = build().cuda(), 64, 10
    elif args.model.startswith("torchvision:"):
        import torchvision

        stock = torchvision.models.get_model(args.model.split(":", 1)[1], weights=None).cuda()
        size, classes = 224, 1000
    else:
        print(f"error: --model is 'user' or torchvision:NAME, got {args.model!r}", file=sys.stderr)
        return 2
    print(f"random ops switched off: {without_random_ops(stock)}")
    planned = copy.deepcopy(stock)
    try:
        if args.apply:
            apply_plan(planned, args.apply)
            print(planned.ucudnn.summary())
        else:
            optimize(planned, budget=args.budget, engines=args.engines, cache=args.cache)
    except EngineError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    x = torch.randn(args.batch, 3, size, size, device="cuda")
    target = torch.randint(0, classes, (args.batch,), device="cuda")
    opts = [torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9) for m in (stock, planned)]
    ok = True
    for step in range(args.steps):
        ref = copy.deepcopy(stock).double()
        losses = []
        for model, inp in ((stock, x), (planned, x), (ref, x.double())):
            torch.manual_seed(1000 + step)  # the same dropout masks in all three
            loss = torch.nn.functional.cross_entropy(model(inp), target)
            loss.backward()
            losses.append(loss.detach())
        params = [dict(m.named_parameters()) for m in (stock, planned, ref)]

        def errors(a: int, b: int) -> dict[str, float]:
            errs = {"loss": rel(losses[a], losses[b])}
            errs.update({n: rel(params[a][n].grad, params[b][n].grad) for n in params[0]})
            return errs

        vs_stock, vs_ref, stock_ref = errors(1, 0), errors(1, 2), errors(0, 2)
        # each gradient on its own: within the tolerance of stock's, or no farther from float64 than stock's own
        # (a gradient that is zero in float64, e.g. a BN bias feeding another training-mode BN, is all rounding)
        tol = TOL[precision]
        bad = [n for n in vs_stock if vs_stock[n] > tol and vs_ref[n] > max(tol, 2 * stock_ref[n])]
        passed = not bad
        ok &= passed

        def worst(errs: dict[str, float]) -> str:
            e, n = max((e, n) for n, e in errs.items())
            return f"{e:.2e} ({n})"

        print(
            f"step {step}: loss {losses[0].item():.6f} stock, {losses[1].item():.6f} planned, {losses[2].item():.6f}"
            f" float64; largest relative L2: planned vs stock {worst(vs_stock)}, planned vs float64 "
            f"{worst(vs_ref)}, stock vs float64 {worst(stock_ref)}: "
            f"{'ok' if passed else 'FAILED: ' + ', '.join(bad[:5])}"
        )
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
    applied = planned.__dict__.get("ucudnn")
    auto = planned.__dict__.get("ucudnn_auto")
    report = {
        "planned_layers": sorted(applied.planned) if applied else [],
        "unplanned": applied.unplanned if applied else None,
        "kept_stock": applied.why_stock if applied else None,  # the plan gains less than its host cost there
        "fallbacks": applied.fallbacks if applied else None,
        "history": auto.history if auto else None,
        "stock": {str(k): v for k, v in auto.stock.items()} if auto else None,
        "precision": precision,
        "tolerance": TOL[precision],
        "steps_ok": ok,
    }
    print(json.dumps(report, default=str))
    return 0 if ok and applied and applied.planned and not applied.fallbacks else 1


if __name__ == "__main__":
    sys.exit(main())
