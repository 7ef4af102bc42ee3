"""Profiling wall time from a cold and from a warm cache, and what the bundled profiles hold.

    python benchmarks/profiling.py measure [--cold 2] [--warm 5]   # GPU host, about 2 minutes
    python benchmarks/profiling.py report                           # anywhere: profiling.md and README's block
    python benchmarks/profiling.py speed --out DIR                  # GPU host: issue 24's runs (about 5 minutes)
    python benchmarks/profiling.py speed-compare DIR                # anywhere: the two ResNet-50 profiles compared
    python benchmarks/profiling.py speed-report                     # anywhere: profiling-speed.md from its JSON

``measure`` runs the issue's timing target, ``python -m engine profile`` of AlexNet b256 (TF32, NCHW,
powerOfTwo, engine sweep), as a subprocess: ``--cold`` times each into a new SQLite cache, then
``--warm`` times into the cache of the last cold run. It compiles the packages' bytecode first, as
``pip install`` leaves them. Each run's wall time (the whole command: imports, CUDA start, profiling,
writing the file) and the profiler's own ``profiling_seconds`` go to the results file, rewritten
atomically after every run. ``report`` reads that file and the bundled profiles only.

``speed`` (issue 24, profiling a new model in a minute or two) runs, each as the user's command from a cold
cache and timed by wall clock: B, ResNet-50 b64 TF32 NCHW ``powerOfTwo`` with the engine sweep on processes
sharing the GPU (engine.gpu.pipeline, the default); D, the depthwise and grouped convolutions of
benchmarks/depthwise.yaml the same way; A, ResNet-50 again graph after graph (``--build-workers 1``, the serial
profiler). Before them ``gil`` measures whether cuDNN's plan building runs in parallel on threads (one handle
each). Each run's profile, its per-graph seconds and time split (from its cache) go to ``--out``;
``speed-compare`` adds A against B (same plans, times, make_plan's plans at 8, 64 and 256 MiB) and
``speed-report`` writes benchmarks/reports/profiling-speed.md from the committed JSON. The module is over 400
lines because it holds both benchmarks of the profiling command and their reports.
"""

from __future__ import annotations

import argparse
import compileall
import gzip
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.profile_multigpu import PROGRESS  # noqa: E402
from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

TARGET = ["--network", "alexnet", "--batch", "256", "--dtype", "tf32", "--layout", "NCHW", "--policy", "powerOfTwo"]
GOALS = {"cold": 60.0, "warm": 2.0}  # seconds, the targets for the whole command
DEFAULT_RESULTS = ROOT / "benchmarks" / "reports" / "profiling.json"
DEFAULT_REPORT = ROOT / "benchmarks" / "reports" / "profiling.md"


def write_json(data: dict, path: Path) -> None:
    atomic_write(path, json.dumps(data, indent=1))


def one_run(kind: str, cache: Path, out: Path) -> dict:
    cmd = [sys.executable, "-m", "engine", "profile", *TARGET, "--cache", str(cache), "-o", str(out)]
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    run = {
        "kind": kind,
        "wall_s": round(wall, 3),
        "returncode": proc.returncode,
        "stdout": proc.stdout.strip()[-500:],
        "stderr": proc.stderr.strip().splitlines()[-1:] if proc.returncode else [],
    }
    if proc.returncode == 0:
        doc = json.loads(gzip.decompress(out.read_bytes()))
        run["profiling_s"] = doc["provenance"]["profiling_seconds"]
        run["rows"] = len(doc["rows"])
    return run


