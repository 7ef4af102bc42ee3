"""``python -m engine memory``: memory timeline, policy comparison and capacity questions.

Examples::

    python -m engine memory --network alexnet-caffe --batch 200 --policy sn-recompute
    python -m engine memory --network vgg16 --batch 128 --policy all --capacity 12GiB --profile NAME
    python -m engine memory --network resnet50 --policy liveness --capacity 12GiB --max-batch
    python -m engine memory --network resnet50 --batch 16 --policy superneurons --capacity 12GiB --deepest resnet
    python -m engine memory --network torchvision:alexnet --batch 256 --profile NAME --time-params h100.json
        # the time model calibrated on a GPU host (python -m engine.pytorch.calibrate); the output says which
        # numbers are measured and which modelled
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys

from .network_args import add_input_argument
from ..errors import EngineError
from ..fileio import atomic_write, is_stdout
from ..kernel_sets import network_variant
from ..profile import Profile, resolve_profile
from ..units import format_size, parse_size
from ..memory.capacity import deepest, deepest_limit, max_batch, smallest_capacity
from ..memory.iteration import LOWER_BOUND, format_table, plan_memory
from ..memory.policies import MEMORY_POLICIES, get_policy
from ..memory.reserve import RESERVE
from ..memory.snapshot import snapshot_bytes, snapshot_path
from ..memory.tensors import CONVENTIONS
from ..memory.calibrate import load_measured
from ..memory.timemodel import TimeParams, time_note
from ..memory.workspace import RULES

BATCH_SEARCH_LIMIT = 1 << 16  # --max-batch looks no further


def add_arguments(parser) -> None:
    parser.add_argument("--network", required=True, help="zoo name, generator name (resnet-N, vgg-N) or spec path")
    add_input_argument(parser)
    parser.add_argument("--batch", type=int, default=None, help="mini-batch size (default: the network's)")
    parser.add_argument(
        "--policy",
        default="liveness",
        help=f"one of {', '.join(MEMORY_POLICIES)}; a comma-separated list, or 'all' to compare",
    )
    parser.add_argument("--capacity", default=None, help="GPU capacity, e.g. 12GiB (default: unbounded)")
    parser.add_argument("--profile", default=None, help="bundled profile name or path (convolution times/workspaces)")
    parser.add_argument("--workspace", default=None, choices=RULES, help="override the policy's workspace rule")
    parser.add_argument(
        "--convention", default=None, choices=list(CONVENTIONS), help="override the policy's framework tensor rules"
    )
    parser.add_argument(
        "--strategy",
        default=None,
        choices=("speed", "memory", "cost-aware"),
        help=f"SuperNeurons recomputation strategy (the policies that take one: {', '.join(_taking('strategy'))})",
    )
    parser.add_argument(
        "--reserve",
        default=None,
        metavar="FRACTION",
        help=f"share of --capacity left to the allocator by plans that fill it, e.g. 0.05 or 5%% "
        f"(default: {RESERVE:.0%}% in the pytorch convention, for PyTorch's caching allocator; "
        f"0 in the papers' own)",
    )
    parser.add_argument(
        "--bandwidth",
        default=None,
        help="host-device copy bandwidth per second (default 54GB, or --time-params' measurement)",
    )
    parser.add_argument(
        "--time-params",
        default=None,
        metavar="FILE",
        help="time-model measurements of a GPU host (python -m engine.pytorch.calibrate): copy "
        "rates, HBM and FC rates, per-layer times of the measured networks, and the bytes "
        "PyTorch keeps allocated itself (counted as workspace)",
    )
    parser.add_argument(
        "--optimizer-copies",
        type=int,
        default=0,
        help="optimizer state in units of the weights (SGD momentum: 1, Adam: 2)",
    )
    parser.add_argument(
        "--json",
        nargs="?",
        const="-",
        default=None,
        metavar="PATH",
        help="write JSON (to PATH, or stdout without one) instead of the table",
    )
    parser.add_argument(
        "--snapshot",
        default=None,
        metavar="PATH",
        help="also write the predicted timeline as a PyTorch memory snapshot (pytorch.org/memory_viz); "
        "with several policies one file each, PATH.pickle -> PATH.POLICY.pickle",
    )
    parser.add_argument("--max-batch", action="store_true", help="largest mini-batch that fits --capacity")
    parser.add_argument(
        "--deepest",
        default=None,
        choices=("resnet", "resnet-sn", "vgg"),
        help="deepest network of this family that fits --capacity at --batch",
    )


def _taking(option: str) -> list[str]:
    """The memory policies that take ``option`` (their registry entries)."""
    return [n for n, p in MEMORY_POLICIES.items() if option in p.options()]


def _policies(text: str) -> list[str]:
    names = list(MEMORY_POLICIES) if text == "all" else [p.strip() for p in text.split(",") if p.strip()]
    if not names:
        raise EngineError(f"--policy names no memory policy; known: {', '.join(MEMORY_POLICIES)}, or all")
    for name in names:
        if name not in MEMORY_POLICIES:
            raise EngineError(f"unknown memory policy {name!r}; known: {', '.join(MEMORY_POLICIES)}")
    return names


def _options(name: str, options: dict) -> dict:
    """The switches a policy takes (its registry entry), of those given: --strategy goes to those with one."""
    takes = get_policy(name).options()
    return {k: v for k, v in options.items() if k in takes}


def _reserve(text: str) -> float:
    try:
        value = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        value = math.nan
    if not 0 <= value < 1:
        raise EngineError(
            f"--reserve {text!r} is not a share of the capacity: give a fraction in [0, 1) such as 0.05, "
            f"or a percentage such as 5%"
        )
    return value


def _emit(args, payload, text: str) -> None:
    if args.json is None:
        print(text)
        return
    data = json.dumps(payload, indent=1)
    if args.json == "-":
        print(data)
    else:
        atomic_write(args.json, data + "\n", what="memory JSON")
        print(f"wrote {args.json}", file=sys.stderr)  # stderr, so `--json /dev/stdout` is JSON alone


def _check_options(args) -> None:
    """Options the parser cannot check alone: empty file names (plan_memory checks the rest)."""
    for flag, value in (("--json", args.json), ("--snapshot", args.snapshot), ("--time-params", args.time_params)):
        if value == "":
            raise EngineError(f"{flag} was given an empty file name")
    if args.snapshot and is_stdout(args.snapshot):  # "-", /dev/stdout: the pickle would mix with the table
        raise EngineError(
            f"--snapshot {args.snapshot}: a memory snapshot is a pickle file for memory_viz; give a file name"
        )


def _time_params(path: str | None):
    """(TimeParams, framework bytes) from ``--time-params`` (default: the assumed constants, 0)."""
    return (TimeParams(), 0) if path is None else load_measured(path)


def run(args) -> int:
    _check_options(args)
    names = _policies(args.policy)
    if args.snapshot:
        snapshot_path(args.snapshot, names[0], len(names) > 1)  # a name it cannot split is refused before any work
    capacity = parse_size(args.capacity) if args.capacity is not None else None
    profile = Profile.load(resolve_profile(args.profile)) if args.profile else None
    # the precision and layout the profile measured (the default precision's without a profile)
    variant = dict(zip(("precision", "layout"), network_variant(profile, args.network))) if profile else {}
    params, fw = _time_params(args.time_params)
    if args.bandwidth is not None:  # a given bandwidth replaces both directions, measured or not
        bw = float(parse_size(args.bandwidth.removesuffix("/s")))
        try:
            params = dataclasses.replace(
                params,
                bandwidth=bw,
                h2d=None,
                d2h=None,
                measured=tuple(m for m in params.measured if m not in ("bandwidth", "h2d", "d2h")),
            )
        except EngineError as err:
            raise EngineError(f"--bandwidth {args.bandwidth}: {str(err).removeprefix('time model: ')}") from None
    options = {}
    if args.strategy:
        options["strategy"] = args.strategy
        takers = _taking("strategy")
        if not set(takers) & set(names):
            raise EngineError(
                f"--strategy applies to {', '.join(takers)}; none of the policies given ({', '.join(names)}) takes it"
            )
    if args.reserve is not None and capacity is None:
        raise EngineError("--reserve is a share of --capacity: give --capacity too")
    if args.max_batch and args.deepest:
        raise EngineError("--max-batch and --deepest ask different questions: give one of them")
    reserve = _reserve(args.reserve) if args.reserve is not None else None
    common = dict(
        batch=args.batch,
        capacity=capacity,
        profile=profile,
        workspace=args.workspace,
        convention=args.convention,
        time_params=params,
        optimizer_copies=args.optimizer_copies,
        framework_bytes=fw,
        **variant,
        reserve=reserve,
    )

    if args.max_batch or args.deepest:
        if args.snapshot:
            raise EngineError("--snapshot exports a timeline; it does not go with --max-batch or --deepest")
        if capacity is None:
            raise EngineError("--max-batch and --deepest need --capacity")
        rows = []
        for name in names:
            opts = _options(name, options)
            if args.max_batch:
                limit = BATCH_SEARCH_LIMIT
                value = max_batch(
                    args.network,
                    name,
                    capacity,
                    profile=profile,
                    convention=args.convention,
                    framework_bytes=fw,
                    **variant,
                    reserve=reserve,
                    limit=limit,
                    **opts,
                )
            else:
                if args.batch is None:
                    raise EngineError("--deepest needs --batch")
                limit = deepest_limit(args.deepest)
                value = deepest(
                    args.deepest,
                    name,
                    capacity,
                    args.batch,
                    profile=profile,
                    convention=args.convention,
                    framework_bytes=fw,
                    **variant,
                    reserve=reserve,
                    **opts,
                )
            # the search stops at its limit: an answer there says "at least", not "the largest"
            rows.append(
                {
                    "policy": name,
                    "max_batch" if args.max_batch else "deepest": value,
                    "search_limit": limit,
                    "at_limit": value >= limit,
                }
            )
        key = "max_batch" if args.max_batch else "deepest"
        what = "largest mini-batch" if args.max_batch else f"deepest {args.deepest}"
        text = "\n".join(
            [f"{what} of {args.network} within {format_size(capacity)}"]
            + [
                f"  {r['policy']:<24} {r[key]}"
                + (f" or more (the search stops at {r['search_limit']})" if r["at_limit"] else "")
                + (" (none fits: even the smallest needs more)" if r[key] == 0 else "")
                for r in rows
            ]
        )
        _emit(args, {"network": args.network, "capacity": capacity, "question": key, "rows": rows}, text)
        return 0

    results = []
    for name in names:
        results.append(plan_memory(args.network, name, **common, **_options(name, options)))
    if args.snapshot:
        for r in results:
            path = snapshot_path(args.snapshot, r.policy, len(results) > 1)
            atomic_write(path, snapshot_bytes(r), what="memory snapshot")
            print(f"wrote {path}", file=sys.stderr if args.json is not None else sys.stdout)
    if len(results) == 1:
        res = results[0]
        _emit(args, res.to_dict(), format_table(res))
    else:
        head = (
            f"{'policy':<24} {'peak':>10} {'fits':>4} {'needs':>10} {'iter ms':>9} {'stall ms':>9} "
            f"{'offload':>10} {'re-fwd':>6}"
        )
        lines = [
            f"{results[0].network} batch {results[0].batch}, capacity "
            f"{format_size(capacity) if capacity else 'unbounded'}",
            head,
        ]
        for r in results:
            s = r.summary
            it = "" if math.isnan(s["iteration_ms"]) else f"{s['iteration_ms']:.2f}"
            st = "" if math.isnan(s["stall_ms"]) else f"{s['stall_ms']:.2f}"
            lines.append(
                f"{r.policy:<24} {format_size(s['peak']):>10} {'yes' if s['fits'] else 'no':>4} "
                f"{format_size(s['min_capacity']):>10} {it:>9} {st:>9} "
                f"{format_size(s['offload_bytes']):>10} {s['recompute_count']:>6}"
            )
        if any(r.time_note for r in results):
            lines.append(time_note(params) + " (per policy: --json, summary.layer_runs_measured)")
        lines += sorted({n for r in results if r.peak_is_lower_bound for n in r.notes if n.startswith(LOWER_BOUND)})
        _emit(args, {"results": [r.to_dict(ticks=False) for r in results]}, "\n".join(lines))
    if capacity is not None and not any(r.fits for r in results):
        mins = smallest_capacity(args.network, args.batch, profile=profile)
        best = min(mins, key=mins.get)
        chosen = ", ".join(f"{r.policy} needs {format_size(r.summary['min_capacity'])}" for r in results)
        if any(m <= capacity for m in mins.values()):
            ok = [p for p, m in mins.items() if m <= capacity]
            print(
                f"error: {args.network} batch {results[0].batch} does not fit {format_size(capacity)} under "
                f"{', '.join(names)} ({chosen}); policies that fit: {', '.join(ok)}",
                file=sys.stderr,
            )
            return 1
        raise EngineError(
            f"capacity {format_size(capacity)} is too small for every policy: {args.network} batch "
            f"{results[0].batch} needs at least {format_size(mins[best])} (policy {best})"
        )
    return 0
