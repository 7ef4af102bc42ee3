"""Profiling wall time from a cold and from a warm cache, and what the bundled profiles hold.

    python benchmarks/profiling.py measure [--cold 2] [--warm 5]   # GPU host, about 2 minutes
    python benchmarks/profiling.py report                           # anywhere: profiling.md and README's block

``measure`` runs the issue's timing target, ``python -m engine profile`` of AlexNet b256 (TF32, NCHW,
powerOfTwo, engine sweep), as a subprocess: ``--cold`` times each into a new SQLite cache, then
``--warm`` times into the cache of the last cold run. It compiles the packages' bytecode first, as
``pip install`` leaves them. Each run's wall time (the whole command: imports, CUDA start, profiling,
writing the file) and the profiler's own ``profiling_seconds`` go to the results file, rewritten
atomically after every run. ``report`` reads that file and the bundled profiles only. Issue 24's profiling
speed has its own runs (benchmarks/profiling_speed.py) and report (benchmarks/profiling_speed_report.py).
"""

from __future__ import annotations

import argparse
import compileall
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

from benchmarks.readme import README, write_block  # noqa: E402
from benchmarks.common import save_json  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

TARGET = ["--network", "alexnet", "--batch", "256", "--dtype", "tf32", "--layout", "NCHW", "--policy", "powerOfTwo"]
GOALS = {"cold": 60.0, "warm": 2.0}  # seconds, the targets for the whole command
DEFAULT_RESULTS = ROOT / "benchmarks" / "reports" / "profiling.json"
DEFAULT_REPORT = ROOT / "benchmarks" / "reports" / "profiling.md"


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
            save_json(out, data)
            print(data["runs"][-1], file=sys.stderr, flush=True)
        for _ in range(args.warm):
            data["runs"].append(one_run("warm", cache, Path(tmp) / "p.profile.json.gz"))
            save_json(out, data)
            print(data["runs"][-1], file=sys.stderr, flush=True)
    data["seconds"] = round(time.perf_counter() - t0, 1)
    save_json(out, data)


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
    args = ap.parse_args()
    {"measure": measure, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
