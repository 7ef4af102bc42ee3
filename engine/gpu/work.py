"""Profiling work: a network's (unique kernel signature, micro-batch size) graphs, their expected
cost, the options that key the cache, and the Profile read back from the cache.

No CuPy here, so the single-GPU profiler and the Dask client (which may run on a machine without a
GPU, against a remote cluster) split, key and assemble the work the same way.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass

from ..errors import EngineError
from ..kernels import KernelSignature
from ..network import Network
from ..policies import batch_sizes, policy_name
from ..profile import Profile
from . import ENGINES, KNOB_SAMPLES
from .cache import ProfileCache
from .screen import MARGIN

DEFAULT_CACHE = "~/.cache/ucudnn-explorer/profiles.sqlite"


class ProfilingCancelled(EngineError):
    """Raised when should_stop() turns true; everything measured so far is in the cache."""


# how the profiler labels numerical notes (engine.gpu.profiler.label_notes); part of the cache key, so
# graphs cached when notes were labelled by plan name alone are measured again
NOTES_GRANULARITY = "per (signature, plan)"


@dataclass(frozen=True)
class Settings:
    """How each graph is measured; ``knob_samples`` None means the heuristic list only (no sweep)."""

    max_workspace: int = 1 << 30
    repeats: int = 5
    include_rtc: bool = False
    knob_samples: int | None = None

    def options(self) -> dict:
        """The cache key of a measurement: a graph measured under other options is measured again."""
        opts = {
            "max_workspace": self.max_workspace,
            "repeats": self.repeats,
            "include_rtc": self.include_rtc,
            "heuristics": "A+FALLBACK",
            "numerical_notes": NOTES_GRANULARITY,
            "repeated": f"plans not dominated by more than {MARGIN:.0%} at their first timing",
        }
        if self.knob_samples is not None:
            opts["sweep"] = {"knob_samples": self.knob_samples}
        return opts


def measure_settings(
    *,
    max_workspace: int = 1 << 30,
    repeats: int = 5,
    include_rtc: bool = False,
    engines: str = "sweep",
    knob_samples: int = KNOB_SAMPLES,
) -> Settings:
    """Checked settings from the profile command's options."""
    if engines not in ENGINES:
        raise EngineError(f"engines must be one of {', '.join(ENGINES)}, got {engines!r}")
    if knob_samples < 0:
        raise EngineError(f"knob samples must be >= 0, got {knob_samples}")
    return Settings(max_workspace, repeats, include_rtc, knob_samples if engines == "sweep" else None)


@dataclass(frozen=True)
class Graph:
    """One unit of profiling work: signature ``sig`` (n = the mini-batch, which sizes the buffers) at
    micro-batch ``b``; ``label`` names the kernels it stands for, for progress lines."""

    sig: KernelSignature
    b: int
    label: str

    @property
    def key(self) -> str:
        return self.sig.key

    @property
    def cost(self) -> int:
        """Expected cost, for balancing: the FLOPs of one run at micro-batch b."""
        return self.sig.with_batch(self.b).flops


def spread_order(work: list[Graph]) -> list[Graph]:
    """``work`` in an order whose every prefix samples every cost: sorted by cost (biggest first), then taken
    in bit-reversed index order (0, n/2, n/4, 3n/4, ...). So the graphs measured first are like the rest and
    the ETA's cost model, fitted on them, interpolates instead of extrapolating from the biggest graphs to
    the smallest (replayed on the committed ResNet-50 runs' per-graph seconds: within 15 % after a tenth
    of the graphs, against up to 74 % biggest first; tests/test_profile_pipeline.py), and a process's first
    graphs are like its later ones, so the ETA can tell its start apart (engine.gpu.progress)."""
    ranked = sorted(work, key=lambda g: -g.cost)
    bits = max(1, (len(ranked) - 1).bit_length())
    return [ranked[i] for i in sorted(range(len(ranked)), key=lambda i: int(f"{i:0{bits}b}"[::-1], 2))]


def timed_measure(measure, *args) -> tuple[list[dict], dict]:
    """``measure(*args)``'s rows and when it started (Unix time) and how long it took: stored with each graph,
    so a run's graphs can be compared one by one with another run's (one GPU against a Dask worker)."""
    start, t0 = time.time(), time.perf_counter()
    rows = measure(*args)
    return rows, {"start": round(start, 4), "seconds": round(time.perf_counter() - t0, 4)}


def open_cache(cache_path: str | None, prov: dict) -> ProfileCache:
    """The SQLite cache at ``cache_path`` (default DEFAULT_CACHE) for the device of ``prov``."""
    return ProfileCache(os.path.expanduser(cache_path or DEFAULT_CACHE), device_key(prov))


def cancelled(done: int, total: int, cache: ProfileCache) -> ProfilingCancelled:
    return ProfilingCancelled(
        f"profiling cancelled after {done} of {total} graphs; results so far are kept in {cache.path}"
    )


def device_key(prov: dict) -> str:
    """Profiles are valid only for one GPU model, driver, cuDNN and frontend (engine ids are not portable)."""
    return "|".join(str(prov[k]) for k in ("gpu", "driver", "cudnn_version", "frontend_version"))


def graphs(network: Network, policy, precision: str, layout: str) -> list[Graph]:
    """Every graph to profile, per unique kernel (network order) and micro-batch size (descending, so a
    serial run allocates each signature's buffers once)."""
    sizes = sorted(batch_sizes(policy, network.batch), reverse=True)
    return [
        Graph(kernels[0].signature, b, f"{kernels[0].id} ({len(kernels)}x) b={b}")
        for kernels in network.unique_kernels(precision, layout).values()
        for b in sizes
    ]


def assemble(
    cache: ProfileCache, work: list[Graph], provenance: dict, network: Network, policy, precision: str, layout: str
) -> Profile:
    """The Profile of ``work`` from the cache, in ``work``'s order whatever order graphs finished in."""
    rows = [r for g in work for r in cache.rows(g.key, g.b)]
    nets = [
        dict(name=network.name, batch=network.batch, precision=precision, layout=layout, policy=policy_name(policy))
    ]
    return Profile.from_records(rows, provenance, nets)