def measure(args) -> None:
    t0 = time.perf_counter()
    compileall.compile_dir(str(ROOT / "engine"), quiet=1)
    out = Path(args.output)
    data = {
        "command": "python benchmarks/profiling.py " + " ".join(sys.argv[1:]),
        "target": "python -m engine profile " + " ".join(TARGET),
        "goals_s": GOALS,
        "runs": [],
    }
    with tempfile.TemporaryDirectory() as tmp:
        probe = subprocess.run(
            [
                sys.executable,
                "-c",
                "from engine.gpu import runtime; import json; print(json.dumps(runtime.provenance()))",
            ],
            cwd=ROOT,
            capture_output=True,
            text=True,
        )
        data["provenance"] = json.loads(probe.stdout) if probe.returncode == 0 else {"error": probe.stderr[-300:]}
        cache = Path(tmp) / "cold-0.sqlite"
        for i in range(args.cold):
            cache = Path(tmp) / f"cold-{i}.sqlite"
            data["runs"].append(one_run("cold", cache, Path(tmp) / "p.profile.json.gz"))
            write_json(data, out)
            print(data["runs"][-1], file=sys.stderr, flush=True)
        for _ in range(args.warm):
            data["runs"].append(one_run("warm", cache, Path(tmp) / "p.profile.json.gz"))
            write_json(data, out)
            print(data["runs"][-1], file=sys.stderr, flush=True)
    data["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(data, out)


def spread(xs: list[float], digits: int = 1) -> str:
    """Median and range of the runs made."""
    if len(xs) == 1:
        return f"{xs[0]:.{digits}f} s (one run)"
    return f"{statistics.median(xs):.{digits}f} s (median of {len(xs)}; {min(xs):.{digits}f} to {max(xs):.{digits}f} s)"


def runs_of(data: dict, kind: str) -> list[dict]:
    return [r for r in data["runs"] if r["kind"] == kind and r["returncode"] == 0]


def bundled_rows() -> list[str]:
    """One table row per bundled profile, from the file itself."""
    from engine.profile import Profile, bundled_profiles

    rows = []
    for name, path in bundled_profiles().items():
        prof = Profile.load(path)
        t, p = prof.table, prof.provenance
        skipped = t[t.status == "skipped"]
        above = int(skipped.reason.str.startswith("workspace").sum())
        rows.append(
            f"| {name} | {p.get('date', '?')} | {t.signature.nunique()} | {t.micro_batch.nunique()} | "
            f"{len(t):,} | {int((t.heuristic_rank < 0).sum()):,} | {int((t.status == 'failed').sum())} | "
            f"{above:,} | {len(skipped) - above:,} | {len(p.get('gpus', [])) or 1} | "
            f"{p.get('profiling_seconds', '?')} |"
        )
    return rows


def _bundled_alexnet_seconds() -> float | None:
    from engine.profile import Profile, bundled_profiles

    path = bundled_profiles().get("h100-alexnet-b256-tf32-nchw-powerOfTwo")
    return Profile.load(path).provenance.get("profiling_seconds") if path else None


def readme_block(data: dict | None) -> str:
    if data is None:  # the command has not been timed since the bundles were re-profiled
        return (
            f"- Profiling AlexNet b256 (`powerOfTwo`, TF32, with the engine sweep) took "
            f"{_bundled_alexnet_seconds()} s (the profiler's own time, recorded in the bundled profile; the first "
            f"profile of a new cache on a new machine, benchmarks/reports/profile-bundle-2026-11-23.log); the "
            f"whole command, cold and warm, has not been timed since the bundles were re-profiled "
            f"([benchmarks/reports/profiling.md](benchmarks/reports/profiling.md))."
        )
    cold, warm = runs_of(data, "cold"), runs_of(data, "warm")
    return (
        f"- Profiling AlexNet b256 (`powerOfTwo`, TF32, with the engine sweep) takes "
        f"{spread([r['wall_s'] for r in cold])} from a cold cache and {spread([r['wall_s'] for r in warm])} "
        f"from a warm one, for the whole command "
        f"([benchmarks/reports/profiling.md](benchmarks/reports/profiling.md))."
    )


def render(data: dict | None, source: str) -> str:
    if data is None:
        return "\n".join(
            [
                "# Profiling speed and the bundled profiles",
                "",
                f"`{source}` does not exist: the whole `python -m engine profile` command has not been timed "
                "cold and warm since the bundled profiles were re-profiled on 2026-11-23 (TF32 without fp16 "
                "down-conversion). `python benchmarks/profiling.py measure` on a GPU host does it; the "
                "profiler's own time of each bundled profile is below.",
                "",
                *_bundled_section(),
            ]
        )
    p = data["provenance"]
    lines = [
        "# Profiling speed and the bundled profiles",
        "",
        f"- GPU: {p.get('gpu')}, driver {p.get('driver')}, cuDNN {p.get('cudnn_version')}, cudnn-frontend "
        f"{p.get('frontend_version')}, CuPy {p.get('cupy_version')}, Python {p.get('python')}; {p.get('date')}",
        f"- command: `{data['command']}` ({data.get('seconds', '?')} s in all); results: `{source}`; this "
        "report: `python benchmarks/profiling.py report`",
        f"- timed: `{data['target']}` as a subprocess, into a new SQLite cache (cold) or into the last cold "
        "run's cache (warm); wall time of the whole command (imports, CUDA start, profiling, writing the file), "
        "with the packages' bytecode compiled first as `pip install` leaves them; `profiling_seconds` is the "
        "profiler's own share, recorded in the profile",
        "",
        "| cache | whole command | profiler's share | plan measurements | target |",
        "|---|---|---|---|---|",
    ]
    for kind in ("cold", "warm"):
        ok = runs_of(data, kind)
        if ok:
            lines.append(
                f"| {kind} | {spread([r['wall_s'] for r in ok])} | "
                f"{spread([r['profiling_s'] for r in ok], 2)} | {ok[0]['rows']:,} | "
                f"<= {data['goals_s'][kind]:g} s |"
            )
    for r in data["runs"]:
        if r["returncode"]:
            lines.append(f"\nA {r['kind']} run failed (exit {r['returncode']}): {r['stderr']}")
    lines += ["", *_bundled_section()]
    return "\n".join(lines)


def _bundled_section() -> list[str]:
    return [
        "## Bundled profiles",
        "",
        "Counted from each file in `assets/profiles`. Profiling time is the `profiling_seconds` of the call that "
        "wrote the file; a call that resumed a cache read the graphs measured before from it, so the time of "
        "the call alone does not measure the whole profile. GPUs: how many measured it at once (one Dask "
        "worker each, `--gpus`).",
        "",
        "| profile | date | unique kernels | sizes | plan measurements | from the sweep | failed | not timed "
        "(above the cap) | runtime-compiled (skipped) | GPUs | profiling s |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
        *bundled_rows(),
        "",
    ]


def load_results(path) -> dict | None:
    """The measured runs, or None where none were measured (the report then says so)."""
    path = Path(path)
    return json.loads(path.read_text()) if path.exists() else None


def report(args) -> None:
    data = load_results(args.results)
    atomic_write(args.output, render(data, os.path.relpath(Path(args.results).resolve(), ROOT)))
    write_block(Path(args.readme), "profiling", readme_block(data))
    print(f"wrote {args.output} and the block in {args.readme}")


# ---------------------------------------------------------------- issue 24: profiling speed

RESNET = ["--network", "resnet50", "--batch", "64", "--dtype", "tf32", "--layout", "NCHW", "--policy", "powerOfTwo"]
DEPTHWISE = [
    "--network",
    "benchmarks/depthwise.yaml",
    "--batch",
    "128",
    "--dtype",
    "tf32",
    "--layout",
    "NCHW",
    "--policy",
    "128,16,1",
]
MOBILENET = [
    "--network",
    "torchvision:mobilenet_v3_large",
    "--batch",
    "128",
    "--dtype",
    "tf32",
    "--layout",
    "NCHW",
    "--policy",
    "powerOfTwo",
]
SPEED_GOALS = {"resnet50_one_gpu_s": 45.0, "depthwise_graph_median_s": 1.5, "mobilenet_v3_large_s": 120.0}
SPEED_NETS = {
    "B": (RESNET, []),
    "M": (MOBILENET, []),
    "H": (MOBILENET, ["--engines", "heuristics"]),  # M as a user who asks for less: cuDNN's heuristic list only
    "D": (DEPTHWISE, []),
    "A": (RESNET, ["--build-workers", "1"]),
}
SPEED_RUNS = ROOT / "benchmarks" / "reports" / "profiling-speed" / "runs.json"
SPEED_REPORT = ROOT / "benchmarks" / "reports" / "profiling-speed.md"
BUDGETS_MIB = (8, 64, 256)


def gil(args) -> None:
    """Build the engine sweep of 8 ResNet-50 graphs graph after graph on one thread, then on 4 threads with a
    cuDNN handle each (runtime.context is per thread); prints the seconds of both as JSON."""
    from concurrent.futures import ThreadPoolExecutor

    from engine.gpu import runtime
    from engine.gpu.graphs import make_graph, sweep
    from engine.zoo import get_network

    sigs = [k[0].signature for k in get_network("resnet50", 32).unique_kernels("tf32", "NCHW").values()][:9]

    def job(sig) -> int:
        cg = make_graph(sig, 32, runtime.context(), include_rtc=False)
        found = sweep(cg, 4)
        for i in range(cg.heuristic):
            try:
                cg.build(i)
            except Exception:
                pass
        return len(found) + cg.heuristic

    job(sigs[-1])  # libraries loaded, kernels' modules registered
    t0 = time.perf_counter()
    plans = sum(job(sg) for sg in sigs[:8])
    serial = time.perf_counter() - t0
    t0 = time.perf_counter()
    with ThreadPoolExecutor(4) as pool:
        plans_threads = sum(pool.map(job, sigs[:8]))
    threads = time.perf_counter() - t0
    print(
        json.dumps(
            {
                "graphs": 8,
                "plans": plans,
                "plans_threads": plans_threads,
                "serial_s": round(serial, 2),
                "threads": 4,
                "threads_s": round(threads, 2),
                "speedup": round(serial / threads, 2),
            }
        )
    )


LEFT = "at its warm-up"  # engine.gpu.profiler.time_graph's reason for a plan left at its warm-up


def plan_runs(repeats: int, reason: str) -> int:
    """GPU runs of one timed plan: its warm-up and its timed runs (the first counts as one of its repeats since
    2026-11-28-run5), or its warm-up alone."""
    return repeats + 1 if repeats > 1 else 1 if LEFT in reason else 2


def grouped(signature: str) -> bool:
    """A depthwise or grouped graph's signature (a group count above 1)."""
    return not signature.endswith("/g1")


def per_graph(cache: Path) -> list[dict]:
    """Each graph's stored timing and time split (the done table), in the order they were stored, and its plans
    (rows, timed, host-bound) from the measurements table: a run cut off at its limit still says where its time
    went."""
    import sqlite3

    with sqlite3.connect(cache) as db:
        db.create_function("plan_runs", 2, plan_runs, deterministic=True)
        rows = db.execute("SELECT signature, micro_batch, provenance FROM done ORDER BY rowid").fetchall()
        counts = {
            (sig, b): (n, ok, host, once, runs)
            for sig, b, n, ok, host, once, runs in db.execute(
                "SELECT signature, micro_batch, COUNT(*), SUM(status = 'ok'), SUM(reason LIKE '%host-bound:%'), "
                "SUM(CASE WHEN status = 'ok' THEN time_min_ms ELSE 0 END), "
                "SUM(CASE WHEN status = 'ok' THEN time_ms * plan_runs(repeats, reason) ELSE 0 END) "
                "FROM measurements GROUP BY signature, micro_batch"
            )
        }
    out = []
    for sig, b, prov in rows:
        plans, timed, host_bound, once_ms, runs_ms = counts.get((sig, b), (0, 0, 0, 0.0, 0.0))
        p = json.loads(prov)
        timing = p.get("timing", {})
        split = {k: v for k, v in timing.get("split", {}).items() if not isinstance(v, dict)}
        out.append(
            {
                "signature": sig,
                "micro_batch": b,
                "worker": p.get("worker", ""),
                "start": timing.get("start"),
                "seconds": timing.get("seconds"),
                "split": split,
                "plans": plans,
                "timed": timed,
                "host_bound": host_bound,
                # GPU seconds of its timed plans: one run each (the least any profiler that runs every plan
                # once must spend), and what ran (a warm-up and a single run per plan, and the repeats)
                "single_runs_s": round((once_ms or 0.0) / 1000, 4),
                "kernel_s": round((runs_ms or 0.0) / 1000, 4),
                "first_runs": timing.get("split", {}).get("first_runs", {}),
            }
        )
    return out


def speed_run(name: str, net: list[str], extra: list[str], out: Path, tmp: Path, timeout: float) -> dict:
    prof = out / f"{name}.profile.json.gz"
    cmd = [
        sys.executable,
        "-m",
        "engine",
        "profile",
        *net,
        "--cache",
        str(tmp / f"{name}.sqlite"),
        "-o",
        str(prof),
        *extra,
    ]
    t0 = time.perf_counter()
    try:
        proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True, timeout=timeout)
        code, stdout, stderr = proc.returncode, proc.stdout, proc.stderr
    except subprocess.TimeoutExpired as err:
        code, stdout, stderr = "timeout", (err.stdout or b"").decode(), (err.stderr or b"").decode()
    wall = round(time.perf_counter() - t0, 2)
    lines = [ln for ln in stderr.replace("\r", "\n").splitlines() if ln.strip()]
    # every progress line (done/total, elapsed, ETA), to check the live ETA against when the run ended
    (out / f"{name}.stderr.txt.gz").write_bytes(gzip.compress("\n".join(lines).encode(), mtime=0))
    run = {
        "command": "python -m engine profile " + " ".join([*net, *extra]),
        "wall_s": wall,
        "returncode": code,
        "stdout": stdout.strip()[-1500:],
        "stderr": lines[-3:],
    }
    if (tmp / f"{name}.sqlite").exists():
        run["graphs"] = per_graph(tmp / f"{name}.sqlite")
    if code == 0:
        doc = json.loads(gzip.decompress(prof.read_bytes()))
        p = doc["provenance"]
        col = {c: i for i, c in enumerate(doc["columns"])}
        ok = [r for r in doc["rows"] if r[col["status"]] == "ok"]
        run.update(
            profiling_s=p["profiling_seconds"],
            rows=len(doc["rows"]),
            timed=len(ok),
            timed_once=sum(1 for r in ok if r[col["repeats"]] == 1),
            dominated=sum(1 for r in ok if r[col["reason"]].startswith("dominated by plan")),
            workers=p.get("workers"),
            time_split=p.get("time_split"),
            provenance=provenance_of(p),
        )
    return run


