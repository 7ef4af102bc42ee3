"""``python -m engine torch-plan``: profile what is missing on this GPU, plan, and write the plan for a model.

One command from a PyTorch model (or zoo network) to a plan that ``engine.pytorch.apply_plan`` applies,
through engine.gpu.planning (the path ``engine.pytorch.optimize`` takes too): the network's kernels are
profiled into the resumable SQLite cache (graphs already measured are read back, not measured again),
then ``engine.planner.make_plan`` makes the WR or WD plan. ``--mode free``
is WR with the per-kernel limit set to the device memory free on this GPU when planning (capped in effect
by --max-workspace, above which nothing is timed); the command prints the limit it used.
"""

from __future__ import annotations

import shlex
import sys

from ..errors import EngineError
from ..fileio import STDOUT, shown
from .network_args import add_input_argument
from .profile import add_precision_arguments, add_profiling_arguments, check_before_profiling, layout_of
from .progress import progress_bar

MODES = ("wr", "wd", "free")  # engine.gpu.planning.MODES; not imported from there, which loads CuPy


def add_arguments(p) -> None:
    p.add_argument("--network", required=True, help="torchvision:NAME, package.module:callable, or a zoo network")
    add_input_argument(p)
    p.add_argument("--batch", type=int, help="mini-batch size (default: the network's)")
    add_precision_arguments(p)
    p.add_argument(
        "--mode",
        default="wr",
        choices=MODES,
        help="wr: --budget per kernel; wd: --budget in total; free: WR at the memory free now",
    )
    p.add_argument("--budget", help="workspace budget, e.g. 64MiB (not with --mode free)")
    add_profiling_arguments(p)
    p.add_argument("--profile-output", help="also write the profile (.profile.json.gz)")
    p.add_argument("-o", "--output", help="plan file to write (default NETWORK-bBATCH-PRECISION-MODE.plan.json)")


def checked_budget(mode: str, budget: str | None) -> str | None:
    """The --budget of a WR/WD plan, or None for --mode free; checked before any GPU work starts."""
    from ..units import parse_size

    if mode == "free":
        if budget is not None:
            raise EngineError("--mode free takes no --budget: the limit is the device memory free when planning")
        return None
    if budget is None:
        raise EngineError(f"--mode {mode} needs --budget (e.g. 64MiB)")
    parse_size(budget)
    return budget


def run(args) -> int:
    from ..errors import GPUUnavailableError
    from ..gpu import available
    from ..summary import plan_summary
    from ..units import format_size, parse_size
    from ..zoo import get_network

    checked_budget(args.mode, args.budget)
    cap = parse_size(args.max_workspace)
    layout = layout_of(args)
    net = get_network(args.network, args.batch)
    safe = net.name.replace(":", "-").replace("/", "-").replace("@", "-")
    out = args.output or f"{safe}-b{net.batch}-{args.precision}-{args.mode}.plan.json"
    outputs = {"the plan": out} | ({"the profile": args.profile_output} if args.profile_output else {})
    check_before_profiling(args, net, outputs)
    ok, why = available()
    if not ok:
        raise GPUUnavailableError(f"cannot profile: {why}")
    from ..gpu.planning import profile_and_plan
    from ..gpu.progress import sweep_hint

    command = "python -m engine " + shlex.join(sys.argv[1:])
    done = profile_and_plan(
        net,
        mode=args.mode,
        budget=args.budget,
        policy=args.policy,
        precision=args.precision,
        layout=layout,
        cache=args.cache,
        max_workspace=cap,
        engines=args.engines,
        gpus=args.gpus,
        command=command,
        progress=progress_bar,
        status=sweep_hint(args.engines),
    )
    if args.profile_output:
        print(f"wrote {shown(done.profile.save(args.profile_output))}")
    if args.mode == "free":
        print(
            f"--mode free: WR at {format_size(done.budget)} per kernel, the device memory free now "
            f"(no plan above --max-workspace {format_size(cap)} was timed)"
        )
    print(plan_summary(done.plan))
    done.plan.save(out)
    if out == STDOUT:
        print("wrote the plan to standard output; save it and apply it with engine.pytorch.apply_plan(model, PATH)")
    else:
        print(f"wrote {out}; apply it with engine.pytorch.apply_plan(model, {out!r})")
    return 0
