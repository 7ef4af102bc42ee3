"""``python -m engine profile``: profile a network's kernels on this GPU into a profile file.

The GPU modules are imported inside ``run``, so that parsing this command's options needs no CuPy.
"""

from __future__ import annotations

import sys
from functools import partial

from ..errors import EngineError
from ..fileio import shown
from ..gpu import ENGINES, KNOB_SAMPLES
from ..precision import DEFAULT_PRECISION, LAYOUTS, PRECISIONS
from ..units import format_size, parse_size
from .network_args import add_input_argument
from .options import positive_int
from .progress import progress_bar


def add_profiling_arguments(p) -> None:
    """What is measured and where: shared by ``profile`` and ``torch-plan``, which profiles what is missing."""
    p.add_argument("--policy", default="powerOfTwo", help="undivided | powerOfTwo | all | a list such as 1,2,4,96,256")
    p.add_argument(
        "--engines",
        default=ENGINES[0],
        choices=ENGINES,
        help="sweep (default): cuDNN's heuristic list plus every other engine configuration it offers; "
        "heuristics: only cuDNN's heuristic list (heuristics A and FALLBACK), several times faster to profile, "
        "its plans possibly a little slower (benchmarks/reports/profiling-speed.md)",
    )
    p.add_argument(
        "--max-workspace",
        default="1GiB",
        help="plans needing more are recorded but not timed, so no plan uses more (default 1GiB)",
    )
    p.add_argument(
        "--gpus",
        help="profile on these local GPUs at once, the build processes spread over them, e.g. 0,1 "
        "(default: every visible GPU when there are several)",
    )
    p.add_argument("--cache", help="SQLite cache (default ~/.cache/ucudnn-explorer/profiles.sqlite)")


def add_precision_arguments(p) -> None:
    """--dtype and --layout of what is measured: shared by ``profile`` and ``torch-plan``."""
    p.add_argument(
        "--dtype",
        "--precision",
        dest="precision",
        default=DEFAULT_PRECISION,
        choices=list(PRECISIONS),
        help="; ".join(f"{name}: {r.label}" for name, r in PRECISIONS.items()) + f" (default {DEFAULT_PRECISION})",
    )
    p.add_argument(
        "--layout",
        choices=LAYOUTS,
        help="default: the dtype's (" + ", ".join(f"{name} {r.layout}" for name, r in PRECISIONS.items()) + ")",
    )


def check_before_profiling(args, net, outputs: dict[str, str]) -> None:
    """What ``profile`` and ``torch-plan`` are asked, checked before anything is measured (and before the GPU
    is): the policy at the network's batch, the cache and the files the results go to (``{what: path}``), so a
    wrong one is not found only after the whole run."""
    import os
    import stat

    from ..fileio import check_writable
    from ..policies import batch_sizes

    batch_sizes(args.policy, net.batch)
    parse_size(args.max_workspace)
    if args.cache:
        try:
            mode = os.stat(os.path.expanduser(args.cache)).st_mode
        except FileNotFoundError:
            mode = None
        except OSError as err:
            raise EngineError(f"cannot open profile cache {args.cache!r}: {err.strerror}") from None
        if mode is not None and not stat.S_ISREG(mode):
            raise EngineError(f"--cache {args.cache!r} is not a file; give the path of an SQLite cache file")
    for what, path in outputs.items():
        check_writable(path, what)


def layout_of(args) -> str:
    """--layout, else the default layout of --dtype."""
    return args.layout or PRECISIONS[args.precision].layout


def add_arguments(p) -> None:
    p.add_argument("--network", required=True, help="zoo name, generator (resnet-N, vgg-N) or spec file")
    add_input_argument(p)
    p.add_argument("--batch", type=int, help="mini-batch size (default: the network's)")
    add_precision_arguments(p)
    add_profiling_arguments(p)
    p.add_argument("--repeats", type=positive_int, default=5)
    p.add_argument(
        "--knob-samples",
        type=int,
        default=KNOB_SAMPLES,
        help=f"random knob settings per engine in the sweep, besides its defaults (default {KNOB_SAMPLES})",
    )
    p.add_argument(
        "--include-rtc",
        action="store_true",
        help="time every runtime-compiled engine (each costs ~1 s of NVRTC per graph; without it only where one "
        "is cuDNN's first heuristic plan, the one stock PyTorch runs)",
    )
    p.add_argument("-o", "--output", help="profile file to write (.profile.json.gz)")
    p.add_argument(
        "--build-workers",
        type=int,
        help="processes building plans while one at a time times them on this GPU (default: one per CPU "
        "core but one, at most 4, as memory allows; 1: build and time graph after graph)",
    )
    p.add_argument(
        "--scheduler",
        help="profile on the GPUs of an existing Dask cluster, e.g. tcp://HOST:8786 "
        "(single-threaded workers, up to 4 per GPU: CUDA_VISIBLE_DEVICES=0 dask worker tcp://HOST:8786 "
        "--nworkers 4 --nthreads 1, one such line per GPU)",
    )