PROVENANCE = ("gpu", "driver", "cuda_runtime", "cudnn_version", "frontend_version", "cupy_version", "python", "date")


def provenance_of(p: dict) -> dict:
    """What a speed report names of a profile's provenance."""
    return {k: p.get(k) for k in PROVENANCE}


def run_provenance(d: dict) -> dict:
    """A speed.json's provenance: any of its runs' profiles, else the profile of its cut run resumed to its end."""
    return next(
        (r["provenance"] for r in d["runs"].values() if r.get("provenance")),
        (d.get("M_resumed") or {}).get("provenance") or {},
    )


def speed_floor(args) -> None:
    """``M_resumed`` in DIR's speed.json: what every plan of a whole sweep costs, from the cache of a run cut at its
    limit and resumed to its end (``python -m engine profile ... --cache`` it again): per graph the GPU seconds of
    one run of each plan and of what ran (per_graph), summed, for the grouped graphs, and for the plans of cuDNN's
    FFT engines (numerical note FFT), the slowest of which bound a depthwise sweep."""
    import sqlite3

    folder = Path(args.dir)
    data = json.loads((folder / "speed.json").read_text())
    graphs = per_graph(Path(args.cache))
    groups = [g for g in graphs if grouped(g["signature"])]  # the whole sweep's: cut run and resumed run
    with sqlite3.connect(args.cache) as db:
        fft = [t for (t,) in db.execute(FFT_RUNS)]
    slow = [t for t in fft if t > 100.0]
    data["M_resumed"] = {
        "about": args.about,
        "provenance": provenance_of(json.loads(gzip.decompress(Path(args.profile).read_bytes()))["provenance"])
        if args.profile
        else {},
        "wall_s": args.wall,
        "graphs": len(graphs),
        "grouped_graphs": len(groups),
        "single_runs_s": round(sum(g["single_runs_s"] for g in graphs), 1),
        "kernel_s": round(sum(g["kernel_s"] for g in graphs), 1),
        "timing_s": round(sum(g["split"].get("timing", 0.0) for g in graphs), 1),
        "grouped_single_runs_s": round(sum(g["single_runs_s"] for g in groups), 1),
        "grouped_graph_single_runs_median_s": round(statistics.median(g["single_runs_s"] for g in groups), 3),
        "grouped_graph_kernel_median_s": round(statistics.median(g["kernel_s"] for g in groups), 3),
        "grouped_graph_own_median_s": round(statistics.median(own_seconds(g) for g in groups), 3),
        "grouped_graph_own_max_s": round(max(own_seconds(g) for g in groups), 2),
        "fft_single_runs_s": round(sum(fft) / 1000, 1),
        "fft_plans_over_100ms": len(slow),
        "fft_over_100ms_median_ms": round(statistics.median(slow), 1) if slow else None,
        "fft_max_ms": round(max(fft), 1) if fft else None,
    }
    write_json(data, folder / "speed.json")
    print(json.dumps(data["M_resumed"], indent=1))


FFT_RUNS = "SELECT time_min_ms FROM measurements WHERE status = 'ok' AND numerical_notes LIKE '%FFT%'"


def speed(args) -> None:
    from benchmarks.profile_multigpu import prepare

    steps = args.runs.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "command": "python benchmarks/profiling.py " + " ".join(sys.argv[1:]),
        "goals": SPEED_GOALS,
        "code": args.code,
        "runs": {},
    }
    t0 = time.perf_counter()
    data["prepared"] = prepare(dict(os.environ), torch="M" in steps or "H" in steps)
    if "gil" in steps:
        g = subprocess.run(
            [sys.executable, str(Path(__file__)), "gil"], cwd=ROOT, capture_output=True, text=True, timeout=120
        )
        data["gil"] = json.loads(g.stdout) if g.returncode == 0 else {"error": g.stderr.strip()[-500:]}
    write_json(data, out / "speed.json")
    print("gil", data.get("gil"), file=sys.stderr, flush=True)
    data["versions"] = versions()
    with tempfile.TemporaryDirectory() as tmp:
        tmp = out / "caches" if args.keep_caches else Path(tmp)  # kept: a run cut at its limit can be resumed
        tmp.mkdir(exist_ok=True)
        for name in [s for s in steps if s in SPEED_NETS]:
            net, extra = SPEED_NETS[name]
            left = args.budget - (time.perf_counter() - t0) if args.budget else args.timeout
            if left < 30:
                data["runs"][name] = {
                    "command": "python -m engine profile " + " ".join([*net, *extra]),
                    "skipped": "no time left in --budget",
                }
                continue
            data["runs"][name] = speed_run(name, net, extra, out, tmp, min(args.timeout, left))
            write_json(data, out / "speed.json")
            r = data["runs"][name]
            print(name, r.get("wall_s"), r.get("returncode"), r.get("time_split"), file=sys.stderr, flush=True)
    data["seconds"] = round(time.perf_counter() - t0, 1)
    write_json(data, out / "speed.json")


def versions() -> dict:
    import importlib.metadata as md

    out = {}
    for name in (
        "cupy-cuda13x",
        "cupy-cuda12x",
        "nvidia-cudnn-frontend",
        "nvidia-cudnn-cu13",
        "nvidia-cudnn-cu12",
        "torch",
        "dask",
        "distributed",
    ):
        try:
            out[name] = md.version(name)
        except md.PackageNotFoundError:
            out[name] = None
    return out


def plan_choices(plan) -> list[tuple[str, tuple[tuple[int, str], ...]]]:
    """What a plan chose: each kernel's micro-batches and cuDNN plans (times and workspaces aside)."""
    return [(k.id, tuple((m.batch, m.plan) for m in k.micro)) for k in plan.kernels]


def timed_on(plan, times: dict) -> float | None:
    """A plan's predicted time with another profile's measurements of the same plans (its choices, their times);
    None if the other profile lacks one of them (a sweep's plan against a profile of the heuristic list only)."""
    keys = [(k.signature, m.batch, m.plan) for k in plan.kernels for m in k.micro]
    return sum(times[key] for key in keys) if all(key in times for key in keys) else None


def _ms(t: float | None) -> float | None:
    return None if t is None else round(t, 3)


def kernel_seconds(profile) -> float:
    """GPU seconds of the timed kernels themselves: per timed plan its time times its runs (plan_runs)."""
    ok = profile.table[profile.table.status == "ok"]
    runs = [plan_runs(n, why) for n, why in zip(ok.repeats, ok.reason)]
    return round(float((ok.time_ms * runs).sum()) / 1000, 2)


