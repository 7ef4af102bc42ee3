"""Live progress of a profile: graphs done per GPU and the time left, for the CLI and the dashboard.

The ETA fits each measured graph's seconds as ``a[kind] + c * GFLOP + d * GB + e * grouped + w * warm(k)``
(non-negative least squares, weighted so that one dear graph does not swing it: noise_weights(); a graph's fixed
work is about constant per direction; its GPU work grows with its FLOPs where the kernels are compute-bound and
with its operand bytes where they are memory-bound, as depthwise ones are; a grouped graph adds its host-bound
plans, whose time is the host's: without ``e`` the ETA replayed on MobileNetV3-Large's heuristic list was 33 %
off after a tenth of the graphs, with it 10-13 %)
and scales the wall time spent measuring so far by the fitted work left over the fitted work done, so it holds
however many processes measure at once. ``warm(k) = exp(-k / WARM_GRAPHS)`` is the start: a process's k-th
graph. On the H100 runs of benchmarks/reports/profiling-speed.md each profiling process's first graphs held the
GPU up to 2.7x longer than the same graphs later (why is not measured: likely the first engines a process runs
loading their kernels), about 0.2 s a process over its first ~5 graphs: on 12 processes that is the
whole first tenth of a ResNet-50 run, which then cost 1.7x more per graph than the rest, and an ETA scaled from
it was 49 % off. The start is learned from the first graphs and counted once: done work includes it, work left
only the small remainder of each known process's decay. It is fitted only for processes that take graphs in
spread order (engine.gpu.pipeline names them; see ProfileProgress.finished), and enters the fit only when it
explains the samples (Bayesian information criterion: its one extra coefficient must lower ``n ln(RSS/n)`` by
more than ``ln n``), so runs without a dear start keep the plain model. Limits: the decay's pace WARM_GRAPHS
comes from those runs (at a tenth of the graphs each process has measured ~4, too few to learn it; 2026-11-26-run4
B is 14, 12, 24 and 33 % off at 1.5, 2, 2.5 and 3 graphs), and a start
under large costs no feature explains is admitted late (tests/test_profile_pipeline.py). Samples are the
seconds each graph adds to the wall clock (sample_seconds). No CuPy here: the Dask client and the tests use it
without a GPU.
"""

from __future__ import annotations

import itertools
import math
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..kernels import KernelKind
from .work import Graph

KINDS = tuple(KernelKind)
WARM_GRAPHS = 2.0  # a process's start decays by e each two graphs (0.09, 0.05, 0.04, 0.01, 0.01 s on the H100)
# chosen on the committed runs replayed in spread order (tests/test_profile_pipeline.py): 0 (plain least squares)
# left two ResNet-50 runs over 15 % after a tenth, 0.5 two, 1.0 two, 0.75 one (2026-11-28-run5's B, 17 %)
NOISE_POWER = 0.75


@dataclass
class Sample:
    features: tuple[float, ...]
    seconds: float


def features(graph: Graph) -> tuple[float, ...]:
    """One intercept per direction, then GFLOP and GB of operands of the graph's micro-batch, then whether it is
    grouped (depthwise included): such a graph's cost is mostly host-bound plans, about constant per graph
    whatever its FLOPs (engine/gpu/timing.py)."""
    s = graph.sig.with_batch(graph.b)
    return (
        *(float(graph.sig.kind is k) for k in KINDS),
        s.flops / 1e9,
        (s.x_elems + s.y_elems + s.w_elems) * s.itemsize / 1e9,
        float(graph.sig.groups > 1),
    )


def warm(k: float) -> float:
    """The start's share of a process's k-th graph (k = 0 for its first)."""
    return math.exp(-k / WARM_GRAPHS)


def warm_left(k: int, graphs: float) -> float:
    """warm(k) + warm(k + 1) + ... over ``graphs`` more graphs of a process that has measured k."""
    q = math.exp(-1.0 / WARM_GRAPHS)
    return warm(k) * (1.0 - q**graphs) / (1.0 - q)


