"""What the GPU benchmarks share: provenance, atomic saving, the case subprocess runner and the step timer.

Each benchmark runs every case in a process of its own (a crash or an out-of-memory loses one case, and the
caching allocator starts empty), records the versions it ran on, saves its results atomically after each case, and
times training steps the same way: CUDA events around each step after a warm-up, the median with the 10-90 %
range. torch is imported inside the functions that need it, so reports build without it.
"""

from __future__ import annotations

import json
import statistics
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from engine.fileio import atomic_write  # noqa: E402


def git_commit() -> str:
    """The commit that runs: ``COMMIT`` where the caller sets it (the GPU call scripts do: a device's copy of the
    tree can carry an older ``.git``), else this checkout's (``git describe --always --dirty``), "unknown"
    outside git."""
    if os.environ.get("COMMIT", "").strip():
        return os.environ["COMMIT"].strip()[:40]
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT, timeout=20
        ).stdout.strip()
    except (OSError, subprocess.TimeoutExpired):
        out = ""
    return out or "unknown"


def provenance(command: str, **extra) -> dict:
    """The profiler's provenance of this GPU (GPU, driver, CUDA, cuDNN and frontend versions, date, command:
    engine.gpu.runtime) with the PyTorch build and ``extra``."""
    import torch

    from engine.gpu import runtime

    return dict(
        runtime.provenance(command), torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version(), **extra
    )


def save_json(path: Path, doc: dict) -> None:
    """``doc`` as indented JSON, written atomically (a kill mid-write leaves the last complete file)."""
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())


def run_case(
    cmd: list[str], base: dict, timeout: float, env: dict | None = None, failed: dict | None = None, stamp: bool = False
) -> dict:
    """Run one case's process; its result is the last JSON line it prints, with ``wall_s`` (and, with ``stamp``,
    ``measured_at``). A timeout, a non-zero exit or no JSON gives ``base`` with ``failed`` and one ``error`` line
    (the last line of stderr that names an error)."""
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        return dict(base, **(failed or {}), error=f"did not finish within {timeout} s")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        errs = [ln for ln in r.stderr.splitlines() if "Error" in ln and "nanobind" not in ln]
        tail = (errs or r.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return dict(base, **(failed or {}), error=f"exit {r.returncode}: {tail}")
    res = json.loads(lines[-1])
    res["wall_s"] = round(time.time() - t0, 1)
    if stamp:
        res["measured_at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(t0))
    return res


def timed_steps(run, steps: int, warmup: int, after=None) -> dict:
    """``warmup`` untimed calls of ``run``, then the peak counters reset and ``steps`` calls timed one by one with
    CUDA events (``after()`` runs after each, between the events, its values listed in ``after``). Returns
    ``step_ms`` (median), ``step_ms_p10``, ``step_ms_p90`` and ``after``; the caller reads the peak."""
    import torch

    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    seen = []
    ev[0].record()
    for i in range(steps):
        run()
        ev[i + 1].record()
        if after is not None:
            seen.append(after())
    torch.cuda.synchronize()
    times = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(steps))
    return {
        "step_ms": statistics.median(times),
        "step_ms_p10": times[len(times) // 10],
        "step_ms_p90": times[(9 * len(times)) // 10],
        "after": seen,
    }