def compare_profiles(a, b, network: tuple[str, int] = ("resnet50", 64)) -> dict:
    """Profile ``a`` against ``b`` of the same ``network`` (name, mini-batch): the same (signature, micro-batch,
    plan) rows and outcome, the plan times' ratio, and make_plan's choices at 8, 64 and 256 MiB, WR and WD, each
    plan also timed with the other profile's measurements of its choices."""
    from benchmarks.profile_multigpu import time_agreement
    from engine.planner import make_plan
    from engine.zoo import get_network

    times = [
        {
            (s, int(m), n): t
            for s, m, n, t, st in zip(
                p.table.signature, p.table.micro_batch, p.table.plan, p.table.time_ms, p.table.status
            )
            if st == "ok"
        }
        for p in (a, b)
    ]
    rows = [set(zip(p.table.signature, p.table.micro_batch.astype(int), p.table.plan)) for p in (a, b)]
    status = [
        set(zip(p.table.signature, p.table.micro_batch.astype(int), p.table.plan, p.table.status)) for p in (a, b)
    ]
    net = get_network(*network)
    plans = []
    for mode in ("wr", "wd"):
        for mib in BUDGETS_MIB:
            pa, pb = (make_plan(p, net, mode=mode, budget=mib << 20, policy="powerOfTwo") for p in (a, b))
            ca, cb = plan_choices(pa), plan_choices(pb)
            plans.append(
                {
                    "mode": mode,
                    "budget_mib": mib,
                    "kernels": len(ca),
                    "same_kernels": sum(x == y for x, y in zip(ca, cb)),
                    "same": ca == cb,
                    "time_ms_a": round(pa.totals.time_ms, 3),
                    "time_ms_b": round(pb.totals.time_ms, 3),
                    "b_plan_on_a_ms": _ms(timed_on(pb, times[0])),
                    "a_plan_on_b_ms": _ms(timed_on(pa, times[1])),
                    "differ": [x[0] for x, y in zip(ca, cb) if x != y][:12],
                }
            )
    return {
        "kernel_s_a": kernel_seconds(a),
        "kernel_s_b": kernel_seconds(b),
        "rows_a": len(rows[0]),
        "rows_b": len(rows[1]),
        "same_rows": rows[0] == rows[1],
        "only_a": len(rows[0] - rows[1]),
        "only_b": len(rows[1] - rows[0]),
        "same_status": status[0] == status[1],
        "status_differ": len(status[0] ^ status[1]) // 2,
        "time_ratio_b_over_a": time_agreement(a, b),
        "plans": plans,
    }


def speed_compare(args) -> None:
    """This run's B against the serial A (of this run, or of ``--serial``'s), and against an earlier run's B
    (``--noise``: two pipelined runs, so the differences of two measurements alone); with ``--coverage``, its
    MobileNetV3-Large sweep M against the same model's heuristic list H (what asking for less costs the plans)."""
    from engine.profile import Profile

    folder = Path(args.dir)
    data = json.loads((folder / "speed.json").read_text())
    if (folder / "B.profile.json.gz").exists():
        b = Profile.load(folder / "B.profile.json.gz")
        serial = Path(args.serial or args.dir)
        serial = serial if serial.is_file() else serial / "A.profile.json.gz"
        data["compare"] = dict(compare_profiles(Profile.load(serial), b), serial_from=args.serial_name or "this run")
        if args.noise:
            data["noise"] = dict(
                compare_profiles(Profile.load(Path(args.noise) / "B.profile.json.gz"), b),
                other_from=args.noise_name or args.noise,
            )
    if args.coverage:
        m, h = (Profile.load(folder / f"{n}.profile.json.gz") for n in ("M", "H"))
        data["coverage"] = compare_profiles(m, h, (MOBILENET[1], int(MOBILENET[3])))
    write_json(data, folder / "speed.json")
    print(json.dumps({k: v for k, v in data.items() if k in ("compare", "noise", "coverage")}, indent=1))


def depthwise_graphs(run: dict) -> list[dict]:
    """The depthwise and grouped graphs of a run (signature ending in a group count above 1)."""
    return [g for g in run.get("graphs", []) if grouped(g["signature"])]


def own_seconds(g: dict) -> float:
    """A graph's own seconds: building and timing it, without waiting for the shared GPU."""
    return g["seconds"] - g.get("split", {}).get("wait", 0.0)


def wall_text(run: dict) -> str:
    """A run's wall clock and graphs, or why it has none."""
    if not run:
        return "-"
    if run.get("skipped"):
        return f"not run ({run['skipped']})"
    graphs = f" ({len(run.get('graphs', []))} graphs)" if run.get("graphs") else ""
    if run.get("returncode") != 0:
        return f"{run.get('returncode')} after {run.get('wall_s')} s{graphs}"
    return f"{run['wall_s']} s{graphs}"


def once_text(run: dict) -> str:
    return f"{run['timed_once']:,} / {run['timed']:,}" if "timed" in run else "-"


def retimed_text(run: dict) -> str:
    s = run.get("time_split") or {}
    return str(sum(s["retimed"].values())) if "retimed" in s else "-"


def depthwise_text(run: dict) -> str:
    dw = depthwise_graphs(run)
    if not dw:
        return "-"
    return f"{median_own(run, dw):.2f} s ({len(dw)} graphs, slowest {max(own_seconds(g) for g in dw):.2f} s)"


def split_text(s: dict | None) -> str:
    if not s:
        return "-"
    st = s.get("steps", {})
    return (
        f"build {s['build']:.1f} s (heuristics {st.get('heuristics', 0):.1f}, sweep {st.get('sweep', 0):.1f}, "
        f"plans {st.get('build', 0):.1f}); timing {s['timing']:.1f} s; bookkeeping {s['bookkeeping']:.1f} s "
        f"(notes {st.get('notes', 0):.1f}, cache {st.get('commit', 0):.1f}); waiting for the GPU {s['wait']:.1f} s"
        + (f"; {s['host_bound']['plans']} plans host-bound, timed back to back" if s.get("host_bound") else "")
        + first_runs_text(s.get("first_runs") or {})
    )


def first_runs_text(f: dict) -> str:
    """How each plan's warm-up compared with its timed run, and the slow plans left at their warm-up
    (engine.gpu.profiler.time_graph's counts; the 1.5x count and the plans left since 2026-11-28's 4th session)."""
    if not f.get("plans"):
        return ""
    slow = next((k.removesuffix("plans") for k in f if k.endswith(": plans")), None)  # "over 10 ms: "

    def counts(prefix: str) -> str:
        far = f.get(f"{prefix}warm-up over 1.5x slower")
        return (
            f"{f[prefix + 'warm-up over 5 % slower']:,} over 5 % slower, {f[prefix + 'warm-up over 5 % faster']:,} "
            f"over 5 % faster" + ("" if far is None else f", {far:,} over 1.5x slower")
        )

    long = f" (of the {f[slow + 'plans']:,} plans {slow.removesuffix(': ')} a run: {counts(slow)})" if slow else ""
    left = f.get(f"{slow}left at the warm-up") if slow else None
    return f"; warm-ups against the plan's timed run, of {f['plans']:,} plans: {counts('')}{long}" + (
        "" if left is None else f"; {left:,} slow plans left at their warm-up"
    )


def median_own(run: dict, graphs: list[dict] | None = None) -> float | None:
    gs = run.get("graphs", []) if graphs is None else graphs
    return statistics.median(own_seconds(g) for g in gs) if gs else None


def compare_lines(c: dict, a_name: str, b_name: str) -> list[str]:
    """Profile a against profile b: rows, times, and make_plan's plans (each also timed on the other's times)."""
    t = c["time_ratio_b_over_a"]
    same_rows = (
        "the same set"
        if c["same_rows"]
        else f"**not the same**: {c['only_a']} only in {a_name}, {c['only_b']} only in {b_name}"
    )
    same_status = "the same" if c["same_status"] else f"differs for {c['status_differ']} rows"
    lines = [
        f"- (signature, micro-batch, plan) rows: {c['rows_a']} in {a_name}, {c['rows_b']} in {b_name}, {same_rows}; "
        f"status per row {same_status}",
        f"- plan times, {b_name} / {a_name} over the {t['plans']} plans both timed with repeats: median "
        f"{t['median']}, quartiles {t['q1']} to {t['q3']}",
        "",
        f"| make_plan | budget | kernels with the same choice | on {a_name}'s times: its plan / {b_name}'s plan "
        f"(ms) | on {b_name}'s times: its plan / {a_name}'s plan (ms) | the other's plan costs at most |",
        "|---|---|---|---|---|---|",
    ]
    for p in c["plans"]:
        worst = max(p["b_plan_on_a_ms"] / p["time_ms_a"], p["a_plan_on_b_ms"] / p["time_ms_b"]) - 1
        lines.append(
            f"| {p['mode'].upper()} | {p['budget_mib']} MiB | {p['same_kernels']} of {p['kernels']} | "
            f"{p['time_ms_a']} / {p['b_plan_on_a_ms']} | {p['time_ms_b']} / {p['a_plan_on_b_ms']} | "
            f"{100 * worst:.2f} % more |"
        )
    return lines


