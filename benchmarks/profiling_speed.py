"""Issue 24's profiling-speed runs: each the user's command from a cold cache, timed by wall clock.

    python benchmarks/profiling_speed.py run --out DIR           # GPU host: the runs (about 5 minutes by default)
    python benchmarks/profiling_speed.py gil                     # GPU host: plan building on 1 thread and on 4
    python benchmarks/profiling_speed.py compare DIR             # anywhere: A against B (and M against H)
    python benchmarks/profiling_speed.py floor DIR CACHE --about  # anywhere: a whole sweep's single-run floor

``run`` runs, in the order of ``--runs``: B, ResNet-50 b64 TF32 NCHW ``powerOfTwo`` with the engine sweep on
processes sharing the GPU (engine.gpu.pipeline, the default); M, MobileNetV3-Large b128 the same way, and H with
``--engines heuristics``; D, the depthwise and grouped convolutions of benchmarks/depthwise.yaml; A, ResNet-50
graph after graph (``--build-workers 1``, the serial profiler); ``gil`` first measures whether cuDNN's plan
building runs in parallel on threads (one handle each). Each run's profile, its whole stderr (the progress
lines), its per-graph seconds and time split (from its cache) go to ``DIR/speed.json``. ``compare`` adds A
against B (same plans, times, make_plan's plans at 8, 64 and 256 MiB); ``floor`` adds what every plan of a
sweep cut at its limit and resumed to its end costs. benchmarks/profiling_speed_report.py writes the report.
"""

from __future__ import annotations

import argparse
import gzip
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

from benchmarks.common import save_json  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402


def command(network: str, batch: int, policy: str) -> list[str]:
    """``python -m engine profile``'s arguments for a TF32 NCHW run of ``network``."""
    return ["--network", network, "--batch", str(batch), "--dtype", "tf32", "--layout", "NCHW", "--policy", policy]


RESNET = command("resnet50", 64, "powerOfTwo")
DEPTHWISE = command("benchmarks/depthwise.yaml", 128, "128,16,1")
MOBILENET = command("torchvision:mobilenet_v3_large", 128, "powerOfTwo")
SPEED_GOALS = {"resnet50_one_gpu_s": 45.0, "depthwise_graph_median_s": 1.5, "mobilenet_v3_large_s": 120.0}
SPEED_NETS = {
    "B": (RESNET, []),
    "M": (MOBILENET, []),
    "H": (MOBILENET, ["--engines", "heuristics"]),  # M as a user who asks for less: cuDNN's heuristic list only
    "D": (DEPTHWISE, []),
    "A": (RESNET, ["--build-workers", "1"]),
}
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


def own_seconds(g: dict) -> float:
    """A graph's own seconds: building and timing it, without waiting for the shared GPU."""
    return g["seconds"] - g.get("split", {}).get("wait", 0.0)


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
    atomic_write(out / f"{name}.stderr.txt.gz", "\n".join(lines), gzip_suffix=True)
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
        doc = profile_doc(prof)
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


def profile_doc(path: Path) -> dict:
    """A written profile's JSON, read as it is (engine.profile.Profile would build its table too)."""
    return json.loads(gzip.decompress(path.read_bytes()))


PROVENANCE = ("gpu", "driver", "cuda_runtime", "cudnn_version", "frontend_version", "cupy_version", "python", "date")


def provenance_of(p: dict) -> dict:
    """What a speed report names of a profile's provenance."""
    return {k: p.get(k) for k in PROVENANCE}


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
        "provenance": provenance_of(profile_doc(Path(args.profile))["provenance"]) if args.profile else {},
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
    save_json(folder / "speed.json", data)
    print(json.dumps(data["M_resumed"], indent=1))


FFT_RUNS = "SELECT time_min_ms FROM measurements WHERE status = 'ok' AND numerical_notes LIKE '%FFT%'"


def speed(args) -> None:
    from benchmarks.profile_multigpu import prepare

    steps = args.runs.split(",")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    data = {
        "command": "python benchmarks/profiling_speed.py " + " ".join(sys.argv[1:]),
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
    save_json(out / "speed.json", data)
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
            save_json(out / "speed.json", data)
            r = data["runs"][name]
            print(name, r.get("wall_s"), r.get("returncode"), r.get("time_split"), file=sys.stderr, flush=True)
    data["seconds"] = round(time.perf_counter() - t0, 1)
    save_json(out / "speed.json", data)


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
    save_json(folder / "speed.json", data)
    print(json.dumps({k: v for k, v in data.items() if k in ("compare", "noise", "coverage")}, indent=1))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    sp = sub.add_parser("run", help="the runs, on the GPU host")
    sp.add_argument("--out", required=True, help="folder for speed.json and the profiles")
    sp.add_argument("--code", default="?", help="the commit whose engine runs")
    sp.add_argument("--timeout", type=float, default=200.0, help="seconds per run")
    sp.add_argument("--budget", type=float, help="seconds for the whole command: a run gets at most what is left")
    sp.add_argument("--keep-caches", action="store_true", help="keep each run's SQLite cache in DIR/caches")
    sp.add_argument("--runs", default="gil,B,M,D,A", help="which steps, in order, of gil, B, M, H, D and A")
    sub.add_parser("gil", help="plan building on one thread and on four (GPU host)")
    sc = sub.add_parser("compare", help="A against B, from the folder run wrote")
    sc.add_argument("dir")
    sc.add_argument("--serial", help="the folder of the serial run A, when another run measured it, or a profile")
    sc.add_argument("--serial-name", help="that run's name in the report")
    sc.add_argument("--noise", help="the folder of an earlier run whose pipelined B to compare with this B")
    sc.add_argument("--noise-name", help="that run's name in the report")
    sc.add_argument("--coverage", action="store_true", help="also M (the sweep) against H (the heuristic list)")
    sf = sub.add_parser("floor", help="a whole sweep's single-run floor, from a resumed run's cache")
    sf.add_argument("dir", help="the run's folder (its speed.json gets M_resumed)")
    sf.add_argument("cache", help="the run's SQLite cache, resumed to the end")
    sf.add_argument("--about", required=True, help="where the cache came from and how it was resumed")
    sf.add_argument("--wall", type=float, help="seconds the resuming command took")
    sf.add_argument("--profile", help="the profile the resuming command wrote (for the GPU and versions)")
    args = ap.parse_args()
    {"run": speed, "gil": gil, "compare": speed_compare, "floor": speed_floor}[args.cmd](args)


if __name__ == "__main__":
    main()
