"""A graph's plans timed in one queue: a spin only when the GPU has caught up, one synchronization per pass.

runtime.time_repeats times one plan per call: a spin ahead of it, its events, then a synchronization,
while the GPU idles through the host's work between plans. On ResNet-50 b64 that held the GPU for 55 s of
which the timed kernels ran about 30 s (benchmarks/reports/profiling-speed.md). Here every plan of a pass
is enqueued behind the others, each between CUDA events on the handle's stream: the GPU runs the plans
back to back while the host enqueues the next, and waits for the host only where the host falls behind.

The same check as time_repeats keeps the times GPU time: a region's first timed event must still be
pending once the region's last event is enqueued (the GPU had not reached the region before the host had
queued all of it, so it never waited for the host inside it). Before each region, if the region ``THIN``
back has already finished (the GPU is about to drain the queue), a spin is queued to stay ahead of the host; a
region that fails the check is timed again in a later pass behind a spin four times as long
(``ctx.retimed`` counts these), up to runtime.SPIN_MAX, past which it is taken as it is.

A region whose own enqueue keeps the host over ``HOST_BOUND_MS`` in every run is host-bound and taken as it
is at once: its events then measure it run back to back, the GPU waiting on the host between launches, which
is what it costs wherever it runs (a micro-batched step enqueues its pieces from one host thread too). The
frontend's execute takes ~0.02 ms of host time; a plan that takes over 1 ms launches work of its own from the
host. Covering it with spins cost the GPU as long again on each of up to four passes: on the simulated GPU of
tests/test_profile_timing.py, timing 50 such plans (5 ms of host time each) once and then ten times took
9.3 s with spins and 3.0 s back to back. On the H100 the depthwise graphs of
benchmarks/reports/profiling-speed.md held the GPU 5-15 s each nearly whatever the micro-batch (one 6.7 s at
b=1, 10.3 s at b=128), with 700 of their 2,200 plans retimed. They were host-bound: on the H200
(2026-11-28-run5 there) 408 of the depthwise benchmark's plans were, and 2,688 of the 3,973 in the depthwise and
grouped graphs of MobileNetV3-Large measured.
"""

from __future__ import annotations

import time
from collections.abc import Callable

import cupy as cp

from . import runtime

AHEAD = 8  # regions whose host enqueue a spin covers
THIN = 2  # a spin is queued when the region this many back has finished: the GPU is about to catch up
HOST_BOUND_MS = 1.0  # host time per run past which a region is host-bound (the frontend's execute: ~0.02 ms)
clock = time.perf_counter  # the host clock (a simulated one in tests)


def time_pass(
    ctx, regions: list[Callable[[int], None]], runs: int, host_ms: dict[int, float] | None = None, spin: bool = True
) -> list[list[float] | str]:
    """Per region, the GPU milliseconds of its ``runs`` runs ``region(r)`` (r = 0 .. runs-1), or the error it
    raised as text. ``host_ms`` receives each region's host milliseconds per run (the least of
    its last pass's runs). ``spin=False``: no spin in the first pass, for regions known to be host-bound, so that
    the GPU waits on the host from each one's start and a single run is measured as it runs back to back (a
    region that proves not host-bound is timed again behind a spin)."""
    out: list[list[float] | str | None] = [None] * len(regions)
    todo = list(range(len(regions)))
    cycles = runtime.SPIN_BASE + runtime.SPIN_PER_CALL * runs * AHEAD
    while todo:
        events: dict[int, list] = {}
        ends: list = []  # an event after each spin and region queued in this pass
        retry = []
        for k in todo:
            if spin and (not ends or ends[-min(THIN, len(ends))].done):
                runtime.block_stream(ctx, cycles)
                ends.append(cp.cuda.Event())
                ends[-1].record(ctx.stream)
            evs = [cp.cuda.Event() for _ in range(runs + 1)]
            stamps = [clock()]
            try:
                evs[0].record(ctx.stream)
                for r in range(runs):
                    regions[k](r)
                    evs[r + 1].record(ctx.stream)
                    stamps.append(clock())
            except cp.cuda.runtime.CUDARuntimeError:
                raise  # the context is unusable; stop rather than record garbage
            except Exception as err:
                out[k] = f"execute: {type(err).__name__}: {str(err).strip()[:300]}"
                continue
            host = 1000.0 * min(b - a for a, b in zip(stamps, stamps[1:]))  # the least: a preempted run is no bound
            if host_ms is not None:
                host_ms[k] = host
            ends.append(evs[-1])
            if evs[0].done and cycles < runtime.SPIN_MAX and host < HOST_BOUND_MS:
                retry.append(k)  # the GPU reached the region before the host had queued it all
            else:
                events[k] = evs
        ctx.stream.synchronize()
        for k, evs in events.items():
            out[k] = [cp.cuda.get_elapsed_time(evs[r], evs[r + 1]) for r in range(runs)]
        ctx.retimed += len(retry)
        todo, cycles, spin = retry, cycles * 4, True
    return out