def eta_replay(name: str, run: dict) -> dict:
    """engine.gpu.progress's ETA replayed on a run's graphs, handed what engine.gpu.pipeline hands it (each
    graph's sample_seconds and, with processes sharing the GPU, the process that measured it): the error of the
    predicted finish (elapsed + ETA) against the real one, as a fraction of the measuring time, worst and
    median after 10, 25 and 50 % of the graphs, in the order measured (the stored ends) and in spread order (the
    wall grown by each graph's sample). A run cut at its time limit is replayed on the graphs it measured."""
    from engine.gpu.progress import sample_seconds
    from engine.gpu.work import graphs, spread_order
    from engine.zoo import get_network

    if name == "D":
        work = graphs(get_network(str(ROOT / DEPTHWISE[1]), 128), [128, 16, 1], "tf32", "NCHW")
    elif name in ("M", "H"):
        work = graphs(get_network(MOBILENET[1], 128), "powerOfTwo", "tf32", "NCHW")
    else:
        work = graphs(get_network("resnet50", 64), "powerOfTwo", "tf32", "NCHW")
    measured = {(g["signature"], g["micro_batch"]): g for g in run["graphs"]}
    work = [g for g in work if (g.key, g.b) in measured]
    shared = len({g["worker"] for g in run["graphs"]}) > 1
    sample = {k: sample_seconds(g["seconds"], g["split"], shared) for k, g in measured.items()}
    t0 = min(g["start"] for g in run["graphs"])
    live = sorted(work, key=lambda g: measured[g.key, g.b]["start"] + measured[g.key, g.b]["seconds"])
    ends = [measured[g.key, g.b]["start"] + measured[g.key, g.b]["seconds"] - t0 for g in live]
    spread = spread_order(work)
    return {
        "measured": eta_errors(work, live, ends, sample, measured, shared),
        "spread": eta_errors(
            work, spread, list(itertools.accumulate(sample[g.key, g.b] for g in spread)), sample, measured, shared
        ),
    }


def live_eta(folder: Path, name: str, run: dict) -> dict | None:
    """The ETA as the command printed it (step ``name``'s kept progress lines, since 2026-11-28-run11): the
    predicted finish (elapsed + ETA) against the real one, as a share of the measuring time, at the first line
    after a tenth of the graphs and the worst from there. A run cut at its limit and resumed to its end
    (``NAME-resume.stderr.txt.gz``) finished, nearly, when its cut plus the resumed command's measuring did."""

    def lines(path: Path) -> list[tuple[int, int, float, float | None]]:
        text = gzip.decompress(path.read_bytes()).decode(errors="replace") if path.is_file() else ""
        return [
            (int(d), int(t), float(at), 60 * int(m) + int(s) if m else None)
            for d, t, at, m, s in PROGRESS.findall(text)
        ]

    seen = lines(folder / f"{name}.stderr.txt.gz")
    if not seen:
        return None
    end = seen[-1][2]
    if run.get("returncode") != 0:
        rest = lines(folder / f"{name}-resume.stderr.txt.gz")
        if not rest or rest[-1][0] != rest[-1][1]:
            return None
        end += rest[-1][2]
    after = [(d, at, eta) for d, total, at, eta in seen if d >= total / 10 and eta is not None]
    if not after or end <= 0:
        return None
    errors = [abs(at + eta - end) / end for _, at, eta in after]
    d, at, eta = after[0]
    return dict(graphs=seen[0][1], done=d, at_s=at, eta_s=eta, end_s=round(end, 1), error=errors[0], worst=max(errors))


