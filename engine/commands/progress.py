"""The progress bar the GPU commands (profile, verify) draw on stderr."""

from __future__ import annotations

import sys
import time
from collections.abc import Callable

_T0: list[float] = []  # when the first bar of this process was drawn


def progress_bar(done: int, total: int, msg: str) -> None:
    """Progress of a GPU command (profile, verify) on stderr, redrawn in place."""
    if not _T0:
        _T0.append(time.perf_counter())
    width = 30
    fill = int(width * done / max(total, 1))
    el = time.perf_counter() - _T0[0]
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {el:6.1f}s {msg[:40]:<40}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()


LONG_SWEEP_S = 300.0  # an engine sweep whose ETA is longer gets one line about --engines heuristics


def sweep_hint(engines: str) -> Callable[[dict], None] | None:
    """A status callback (engine.gpu.progress.ProfileProgress.status) that says once, when an engine sweep's ETA
    after a tenth of its graphs is over LONG_SWEEP_S, that ``--engines heuristics`` is much faster: exact
    coverage has a floor, every plan run at least once (MobileNetV3-Large b128 on an H200: 295 s of plan runs alone,
    its heuristic list profiled in 88 s with plans within 2 % of the sweep's; benchmarks/reports/profiling-speed.md)."""
    if engines != "sweep":
        return None
    said = []

    def hint(status: dict) -> None:
        eta, done, total = status.get("eta_s"), status.get("done", 0), status.get("total", 0)
        if said or eta is None or eta <= LONG_SWEEP_S or done < max(1, total // 10):
            return
        said.append(True)
        sys.stderr.write(
            f"\nnote: the engine sweep needs about {eta / 60:.0f} min more (it times every engine configuration "
            "cuDNN offers); --engines heuristics times cuDNN's heuristic list only, several times faster, and the "
            "plans may be a little slower. What is measured so far stays in the cache.\n"
        )
        sys.stderr.flush()

    return hint
