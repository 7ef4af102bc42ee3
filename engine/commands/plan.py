"""``python -m engine plan``: make a WR or WD plan from a profile, print its summary, export it as JSON."""

from __future__ import annotations

import argparse
import math
import shlex
import sys

from ..errors import EngineError
from ..fileio import shown
from ..plan import MODES, load_plan
from ..planner import make_plan
from ..summary import plan_summary
from .options import add_source_arguments, load_sources


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser, required=False)  # not needed with --show
    parser.add_argument(
        "--mode",
        metavar="wr|wd",
        help="wr (default, as torch-plan): per-kernel workspace limit (mu-cuDNN WR); wd: one total budget "
        "(WD, 0-1 ILP)",
    )
    parser.add_argument(
        "--budget", metavar="SIZE", help="workspace budget, e.g. 64MiB or 1.5GiB: per kernel for wr, in total for wd"
    )
    parser.add_argument("--solver", default=None, help="WD only: ILP solver (default auto)")
    parser.add_argument(
        "--time-limit", type=str, default=None, metavar="SECONDS", help="WD only: ILP time limit (default 10 s)"
    )
    parser.add_argument(
        "-o",
        "--output",
        default=None,
        metavar="PLAN.json",
        help="write the plan here (JSON; gzip-compressed if the name ends in .gz)",
    )
    parser.add_argument(
        "--show",
        default=None,
        metavar="PLAN.json",
        help="instead of planning, validate a saved plan and print its summary",
    )


TIME_LIMIT_S = 10  # WD's ILP, unless --time-limit


def run(args) -> int:
    for flag, value in (("--output", args.output), ("--show", args.show)):
        if value == "":
            raise EngineError(f"{flag} was given an empty file name")
    if args.show:
        planning = [f"--{a}" for a in ("profile", "network", "mode", "budget", "output") if getattr(args, a)]
        if planning:
            raise EngineError(
                f"--show prints a saved plan; {', '.join(planning)} belong to making one: give one or the other"
            )
        print(plan_summary(load_plan(args.show)))
        return 0
    missing = [f"--{a}" for a in ("profile", "budget") if getattr(args, a) is None]
    if missing:
        raise EngineError(f"missing {', '.join(missing)} (or use --show PLAN.json to print a saved plan)")
    mode = "wr" if args.mode is None else args.mode.lower()  # an empty --mode is a mistake, not the default
    if mode not in MODES:
        raise EngineError(f"--mode must be wr or wd, got {args.mode!r}")
    wd_only = [f for f, v in (("--solver", args.solver), ("--time-limit", args.time_limit)) if v is not None]
    if mode != "wd" and wd_only:
        raise EngineError(
            f"{' and '.join(wd_only)} {'tune' if len(wd_only) > 1 else 'tunes'} WD's ILP; WR (the default --mode) "
            "solves none: drop it"
        )
    try:
        time_limit = float(args.time_limit or TIME_LIMIT_S)
    except ValueError:
        time_limit = math.nan
    if not 0 < time_limit < math.inf:
        raise EngineError(f"--time-limit must be a positive number of seconds, got {args.time_limit!r}")
    profile, network = load_sources(args)
    plan = make_plan(
        profile,
        network,
        mode=mode,
        budget=args.budget,
        policy=args.policy,
        precision=args.precision,
        layout=args.layout,
        command="python -m engine " + shlex.join(sys.argv[1:]),
        solver=args.solver or "auto",
        time_limit_s=time_limit,
    )
    print(plan_summary(plan))
    if args.output is not None:
        print(f"wrote the plan to {shown(plan.save(args.output))}")
    return 0
