"""The network Pareto front under WD: total time against total workspace (mu-cuDNN arXiv:1804.04806 §III-C).

WD gives every kernel its own workspace segment, so a network choice costs the *sum* of the kernels'
workspaces and times (Eq. 1-2). The exact front of such sums is the Pareto set of the Minkowski sum of
the kernels' desirable sets; merging two fronts = all pairwise sums, then dominance pruning (a
min-plus merge). Every point keeps back-pointers to the two points it came from, so ``choice(i)``
rebuilds the per-kernel selection. At any budget the fastest point within it is the WD ILP optimum,
because the front holds the optimum of every budget (tests/test_optimize_front.py checks it against
the ILP and exhaustive search).

Merge order: kernels with identical sets (repeated ResNet blocks) are merged by halving, so n copies
cost O(log n) merges and shared sub-results are computed once; small group fronts are then merged
smallest first, and the remaining ones folded into the largest (measured fastest on ResNet-50, see
benchmarks/reports/optimizer.md).
"""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pandas as pd

from ..configuration import Configuration
from ..errors import EngineError, InfeasibleBudgetError
from ..units import format_size


@dataclass(eq=False)
class _Node:
    """A front of some kernels; a leaf (left is None) is one kernel of group ``group``."""

    workspace: np.ndarray  # int64, ascending
    time_ms: np.ndarray  # float, strictly decreasing
    left: "_Node | None" = None
    right: "_Node | None" = None
    li: np.ndarray | None = None  # point i = left[li[i]] + right[ri[i]]; for a leaf, li = index into the set
    ri: np.ndarray | None = None
    group: int = -1


# Relative margin by which a point must beat every point of smaller workspace. Sums of the same times
# in another order differ in the last bits; without a margin such rounding would add spurious
# "faster by 1e-16" points whose presence depends on the merge order. 1e-12 is far below any
# measurable time difference and far above the rounding of a few hundred additions.
RTOL = 1e-12


