"""memory_training's capacity runs: the searches for the largest batch that trains under a cap (tries at once,
sharing the GPU's and the host's memory) and the timed steps at the batches found."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import contextlib  # noqa: E402
import os  # noqa: E402
import threading  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from benchmarks.common import save_json  # noqa: E402
from benchmarks.memory_training_predict import (
    STEP,
    STOCK,
    GiB,
    MAX_BATCH,
    MODELS,
    PAPER,  # noqa: E402
    batch_limit,
    memory_result,
)


class SearchError(Exception):
    """A capacity try failed for another reason than running out of memory."""


def capacity(args, doc, out, run, run_many, lock, entries: dict) -> None:
    """Under each capacity: the largest batch found by trying for stock PyTorch and each paper policy (at the
    capacities ``--search-all`` names; elsewhere the best one alone), every search at once in threads sharing the
    GPU's and the host's memory; then, one case at a time, the timed steps at the found batches of stock and the
    best paper policy, and that policy + STEP at the same batch. ``entries``: {(net, GiB): the capacity entry,
    its predictions made}."""
    total = doc["provenance"].get("total_memory") or 80 * GiB
    slots = Slots(GPU_SHARE * total, HOST_SHARE * host_memory())
    searches = []
    for (net, gib), e in entries.items():
        found, skipped = e.setdefault("found", {}), e.setdefault("skipped", {})
        e.setdefault("search_error", {})

        def pinning(variant):
            guess = min(e["predicted"][variant] or MODELS[net], batch_limit(net))
            return guess, pinned_per_sample(net, variant, guess, gib * GiB)

        def too_much(guess, pinned):
            return pinned * guess > HOST_SHARE * host_memory()

        if "host_limited" not in e and too_much(*pinning(e["best"])):
            # the host cannot hold what the predicted best pins: time the best paper policy it can run instead
            runnable = [p for p in PAPER if not too_much(*pinning(p))]
            if runnable:
                e["host_limited"], e["best"] = e["best"], max(runnable, key=lambda p: e["predicted"][p] or 0)
        order = [STOCK, e["best"]] + [
            p for p in PAPER if p != e["best"] and (gib in args.search_all or p == e.get("host_limited"))
        ]
        for variant in order:
            guess, pinned = pinning(variant)
            if too_much(guess, pinned):
                skipped[variant] = (
                    f"would pin {pinned * guess / GiB:.0f} GiB of host memory at the predicted batch, "
                    f"more than {HOST_SHARE:.0%} of this host's {host_memory() / GiB:.0f} GiB"
                )
            elif variant not in found and "search" in args.parts:
                searches.append((net, gib, variant, guess, pinned))
    width = max(2, min(args.parallel, int(GPU_SHARE * total / (min(args.capacities) * GiB)) // max(1, len(searches))))

    def one_search(net, gib, variant, guess, pinned):
        cap, e = gib * GiB, entries[net, gib]

        def fits_many(batches):
            answers = {}
            for b, r in zip(
                batches,
                run_many(
                    "try", net, variant, batches, cap, args.try_timeout, hold=lambda b: slots.hold(cap, pinned * b)
                ),
            ):
                if "error" in r and not r.get("oom"):
                    raise SearchError(r["error"])
                answers[b] = bool(r.get("ok"))
            return answers

        try:
            got = search(fits_many, guess, width, batch_limit(net), args.precision)
            with lock:
                e["found"][variant] = got
                e["search_error"].pop(variant, None)
        except SearchError as err:  # recorded, not kept as an answer: --resume searches again
            with lock:
                e["search_error"][variant] = str(err)
        with lock:
            save_json(out, doc)

    if searches:
        with ThreadPoolExecutor(max_workers=len(searches)) as pool:
            futures = [pool.submit(one_search, *s) for s in searches]
        for f in futures:
            if f.exception() is not None:
                raise f.exception()
    if "timed" not in args.parts:
        return
    for (net, gib), e in sorted(entries.items(), key=lambda kv: kv[0][1]):  # timed: one at a time, the GPU quiet
        cap, found, stepped = gib * GiB, e["found"], e.setdefault("stepped", {})
        for variant in (STOCK, e["best"]):
            if found.get(variant):
                stepped[variant] = timed_step(run, net, variant, found[variant], cap)
                save_json(out, doc)
        b, pair = stepped.get(e["best"]), e["best"] + STEP
        chosen = args.pair_at.get(f"{net}/{gib}")
        if chosen:  # the user's batch: no prediction lowers it first
            stepped[pair] = timed_pair(run, net, e["best"], chosen, cap)
            save_json(out, doc)
        elif b:
            stepped[pair] = timed_pair(run, net, e["best"], b, cap, e["predicted"].get(pair))
            save_json(out, doc)


def timed_step(run, net: str, variant: str, batch: int, cap: int, lower: int | None = None) -> int:
    """The timed steps at a found batch, which sits at the edge of memory (a try runs 2 steps, the timed case 24 and
    a traced one): where they run out of memory they run once more at ``lower`` (default 97 % of it). Returns the
    batch they ran at."""
    r = run("step", net, variant, batch, cap)
    if r.get("oom") and batch > 1:
        lower = max(1, min(lower or batch, int(batch * 0.97)))
        run("step", net, variant, lower, cap)
        return lower
    return batch


def timed_pair(run, net: str, policy: str, batch: int, cap: int, predicted: int | None = None) -> int:
    """``policy`` + STEP timed at the batch ``policy`` was timed at; where it does not fit there, both run at the
    largest batch its plan predicts to fit (``predicted``; at most 97 % of the first), and where ``policy`` alone
    does not fit at that batch, both run once more at 97 % of it, so the two step times compare at one batch and
    one cap. The two run on one host: where their kept results come from two, both run again here. Returns the
    batch."""

    def pair(b, again=False):
        return run("step", net, policy + STEP, b, cap, again=again), run("step", net, policy, b, cap, again=again)

    b = timed_step(run, net, policy + STEP, batch, cap, predicted)
    for lower in (True, False):
        mine, paper = pair(b)
        if mine.get("ok") and paper.get("ok") and mine.get("gpu_uuid") != paper.get("gpu_uuid"):
            mine, paper = pair(b, again=True)
        if not (lower and mine.get("ok") and paper.get("oom") and b > 1):
            break
        b = max(1, int(b * 0.97))
    return b


def pinned_per_sample(net: str, variant: str, batch: int, cap: int) -> float:
    """Pinned host bytes per sample a try of ``variant`` takes (the plan's offloaded bytes at ``batch``)."""
    if variant == STOCK:
        return 0.0
    return memory_result(net, batch, variant, cap).summary["offload_bytes"] / batch


GPU_SHARE = 0.85  # the memory caps of tries at once (a cap is a limit, not a reservation: beyond, they would fail)
HOST_SHARE = 0.5  # pinned buffers of tries at once (five offloading tries pinned more than a 128 GiB host had);
# a search whose tries alone would pin more is skipped: the host, not the GPU, would limit it


def host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Slots:
    """What capacity tries running at once hold together: their memory caps under the GPU's memory (a cap is a
    limit, not a reservation) and their pinned buffers under a share of the host's. A try larger than a budget
    runs when nothing else holds that budget, so every try runs in the end."""

    def __init__(self, gpu: float, host: float):
        self.free = {"gpu": gpu, "host": host}
        self.holders = {"gpu": 0, "host": 0}
        self.cond = threading.Condition()

    def _fits(self, need: dict) -> bool:
        return all(need[k] <= self.free[k] or not self.holders[k] for k in need)

    @contextlib.contextmanager
    def hold(self, gpu: float, host: float):
        need = {"gpu": gpu, "host": host}
        with self.cond:
            self.cond.wait_for(lambda: self._fits(need))
            for k in need:
                self.free[k] -= need[k]
                self.holders[k] += need[k] > 0
        try:
            yield
        finally:
            with self.cond:
                for k in need:
                    self.free[k] += need[k]
                    self.holders[k] -= need[k] > 0
                self.cond.notify_all()


def search(fits_many, guess: int, width: int = 1, top: int = MAX_BATCH, precision: float = 0.02) -> int:
    """The largest batch b with fits(b), starting from ``guess``. Each round tries up to ``width`` batches at once
    (``fits_many(batches) -> {batch: fits}``, each a try in its own process): first around the guess, then
    bracketing by growing factors (a good prediction costs one or two rounds, a bad one not many more), then
    narrowing to ``precision``, never above ``top``. ``fits`` is assumed monotone; where it is not, the largest
    batch seen fitting wins."""
    guess = max(1, min(guess, top))
    lo, hi = 0, top + 1  # lo fits (0: none known), hi does not (top + 1: none known)

    def ask(batches) -> None:
        nonlocal lo, hi
        todo = sorted({b for b in batches if lo < b < hi})[:width]
        for b, ok in fits_many(todo).items():
            if ok:
                lo = max(lo, b)
            else:
                hi = min(hi, b)
        if hi <= lo:  # not monotone: trust the fit, forget the failure below it
            hi = top + 1

    near = (1.0, 0.96, 1.04, 0.92, 1.1, 0.85, 1.2, 0.75, 1.4)
    ask([int(guess * f) for f in near[:width]])
    grow = 1
    while hi > top and lo < top:  # everything tried so far fits: grow
        ask([min(top, max(lo + i, int(lo * (1 + 0.04 * grow * i)))) for i in range(1, width + 1)])
        grow *= 2
    while lo == 0 and hi > 1:  # nothing fits yet: shrink
        ask([max(1, int(hi * f)) for f in (0.8, 0.6, 0.4, 0.25, 0.1, 0.05, 0.01)[:width]])
    while hi <= top and hi - lo > max(1, int(lo * precision)):
        n = min(width, hi - lo - 1)
        ask([lo + (hi - lo) * i // (n + 1) for i in range(1, n + 1)])
    return lo
