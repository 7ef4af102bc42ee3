"""``python -m engine torch-plan``: profile what is missing on this GPU, plan, and write the plan for a model.

One command from a PyTorch model (or zoo network) to a plan that ``engine.pytorch.apply_plan`` applies:
the network's kernels are profiled into the resumable SQLite cache (graphs already measured are read
back, not measured again), then ``engine.planner.make_plan`` makes the WR or WD plan. ``--mode free``
is WR with the per-kernel limit set to the device memory free on this GPU when planning (capped in effect
by --max-workspace, above which nothing is timed); the command prints the limit it used.
"""

from __future__ import annotations

import shlex
import sys

from ..errors import EngineError
from .network_args import add_input_argument
from .profile import add_precision_arguments, add_profiling_arguments, layout_of
from .progress import progress_bar

MODES = ("wr", "wd", "free")


def add_arguments(p) -> None:
    p.add_argument("--network", required=True, help="torchvision:NAME, package.module:callable, or a zoo network")
    add_input_argument(p)
    p.add_argument("--batch", type=int, help="mini-batch size (default: the network's)")
    add_precision_arguments(p)
    p.add_argument("--mode", default="wr", choices=MODES,
                   help="wr: --budget per kernel; wd: --budget in total; free: WR at the memory free now")
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


def free_memory() -> int:
    """Bytes of device memory free now (cudaMemGetInfo), the most workspace a kernel could get."""
    import cupy
    return int(cupy.cuda.runtime.memGetInfo()[0])


def run(args) -> int:
    from ..gpu.distributed import choose_profiler
    from ..planner import make_plan
    from ..summary import plan_summary
    from ..zoo import get_network
    from ..units import format_size, parse_size
    budget = checked_budget(args.mode, args.budget)
    cap = parse_size(args.max_workspace)
    layout = layout_of(args)
    net = get_network(args.network, args.batch)
    profile_network = choose_profiler(args.gpus, None)
    command = "python -m engine " + shlex.join(sys.argv[1:])
    profile = profile_network(net, policy=args.policy, precision=args.precision, layout=layout,
                              cache_path=args.cache, max_workspace=cap, engines=args.engines, command=command,
                              progress=progress_bar)
    if args.profile_output:
        print(f"wrote {profile.save(args.profile_output)}")
    if budget is None:
        budget = free_memory()
        print(f"--mode free: WR at {format_size(budget)} per kernel, the device memory free now "
              f"(no plan above --max-workspace {format_size(cap)} was timed)")
    plan = make_plan(profile, net, mode="wr" if args.mode == "free" else args.mode,
                     budget=budget, policy=args.policy, precision=args.precision,
                     layout=layout, command=command)
    print(plan_summary(plan))
    safe = net.name.replace(":", "-").replace("/", "-").replace("@", "-")
    out = args.output or f"{safe}-b{net.batch}-{args.precision}-{args.mode}.plan.json"
    print(f"wrote {plan.save(out)}; apply it with engine.pytorch.apply_plan(model, {out!r})")
    return 0
