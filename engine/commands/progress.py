"""The progress bar the GPU commands (profile, verify) draw on stderr."""

from __future__ import annotations

import sys
import time


def progress_bar(done: int, total: int, msg: str, _t0=[None]) -> None:
    """Progress of a GPU command (profile, verify) on stderr, redrawn in place."""
    if _t0[0] is None:
        _t0[0] = time.perf_counter()
    width = 30
    fill = int(width * done / max(total, 1))
    el = time.perf_counter() - _t0[0]
    sys.stderr.write(f"\r[{'#' * fill}{'.' * (width - fill)}] {done}/{total} {el:6.1f}s {msg[:40]:<40}")
    if done == total:
        sys.stderr.write("\n")
    sys.stderr.flush()