def start_text(rows: list[tuple[dict, dict]]) -> str:
    """How much more the first tenth of the last pipelined ResNet-50 run's graphs held the GPU than the rest."""
    from engine.gpu.progress import sample_seconds

    for entry, d in reversed(rows):
        b = d["runs"].get("B") or {}
        if len({g["worker"] for g in b.get("graphs", [])}) > 1:
            done = sorted(b["graphs"], key=lambda g: g["start"] + g["seconds"])
            gpu = [sample_seconds(g["seconds"], g["split"], shared=True) for g in done]
            ratio = statistics.mean(gpu[: len(gpu) // 10]) / statistics.mean(gpu[len(gpu) // 10 :])
            return (
                f": in {entry['dir']} B the first tenth of the graphs held the GPU "
                f"{ratio:.1f}x longer each than the rest"
            )
    return ""


def eta_errors(work: list, order: list, ends: list[float], sample: dict, measured: dict, shared: bool) -> dict:
    """The ETA's error at each graph of ``order`` finishing at ``ends``, worst and median after 10, 25, 50 %."""
    from engine.gpu.progress import ProfileProgress

    now = [0.0]
    track = ProfileProgress(work, clock=lambda: now[0])
    track.start()
    errors = []
    for n, (g, end) in enumerate(zip(order, ends), 1):
        now[0] = end
        track.finished(g, "gpu0", sample[g.key, g.b], worker=measured[g.key, g.b]["worker"] if shared else None)
        eta = track.eta_s()
        if n < len(order) and eta is not None:
            errors.append((n / len(order), abs(end + eta - ends[-1]) / ends[-1]))
    out = {}
    for frac in (0.1, 0.25, 0.5):
        e = [x for f, x in errors if f >= frac]
        out[f"after {frac:.0%}"] = {"worst": round(max(e), 3), "median": round(statistics.median(e), 3)}
    return out


def load_speed_runs(listing: Path) -> list[tuple[dict, dict]]:
    """(listing entry with its ``folder``, its speed.json) per committed run, in the order they ran."""
    doc = json.loads(listing.read_text())
    return [
        (dict(r, folder=listing.parent / r["dir"]), json.loads((listing.parent / r["dir"] / "speed.json").read_text()))
        for r in doc["runs"]
    ]


def host_bound_lines(entry: dict, data: dict) -> list[str]:
    """A run's host-bound plans (engine.gpu.timing): in M's depthwise and grouped graphs from its per-graph counts,
    and in D from its profile where committed: how many cuDNN's heuristic list holds, how many are in their
    graph's desirable set (engine.optimize.desirable, one plan per configuration)."""
    from engine.configuration import Configuration, MicroConfig
    from engine.optimize.desirable import desirable
    from engine.profile import Profile

    out = []
    m = depthwise_graphs(data["runs"].get("M") or {})
    if m and "host_bound" in m[0]:
        timing = sum(g["split"].get("timing", 0.0) for g in data["runs"]["M"]["graphs"])
        out.append(
            f"- M: {len(m)} depthwise and grouped graphs measured held the GPU "
            f"{sum(g['split'].get('timing', 0.0) for g in m):.0f} s of the run's {timing:.0f} s of timing; "
            f"{sum(g['host_bound'] for g in m):,} of their {sum(g['plans'] for g in m):,} plans host-bound"
        )
    path = entry["folder"] / "D.profile.json.gz"
    if path.exists():
        t = Profile.load(path).table
        ok = t[t.status == "ok"]
        bound = ok[ok.reason.str.contains("host-bound:", regex=False)]
        front = {
            (sig, b, c.micro[0].plan)
            for (sig, b), g in ok.groupby(["signature", "micro_batch"])
            for c in desirable(
                Configuration((MicroConfig(int(b), p, tm, int(w)),)) for p, tm, w in zip(g.plan, g.time_ms, g.workspace)
            )
        }
        inside = sum(k in front for k in zip(bound.signature, bound.micro_batch, bound.plan))
        dearest = bound.reason.str.extract(r"host-bound: ([\d.]+) ms", expand=False).astype(float).max()
        out.append(
            f"- D: {len(bound)} of its {len(ok):,} timed plans host-bound (the dearest {dearest:,.0f} ms of host time "
            f"per execution), {int((bound.heuristic_rank >= 0).sum())} of them on cuDNN's heuristic list, {inside} in "
            "their graph's desirable set"
        )
    return out


def cut_text(run: dict) -> str:
    """Where a run cut at its limit stood, from its last progress line: graphs done of all, and its ETA then."""
    last = (run.get("stderr") or [""])[-1] if run.get("returncode") == "timeout" else ""
    m = PROGRESS.search(last)
    if not m or m[4] is None:
        return ""
    done, total, at, eta = int(m[1]), int(m[2]), float(m[3]), 60 * int(m[4]) + int(m[5])
    return f"cut at {done} of {total} graphs after {at:.0f} s of profiling; its ETA then: {eta} s more"


def run_gpu(d: dict) -> str:
    """The GPU a run measured on (from any of its runs' provenance)."""
    return run_provenance(d).get("gpu") or "?"


def target_lines(rows: list[tuple[dict, dict]], goals: dict) -> list[str]:
    """Each target against the last run that measured it, with where B's time went."""
    out = []
    entry, doc, b = latest(rows, "B")
    if b.get("returncode") == 0:
        c = doc.get("compare") or {}
        met = "met" if b["wall_s"] <= goals["resnet50_one_gpu_s"] else "not met"
        split = b.get("time_split") or {}
        kernels = f", of which its timed kernels themselves ran {c['kernel_s_b']:.1f} s" if "kernel_s_b" in c else ""
        out.append(
            f"- ResNet-50 b64 on one GPU: {b['wall_s']} s in {entry['dir']}, target "
            f"{goals['resnet50_one_gpu_s']:g} s: **{met}**. B held the GPU for {split.get('timing', 0):.1f} s"
            f"{kernels} (a warm-up and a single run per plan or its warm-up alone, and the repeats of the "
            f"{b.get('timed', 0) - b.get('timed_once', 0):,} plans not dominated at their first timing); building "
            f"(plus labelling notes) is {split.get('build', 0) + split.get('bookkeeping', 0):.1f} s of host time, "
            f"spread over {b.get('workers')} processes."
        )
    entry, doc, m = latest(rows, "M")
    if m:
        goal = goals.get("mobilenet_v3_large_s", 120.0)
        met = "met" if m.get("returncode") == 0 and m["wall_s"] <= goal else "not met"
        cut = "; ".join(t for t in (cut_text(m), resumed_text(m, doc.get("M_resumed"))) if t)
        floor = floor_text(doc)
        out.append(
            f"- MobileNetV3-Large b128 on one GPU: {wall_text(m)} in {entry['dir']}, target {goal:g} s: **{met}**"
            + (f" ({cut})" if cut else "")
            + (f"; {floor}, more than the target alone; {floor_split_text(doc['M_resumed'])}" if floor else "")
            + "."
        )
    entry, _, h = latest(rows, "H")
    if h:
        goal = goals.get("mobilenet_v3_large_s", 120.0)
        met = "met" if h.get("returncode") == 0 and h["wall_s"] <= goal else "not met"
        cov = coverage_cost(rows)
        worse = (
            f"; its plans cost at most {cov[1]:.1f} % more than the sweep's on the sweep's times ({cov[0]})"
            if cov
            else ""
        )
        out.append(
            f"- MobileNetV3-Large b128 with `--engines heuristics` (the user asks for less): {wall_text(h)} in "
            f"{entry['dir']}, target {goal:g} s: **{met}**{worse}."
        )
    for name, entry, med, which in depthwise_medians(rows):
        met = "met" if med <= goals["depthwise_graph_median_s"] else "not met"
        out.append(
            f"- depthwise and grouped graphs ({name}, {entry['dir']}, {which} graphs): median {med:.2f} s of a "
            f"graph's own building and timing, target {goals['depthwise_graph_median_s']:g} s: **{met}**."
        )
    return out


def floor_text(d: dict) -> str:
    """The GPU seconds every plan of a whole MobileNetV3-Large sweep takes run once (M resumed to its end)."""
    f = d.get("M_resumed")
    if not f:
        return ""
    return (
        f"its {f['graphs']:,} graphs' plans run once each take {f['single_runs_s']:.0f} s of GPU time (what ran: a "
        f"warm-up, a timed run and the repeats, {f['kernel_s']:.0f} s)"
    )


def floor_split_text(f: dict) -> str:
    """Where that floor lies: the grouped graphs and the plans of cuDNN's FFT engines (speed-floor)."""
    return (
        f"grouped and depthwise graphs {f['grouped_single_runs_s']:.0f} s of it (a median graph "
        f"{f['grouped_graph_single_runs_median_s']:.2f} s, {f['grouped_graph_kernel_median_s']:.2f} s with each "
        f"plan's warm-up and repeats), plans of cuDNN's FFT engines {f['fft_single_runs_s']:.0f} s "
        f"({f['fft_plans_over_100ms']} of them over 0.1 s a run, median {f['fft_over_100ms_median_ms'] / 1000:.2f} "
        f"s, up to {f['fft_max_ms'] / 1000:.1f} s)"
    )


def extra_percent(p: dict) -> float:
    """How much more profile b's plan costs than a's, both timed on a's measurements (a compare_profiles row)."""
    return 100 * (p["b_plan_on_a_ms"] / p["time_ms_a"] - 1)


def coverage_cost(rows: list[tuple[dict, dict]]) -> tuple[str, float] | None:
    """(run, percent): the last run comparing H's plans with M's, and the most H's plans cost on M's times."""
    for entry, d in reversed(rows):
        if d.get("coverage"):
            return entry["dir"], max(extra_percent(p) for p in d["coverage"]["plans"])
    return None


def coverage_lines(d: dict) -> list[str]:
    """M (the engine sweep) against H (cuDNN's heuristic list), make_plan on each, H's plan timed on M's times."""
    c, m, h = d["coverage"], d["runs"]["M"], d["runs"]["H"]
    lines = [
        f"- M, the sweep, was cut at {m['wall_s']} s ({len(m.get('graphs', []))} of {d['M_resumed']['graphs']:,} "
        f"graphs; {cut_text(m) or 'no progress line'}); {d['M_resumed']['about']}.",
        f"- The floor of an exact sweep: {floor_text(d)}; {floor_split_text(d['M_resumed'])} "
        f"(`profiling.py speed-floor`). No profiler that runs every plan at least once can "
        f"finish this sweep in {d['goals'].get('mobilenet_v3_large_s', 120):g} s on this GPU; {c['only_a']:,} of "
        f"its {c['rows_a']:,} rows are engine configurations outside cuDNN's heuristic list.",
        f"- H, the same command with `--engines heuristics` (on the host's other GPU, at the same time as M): "
        f"{wall_text(h)}, {c['rows_b']:,} rows; the plans both timed with repeats differ by a median ratio of "
        f"{c['time_ratio_b_over_a']['median']} (H / M, quartiles {c['time_ratio_b_over_a']['q1']} to "
        f"{c['time_ratio_b_over_a']['q3']}).",
        "",
        "| make_plan | budget | kernels with the same choice | M's plan (ms, on M's times) | H's plan on M's times "
        "(ms) | H's plan costs |",
        "|---|---|---|---|---|---|",
    ]
    for p in c["plans"]:
        lines.append(
            f"| {p['mode'].upper()} | {p['budget_mib']} MiB | {p['same_kernels']} of {p['kernels']} | "
            f"{p['time_ms_a']} | {p['b_plan_on_a_ms']} | {extra_percent(p):.2f} % more |"
        )
    return lines


def speed_render(rows: list[tuple[dict, dict]], source: str) -> str:
    entry, last = rows[-1]
    prov = run_provenance(last)
    v = last.get("versions", {})
    goals = last["goals"]
    gpus = list(dict.fromkeys(run_gpu(d) for _, d in rows))
    lines = [
        "# Profiling a new model in a minute or two (issue 24)",
        "",
        f"Written by `python benchmarks/profiling.py speed-report` from the runs listed in [{source}]({source}) "
        "(each measured by `python benchmarks/profiling.py speed --out DIR` on a lent host with one GPU and "
        "compared by `speed-compare`; each run's `speed.json` holds every graph's seconds and time split).",
        "",
        "- GPU: "
        + "; ".join(f"{g} ({', '.join(r['dir'] for r, d in rows if run_gpu(d) == g)})" for g in gpus)
        + f"; the last run's: driver {prov.get('driver')}, CUDA runtime {prov.get('cuda_runtime')}, cuDNN "
        f"{prov.get('cudnn_version')}, cudnn-frontend {prov.get('frontend_version')}, CuPy "
        f"{prov.get('cupy_version')}, torch {v.get('torch') or 'not installed'} (not used), dask "
        f"{v.get('dask')}, Python {prov.get('python')}; {prov.get('date')}",
        "- every run is the user's command from a cold cache, timed by wall clock (imports, CUDA start, worker "
        "start, profiling, writing the file), after the packages' bytecode was compiled and the GPU libraries "
        "loaded once: A `python -m engine profile " + " ".join(RESNET) + " --build-workers 1` (graph after "
        "graph), B the same without `--build-workers` (processes sharing the GPU), D `python -m engine profile "
        + " ".join(DEPTHWISE)
        + "` (depthwise and grouped convolutions, processes sharing the GPU), M `python -m engine profile "
        + " ".join(MOBILENET)
        + "` (the engine sweep of a depthwise-heavy torchvision model) and H the same with `"
        + " ".join(SPEED_NETS["H"][1])
        + "` (cuDNN's heuristic list only: the user asks for less)",
        f"- targets: ResNet-50 on one GPU <= {goals['resnet50_one_gpu_s']:g} s; depthwise and grouped graphs <= "
        f"{goals['depthwise_graph_median_s']:g} s each (median); MobileNetV3-Large b128 on one GPU <= "
        f"{goals.get('mobilenet_v3_large_s', 120.0):g} s",
        "",
        "| run | code | A: ResNet-50 serial | B: ResNet-50 pipelined | B against A | processes | B's GPU time "
        "(timing) / host time (building, bookkeeping) | B's plans timed once / timed | M: MobileNetV3-Large | "
        "D: depthwise run | depthwise graph, median own s (of M, else D) | timings repeated behind a longer "
        "spin, B / M / D | H: MobileNetV3-Large, heuristic list only |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    serials: dict[str, dict] = {}  # per GPU: the last serial run A
    for r, d in rows:
        ru = d["runs"]
        a, b, m, dd = (ru.get(k) or {} for k in ("A", "B", "M", "D"))
        if a.get("returncode") == 0:
            serials[run_gpu(d)] = {"wall": a["wall_s"], "run": r["dir"]}
        serial = serials.get(run_gpu(d), {})
        a_text = f"{a['wall_s']} s" if a.get("wall_s") else (f"(run {serial['run']})" if serial else "-")
        vs = f"{serial['wall'] / b['wall_s']:.2f}x" if b.get("wall_s") and serial else "-"
        bs = b.get("time_split") or {}
        b_split = f"{bs['timing']:.1f} / {bs['build'] + bs['bookkeeping']:.1f} s" if bs else "-"
        lines.append(
            f"| {r['dir']} ({run_gpu(d).removeprefix('NVIDIA ')}) | {r['code']} | {a_text} | **{wall_text(b)}** | "
            f"{vs} | {b.get('workers', '-')} | "
            f"{b_split} | "
            f"{once_text(b)} | **{wall_text(m)}** | {wall_text(dd)} | {depthwise_text(m or dd)} | "
            + " / ".join(retimed_text(x) for x in (b, m, dd))
            + f" | {wall_text(ru.get('H') or {})} |"
        )
    lines += [
        "",
        "What changed between the runs:",
        "",
        *(f"- {r['dir']} ({r['code']}): {r['change']}" for r, _ in rows),
    ]
    lines += [
        "",
        "## Where the time goes",
        "",
        "Summed over the graphs of each run, from the split each graph stores with its rows in the cache "
        "(`python -m engine profile` prints it at the end): building is the heuristic query, the engine "
        "sweep (support checks, knob settings, finalizing its plans) and finalizing the heuristic plans; "
        "timing is holding the GPU (operands, the timed runs, the host's work between them); bookkeeping is "
        "labelling numerical notes and writing the cache. On processes sharing the GPU, building overlaps "
        "timing and only timing is serialized, so B's wall clock is its timing plus the start.",
        "",
    ]
    for r, d in rows:
        for name in ("A", "B", "M", "H", "D"):
            x = d["runs"].get(name)
            if x and x.get("time_split"):
                lines.append(f"- {r['dir']} {name}: {split_text(x['time_split'])}")
    for r, d in rows:
        if d.get("compare"):
            c = d["compare"]
            a_run = r["dir"] if c.get("serial_from", "this run") == "this run" else c["serial_from"]
            lines += [
                "",
                f"## Serial against pipelined: A of {a_run} against B of {r['dir']}",
                "",
                *compare_lines(c, "A", "B"),
            ]
        if d.get("noise"):
            lines += [
                "",
                f"## Two pipelined runs: B of {d['noise'].get('other_from')} against B of {r['dir']}",
                "",
                "The same comparison between two profiles measured the same way: how far two profiles of one "
                "GPU differ by noise alone.",
                "",
                *compare_lines(d["noise"], "earlier B", "B"),
            ]
    lines += [
        "",
        "make_plan's plans from two profiles differ where configurations are within the timing noise of "
        "each other; the last column times each plan with the other profile's measurements of its choices. "
        "The serial and the pipelined profiles differ about as much as two pipelined ones.",
    ]
    gl = next((d["gil"] for _, d in rows if "speedup" in d.get("gil", {})), None)
    if gl:
        lines += [
            "",
            "## Threads or processes",
            "",
            f"Building the engine sweep of {gl['graphs']} ResNet-50 graphs ({gl['plans']} plans): "
            f"{gl['serial_s']} s on one thread, {gl['threads_s']} s on {gl['threads']} threads with a cuDNN "
            f"handle each ({gl['speedup']}x; too short a sample to weigh much). The frontend's only extension "
            "module never releases the GIL (engine/gpu/pipeline.py), so the profiler builds on processes.",
        ]
    for r, d in rows:
        if d.get("coverage"):
            lines += ["", f"## MobileNetV3-Large: the sweep's floor and the heuristic list ({r['dir']})", ""]
            lines += coverage_lines(d)
    lines += ["", "## Targets (the last run of each step)", "", *target_lines(rows, goals)]
    bound = [(r, host_bound_lines(r, d)) for r, d in rows]
    if any(lines_ for _, lines_ in bound):
        lines += [
            "",
            "## Host-bound plans",
            "",
            "Plans whose every execution kept the host over engine.gpu.timing's HOST_BOUND_MS enqueueing work, "
            "each run twice (a warm-up and one timed run), per run that counted them:",
        ]
        for r, lines_ in bound:
            lines += ["", f"{r['dir']}:", "", *lines_] if lines_ else []
    lines += [
        "",
        "## ETA",
        "",
        "`engine.gpu.progress`'s ETA replayed on each run's graphs as engine.gpu.pipeline hands them (each graph's "
        "seconds holding the GPU, or its own seconds graph after graph, and the process that measured it): how far "
        "the predicted finish (elapsed + ETA) was from the real one, as a share of the run's measuring time, in the "
        "order the graphs were measured (network order before 2026-11-26-run4, spread order from it) and in spread "
        "order (each run's wall grown graph by graph: the order the pipeline now measures in); M runs were cut at "
        "their time limit and are replayed on the graphs they measured. Issue 24 asks for +-15 % after the first "
        "10 % of graphs. Every row replays today's ETA, whatever code measured the run. Since 2026-11-26 it fits "
        f"each process's start apart from its graphs' own cost (engine.gpu.progress){start_text(rows)}; since "
        "2026-11-28 it fits grouped graphs (depthwise included) apart too, whose host-bound plans cost about the "
        "same whatever their FLOPs: without that, MobileNetV3-Large's H runs were 33 % off in spread order.",
        "",
        "| run | graphs | in the order measured, after 10 % of the graphs: worst / median | after 25 % | after 50 % "
        "| in spread order, after 10 %: worst / median | after 25 % |",
        "|---|---|---|---|---|---|---|",
    ]
    for r, d in rows:
        for name in ("A", "B", "M", "H", "D"):
            x = d["runs"].get(name)
            if x and x.get("graphs"):
                e = eta_replay(name, x)
                cells = [*e["measured"].values(), *list(e["spread"].values())[:2]]
                lines.append(
                    f"| {r['dir']} {name} | {len(x['graphs'])} | "
                    + " | ".join(f"{100 * v['worst']:.0f} / {100 * v['median']:.0f} %" for v in cells)
                    + " |"
                )
    live = [
        (r, name, e, d["runs"][name].get("returncode") != 0)
        for r, d in rows
        for name in d["runs"]
        if (e := live_eta(r["folder"], name, d["runs"][name]))
    ]
    if live:
        lines += ["", "As the command printed it (every progress line kept since 2026-11-28-run11):", ""]
        lines += [
            f"- {r['dir']} {name}: at graph {e['done']} of {e['graphs']} ({e['at_s']:.1f} s) the ETA said "
            f"{e['eta_s']} s more, a finish at {e['at_s'] + e['eta_s']:.0f} s against the real {e['end_s']:g} s"
            + (" (its cut plus the resumed command's measuring)" if cut else "")
            + f": {100 * e['error']:.1f} % off; the worst from there {100 * e['worst']:.1f} %."
            for r, name, e, cut in live
        ]
    lines += [
        "",
        "## Not measured",
        "",
        "- the code after the last run: " + last.get("after", "nothing changed the measured path") + ".",
        "- two GPUs (issue 24's >= 1.9x): not measured here; benchmarks/profile_multigpu.py measures one GPU "
        "against two on a host with two (since 2026-11-26 `--gpus` spreads the pipeline's processes over the "
        "GPUs instead of one Dask worker per GPU measuring graph after graph).",
    ]
    if not any(d["runs"].get("M") for _, d in rows):
        lines.append("- MobileNetV3-Large: not run; D stands for its depthwise and grouped kernels.")
    b_entry, _, b = latest(rows, "B")
    skips = (b.get("time_split") or {}).get("sweep_skips") or {}
    if skips:
        lines += [
            "",
            f"## What the engine sweep did not time ({b_entry['dir']}, B)",
            "",
            "Every engine configuration the sweep tried that did not become a plan, by reason; plans the "
            "profile records as skipped (above the workspace cap, filtered by a note) are rows of the profile:",
            "",
            *(f"- {r}: {n:,}" for r, n in sorted(skips.items(), key=lambda x: -x[1])),
        ]
    return "\n".join(lines) + "\n"


def latest(rows: list[tuple[dict, dict]], name: str) -> tuple[dict, dict, dict]:
    """(listing entry, its speed.json, step ``name``'s run) of the last run that ran that step, else ({}, {}, {})."""
    return next(((r, d, d["runs"][name]) for r, d in reversed(rows) if d["runs"].get(name)), ({}, {}, {}))


def depthwise_medians(rows: list[tuple[dict, dict]]) -> list[tuple[str, dict, float, str]]:
    """(step, listing entry, median own seconds of its depthwise and grouped graphs, which graphs) for the last
    M and D; for an M cut at its limit and resumed to its end (speed-floor), over the whole sweep."""
    out = []
    for name in ("M", "D"):
        entry, doc, run = latest(rows, name)
        f = doc.get("M_resumed") or {} if name == "M" else {}
        dw = depthwise_graphs(run)
        if "grouped_graph_own_median_s" in f:
            out.append((name, entry, f["grouped_graph_own_median_s"], f"the whole sweep's {f['grouped_graphs']}"))
        elif dw:
            out.append((name, entry, median_own(run, dw), f"{len(dw)}"))
    return out


def resumed_text(run: dict, f: dict | None) -> str:
    """A run cut at its limit and resumed to its end: the two commands' wall clocks summed."""
    if not f or run.get("returncode") != "timeout" or "grouped_graph_own_median_s" not in f or not f.get("wall_s"):
        return ""
    return (
        f"resumed to its end in {f['wall_s']:g} s more: the whole sweep {run['wall_s'] + f['wall_s']:.0f} s over "
        "the two commands"
    )


def speed_readme(rows: list[tuple[dict, dict]]) -> str:
    """README's lines: per GPU the last pipelined ResNet-50 and the serial one, then the last depthwise and
    MobileNetV3-Large results, with the targets."""
    goals, parts = rows[-1][1]["goals"], []
    for gpu in dict.fromkeys(run_gpu(d) for _, d in rows):
        mine = [(r, d) for r, d in rows if run_gpu(d) == gpu]
        b = [(r, d["runs"]["B"]) for r, d in mine if (d["runs"].get("B") or {}).get("returncode") == 0]
        a = [(r, d["runs"]["A"]) for r, d in mine if (d["runs"].get("A") or {}).get("returncode") == 0]
        if not b:  # a GPU whose runs had no ResNet-50 (M or H alone)
            continue
        text = f"on one {gpu}: {b[-1][1]['wall_s']} s in {b[-1][0]['dir']} (code {b[-1][0]['code']})"
        if a:
            text += f", {a[-1][1]['wall_s']} s graph after graph ({a[-1][0]['dir']})"
        parts.append(text)
    tail = ""
    what = {"M": "MobileNetV3-Large b128", "D": "benchmarks/depthwise.yaml"}
    for name, entry, med, which in depthwise_medians(rows):
        tail += (
            f" Depthwise and grouped graphs ({what[name]}, {entry['dir']}, {which} graphs): {med:.2f} s median of a "
            f"graph's own building and timing (target {goals['depthwise_graph_median_s']:g} s)."
        )
    entry, doc, m = latest(rows, "M")
    if m:
        floor, resumed = floor_text(doc), resumed_text(m, doc.get("M_resumed"))
        tail += (
            f" MobileNetV3-Large b128 with the sweep ({entry['dir']}): {cut_text(m) or wall_text(m)}"
            + (f"; {resumed}" if resumed else "")
            + f" (target {goals.get('mobilenet_v3_large_s', 120.0):g} s)"
            + (f"; {floor}, more than the target alone." if floor else ".")
        )
    entry, _, h = latest(rows, "H")
    cov = coverage_cost(rows)
    if h.get("returncode") == 0 and cov:
        tail += (
            f" With `--engines heuristics` ({entry['dir']}): {h['wall_s']} s, its WR and WD plans at 8, 64 and "
            f"256 MiB at most {cov[1]:.1f} % slower than the sweep's on the sweep's own times ({cov[0]})."
        )
    return (
        "- Profiling speed (`python -m engine profile`, ResNet-50 b64 TF32 `powerOfTwo` with the engine sweep, cold "
        "cache, wall clock of the command, plans built on host processes while one at a time times on the GPU, the "
        f"default; target {goals['resnet50_one_gpu_s']:g} s): "
        + "; ".join(parts)
        + "."
        + tail
        + " ([benchmarks/reports/profiling-speed.md](benchmarks/reports/profiling-speed.md))"
    )


def speed_report(args) -> None:
    listing = Path(args.runs)
    rows = load_speed_runs(listing)
    atomic_write(args.output, speed_render(rows, os.path.relpath(listing, Path(args.output).parent)))
    if args.readme:
        write_block(Path(args.readme), "profiling:speed", speed_readme(rows))
    print(f"wrote {args.output}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="time cold and warm profiling on the GPU host")
    m.add_argument("-o", "--output", default=str(DEFAULT_RESULTS))
    m.add_argument("--cold", type=int, default=2, help="runs, each into a new cache")
    m.add_argument("--warm", type=int, default=5, help="runs into the last cold run's cache")
    r = sub.add_parser("report", help="profiling.md and README's block from a results file")
    r.add_argument("results", nargs="?", default=str(DEFAULT_RESULTS))
    r.add_argument("-o", "--output", default=str(DEFAULT_REPORT))
    r.add_argument("--readme", default=str(README))
    sp = sub.add_parser("speed", help="issue 24's runs on the GPU host")
    sp.add_argument("--out", required=True, help="folder for speed.json and the profiles")
    sp.add_argument("--code", default="?", help="the commit whose engine runs")
    sp.add_argument("--timeout", type=float, default=200.0, help="seconds per run")
    sp.add_argument("--budget", type=float, help="seconds for the whole command: a run gets at most what is left")
    sp.add_argument("--keep-caches", action="store_true", help="keep each run's SQLite cache in DIR/caches")
    sp.add_argument("--runs", default="gil,B,M,D,A", help="which steps, in order, of gil, B, M, H, D and A")
    sub.add_parser("gil", help="plan building on one thread and on four (GPU host)")
    sc = sub.add_parser("speed-compare", help="A against B, from the folder speed wrote")
    sc.add_argument("dir")
    sc.add_argument("--serial", help="the folder of the serial run A, when another run measured it, or a profile")
    sc.add_argument("--serial-name", help="that run's name in the report")
    sc.add_argument("--noise", help="the folder of an earlier run whose pipelined B to compare with this B")
    sc.add_argument("--noise-name", help="that run's name in the report")
    sc.add_argument("--coverage", action="store_true", help="also M (the sweep) against H (the heuristic list)")
    sf = sub.add_parser("speed-floor", help="a whole sweep's single-run floor, from a resumed run's cache")
    sf.add_argument("dir", help="the run's folder (its speed.json gets M_resumed)")
    sf.add_argument("cache", help="the run's SQLite cache, resumed to the end")
    sf.add_argument("--about", required=True, help="where the cache came from and how it was resumed")
    sf.add_argument("--wall", type=float, help="seconds the resuming command took")
    sf.add_argument("--profile", help="the profile the resuming command wrote (for the GPU and versions)")
    sr = sub.add_parser("speed-report", help="profiling-speed.md from the committed JSON")
    sr.add_argument("runs", nargs="?", default=str(SPEED_RUNS), help="the listing of committed runs")
    sr.add_argument("-o", "--output", default=str(SPEED_REPORT))
    sr.add_argument("--readme", default=str(README), help="README whose profiling:speed block to rewrite ('' for none)")
    args = ap.parse_args()
    {
        "measure": measure,
        "report": report,
        "speed": speed,
        "gil": gil,
        "speed-compare": speed_compare,
        "speed-floor": speed_floor,
        "speed-report": speed_report,
    }[args.cmd](args)


if __name__ == "__main__":
    main()
