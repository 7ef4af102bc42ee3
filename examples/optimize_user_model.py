"""Train a model of one's own (examples/user_model.py) with ``engine.pytorch.optimize`` and check each step
against stock PyTorch: the loss and every parameter's gradient, relative L2, within TF32's tolerance.

    python examples/optimize_user_model.py --steps 3                    # one line: optimize(model, budget=...)
    python -m engine torch-plan --network examples.user_model:build@3x64x64 --batch 32 --budget 64MiB -o u.json
    python examples/optimize_user_model.py --apply u.json               # the plan file, in a fresh process

Needs a GPU host. Prints what optimize profiled (a second run with the same cache measures nothing) and
exits 1 if any step differs from stock beyond the tolerance.
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

TOL = 5e-3  # TF32, as tests/test_gpu_torch.py


def rel(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--budget", default="64MiB")
    ap.add_argument("--engines", default="sweep", choices=["sweep", "heuristics"])
    ap.add_argument("--cache", help="profile cache (default: the engine's)")
    ap.add_argument("--apply", metavar="PLAN", help="apply this plan file instead of optimize()")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("error: this example trains on a CUDA GPU and this host has none", file=sys.stderr)
        return 2
    torch.manual_seed(0)
    stock = build().cuda()
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
    x = torch.randn(args.batch, 3, 64, 64, device="cuda")
    target = torch.randint(0, 10, (args.batch,), device="cuda")
    opts = [torch.optim.SGD(m.parameters(), lr=1e-2, momentum=0.9) for m in (stock, planned)]
    worst = 0.0
    for step in range(args.steps):
        losses = []
        for model, opt in zip((stock, planned), opts):
            loss = torch.nn.functional.cross_entropy(model(x), target)
            loss.backward()
            losses.append(loss.detach())
        errors = {"loss": rel(losses[1], losses[0])}
        errors.update({name: rel(q.grad, p.grad) for (name, p), q in zip(stock.named_parameters(),
                                                                         planned.parameters())})
        name, err = max(errors.items(), key=lambda kv: kv[1])
        worst = max(worst, err)
        print(f"step {step}: loss {losses[0].item():.6f} stock, {losses[1].item():.6f} planned; largest relative "
              f"L2 difference {err:.2e} ({name})")
        for opt in opts:
            opt.step()
            opt.zero_grad(set_to_none=True)
    applied = planned.__dict__.get("ucudnn")
    auto = planned.__dict__.get("ucudnn_auto")
    report = {"planned_layers": sorted(applied.planned) if applied else [],
              "unplanned": applied.unplanned if applied else None,
              "fallbacks": applied.fallbacks if applied else None,
              "history": auto.history if auto else None, "stock": {str(k): v for k, v in auto.stock.items()}
              if auto else None, "worst_relative_l2": worst, "tolerance": TOL}
    print(json.dumps(report, default=str))
    return 0 if worst <= TOL and applied and applied.planned and not applied.fallbacks else 1


if __name__ == "__main__":
    sys.exit(main())