def _pareto(ws: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Indices of the points kept: by workspace ascending, each faster than all before it (by RTOL).

    A stable sort on workspace alone exploits the sorted runs the merges produce. Within one
    workspace value the last point kept is the fastest; exact ties keep the earliest input point.
    """
    order = np.argsort(ws, kind="stable")
    t_sorted = t[order]
    keep = np.empty(len(order), dtype=bool)
    keep[:1] = True
    keep[1:] = t_sorted[1:] < np.minimum.accumulate(t_sorted)[:-1] * (1.0 - RTOL)
    kept = order[keep]
    w_kept = ws[kept]
    last_of_value = np.append(w_kept[1:] != w_kept[:-1], True)
    return kept[last_of_value]


_DIRECT = 4096  # merges with at most this many pairwise sums are enumerated outright
_LEAF_BLOCK = 16  # finest block: 16 consecutive points of the larger front with one point of the other
_SPLIT = 4  # each refinement splits a block 4 ways along each front
_HUFFMAN = 10_000  # network_front merges smallest-first while the two smallest have at most this many pairs
# sums one merge may enumerate: about 40 bytes each while it runs (ResNet-1001 b32's largest merge: 40 million, 3.4 GB
# resident; ResNet-50's: 0.14 million); past it the front is refused before memory runs out
MAX_PAIRS = 50_000_000


def _split(lo: np.ndarray, hi: np.ndarray, size: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cut each index range [lo, hi) into pieces of ``size``: (parent range, piece start, piece end)."""
    counts = -(-(hi - lo) // size)
    parent = np.repeat(np.arange(len(lo)), counts)
    first = np.repeat(np.cumsum(counts) - counts, counts)
    start = lo[parent] + (np.arange(len(parent)) - first) * size
    return parent, start, np.minimum(start + size, hi[parent])


def _merge(a: _Node, b: _Node) -> _Node:
    """Pareto set of all sums a_i + b_j (both coordinates add).

    Large merges prune rectangles of index pairs [i0, i1) x [j0, j1) before enumerating any sum.
    The best a rectangle could hold is workspace a[i0] + b[j0] with time a[i1-1] + b[j1-1]; when a
    known achievable sum is strictly better in both, the rectangle holds no Pareto point. Known
    sums: the Pareto set of the surviving rectangles' corners (i1-1, j0), refined level by level as
    the rectangles shrink 4x per front down to 16 x 1. Only what survives is enumerated, so the cost
    follows the size of the result rather than n*m (measured in benchmarks/reports/optimizer.md).
    """
    if len(a.workspace) < len(b.workspace):
        a, b = b, a
    aw, at, bw, bt = a.workspace, a.time_ms, b.workspace, b.time_ms
    n, m = len(aw), len(bw)
    if n * m <= _DIRECT:
        ib, ia = np.divmod(np.arange(n * m), n)
    else:
        sizes = [_LEAF_BLOCK]
        while sizes[-1] * _LEAF_BLOCK < n:
            sizes.append(sizes[-1] * _SPLIT)
        i0, i1, j0, j1 = np.array([0]), np.array([n]), np.array([0]), np.array([m])
        gw, gt = np.zeros(0, dtype=np.int64), np.zeros(0)
        for size in reversed(sizes):
            parent, i0, i1 = _split(i0, i1, size)
            parent, j0, j1 = _split(j0[parent], j1[parent], max(1, size // _LEAF_BLOCK))
            i0, i1 = i0[parent], i1[parent]
            gw = np.concatenate((gw, aw[i1 - 1] + bw[j0]))  # one achievable corner per rectangle
            gt = np.concatenate((gt, at[i1 - 1] + bt[j0]))
            g = _pareto(gw, gt)
            gw, gt = gw[g], gt[g]
            pos = np.searchsorted(gw, aw[i0] + bw[j0], side="right") - 1
            alive = (pos < 0) | ~(gt[np.maximum(pos, 0)] < at[i1 - 1] + bt[j1 - 1])
            i0, i1, j0, j1 = i0[alive], i1[alive], j0[alive], j1[alive]
        pairs = int((i1 - i0).sum())
        if pairs > MAX_PAIRS:
            raise EngineError(
                f"the exact network front is too large to compute here: one merge would enumerate {pairs:,} sums "
                f"(limit {MAX_PAIRS:,}); plan at a budget with `plan --mode wd` (the ILP needs no front)"
            )
        # enumerate row by row (j-major), so each row is a sorted run for the stable sort in _pareto
        order = np.lexsort((i0, j0))
        parent, ia, _ = _split(i0[order], i1[order], 1)
        ib = j0[order][parent]
    ws = aw[ia] + bw[ib]
    t = at[ia] + bt[ib]
    keep = _pareto(ws, t)
    return _Node(ws[keep], t[keep], a, b, ia[keep], ib[keep])


def _leaf(configs: Sequence[Configuration], group: int) -> _Node:
    ws = np.array([c.workspace for c in configs], dtype=np.int64)
    t = np.array([c.time_ms for c in configs], dtype=float)
    keep = _pareto(ws, t)  # sets are normally desirable already; this makes any set safe to merge
    return _Node(ws[keep], t[keep], li=keep, group=group)


def _copies(leaf: _Node, n: int, memo: dict[int, _Node]) -> _Node:
    """Front of n kernels sharing one set: halve, and reuse equal halves."""
    if n == 1:
        return leaf
    if n not in memo:
        memo[n] = _merge(_copies(leaf, (n + 1) // 2, memo), _copies(leaf, n // 2, memo))
    return memo[n]


class NetworkFront:
    """Exact WD network front: ``workspace`` (int64, ascending) against ``time_ms`` (strictly decreasing)."""

    def __init__(self, root: _Node, groups: list[list[int]]):
        self._root = root
        self._groups = groups  # group -> kernel indices sharing that set, in kernel order
        self.workspace: np.ndarray = root.workspace
        self.time_ms: np.ndarray = root.time_ms

    def __len__(self) -> int:
        return len(self.workspace)

    def at_budget(self, budget: int) -> int:
        """Index of the fastest point whose total workspace fits ``budget``."""
        i = int(np.searchsorted(self.workspace, budget, side="right")) - 1
        if i < 0:
            minimum = int(self.workspace[0])
            raise InfeasibleBudgetError(
                f"total workspace budget {budget} B ({format_size(budget)}) is below {minimum} B "
                f"({format_size(minimum)}), the least any choice of configurations needs",
                minimum=minimum,
            )
        return i

    def choice(self, i: int) -> list[int]:
        """Per kernel, the index into its set of the configuration that point i uses."""
        if not 0 <= i < len(self):
            raise IndexError(f"front point {i} out of range 0..{len(self) - 1}")
        if not self._groups:  # a network without kernels
            return []
        picks: dict[int, list[int]] = {g: [] for g in range(len(self._groups))}
        stack = [(self._root, i)]
        while stack:  # right pushed first so leaves come out left to right
            node, j = stack.pop()
            if node.left is None:
                picks[node.group].append(int(node.li[j]))
            else:
                stack.append((node.right, int(node.ri[j])))
                stack.append((node.left, int(node.li[j])))
        out = [0] * sum(len(g) for g in self._groups)
        for g, kernels in enumerate(self._groups):
            for k, c in zip(kernels, picks[g]):
                out[k] = c
        return out

    def to_frame(self) -> pd.DataFrame:
        return pd.DataFrame({"workspace": self.workspace, "time_ms": self.time_ms})


def network_front(kernel_sets: Sequence[Sequence[Configuration]]) -> NetworkFront:
    """The exact front of a network whose kernels have these (desirable) sets, one set per kernel."""
    groups: dict[tuple, list[int]] = {}
    for k, configs in enumerate(kernel_sets):
        if not configs:
            raise ValueError(f"kernel {k} has an empty configuration set; every kernel needs at least one")
        key = tuple((c.workspace, c.time_ms) for c in configs)
        groups.setdefault(key, []).append(k)
    members = list(groups.values())
    if not members:
        return NetworkFront(_Node(np.zeros(1, dtype=np.int64), np.zeros(1)), [])
    heap = []
    for g, kernels in enumerate(members):
        node = _copies(_leaf(kernel_sets[kernels[0]], g), len(kernels), {})
        heap.append((len(node.workspace), g, node))
    heapq.heapify(heap)
    # small fronts: merge the two smallest (cheap, few pairs); then fold the rest into the largest,
    # which keeps one side of every large merge small (cheap block pruning, see _merge)
    tick = len(heap)  # unique tie-breaker, so nodes are never compared
    while len(heap) > 1 and heap[0][0] * heap[1][0] <= _HUFFMAN:
        _, _, a = heapq.heappop(heap)
        _, _, b = heapq.heappop(heap)
        node = _merge(a, b)
        heapq.heappush(heap, (len(node.workspace), tick, node))
        tick += 1
    rest = sorted(heap, reverse=True)
    acc = rest[0][2]
    for _, _, node in rest[1:]:
        acc = _merge(acc, node)
    return NetworkFront(acc, members)
