"""A measured profiling run replayed on its own clock, for the ETA's tests on committed GPU runs."""

from __future__ import annotations

from ..gpu.progress import ProfileProgress, sample_seconds
from ..gpu.work import Graph


def eta_worst_on_own_clock(work: list[Graph], measured: list[dict]) -> float:
    """The worst error of the ETA's predicted finish, as a share of the run, from a tenth of the graphs on.

    ``measured``: one dict per graph (benchmarks/profiling_speed.py's ``per_graph``: signature, micro_batch,
    start, seconds, split, worker) of a run whose processes or Dask workers shared a GPU. Each graph is handed to
    the ETA as the pipeline and the Dask path hand it: when it was stored (its start plus its seconds), its
    GPU-held seconds, its worker; the clock from the first stored graph."""
    by = {(g.key, g.b): g for g in work}
    if {(g["signature"], g["micro_batch"]) for g in measured} != set(by):
        raise ValueError("the measured graphs are not the work's")
    measured = sorted(measured, key=lambda g: g["start"] + g["seconds"])
    first, finish = measured[0]["start"], measured[-1]["start"] + measured[-1]["seconds"]
    now = [0.0]
    track = ProfileProgress(work, clock=lambda: now[0])
    worst = 0.0
    for n, g in enumerate(measured, 1):
        now[0] = g["start"] + g["seconds"]
        held = sample_seconds(g["seconds"], g["split"], shared=True)
        track.finished(by[g["signature"], g["micro_batch"]], "gpu0", held, g["split"], worker=g["worker"])
        if 0.1 * len(measured) <= n < len(measured):
            worst = max(worst, abs(now[0] + track.eta_s() - finish) / (finish - first))
    return worst
