"""Desirable sets: Pareto fronts of configurations in (workspace, time) (mu-cuDNN arXiv:1804.04806 §III-C1).

D(C) = {c in C | for all c' in C, c' != c: T(c) < T(c') or M(c) < M(c')}: a configuration is dropped
when another is at least as fast and needs no more workspace. Read literally (c' = c included) the
definition is empty, so exact ties keep one representative (as mu-cuDNN's code does). The paper proves
the WD optimum never needs a dropped configuration.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence

import numpy as np

from ..configuration import Configuration, MicroConfig
from .wr import canonical, check_feasible, reconstruct, size_fronts, solve_choices, solve_table

_CHUNK = 4096  # limits per pass of the WR table


def _tie_key(c: Configuration) -> tuple:
    return (c.workspace, c.time_ms, len(c.micro), tuple((-m.batch, m.plan, m.time_ms, m.workspace) for m in c.micro))


def desirable(configs: Iterable[Configuration]) -> list[Configuration]:
    """D(C), sorted by workspace ascending with time strictly decreasing.

    Of configurations with equal workspace only the fastest can stay; of exact (workspace, time) ties
    the one with fewer micro-configurations, then the first in canonical order. Returned
    configurations are in canonical micro order.
    """
    out: list[Configuration] = []
    for c in sorted((canonical(c.micro) for c in configs), key=_tie_key):
        if not out or c.time_ms < out[-1].time_ms:
            out.append(c)
    return out


def desirable_set(
    candidates: Mapping[int, Sequence[MicroConfig]], batch: int, limit: int | None = None
) -> list[Configuration]:
    """C(B) = D(∪ over b', cμ in Cμ(b'), c in C(B - b') of {cμ} + c): the full desirable set of a kernel.

    Computed as WR for every limit at once: a configuration fits W iff each piece does, so the fastest
    time under W, T_B(W), is a non-increasing step function that can only step at a workspace some
    micro-configuration has. Running the WR table over all those values and keeping the steps gives
    exactly D of every configuration (each step's configuration needs exactly that workspace). So the
    fastest element with workspace <= W is ``wr(candidates, batch, W)``'s time, for every W.
    Raises InfeasibleBudgetError as ``wr`` does when no configuration fits ``limit``.
    """
    fronts = size_fronts(candidates, batch, limit)
    sizes = sorted(fronts)
    if not sizes:
        check_feasible(candidates, batch, limit)
    limits = np.unique(np.fromiter((m.workspace for s in sizes for m in fronts[s]), dtype=np.int64))
    ws = [np.array([m.workspace for m in fronts[s]], dtype=np.int64) for s in sizes]
    t = [np.array([m.time_ms for m in fronts[s]]) for s in sizes]

    def table(lims: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Tμ(size) under each limit, and which plan of the size's front that is (-1: none fits)."""
        pick = np.stack([np.searchsorted(w, lims, side="right") - 1 for w in ws])
        tmu = np.stack([np.where(p >= 0, tj[np.maximum(p, 0)], np.inf) for p, tj in zip(pick, t)])
        return tmu, pick

    # limits in chunks: the table is (batch+1) x limits, which for B=1024 under `all` would not be small
    tb = np.concatenate(
        [solve_table(sizes, table(limits[k : k + _CHUNK])[0], batch)[batch] for k in range(0, len(limits), _CHUNK)]
    )
    if not np.isfinite(tb).any():
        check_feasible(candidates, batch, limit)
    previous = np.concatenate(([np.inf], tb[:-1]))
    steps = np.flatnonzero(tb < previous)
    # second pass, only over the limits where T_B steps, to recover each step's pieces
    tmu, pick = table(limits[steps])
    _, arg = solve_choices(sizes, tmu, batch)
    configs = [reconstruct(arg, sizes, batch, i, lambda j, i: fronts[sizes[j]][pick[j, i]]) for i in range(len(steps))]
    # the DP adds times in peel order, Configuration.time_ms in canonical order; re-prune so the
    # returned list is strictly decreasing in the times callers will read
    return desirable(configs)
