"""``python -m engine plan``: make a WR or WD plan from a profile, print its summary, export it as JSON."""

from __future__ import annotations

import argparse
import shlex
import sys

from ..errors import EngineError
from ..kernels import LAYOUTS, PRECISIONS
from ..network import Network
from ..plan import MODES, load_plan
from ..planner import default_batch, make_plan, plan_summary
from ..profile import ENGINE_SETS, Profile, resolve_profile
from ..zoo import get_network
from .network_args import add_input_argument


def one_line_errors(parser: argparse.ArgumentParser) -> None:
    """Usage mistakes print one ``error:`` line (exit 2) like every other bad input, not argparse's usage block."""
    def error(message: str):
        parser.exit(2, f"error: {parser.prog}: {message} (see --help)\n")
    parser.error = error


def add_source_arguments(parser: argparse.ArgumentParser, required: bool = True) -> None:
    """Arguments shared by ``plan`` and ``front``: which profile, network and policy."""
    one_line_errors(parser)
    parser.add_argument("--profile", required=required, metavar="PATH|NAME",
                        help="a profile file (.profile.json[.gz]) or the name of a bundled profile")
    parser.add_argument("--network", required=required, metavar="NAME", help="a zoo network, e.g. alexnet")
    add_input_argument(parser)
    parser.add_argument("--batch", type=str, default=None, metavar="N",
                        help="mini-batch size (default: the one the profile records for this network)")
    parser.add_argument("--policy", default="powerOfTwo", metavar="undivided|powerOfTwo|all|LIST",
                        help="batch-size policy: which micro-batch sizes the optimizer may use (default powerOfTwo)")
    parser.add_argument("--precision", default=None, metavar="|".join(PRECISIONS),
                        help="default: as the profile records the network")
    parser.add_argument("--layout", default=None, metavar="|".join(LAYOUTS),
                        help="default: as the profile records the network")
    parser.add_argument("--engines", default="all", choices=ENGINE_SETS,
                        help="plans the optimizer may use: all measured (default), heuristics (only cuDNN's "
                             "heuristic list, as a framework sees it), deterministic (no NONDETERMINISTIC plans)")


def load_sources(args) -> tuple[Profile, Network]:
    profile = Profile.load(resolve_profile(args.profile)).restrict(args.engines)
    batch = None
    if args.batch is not None:
        try:
            batch = int(args.batch)
        except ValueError:
            raise EngineError(f"--batch must be a positive integer, got {args.batch!r}") from None
        if batch < 1:
            raise EngineError(f"--batch must be a positive integer, got {batch}")
    else:
        batch = default_batch(profile, args.network)
    return profile, get_network(args.network, batch)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser, required=False)  # not needed with --show
    parser.add_argument("--mode", metavar="wr|wd",
                        help="wr: per-kernel workspace limit (mu-cuDNN WR); wd: one total budget (WD, 0-1 ILP)")
    parser.add_argument("--budget", metavar="SIZE",
                        help="workspace budget, e.g. 64MiB or 1.5GiB: per kernel for wr, in total for wd")
    parser.add_argument("--solver", default="auto", help="WD only: ILP solver (default auto)")
    parser.add_argument("--time-limit", type=str, default="10", metavar="SECONDS",
                        help="WD only: ILP time limit (default 10 s)")
    parser.add_argument("-o", "--output", default=None, metavar="PLAN.json",
                        help="write the plan here (JSON; gzip-compressed if the name ends in .gz)")
    parser.add_argument("--show", default=None, metavar="PLAN.json",
                        help="instead of planning, validate a saved plan and print its summary")


def run(args) -> int:
    if args.show:
        print(plan_summary(load_plan(args.show)))
        return 0
    missing = [f"--{a}" for a in ("profile", "network", "mode", "budget") if getattr(args, a) is None]
    if missing:
        raise EngineError(f"missing {', '.join(missing)} (or use --show PLAN.json to print a saved plan)")
    mode = args.mode.lower()
    if mode not in MODES:
        raise EngineError(f"--mode must be wr or wd, got {args.mode!r}")
    try:
        time_limit = float(args.time_limit)
    except ValueError:
        raise EngineError(f"--time-limit must be a number of seconds, got {args.time_limit!r}") from None
    profile, network = load_sources(args)
    plan = make_plan(profile, network, mode=mode, budget=args.budget, policy=args.policy,
                     precision=args.precision, layout=args.layout,
                     command="python -m engine " + shlex.join(sys.argv[1:]), solver=args.solver,
                     time_limit_s=time_limit)
    print(plan_summary(plan))
    if args.output:
        try:
            path = plan.save(args.output)
        except OSError as err:
            raise EngineError(f"cannot write plan to {args.output!r}: {err.strerror or err}") from None
        print(f"wrote {path}")
    return 0
