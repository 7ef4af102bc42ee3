"""Which of a graph's plans are timed with repeats: those that can still be in a desirable set.

Every plan is timed once first (a warm-up run, then one timed run). At one (signature, micro-batch) a plan
can never be in a desirable set, nor be ``make_plan``'s choice at any budget, when another plan is faster
and needs no more workspace. So a plan p keeps its single run (``repeats`` 1, its reason naming the
plan that dominates it) when a plan q with ``workspace(q) <= workspace(p)`` was more than ``MARGIN``
faster: ``(1 + MARGIN) * time(q) < low(p)``, where ``low(p)`` is the faster of p's two runs (the warm-up
only ever runs slower, so it can only lower the chance of a wrong skip). Every other plan is timed with
repeats, as before. q must stand wherever p can: in every engine set that keeps p (Profile.restrict: a
heuristic p needs a heuristic q, a deterministic p a deterministic q) and not be a plan of another
precision. The plan a framework would run undivided (Profile.heuristic_first: the first in cuDNN's
order that fits a limit) is always repeated, as it is the baseline of the speed-ups reported.

Why the choice is exact within the noise: if every time is within a factor ``1 +- d`` of the plan's
true median with ``d <= MARGIN / (2 + MARGIN)`` (4.8 % for MARGIN = 0.10), then
``true(p) >= low(p) (1 - d) > (1 + MARGIN) (1 - d) time(q) >= (1 + MARGIN)(1 - d)/(1 + d) true(q) >= true(q)``:
p is slower than q at no less workspace, so it is in no desirable set whatever its other runs would have
measured. MARGIN = 0.10 is chosen from the committed H100 ResNet-50 b64 profile: over its 16,539 plans
timed 5 times, the slowest of the 5 runs is within 1.4 % of the median for half of them and within 9.7 %
for 99 %; p's two runs would both have to be that far off. Two profiles of the same GPU differ by about
1 % (quartiles of their medians' ratio, benchmarks/reports/profiling-speed.md). On that profile the rule
leaves 4,898 of 30,255 timed plans to repeat (16,539 with the 10x/1.25x rules it replaces, which were not
exact: they skipped slow plans on the small-workspace end of the front).

A slow plan is left at its warm-up (``left_at_warm_up``): every plan's warm-up runs first, in a pass of its
own, and a plan whose warm-up kernels took ``SLOW_MS`` or more and over ``1 + WARM_UP_MARGIN`` times the
warm-up of a plan that stands for it (as above) is not run again. "Its kernels took" is the warm-up's GPU time
less the host's time enqueueing it (``low``), the most the GPU can have waited for the host: a plan's first
launch loads its kernels on the host (CUDA's lazy loading), and on the H200 a 0.007 ms plan's warm-up read 14 ms
that way (benchmarks/reports/warm-up-check.md, check 1), so its warm-up alone would have
left it behind a slower plan. So a host-bound plan (one that enqueues its own work for as long as it runs, as
most of a depthwise graph's slow plans do) is never left: its warm-up bounds nothing. The rule is exact unless
a warm-up's kernels run over 1.9x its plan's timed run, or the standing plan's warm-up ran over 5 % faster than
its timed runs; the profiler counts such warm-ups where it sees them (profiler.FIRST_RUNS), and
benchmarks/warm_up_check.py judges every plan left against a run that timed them all.

Pure functions, no CuPy: tested against brute force on the CPU.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass

from ..precision import PRECISIONS

MARGIN = 0.10
WARM_UP_MARGIN = 1.0  # a slow plan's warm-up over twice another's: it is not run again
SLOW_MS = 10.0  # ms: the least warm-up kernels this rule applies to, where a second run costs most


@dataclass(frozen=True)
class Timed:
    """What the screen knows of one timed plan: its time (the median of its repeats, or its single run),
    ``low`` the fastest run seen, its workspace, and the engine sets it belongs to."""

    name: str
    time: float
    low: float
    workspace: int
    heuristic: bool = True
    deterministic: bool = True
    usable: bool = True  # False: a plan of another precision, never planned


def timed(row: dict, time: float, low: float) -> Timed:
    """The screen's view of a profile row (profile.COLUMNS) timed at ``time``, fastest run ``low``."""
    notes = row["numerical_notes"].split("|") if row["numerical_notes"] else []
    precision = row["signature"].split("/")[1]
    other = set(notes) & set(PRECISIONS[precision].deselect_notes) if precision in PRECISIONS else set()
    return Timed(
        name=row["plan"],
        time=time,
        low=low,
        workspace=int(row["workspace"]),
        heuristic=row["heuristic_rank"] >= 0,
        deterministic="NONDETERMINISTIC" not in notes,
        usable=not other,
    )


def dominators(plans: list[Timed], keep: set[int] = frozenset(), margin: float = MARGIN) -> list[int | None]:
    """For each plan, the index of the plan that dominates it beyond ``margin`` (the fastest that can stand
    for it), or None if it must be timed with repeats; ``keep``: indices always repeated. The fastest plan
    that can stand for p is itself never dominated, so every dominator is repeated. (p may be that fastest
    plan itself: its time is never below its own ``low``, so it does not dominate itself.)"""
    fronts = {}  # per (heuristic only, deterministic only): (workspaces ascending, fastest index up to each)
    for h, d in itertools.product((False, True), repeat=2):
        cands = sorted(
            (q.workspace, q.time, j)
            for j, q in enumerate(plans)
            if q.usable and (q.heuristic or not h) and (q.deterministic or not d)
        )
        best, fastest = None, []
        for _, t, j in cands:
            best = j if best is None or t < plans[best].time else best
            fastest.append(best)
        fronts[h, d] = ([c[0] for c in cands], fastest)
    out: list[int | None] = []
    for i, p in enumerate(plans):
        ws, fastest = fronts[p.heuristic, p.deterministic]
        n = bisect.bisect_right(ws, p.workspace)
        q = fastest[n - 1] if n and i not in keep else None
        out.append(q if q is not None and (1 + margin) * plans[q].time < p.low else None)
    return out


def framework_choices(ranked: list[tuple[int, int]]) -> set[int]:
    """Of (heuristic rank, workspace) per plan index (rank < 0: not in cuDNN's list), the indices that are
    the first in cuDNN's order fitting some workspace limit: those whose workspace is below every earlier
    rank's."""
    out, least = set(), None
    for idx, (rank, ws) in sorted(enumerate(ranked), key=lambda e: e[1][0]):
        if rank >= 0 and (least is None or ws < least):
            out.add(idx)
            least = ws
    return out


def left_at_warm_up(plans: list[Timed], keep: set[int] = frozenset()) -> list[int | None]:
    """For each plan timed by its warm-up alone (``time`` that run, ``low`` the least its kernels took), the plan
    that dominates it by more than WARM_UP_MARGIN if ``low`` is SLOW_MS or more (it is not run again), else None."""
    dom = dominators(plans, keep, WARM_UP_MARGIN)
    return [q if q is not None and p.low >= SLOW_MS else None for p, q in zip(plans, dom)]
