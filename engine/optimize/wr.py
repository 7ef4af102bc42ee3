"""WR: the per-kernel dynamic program over micro-batch sizes (mu-cuDNN arXiv:1804.04806 §III-B).

T(0) = 0, T(b) = min over profiled sizes b' <= b of Tμ(b') + T(b - b'), where Tμ(b') is the fastest
micro-configuration of size b' whose workspace fits the limit. A configuration runs its pieces one
after another on one workspace, so its workspace is the max of the pieces' (engine/configuration.py).

Two facts keep the program small and exact:

* any configuration of two or more pieces has a piece of at most b/2; peeling off its smallest piece
  shows T(b) = min(Tμ(b), min over b' <= b/2 of Tμ(b') + T(b - b')) (mu-cuDNN's own recursion);
* because workspace is a max, "every piece fits W" is the whole constraint, so the program for many
  limits W at once is the same recursion on a (sizes x limits) table. ``solve_table`` runs it that
  way with numpy; WR is the one-column case and ``desirable.desirable_set`` the many-column one.

Exact time ties are broken towards fewer pieces (fewer launches), then towards the undivided run,
then towards the smaller piece peeled first, so results are deterministic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ..configuration import Configuration, MicroConfig
from ..errors import InfeasibleBudgetError
from ..units import format_size

_NO_PIECES = np.iinfo(np.int32).max


def canonical(micro: Iterable[MicroConfig]) -> Configuration:
    """The configuration of these micro-configurations in canonical order: descending batch, then plan."""
    return Configuration(tuple(sorted(micro, key=lambda m: (-m.batch, m.plan, m.time_ms, m.workspace))))


def micro_front(micros: Iterable[MicroConfig], limit: int | None = None) -> list[MicroConfig]:
    """One size's micro-configurations that fit ``limit``, pruned to their own Pareto set.

    Ascending workspace, strictly decreasing time; on exact ties the earlier plan name wins. A
    dominated micro-configuration can never be the fastest one under any limit, so dropping it first
    loses nothing (mu-cuDNN arXiv:1804.04806 §III-C1) and keeps the tables below small.
    """
    fits = [m for m in micros if limit is None or m.workspace <= limit]
    fits.sort(key=lambda m: (m.workspace, m.time_ms, m.plan))
    out: list[MicroConfig] = []
    for m in fits:
        if not out or m.time_ms < out[-1].time_ms:
            out.append(m)
    return out


def size_fronts(
    candidates: Mapping[int, Sequence[MicroConfig]], batch: int, limit: int | None
) -> dict[int, list[MicroConfig]]:
    """{b: micro_front} for the profiled sizes 1 <= b <= batch that have a micro-configuration within limit."""
    if batch < 1:
        raise ValueError(f"mini-batch size must be >= 1, got {batch}")
    out = {}
    for b in sorted(candidates):
        if not 1 <= b <= batch:
            continue
        for m in candidates[b]:
            if m.batch != b:
                raise ValueError(f"micro-configuration {m.plan!r} has batch {m.batch} but is listed under size {b}")
        front = micro_front(candidates[b], limit)
        if front:
            out[b] = front
    return out


def solve_table(sizes: Sequence[int], tmu: np.ndarray, batch: int) -> np.ndarray:
    """T(b) of the WR recursion for several limits at once: shape (batch+1, K), inf where unreachable.

    ``tmu[j, k]`` is Tμ(sizes[j]) under the k-th limit (inf where no plan fits). Values only: this is
    the hot loop of ``desirable_set`` (thousands of limits), ``solve_choices`` recovers the pieces.
    """
    sizes_arr = np.asarray(sizes, dtype=np.int64)
    T = np.full((batch + 1, tmu.shape[1]), np.inf)
    T[0] = 0.0
    position = {int(s): j for j, s in enumerate(sizes_arr)}
    n_max = int(np.searchsorted(sizes_arr, batch // 2, side="right"))
    buf = np.empty((max(n_max, 1), tmu.shape[1]))  # reused: fresh large arrays per b cost page faults
    low = np.empty(tmu.shape[1])
    run = int(np.argmin(np.append(sizes_arr, 0) == np.arange(1, len(sizes_arr) + 2)))  # sizes[:run] == 1..run
    for b in range(1, batch + 1):
        n_small = int(np.searchsorted(sizes_arr, b // 2, side="right"))  # pieces <= b/2
        row = T[b]
        if b in position:
            row[:] = tmu[position[b]]
        if n_small:
            vals = buf[:n_small]
            if n_small <= run:  # sizes 1..n_small: rows b-1 down to b-n_small, a reversed slice
                np.add(T[b - 1 : b - n_small - 1 : -1], tmu[:n_small], out=vals)  # stop >= 0: n_small <= b/2
            else:
                np.take(T, b - sizes_arr[:n_small], axis=0, out=vals)
                vals += tmu[:n_small]
            np.minimum(row, vals.min(axis=0, out=low), out=row)
    return T


def solve_choices(sizes: Sequence[int], tmu: np.ndarray, batch: int) -> tuple[np.ndarray, np.ndarray]:
    """The same recursion, also returning ``arg[b, k]``: the index into ``sizes`` of the piece to peel
    off (-1 where b is unreachable). Exact time ties go to the fewest pieces, then to the undivided
    option, then to the smallest piece.
    """
    sizes_arr = np.asarray(sizes, dtype=np.int64)
    n_lim = tmu.shape[1]
    T = np.full((batch + 1, n_lim), np.inf)
    P = np.full((batch + 1, n_lim), _NO_PIECES, dtype=np.int64)
    arg = np.full((batch + 1, n_lim), -1, dtype=np.int32)
    T[0] = 0.0
    P[0] = 0
    position = {int(s): j for j, s in enumerate(sizes_arr)}
    cols = np.arange(n_lim)
    for b in range(1, batch + 1):
        idx = [position[b]] if b in position else []
        idx += range(int(np.searchsorted(sizes_arr, b // 2, side="right")))
        if not idx:
            continue
        idx_arr = np.asarray(idx, dtype=np.int64)
        rest = b - sizes_arr[idx_arr]
        vals = T[rest] + tmu[idx_arr]
        best = vals.min(axis=0)
        pieces = np.where(vals == best, P[rest] + 1, _NO_PIECES)
        pick = pieces.argmin(axis=0)  # first of the fewest: undivided comes first in idx
        reach = np.isfinite(best)
        T[b] = best
        P[b] = np.where(reach, pieces[pick, cols], _NO_PIECES)
        arg[b] = np.where(reach, idx_arr[pick], -1)
    return T, arg


def min_workspace(candidates: Mapping[int, Sequence[MicroConfig]], batch: int) -> int:
    """Smallest workspace of any configuration summing to ``batch``; -1 if no partition exists.

    Bottleneck version of the same recursion: W(b) = min over b' of max(w(b'), W(b - b')).
    """
    fronts = size_fronts(candidates, batch, None)
    sizes = sorted(fronts)
    wmin = {s: fronts[s][0].workspace for s in sizes}
    INF = float("inf")
    W = [0.0] + [INF] * batch
    for b in range(1, batch + 1):
        W[b] = min((max(wmin[s], W[b - s]) for s in sizes if s <= b), default=INF)
    return -1 if W[batch] == INF else int(W[batch])


def check_feasible(candidates: Mapping[int, Sequence[MicroConfig]], batch: int, limit: int | None) -> None:
    """Raise InfeasibleBudgetError saying why no configuration of ``batch`` fits ``limit``."""
    minimum = min_workspace(candidates, batch)
    if minimum < 0:
        sizes = sorted(b for b in candidates if 1 <= b <= batch and candidates[b])
        raise InfeasibleBudgetError(
            f"no configuration sums to mini-batch {batch}: the profiled micro-batch sizes {sizes or 'none'} "
            f"cannot partition it",
            minimum=-1,
        )
    raise InfeasibleBudgetError(
        f"workspace limit {limit} B ({format_size(limit or 0)}) is below {minimum} B ({format_size(minimum)}), "
        f"the smallest workspace of any configuration of mini-batch {batch}",
        minimum=minimum,
    )


def reconstruct(arg: np.ndarray, sizes: Sequence[int], batch: int, k: int, chooser) -> Configuration:
    """Follow the peeled pieces of column k back from ``batch``; ``chooser(j, k)`` names the micro-configuration."""
    parts = []
    b = batch
    while b > 0:
        j = int(arg[b, k])
        parts.append(chooser(j, k))
        b -= sizes[j]
    return canonical(parts)


def wr(candidates: Mapping[int, Sequence[MicroConfig]], batch: int, limit: int | None) -> Configuration:
    """Fastest configuration of ``batch`` whose every piece fits ``limit`` (None: unlimited).

    Only the sizes in ``candidates`` take part (the batch-size policy chose them, §III-D).
    Raises InfeasibleBudgetError when nothing fits (``minimum`` = the least workspace that would) or
    when the sizes cannot partition ``batch`` at all (``minimum`` = -1).
    """
    fronts = size_fronts(candidates, batch, limit)
    sizes = sorted(fronts)
    if not sizes:
        check_feasible(candidates, batch, limit)
    fastest = [fronts[s][-1] for s in sizes]  # last of a Pareto front = fastest within the limit
    tmu = np.array([[m.time_ms] for m in fastest], dtype=float)
    T, arg = solve_choices(sizes, tmu, batch)
    if not np.isfinite(T[batch, 0]):
        check_feasible(candidates, batch, limit)
    return reconstruct(arg, sizes, batch, 0, lambda j, _k: fastest[j])