def run(args) -> int:
    from ..gpu.distributed import choose_profiler
    from ..gpu.progress import sweep_hint
    from ..zoo import get_network

    net = get_network(args.network, args.batch)
    layout = layout_of(args)
    out = args.output or f"{net.name}-b{net.batch}-{args.precision}-{layout.lower()}-{args.policy}.profile.json.gz"
    check_before_profiling(args, net, {"the profile": out})
    profile_network = choose_profiler(args.gpus, args.scheduler)
    cap = parse_size(args.max_workspace)
    command = "python -m engine " + " ".join(sys.argv[1:])
    extra = {}
    if args.build_workers is not None:
        if isinstance(profile_network, partial):  # Dask: one process per GPU
            raise EngineError("--build-workers applies to profiling on one GPU, not with --gpus or --scheduler")
        extra["workers"] = args.build_workers
    prof = profile_network(
        net,
        policy=args.policy,
        precision=args.precision,
        layout=layout,
        cache_path=args.cache,
        max_workspace=cap,
        repeats=args.repeats,
        include_rtc=args.include_rtc,
        engines=args.engines,
        knob_samples=args.knob_samples,
        command=command,
        progress=progress_bar,
        status=sweep_hint(args.engines),
        **extra,
    )
    prof.save(out)
    t = prof.table
    skipped = t[t.status == "skipped"]
    swept = (t.heuristic_rank < 0).sum()
    above = skipped.reason.str.startswith("workspace").sum()
    gpus = len(prof.provenance.get("gpus", []))
    print(
        f"{f'{gpus}x ' if gpus > 1 else ''}{prof.provenance['gpu']}: {t.signature.nunique()} unique kernels, "
        f"{t.micro_batch.nunique()} sizes, "
        f"{len(t)} plan measurements ({swept} from the engine sweep; {(t.status == 'ok').sum()} ok, "
        f"{(t.status == 'failed').sum()} failed, "
        f"{above} not timed above {format_size(cap)}, {len(skipped) - above} runtime-compiled or filtered "
        f"out) in {prof.provenance['profiling_seconds']} s -> {shown(out)}"
    )
    if prof.provenance.get("time_split"):
        print(split_line(prof.provenance))
    failed = prof.provenance.get("failed_graphs", [])
    for f in failed:
        print(
            f"error: {f['signature']} at b={f['micro_batch']} failed ({f['reason']}) and is not in {shown(out)}; "
            f"run the same command again to retry it",
            file=sys.stderr,
        )
    return 2 if failed else 0


def split_line(prov: dict) -> str:
    """Where the profiling time went: the graphs' seconds per step, summed (profiler.GraphMeasurer.split)."""
    s, steps = prov["time_split"], prov["time_split"].get("steps", {})
    if not s.get("graphs"):
        return "time split: every graph came from the cache"
    part = ", ".join(f"{k} {steps[k]:.1f}" for k in ("heuristics", "sweep", "build") if k in steps)
    where = f" on {prov['workers']} processes sharing the GPU" if prov.get("workers", 1) > 1 else ""
    skips = s.get("sweep_skips") or {}
    skipped = (
        "; sweep configurations not timed: " + ", ".join(f"{n} {r}" for r, n in sorted(skips.items())) if skips else ""
    )
    wait = f", waiting for the GPU {s['wait']:.1f} s" if s.get("wait") else ""
    bound = (s.get("host_bound") or {}).get("plans")
    bound = f"; {bound} plans host-bound (engine/gpu/timing.py), timed back to back" if bound else ""
    left = sum(n for k, n in (s.get("first_runs") or {}).items() if k.endswith("left at the warm-up"))
    bound += f"; {left} slow plans left at their warm-up (engine/gpu/screen.py)" if left else ""
    return (
        f"time split over {s['graphs']} measured graphs{where}: building {s['build']:.1f} s ({part}), timing "
        f"{s['timing']:.1f} s, bookkeeping {s['bookkeeping']:.1f} s (notes {steps.get('notes', 0):.1f}, cache "
        f"{steps.get('commit', 0):.1f}){wait}; wall {prov['profiling_seconds']} s{skipped}{bound}"
    )
