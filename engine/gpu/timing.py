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
"""

from __future__ import annotations

from collections.abc import Callable

import cupy as cp

from . import runtime

AHEAD = 8  # regions whose host enqueue a spin covers
THIN = 2  # a spin is queued when the region this many back has finished: the GPU is about to catch up


def time_pass(ctx, regions: list[Callable[[int], None]], runs: int, timed_from: int = 0) -> list[list[float] | str]:
    """Per region, the GPU milliseconds of its ``runs`` runs ``region(r)`` (r = 0 .. runs-1), or the error it
    raised as text. Runs before ``timed_from`` are warm-ups: their times are returned but the GPU may have
    waited for the host in them."""
    out: list[list[float] | str | None] = [None] * len(regions)
    todo = list(range(len(regions)))
    cycles = runtime.SPIN_BASE + runtime.SPIN_PER_CALL * runs * AHEAD
    while todo:
        events: dict[int, list] = {}
        ends: list = []  # an event after each spin and region queued in this pass
        retry = []
        for k in todo:
            if not ends or ends[-min(THIN, len(ends))].done:
                runtime.block_stream(ctx, cycles)
                ends.append(cp.cuda.Event())
                ends[-1].record(ctx.stream)
            evs = [cp.cuda.Event() for _ in range(runs + 1)]
            try:
                evs[0].record(ctx.stream)
                for r in range(runs):
                    regions[k](r)
                    evs[r + 1].record(ctx.stream)
            except cp.cuda.runtime.CUDARuntimeError:
                raise  # the context is unusable; stop rather than record garbage
            except Exception as err:
                out[k] = f"execute: {type(err).__name__}: {str(err).strip()[:300]}"
                continue
            ends.append(evs[-1])
            if evs[timed_from].done and cycles < runtime.SPIN_MAX:
                retry.append(k)  # the GPU reached the region before the host had queued it all
            else:
                events[k] = evs
        ctx.stream.synchronize()
        for k, evs in events.items():
            out[k] = [cp.cuda.get_elapsed_time(evs[r], evs[r + 1]) for r in range(runs)]
        ctx.retimed += len(retry)
        todo, cycles = retry, cycles * 4
    return out