def sample_seconds(seconds: float, split: dict | None, shared: bool) -> float:
    """What a graph adds to the wall clock, the ETA's sample: with processes sharing a GPU its time holding the
    GPU (operands and timing; the builds overlap), graph after graph its own seconds (without waiting)."""
    split = split or {}
    if shared:
        return split.get("timing", 0.0) + split.get("buffers", 0.0)
    return seconds - split.get("wait", 0.0)


def fit(samples: list[Sample], penalized: tuple[int, ...] = (), weights: np.ndarray | None = None) -> np.ndarray:
    """Non-negative least-squares coefficients of seconds on features: the best of the least-squares fits on
    every subset of the features whose coefficients are all >= 0 (exact for this handful of features). A
    column in ``penalized`` must earn its place: a subset using it scores ``n ln(RSS/n) + ln n`` against the
    subsets without it (the Bayesian information criterion's price of a coefficient). ``weights``: each sample's
    weight in the squared residuals (noise_weights)."""
    x = np.array([sm.features for sm in samples], dtype=float)
    y = np.array([sm.seconds for sm in samples], dtype=float)
    if weights is not None:
        root = np.sqrt(weights)
        x, y = x * root[:, None], y * root
    n = len(y)
    gram, xy = x.T @ x, x.T @ y  # each subset's normal equations: a few features, many samples
    best, coef = float("inf"), np.zeros(x.shape[1])
    for m in range(1, x.shape[1] + 1):
        for cols in itertools.combinations(range(x.shape[1]), m):
            g = gram[np.ix_(cols, cols)]
            if not g.any():
                continue
            if np.linalg.det(g) > 1e-9 * np.prod(np.diag(g)):  # columns far from collinear: solve directly
                c = np.linalg.solve(g, xy[list(cols)])
            else:  # a feature no sample has yet, or two alike: the least-norm solution
                c, *_ = np.linalg.lstsq(x[:, cols], y, rcond=None)
            if (c < 0).any():
                continue
            err = float(((x[:, cols] @ c - y) ** 2).sum())
            score = n * math.log(err / n + 1e-18) + math.log(n) * sum(i in penalized for i in cols)
            if score < best - 1e-9:
                best, coef = score, np.zeros(x.shape[1])
                coef[list(cols)] = c
    return coef


