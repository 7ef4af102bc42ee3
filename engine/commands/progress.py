"""The progress bar the GPU commands (profile, verify) draw on stderr."""

from __future__ import annotations

import sys
import time

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
