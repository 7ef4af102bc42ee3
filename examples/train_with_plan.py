"""Train a torchvision model on synthetic data, stock and then with a plan applied; print both.

    python -m engine torch-plan --network torchvision:resnet50 --batch 64 --budget 64MiB -o plan.json
    python examples/train_with_plan.py --model resnet50 --batch 64 --plan plan.json --steps 30

Needs a GPU host (the `gpu` and `torch` extras). Synthetic images and labels, so nothing is downloaded.
Step times are CUDA-event medians after warm-up; peak memory is ``torch.cuda.max_memory_allocated``.
For AMP fp16, make the plan with ``--dtype fp16`` and pass ``--amp``.
"""

from __future__ import annotations

import argparse
import statistics
import sys

import torch
import torchvision

from engine.errors import EngineError
from engine.pytorch import apply_plan


def train(model, x, target, steps: int, amp: bool) -> tuple[float, int]:
    opt = torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    times = []
    for _ in range(steps):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times), torch.cuda.max_memory_allocated()


def fail(problem: str) -> None:
    """One line and exit status 2, as the engine's commands end."""
    print(f"error: {problem}", file=sys.stderr)
    sys.exit(2)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="resnet50", help="a torchvision.models builder name")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--plan", required=True, help="plan file from `python -m engine torch-plan` or `plan`")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--amp", action="store_true", help="fp16 autocast and channels_last (an fp16 NHWC plan)")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        fail(
            "this example trains on a CUDA GPU and this host has none (torch.cuda.is_available() is False); "
            "run it on a GPU host"
        )
    torch.backends.cudnn.benchmark = True
    fmt = torch.channels_last if args.amp else torch.contiguous_format
    x = torch.randn(args.batch, 3, 224, 224, device="cuda").to(memory_format=fmt)
    target = torch.randint(0, 1000, (args.batch,), device="cuda")
    for label in ("stock PyTorch", "planned"):
        torch.manual_seed(0)
        model = getattr(torchvision.models, args.model)(weights=None).cuda().to(memory_format=fmt)
        if label == "planned":
            try:
                apply_plan(model, args.plan)
            except EngineError as err:
                fail(str(err))
            print(model.ucudnn.summary())
        ms, peak = train(model, x, target, args.steps, args.amp)
        print(f"{label:>14}: {ms:7.2f} ms per step (median of {args.steps}), peak {peak / 2**20:,.0f} MiB")
        del model
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
