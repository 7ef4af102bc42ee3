"""Live progress of a profile: graphs done per GPU and the time left, for the CLI and the dashboard.

The ETA fits each measured graph's own seconds as ``a + c * cost`` (cost: the graph's FLOPs, Graph.cost;
a graph's host work, building ~60 plans, is about constant, its GPU work grows with the micro-batch) and
scales the wall time spent measuring so far by the fitted work left over the fitted work done. Graphs go
biggest first on several workers and in network order on one, so a plain graphs-per-second rate would be
off by the spread of graph costs; the fit is not, and it holds however many workers run at once.
No CuPy here: the Dask client and the tests use it without a GPU.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from .work import Graph


@dataclass
class Sample:
    cost: float
    seconds: float


def fit(samples: list[Sample]) -> tuple[float, float]:
    """Least-squares (a, c) of seconds = a + c * cost with a, c >= 0 (a plain mean when costs do not vary)."""
    n = len(samples)
    mx = sum(s.cost for s in samples) / n
    my = sum(s.seconds for s in samples) / n
    sxx = sum((s.cost - mx) ** 2 for s in samples)
    if sxx <= 0:
        return my, 0.0
    c = sum((s.cost - mx) * (s.seconds - my) for s in samples) / sxx
    if c <= 0:
        return my, 0.0
    a = my - c * mx
    if a < 0:  # through the origin instead
        return 0.0, sum(s.cost * s.seconds for s in samples) / sum(s.cost ** 2 for s in samples)
    return a, c


class ProfileProgress:
    """Counts finished graphs (per GPU, and those read from the cache) and estimates the time left.

    ``callback(done, total, message)`` is the profilers' progress callback (CLI bar, dashboard job); the
    message starts with the ETA. ``status()`` is the same as a dict for a richer view."""

    def __init__(self, work: list[Graph], callback: Callable[[int, int, str], None] | None = None,
                 clock: Callable[[], float] = time.perf_counter):
        self.total, self.callback, self.clock = len(work), callback, clock
        self.cost = {(g.key, g.b): float(g.cost) for g in work}
        self.left = dict(self.cost)
        self.samples: list[Sample] = []
        self.per_gpu: dict[str, int] = {}
        self.done = self.cached = 0
        self.began: float | None = None   # when measuring began (after the workers started)
        self.split: dict = {}             # seconds per step summed over the measured graphs

    def start(self) -> None:
        """Measuring begins now (the ETA counts from here)."""
        self.began = self.clock()

    def from_cache(self, graphs: list[Graph]) -> None:
        for g in graphs:
            self.left.pop((g.key, g.b), None)
        self.cached += len(graphs)
        self.done += len(graphs)
        if graphs:
            self._tell(f"{len(graphs)} graphs from the cache")

    def finished(self, graph: Graph, gpu: str, seconds: float, split: dict | None = None, commit: float = 0.0,
                 note: str = "") -> None:
        """``graph`` was measured on ``gpu`` in ``seconds`` of its own (``split``: per step, as
        profiler.GraphMeasurer.split) and stored in ``commit`` seconds."""
        if self.began is None:
            self.start()
        for k, v in dict(split or {}, commit=commit).items():
            if isinstance(v, dict):  # the sweep's skips by reason
                into = self.split.setdefault(k, {})
                for reason, n in v.items():
                    into[reason] = into.get(reason, 0) + n
            else:
                self.split[k] = self.split.get(k, 0.0) + v
        self.left.pop((graph.key, graph.b), None)
        self.samples.append(Sample(self.cost.get((graph.key, graph.b), float(graph.cost)), seconds))
        self.per_gpu[gpu] = self.per_gpu.get(gpu, 0) + 1
        self.done += 1
        self._tell(f"{graph.label} {note}".strip())

    def failed(self, graph: Graph, note: str) -> None:
        """``graph`` failed for good: done, but no sample for the ETA."""
        self.left.pop((graph.key, graph.b), None)
        self.done += 1
        self._tell(f"{graph.label} {note}")

    def eta_s(self) -> float | None:
        """Seconds until the last graph is stored, or None before any graph was measured."""
        if not self.samples or self.began is None:
            return None
        if not self.left:
            return 0.0
        a, c = fit(self.samples)
        done = sum(a + c * s.cost for s in self.samples)
        left = sum(a + c * cost for cost in self.left.values())
        if done <= 0:
            return None
        return (self.clock() - self.began) * left / done

    def status(self) -> dict:
        eta = self.eta_s()
        return {"done": self.done, "total": self.total, "from_cache": self.cached, "per_gpu": dict(self.per_gpu),
                "eta_s": None if eta is None else round(eta, 1),
                "elapsed_s": None if self.began is None else round(self.clock() - self.began, 1)}

    def split_summary(self) -> dict:
        """Seconds summed over this run's measured graphs: "build" (heuristic query, engine sweep, plan
        finalizing), "timing" (operand fills, timed runs), "bookkeeping" (numerical-notes labelling, cache
        writes), "wait" (for the shared GPU), each step, the sweep's skips by reason, and the timings repeated
        behind a longer spin (runtime.time_repeats)."""
        s = self.split
        out = {"graphs": len(self.samples),
               "build": sum(s.get(k, 0.0) for k in ("heuristics", "sweep", "build")),
               "timing": sum(s.get(k, 0.0) for k in ("buffers", "timing")),
               "bookkeeping": sum(s.get(k, 0.0) for k in ("notes", "commit")),
               "wait": s.get("wait", 0.0)}
        out = {k: round(v, 2) for k, v in out.items()}
        out["steps"] = {k: round(v, 2) for k, v in s.items() if not isinstance(v, dict)}
        out["sweep_skips"] = dict(s.get("sweep_skips", {}))
        out["retimed"] = dict(s.get("retimed", {}))
        return out

    def _tell(self, what: str) -> None:
        if self.callback:
            self.callback(self.done, self.total, f"{eta_text(self.eta_s())} {gpus_text(self.per_gpu)}| {what}")


def eta_text(eta: float | None) -> str:
    if eta is None:
        return "ETA ?"
    m, s = divmod(int(round(eta)), 60)
    return f"ETA {m}:{s:02d}"


def gpus_text(per_gpu: dict[str, int]) -> str:
    """Graphs per GPU when there are several ("gpu0 12, gpu1 11 "), else nothing."""
    if len(per_gpu) < 2:
        return ""
    return ", ".join(f"{k} {v}" for k, v in sorted(per_gpu.items())) + " "
