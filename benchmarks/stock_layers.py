"""Which layers ``apply_plan`` leaves to stock PyTorch (engine.stock), from the bundled H100/H200 profiles.

    python benchmarks/stock_layers.py            # the plans from the bundled profiles -> stock-layers.json, then:
    python benchmarks/stock_layers.py report     # stock-layers.md and README's block from the JSON alone

For every bundled profile of a zoo network, WR plans at 64 and 256 MiB per kernel (``make_plan``, the
profile's own policy): how many of the network's convolution layers stay stock PyTorch with ``cudnn.benchmark``
off and on, and the predicted convolution time of the plan alone, of stock PyTorch (each kernel's
``StockEstimate``), and of what runs once those layers are left stock. No GPU: predictions from measured
profiles; whether the steps match them is benchmarks/torch_training.py's to measure.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write, load_json_file  # noqa: E402
from engine.planner import make_plan  # noqa: E402
from engine.profile import Profile, bundled_profiles  # noqa: E402
from engine.stock import stock_layers  # noqa: E402
from engine.zoo import get_network  # noqa: E402

BUDGETS = ("64MiB", "256MiB")


def rows() -> list[dict]:
    out = []
    for name, path in bundled_profiles().items():
        prof = Profile.load(path)
        spec = prof.networks[0]
        net = get_network(spec["name"], spec["batch"])
        for budget in BUDGETS:
            plan = make_plan(prof, net, mode="wr", budget=budget, policy=spec["policy"])
            row = {"profile": name, "budget": budget, "layers": len({k.layer for k in plan.kernels})}
            row["plan_ms"] = plan.totals.time_ms
            for bench in (False, True):
                stays = stock_layers(plan, bench)
                ref = [
                    (k.stock.benchmark_ms if bench else k.stock.heuristic_ms) if k.stock else None for k in plan.kernels
                ]
                row[f"stock_{bench}"] = len(stays)
                row[f"stock_ms_{bench}"] = None if None in ref else sum(ref)
                mixed = [r if k.layer in stays else k.time_ms for k, r in zip(plan.kernels, ref)]
                row[f"mixed_ms_{bench}"] = None if None in mixed else sum(mixed)
            out.append(row)
    return out


def report(rs: list[dict]) -> str:
    def ms(v):
        return "-" if v is None else f"{v:.2f}"

    lines = [
        "# Layers a WR plan leaves to stock PyTorch (engine.stock)",
        "",
        "<!-- generated: python benchmarks/stock_layers.py; do not edit -->",
        "",
        "Predicted from the bundled profiles (assets/profiles; no GPU run): WR plans at each budget, the layers whose "
        "predicted gain over stock PyTorch is less than the planned op's host cost (engine/stock.py) and the "
        "convolution time (ms, forward + backward, all kernels) of the plan, of stock PyTorch's choice (cuDNN's "
        "first heuristic plan with `cudnn.benchmark` off; the fastest of the first 10 with it on) and of the plan "
        "with those layers left stock; - where a plan stock PyTorch may run was not timed (above the profiler's "
        "workspace cap, or runtime-compiled), so its time is unknown.",
        "",
        "| profile | budget | layers | stock, benchmark off | stock, on | plan | stock off / on | mixed off / on |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rs:
        lines.append(
            f"| {r['profile']} | {r['budget']} | {r['layers']} | {r['stock_False']} | {r['stock_True']} | "
            f"{ms(r['plan_ms'])} | {ms(r['stock_ms_False'])} / {ms(r['stock_ms_True'])} | "
            f"{ms(r['mixed_ms_False'])} / {ms(r['mixed_ms_True'])} |"
        )
    return "\n".join(lines) + "\n"


README_CASES = (  # (profile, budget, what): the layers the README quotes
    ("h100-resnet50-b64-fp16-nhwc-powerOfTwo", "256MiB", "ResNet-50 b64 fp16"),
    ("h100-resnet50-b64-tf32-nchw-powerOfTwo", "256MiB", "ResNet-50 b64 TF32"),
    ("h100-alexnet-b256-tf32-nchw-powerOfTwo", "256MiB", "AlexNet b256 TF32"),
    ("h100-vgg16-b64-tf32-nchw-powerOfTwo", "256MiB", "VGG-16 b64 TF32"),
)


def readme_block(rs: list[dict]) -> str:
    by = {(r["profile"], r["budget"]): r for r in rs}
    parts = [
        f"{by[p, b]['stock_False']} of {by[p, b]['layers']} {what} layers"
        for p, b, what in README_CASES
        if (p, b) in by
    ]
    return (
        "On the bundled H100 profiles at 256 MiB per kernel (`cudnn.benchmark` off) that leaves "
        + ", ".join(parts)
        + " stock ([benchmarks/reports/stock-layers.md](benchmarks/reports/stock-layers.md), predictions)."
    )


JSON = ROOT / "benchmarks" / "reports" / "stock-layers.json"
MD = ROOT / "benchmarks" / "reports" / "stock-layers.md"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("what", nargs="?", choices=["plans", "report"], default="plans")
    args = ap.parse_args(argv)
    if args.what == "plans":
        atomic_write(JSON, json.dumps({"rows": rows()}, indent=1) + "\n")
    rs = load_json_file(JSON, "stock-layers results")["rows"]
    atomic_write(MD, report(rs))
    write_block(README, "stock_layers", readme_block(rs))
    print(f"wrote {MD.relative_to(ROOT)} and README's block")
    return 0


if __name__ == "__main__":
    sys.exit(main())
