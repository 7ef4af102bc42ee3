"""The computed tables of docs/reproduction.md, from the bundled profiles (CPU, a few seconds).

    python benchmarks/reproduction.py          # rewrites the generated blocks of docs/reproduction.md

Each table is made by ``python -m engine memory ... --json`` (the command is printed above the table),
so the page quotes exactly what the engine computes today; tests/test_reports.py checks the blocks.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme import read_block, write_block  # noqa: E402
from engine.units import format_size  # noqa: E402

DOC = ROOT / "docs" / "reproduction.md"
POLICIES = (
    "baseline-vdnn-p",
    "liveness",
    "vdnn-all-m",
    "vdnn-conv-p",
    "vdnn-dyn",
    "layrub-hybrid",
    "sn-recompute",
    "superneurons",
)
TORCH_STEPS = (("AlexNet", "alexnet", 256), ("ResNet-50", "resnet50", 64), ("VGG-16", "vgg16", 64))
MICRO = ("vgg16", 64, "h100-vgg16-b64-tf32-nchw-powerOfTwo", ("8GiB", "10GiB"), ("fit", "fit-seq", "wr"))


def memory(*args: str) -> dict:
    out = subprocess.run(
        [sys.executable, "-m", "engine", "memory", *args, "--json"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out)


def where(s: dict) -> str:
    return f"step {s['peak_step']}, {'bwd' if s['peak_phase'] == 'B' else 'fwd'} {s['peak_layer']}"


def torch_steps() -> str:
    lines = ["| network | batch | predicted peak | where |", "|---|---|---|---|"]
    for label, net, batch in TORCH_STEPS:
        s = memory(
            "--network",
            net,
            "--batch",
            str(batch),
            "--policy",
            "liveness",
            "--convention",
            "pytorch",
            "--optimizer-copies",
            "1",
        )["summary"]
        lines.append(f"| {label} | {batch} | {format_size(s['peak'])} | {where(s)} |")
    return "\n".join(lines)


def all_policies() -> str:
    args = (
        "--network",
        "alexnet",
        "--batch",
        "256",
        "--policy",
        "all",
        "--capacity",
        "3GiB",
        "--profile",
        "h100-alexnet-b256-tf32-nchw-powerOfTwo",
    )
    results = {r["policy"]: r["summary"] for r in memory(*args)["results"]}
    lines = [
        f"`python -m engine memory {' '.join(args)}`",
        "",
        "| policy | peak | needs at least | iteration ms | stalls ms | offloaded |",
        "|---|---|---|---|---|---|",
    ]
    for p in POLICIES:
        s = results[p]
        lines.append(
            f"| {p} | {format_size(s['peak'])} | {format_size(s['min_capacity'])} | {s['iteration_ms']:.2f} | "
            f"{s['stall_ms']:.2f} | {format_size(s['offload_bytes']) if s['offload_bytes'] else 0} |"
        )
    return "\n".join(lines)


def micro_batching() -> str:
    net, batch, profile, capacities, rules = MICRO
    lines = [
        f"`python -m engine memory --network {net} --batch {batch} --policy liveness --profile {profile} "
        "--capacity C --workspace RULE`: convolution time in ms (kernels the rule micro-batched)",
        "",
        "| capacity | " + " | ".join(rules) + " |",
        "|---|" + "---|" * len(rules),
    ]
    for cap in capacities:
        cells = []
        for rule in rules:
            d = memory(
                "--network",
                net,
                "--batch",
                str(batch),
                "--policy",
                "liveness",
                "--profile",
                profile,
                "--capacity",
                cap,
                "--workspace",
                rule,
            )
            divided = sum(1 for k in d["kernels"] if not k["division"].startswith("1x"))
            cells.append(f"{d['summary']['conv_ms']:.1f} ({divided})")
        lines.append(f"| {cap.replace('GiB', ' GiB')} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


BLOCKS = {
    "reproduction:torch": torch_steps,
    "reproduction:policies": all_policies,
    "reproduction:micro": micro_batching,
}


def main() -> None:
    for name, make in BLOCKS.items():
        write_block(DOC, name, make())
        print(read_block(DOC.read_text(), name), end="\n\n")


if __name__ == "__main__":
    main()
