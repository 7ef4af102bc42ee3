"""Which layers ``apply_plan`` leaves to stock PyTorch (engine.stock), from the bundled H100/H200 profiles.

    python benchmarks/stock_layers.py [--out benchmarks/reports/stock-layers.md]

For every bundled profile of a zoo network, WR plans at 64 and 256 MiB per kernel (``make_plan``, the
profile's own policy): how many of the network's convolution layers stay stock PyTorch with ``cudnn.benchmark``
off and on, and the predicted convolution time of the plan alone, of stock PyTorch (each kernel's
``StockEstimate``), and of what runs once those layers are left stock. No GPU: predictions from measured
profiles; whether the steps match them is benchmarks/torch_training.py's to measure.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.fileio import atomic_write  # noqa: E402
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


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default=str(ROOT / "benchmarks" / "reports" / "stock-layers.md"))
    args = ap.parse_args(argv)
    atomic_write(args.out, report(rows()))
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