def noise_weights(samples: list[Sample]) -> np.ndarray:
    """Weights for the fit, a graph's variance taken to grow as its seconds to the power NOISE_POWER (floored at
    the median): a graph several times the median (ResNet-50's BackwardFilter at 56x56 and b=64, 0.47 s against
    0.065 s) otherwise swung the FLOP and byte terms, and the ETA with them, 15-20 % over the next dozen graphs
    (2026-11-28-run9's B, replayed)."""
    y = np.array([s.seconds for s in samples])
    return np.maximum(y, float(np.median(y)) or 1e-9) ** -NOISE_POWER


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
        self.samples: list[Sample] = []  # features, then warm(k) of the graph's place in its process
        self.per_worker: dict[str, int] = {}  # graphs measured per process (the start is per process)
        self.per_gpu: dict[str, int] = {}
        self._fitted: tuple[int, np.ndarray] | None = None
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
        self,
        graph: Graph,
        gpu: str,
        seconds: float,
        split: dict | None = None,
        commit: float = 0.0,
        note: str = "",
        worker: str | None = None,
    ) -> None:
        """``graph`` was measured on ``gpu``, adding ``seconds`` to the wall clock (sample_seconds; ``split``: per
        step, as profiler.GraphMeasurer.split), and stored in ``commit`` seconds. ``worker`` names the process
        that measured it, given where processes take graphs in spread_order (engine.gpu.pipeline): only then is
        a process's start told apart from its graphs' own cost. In another order a process's first graphs are
        also its biggest (the Dask path before it took spread order too) or its network's first (the serial
        one), and a start term took their cost: replayed on the two-GPU Dask runs of
        benchmarks/reports/profile-multigpu, biggest first, the ETA was 26-53 % off after a tenth of the graphs
        with it, 12-25 % without. The Dask path takes spread order too, and names its workers."""
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
        start = 0.0
        if worker is not None:
            k = self.per_worker.get(worker, 0)
            self.per_worker[worker], start = k + 1, warm(k)
        self.samples.append(Sample((*features(graph), start), seconds))
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
        coef = self.coefficients()
        done = float((np.array([sm.features for sm in self.samples]) @ coef).sum())
        left = float((np.array(list(self.left.values())) @ coef[:-1]).sum())
        share = len(self.left) / max(1, len(self.per_worker))  # graphs left per process, as the pipeline deals them
        left += coef[-1] * sum(warm_left(k, share) for k in self.per_worker.values())
        if done <= 0:
            return None
        return (self.clock() - self.began) * left / done

    def coefficients(self) -> np.ndarray:
        """The fit on the samples so far (kept until the next sample): per-direction intercepts, per GFLOP,
        per GB, and the start (0 unless the samples show one)."""
        if self._fitted is None or self._fitted[0] != len(self.samples):
            start = (len(self.samples[0].features) - 1,)
            self._fitted = (len(self.samples), fit(self.samples, start, noise_weights(self.samples)))
        return self._fitted[1]

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

    def graph_counts(self) -> dict:
        """A profile's ``graphs`` provenance (as engine.gpu.distributed's): what a resumed run measured."""
        return {"total": self.total, "from_cache": self.cached, "measured": self.done - self.cached, "failed": 0}

    def split_summary(self) -> dict:
        """Seconds summed over this run's measured graphs: "build" (heuristic query, engine sweep, plan
        finalizing), "timing" (operand fills, timed runs), "bookkeeping" (numerical-notes labelling, cache
        writes), "wait" (for the shared GPU), each step, the sweep's skips by reason, the timings repeated
        behind a longer spin (engine.gpu.timing), how the warm-up run compared with the first timed run, and the
        plans timed back to back as host-bound."""
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
        out["host_bound"] = dict(s.get("host_bound", {}))
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


LONG_SWEEP_S = 300.0  # an engine sweep whose ETA is longer gets one line about --engines heuristics


def sweep_hint(
    engines: str, say: Callable[[str], None] | None = None, option: str = "--engines heuristics"
) -> Callable[[dict], None] | None:
    """A status callback (ProfileProgress.status) that says once (``say``, else on stderr), when an engine
    sweep's ETA after a tenth of the graphs it measures (those not in the cache) is over LONG_SWEEP_S, that
    ``option`` (cuDNN's heuristic list only) is much faster. An exact sweep has a floor, every plan run at least
    once: MobileNetV3-Large b128 on an H200 is 295 s of plan runs alone, its heuristic list profiled in 74 s
    with plans within 2 % of the sweep's (benchmarks/reports/profiling-speed.md)."""
    if engines != "sweep":
        return None
    said = []

    def hint(status: dict) -> None:
        eta, cached = status.get("eta_s"), status.get("from_cache", 0)
        measured, todo = status.get("done", 0) - cached, status.get("total", 0) - cached
        if said or eta is None or eta <= LONG_SWEEP_S or measured < max(1, todo // 10):
            return
        said.append(True)
        (say or _stderr)(
            f"note: the engine sweep needs about {eta / 60:.0f} min more (it times every engine configuration "
            f"cuDNN offers); {option} times cuDNN's heuristic list only, several times faster, and the "
            "plans may be a little slower. What is measured so far stays in the cache."
        )

    return hint


def _stderr(line: str) -> None:
    sys.stderr.write(f"\n{line}\n")  # below the progress bar redrawn in place
    sys.stderr.flush()
