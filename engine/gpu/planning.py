"""From a network to a plan on this GPU: profile what the resumable cache lacks, then ``make_plan``.

The one path shared by ``python -m engine torch-plan`` and ``engine.pytorch.optimize``: the same cache
(a graph measured once, by either, is read back by both), the same profiler choice (one GPU, or Dask
over several), the same planning function. ``mode="free"`` is WR with the per-kernel limit set to the
device memory free when planning. Progress is the profiler's own (engine.gpu.progress): the graphs read
from the cache, then each graph measured, led by the ETA. CuPy and the frontend load only when the GPU is
asked (``missing``, the profiler), so the planning logic is tested on a CPU host with a fake profiler.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from ..network import Network
from ..plan import Plan
from ..planner import make_plan
from ..profile import Profile
from ..units import parse_size
from .cache import ProfileCache
from .work import DEFAULT_CACHE, device_key, graphs, measure_settings

MODES = ("wr", "wd", "free")


@dataclass
class Planned:
    """A plan, the profile it came from, and what profiling cost here."""

    plan: Plan
    profile: Profile
    budget: int  # the budget planned with (for mode free: the memory free then)
    graphs: int  # graphs the network needs
    measured: int  # of which measured now (0: all were in the cache)
    seconds: float  # profiling time


def free_memory() -> int:
    """Bytes of device memory free now (cudaMemGetInfo), the most workspace a kernel could get."""
    import cupy

    return int(cupy.cuda.runtime.memGetInfo()[0])


def missing(
    net: Network, *, policy, precision: str, layout: str, cache: str | None, max_workspace: int, engines: str
) -> tuple[int, set[str]]:
    """(graphs the network needs, labels of those the cache lacks on this GPU under these options)."""
    from . import runtime

    options = measure_settings(max_workspace=max_workspace, engines=engines).options()
    work = graphs(net, policy, precision, layout)
    store = ProfileCache(os.path.expanduser(cache or DEFAULT_CACHE), device_key(runtime.provenance()))
    try:
        return len(work), {g.label for g in work if not store.is_done(g.key, g.b, options)}
    finally:
        store.close()


def profile_and_plan(
    net: Network,
    *,
    mode: str,
    budget=None,
    policy="powerOfTwo",
    precision: str = "tf32",
    layout: str = "NCHW",
    cache: str | None = None,
    max_workspace="1GiB",
    engines: str = "sweep",
    gpus: str | None = None,
    command: str = "",
    progress: Callable[[int, int, str], None] | None = None,
    status: Callable[[dict], None] | None = None,
) -> Planned:
    """Profile ``net``'s missing graphs on this host's GPU(s) into ``cache``, then plan with ``make_plan``
    (``mode`` wr or wd at ``budget``, or free). ``progress(done, total, message)`` sees every graph, ``status``
    the profiler's ProfileProgress.status() after each."""
    from .distributed import choose_profiler

    cap = parse_size(max_workspace)
    total, todo = missing(
        net, policy=policy, precision=precision, layout=layout, cache=cache, max_workspace=cap, engines=engines
    )
    profile_network = choose_profiler(gpus, None)
    t0 = time.perf_counter()
    profile = profile_network(
        net,
        policy=policy,
        precision=precision,
        layout=layout,
        cache_path=cache,
        max_workspace=cap,
        engines=engines,
        command=command,
        progress=progress,  # its messages lead with the profiler's ETA and name each graph measured
        status=status,
    )
    seconds = time.perf_counter() - t0
    limit = free_memory() if mode == "free" else parse_size(budget)
    plan = make_plan(
        profile,
        net,
        mode="wr" if mode == "free" else mode,
        budget=limit,
        policy=policy,
        precision=precision,
        layout=layout,
        command=command,
    )
    return Planned(plan, profile, limit, total, len(todo), seconds)
