"""Live progress of a profile: graphs done per GPU and the time left, for the CLI and the dashboard.

The ETA fits each measured graph's own seconds as ``a[kind] + c * GFLOP + d * GB`` (non-negative least
squares: a graph's host work, building ~60 plans, is about constant per direction; its GPU work grows with
its FLOPs where the kernels are compute-bound and with its operand bytes where they are memory-bound, as
depthwise ones are) and scales the wall time spent measuring so far by the fitted work left over the fitted
work done, so it holds however many processes measure at once. Samples are each graph's own seconds
(building and timing, without waiting for the shared GPU). Replayed biggest graph first on the H100 runs of
benchmarks/reports/profiling-speed.md it was up to a third off in the first quarter of a run: fitted on the
biggest graphs, the model extrapolated to the smallest. The pipeline now measures in work.spread_order,
whose every prefix samples every cost: the same runs' per-graph seconds replayed in that order give a
finish within 10 % from a tenth of the graphs on (tests/test_profile_pipeline.py).
No CuPy here: the Dask client and the tests use it without a GPU.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..kernels import KernelKind
from .work import Graph

KINDS = tuple(KernelKind)


@dataclass
class Sample:
    features: tuple[float, ...]
    seconds: float


def features(graph: Graph) -> tuple[float, ...]:
    """One intercept per direction, then GFLOP and GB of operands of the graph's micro-batch."""
    s = graph.sig.with_batch(graph.b)
    return (
        *(float(graph.sig.kind is k) for k in KINDS),
        s.flops / 1e9,
        (s.x_elems + s.y_elems + s.w_elems) * s.itemsize / 1e9,
    )


def fit(samples: list[Sample]) -> np.ndarray:
    """Non-negative least-squares coefficients of seconds on features: the best of the least-squares fits on
    every subset of the features whose coefficients are all >= 0 (exact for this handful of features)."""
    x = np.array([sm.features for sm in samples], dtype=float)
    y = np.array([sm.seconds for sm in samples], dtype=float)
    best, coef = float("inf"), np.zeros(x.shape[1])
    for n in range(1, x.shape[1] + 1):
        for cols in itertools.combinations(range(x.shape[1]), n):
            sub = x[:, cols]
            if not sub.any():
                continue
            c, *_ = np.linalg.lstsq(sub, y, rcond=None)
            if (c < 0).any():
                continue
            err = float(((sub @ c - y) ** 2).sum())
            if err < best - 1e-12:
                best, coef = err, np.zeros(x.shape[1])
                coef[list(cols)] = c
    return coef


class ProfileProgress:
    """Counts finished graphs (per GPU, and those read from the cache) and estimates the time left.

    ``callback(done, total, message)`` is the profilers' progress callback (CLI bar, dashboard job); the
    message starts with the ETA. ``status()`` is the same as a dict for a richer view."""

    def __init__(
        self,
        work: list[Graph],
        callback: Callable[[int, int, str], None] | None = None,
        clock: Callable[[], float] = time.perf_counter,
    ):
        self.total, self.callback, self.clock = len(work), callback, clock
        self.features = {(g.key, g.b): features(g) for g in work}
        self.left = dict(self.features)
        self.samples: list[Sample] = []
        self.per_gpu: dict[str, int] = {}
        self.done = self.cached = 0
        self.began: float | None = None  # when measuring began (after the workers started)
        self.split: dict = {}  # seconds per step summed over the measured graphs

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

    def finished(
        self, graph: Graph, gpu: str, seconds: float, split: dict | None = None, commit: float = 0.0, note: str = ""
    ) -> None:
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
        self.samples.append(Sample(features(graph), seconds))
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
        coef = fit(self.samples)
        done = sum(float(np.dot(sm.features, coef)) for sm in self.samples)
        left = sum(float(np.dot(f, coef)) for f in self.left.values())
        if done <= 0:
            return None
        return (self.clock() - self.began) * left / done

    def status(self) -> dict:
        eta = self.eta_s()
        return {
            "done": self.done,
            "total": self.total,
            "from_cache": self.cached,
            "per_gpu": dict(self.per_gpu),
            "eta_s": None if eta is None else round(eta, 1),
            "elapsed_s": None if self.began is None else round(self.clock() - self.began, 1),
        }

    def split_summary(self) -> dict:
        """Seconds summed over this run's measured graphs: "build" (heuristic query, engine sweep, plan
        finalizing), "timing" (operand fills, timed runs), "bookkeeping" (numerical-notes labelling, cache
        writes), "wait" (for the shared GPU), each step, the sweep's skips by reason, the timings repeated
        behind a longer spin (engine.gpu.timing) and how the warm-up run compared with the first timed run."""
        s = self.split
        out = {
            "graphs": len(self.samples),
            "build": sum(s.get(k, 0.0) for k in ("heuristics", "sweep", "build")),
            "timing": sum(s.get(k, 0.0) for k in ("buffers", "timing")),
            "bookkeeping": sum(s.get(k, 0.0) for k in ("notes", "commit")),
            "wait": s.get("wait", 0.0),
        }
        out = {k: round(v, 2) for k, v in out.items()}
        out["steps"] = {k: round(v, 2) for k, v in s.items() if not isinstance(v, dict)}
        out["sweep_skips"] = dict(s.get("sweep_skips", {}))
        out["retimed"] = dict(s.get("retimed", {}))
        out["first_runs"] = dict(s.get("first_runs", {}))
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
