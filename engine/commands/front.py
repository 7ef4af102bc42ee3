"""``python -m engine front``: the network's WD Pareto front (total workspace vs total time) as CSV or JSON.

Every point is an optimal WD plan at that total budget (mu-cuDNN §III-C), its workspace the plan's
aligned arena (engine.planner.wd_front): the front the dashboard draws and its budget slider walks along.
"""

from __future__ import annotations

import argparse
import json
import sys

from ..errors import EngineError
from ..fileio import atomic_write, shown
from ..kernel_sets import kernel_sets, network_variant
from ..planner import wd_front
from ..policies import policy_name
from ..units import MiB
from .options import add_source_arguments, load_sources


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser)
    parser.add_argument("--format", default="csv", metavar="csv|json", help="output format (default csv)")
    parser.add_argument("-o", "--output", default=None, metavar="FILE", help="write here instead of stdout")


def run(args) -> int:
    fmt = args.format.lower()
    if fmt not in ("csv", "json"):
        raise EngineError(f"--format must be csv or json, got {args.format!r}")
    profile, network = load_sources(args)
    precision, layout = network_variant(profile, network.name, args.precision, args.layout)
    sets = kernel_sets(profile, network, args.policy, precision, layout)
    front = wd_front([confs for _, confs in sets])
    points = [(int(w), float(t)) for w, t in zip(front.workspace, front.time_ms)]
    if fmt == "csv":
        text = "workspace_bytes,workspace_mib,time_ms\n" + "".join(f"{w},{w / MiB:.6f},{t!r}\n" for w, t in points)
    else:
        text = (
            json.dumps(
                {
                    "network": {"name": network.name, "batch": network.batch},
                    "precision": precision,
                    "layout": layout,
                    "policy": policy_name(args.policy),
                    "kernels": [k.id for k, _ in sets],
                    "points": [{"workspace": w, "workspace_mib": w / MiB, "time_ms": t} for w, t in points],
                    "profile": profile.provenance,
                },
                indent=1,
            )
            + "\n"
        )
    if args.output is not None:
        atomic_write(args.output, text, what="front")
        print(f"wrote {len(points)} front points to {shown(args.output)}", file=sys.stderr)
    else:
        sys.stdout.write(text)
    return 0
