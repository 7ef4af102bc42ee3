"""WD: the network-wide integer program over the kernels' desirable sets (mu-cuDNN arXiv:1804.04806 §III-C, Eq. 1-4).

    minimise   Σ_k Σ_c T_k(c) x_kc                     (1)
    subject to Σ_k Σ_c M_k(c) x_kc <= M                 (2)
               Σ_c x_kc = 1 for every kernel k          (3)
               x_kc in {0, 1}                           (4)

A multiple-choice knapsack; each kernel gets its own workspace segment. Handed to HiGHS as written it
is slow (ResNet-50 b32: hundreds of 0-1 variables and up to hundreds of ms a budget, benchmarks/reports/optimizer.md):
repeated kernels make the search symmetric, and the LP bound lies within ~1e-4 of the optimum with
many near-optimal choices, so HiGHS spends its time in primal heuristics, sub-MIPs and restarts.
``wd`` therefore solves an equivalent model with the same optima:

1. Aggregation. Kernels with identical sets form a group g of m_g kernels; an integer n_gc in
   0..m_g counts how many of them take configuration c, with Σ_c n_gc = m_g and one workspace row
   Σ M_gc n_gc <= M. Any 0-1 choice maps to counts, and counts map back by giving the group's
   kernels the configurations in index order, so both models have the same optimal value.
2. Bound. Relaxing the workspace row with a multiplier λ >= 0 gives the lower bound
   LB = Σ_g m_g min_c (T_gc + λ M_gc) - λM (for a multiple-choice knapsack it equals the LP bound),
   largest at the λ ``_lagrange`` finds.
3. Incumbent. The hull choice at that λ fits the budget; ``_greedy`` spends the slack, and a
   dynamic program over the kernels left free (``_dp``) usually improves it to the optimum. Its
   time is UB.
4. Reduced-cost fixing. With r_gc = T_gc + λ M_gc - min_c' (T_gc' + λ M_gc') >= 0, every choice
   within the budget takes time >= LB + Σ n_gc r_gc, so one no slower than UB has
   n_gc <= (UB - LB) / r_gc: that bounds n_gc, and configurations bounded to 0 are dropped. Every
   optimum survives (a small margin keeps the borderline ones against rounding).
5. HiGHS (or CBC) solves what is left, in incremental form (``_problem``), and proves the incumbent
   optimal or finds the optimum. CBC is warm-started from the incumbent; HiGHS is not: HiGHS 1.16 read
   a MIP start's objective in its presolved space without the constant presolve moved out (a 36 ms
   start read 18) and returned that start as optimal where 21 ms was best (tests/test_optimize_wd.py).
   HiGHS's primal heuristics, symmetry detection and restarts are off: aggregation removed the
   symmetry, fixing did what restarts would, and each cost more than it saved (measured with the
   start; not measured since).

Unlike mu-cuDNN's GLPK call (no time limit or gap, raw-byte coefficients) the model has MiB-scaled workspace
coefficients, a time limit, a near-zero optimality gap (the result must be the optimum,
not a 1e-4 one), tight feasibility tolerances (so "1 byte over the budget" is infeasible despite the
scaling) and a clear error naming the least feasible budget. ``wd_problem`` returns the PuLP model
``wd`` solves, for export (``problem.writeLP(path)`` / ``writeMPS``).

The module is over 300 statements because steps 1-5 are one exact algorithm: the bound, the fixing margin,
the incumbent and the solver settings are correct only together, so they are read in one place.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pulp

from ..configuration import Configuration
from ..errors import EngineError, InfeasibleBudgetError
from ..units import MiB, format_size

SOLVERS = ("auto", "highs", "cbc")
_GAP = 1e-9  # relative and absolute (ms) optimality gap: effectively exact
_FEAS_TOL = 1e-9  # MiB, i.e. ~0.001 byte: a solution 1 byte over the budget is infeasible
_FIX_MARGIN = 1e-9  # relative: fixing keeps what is this close past its limit (float rounding of LB, UB)
_DP_WIDTH = 512  # states per stage of the incumbent's DP (_dp); 128 cost as much time overall but found
# the optimum less often (ResNet-50 b32, 44 budgets: 40 vs 43), which leaves more to HiGHS
SOLVER_LOG = {"on": False}  # the solver's banner and log on stdout: off, except under `python -m engine --verbose`
# module docstring, step 5 (options an older HiGHS lacks are ignored with a warning in its log)
_HIGHS_OPTIONS = dict(
    mip_heuristic_effort=0.0,
    mip_heuristic_run_rins=False,
    mip_heuristic_run_rens=False,
    mip_heuristic_run_root_reduced_cost=False,
    mip_heuristic_run_feasibility_jump=False,
    mip_detect_symmetry=False,
    mip_allow_restart=False,
)


@dataclass
class WDResult:
    choice: list[int]  # per kernel, index into its set
    configurations: list[Configuration]  # per kernel, the chosen configuration
    time_ms: float  # Σ of the chosen configurations' times
    workspace: int  # Σ of their workspaces, bytes
    n_variables: int  # 0-1 variables of the ILP as written (Eq. 1-4)
    solve_time_s: float  # the solver's own run: HiGHS run(); CBC: its process incl. file I/O
    build_time_s: float  # building the PuLP model and loading it into the solver
    solver: str  # "highs" or "cbc"
    status: str  # "optimal", or "time_limit" when stopped with a feasible solution
    n_solver_variables: int = 0  # integer variables of the model solved (module docstring, step 5)
    reduce_time_s: float = 0.0  # steps 1-4 of the module docstring, before the build


def _values(kernel_sets: Sequence[Sequence[Configuration]]) -> list[list[tuple[int, float]]]:
    """(workspace, time) per configuration per kernel, computed once (they are properties), and once
    per set object that several kernels share."""
    out, seen = [], {}
    for k, configs in enumerate(kernel_sets):
        if not configs:
            raise ValueError(f"kernel {k} has an empty configuration set; every kernel needs at least one")
        if id(configs) not in seen:  # kernel_sets holds every set for the whole call: no id is reused
            seen[id(configs)] = [(c.workspace, c.time_ms) for c in configs]
        out.append(seen[id(configs)])
    return out


def minimum_budget(kernel_sets: Sequence[Sequence[Configuration]]) -> int:
    """Least total workspace any choice needs: each kernel's smallest configuration."""
    return sum(min(w for w, _ in vals) for vals in _values(kernel_sets))


def _check(values: list[list[tuple[int, float]]], budget: int) -> None:
    minimum = sum(min(w for w, _ in vals) for vals in values)
    if budget < minimum:
        raise InfeasibleBudgetError(
            f"total workspace budget {budget} B ({format_size(budget)}) is below {minimum} B "
            f"({format_size(minimum)}), the sum of every kernel's smallest workspace",
            minimum=minimum,
        )


def _lagrange(
    W: np.ndarray, T: np.ndarray, valid: np.ndarray, m: np.ndarray, budget: int
) -> tuple[float, float, np.ndarray]:
    """The best multiplier λ, its bound LB, and the hull choice at λ (least workspace among ties).

    The bound is concave in λ with breakpoints at the slopes between two configurations of a group;
    the hull choice's workspace falls as λ grows, and the bound peaks at the first breakpoint where
    that workspace fits the budget.
    """

    def hull(lam: float) -> tuple[np.ndarray, np.ndarray]:
        v = np.where(valid, T + lam * W, np.inf)
        best = v.min(axis=1)
        ties = v <= best[:, None] + 1e-12 * np.abs(best[:, None])
        return best, np.where(ties, W, np.inf).argmin(axis=1)

    rows = np.arange(len(W))
    dW = W[:, None, :] - W[:, :, None]  # [g, a, b]: M_gb - M_ga
    dT = T[:, :, None] - T[:, None, :]  # [g, a, b]: T_ga - T_gb
    steep = valid[:, :, None] & valid[:, None, :] & (dW > 0) & (dT > 0)
    slopes = np.unique(np.append(dT[steep] / dW[steep], 0.0))
    lo, hi = 0, len(slopes) - 1
    while lo < hi:
        mid = (lo + hi) // 2
        if (W[rows, hull(slopes[mid])[1]] * m).sum() <= budget:
            hi = mid
        else:
            lo = mid + 1
    lam = float(slopes[lo])
    best, pick = hull(lam)
    if (W[rows, pick] * m).sum() > budget:  # only by rounding at a tie: take the least workspace
        least = np.where(valid, W, np.inf).min(axis=1)
        pick = np.where(valid & (W == least[:, None]), T, np.inf).argmin(axis=1)
    return lam, float((best * m).sum() - lam * budget), pick


def _greedy(W: np.ndarray, T: np.ndarray, counts: np.ndarray, valid: np.ndarray, slack: float) -> np.ndarray:
    """Fill the slack: apply the best time-saving move that fits until none does; a move switches one
    kernel of a group to another configuration of its set."""
    counts = counts.copy()
    configs = np.arange(W.shape[1])
    while True:
        src_g, src_c = np.nonzero(counts > 0)
        s, c2 = np.nonzero(valid[src_g] & (configs[None, :] != src_c[:, None]))
        g, c1 = src_g[s], src_c[s]
        dW, dT = W[g, c2] - W[g, c1], T[g, c2] - T[g, c1]
        fits = (dW <= slack) & (dT < 0)
        if not fits.any():
            return counts
        j = int(np.argmin(np.where(fits, dT, np.inf)))
        counts[g[j], c1[j]] -= 1
        counts[g[j], c2[j]] += 1
        slack -= dW[j]


def _hull(ws: np.ndarray, ts: np.ndarray) -> tuple[float, float, np.ndarray, np.ndarray]:
    """Lower convex hull of a group's (workspace, time) points: its least-workspace point, and the
    workspace and time steps of its edges (dW > 0, dT < 0) in order of increasing slope."""
    points: list[tuple[float, float]] = []
    for w, t in sorted(zip(ws.tolist(), ts.tolist())):
        if points and t >= points[-1][1]:
            continue  # no faster than a point with no more workspace
        while len(points) >= 2 and (
            (points[-1][1] - points[-2][1]) * (w - points[-2][0])
            >= (t - points[-2][1]) * (points[-1][0] - points[-2][0])
        ):
            points.pop()  # on or above the segment from points[-2] to (w, t)
        points.append((w, t))
    p = np.array(points)
    return p[0, 0], p[0, 1], np.diff(p[:, 0]), np.diff(p[:, 1])


def _dp(
    W: np.ndarray, T: np.ndarray, m: np.ndarray, allowed: np.ndarray, budget: int, upper: float
) -> np.ndarray | None:
    """A choice by dynamic programming over the kernels with more than one ``allowed`` configuration,
    no slower than ``upper``; None if there are no such kernels or it finds none.

    Kernels are added one at a time; a state is a partial choice's (workspace, time). A state goes
    when another has no more workspace and less time, or when its time plus the LP bound of the
    kernels still to come, given the budget left, exceeds ``upper``. The LP bound of a multiple-choice
    knapsack is each kernel's least-workspace hull point plus the hull edges taken greedily by slope
    (Sinha & Zoltners, Oper. Res. 1979). Exact while no stage holds more than ``_DP_WIDTH`` states;
    beyond that the states of least bound stay, a heuristic (the solver still proves the result).
    """
    free = np.nonzero(allowed.sum(axis=1) > 1)[0]
    if not len(free):
        return None
    counts = np.where(allowed.sum(axis=1, keepdims=True) == 1, allowed * m[:, None], 0.0)
    options = [np.nonzero(allowed[g])[0] for g in free]
    hulls = [_hull(W[g, cs], T[g, cs]) for g, cs in zip(free, options)]
    first_w, first_t = np.array([h[0] for h in hulls]), np.array([h[1] for h in hulls])
    edge_group = np.concatenate([np.full(len(h[2]), k) for k, h in enumerate(hulls)])
    edge_w, edge_t = np.concatenate([h[2] for h in hulls]), np.concatenate([h[3] for h in hulls])
    order = np.argsort(edge_t / edge_w, kind="stable")
    edge_group, edge_w, edge_t = edge_group[order], edge_w[order], edge_t[order]
    step_group = np.repeat(np.arange(len(free)), m[free].astype(int))  # index into free, one per kernel
    left = m[free] - np.cumsum(np.eye(len(free))[step_group], axis=0)  # [j]: kernels still to come after step j
    rest_w, rest_t = left @ first_w, left @ first_t  # their LP bound: rest_t + the edges bought with the
    zero = np.zeros((len(left), 1))  # budget beyond rest_w, piecewise linear
    edges_w = np.hstack((zero, np.cumsum(left[:, edge_group] * edge_w, axis=1)))
    edges_t = np.hstack((zero, np.cumsum(left[:, edge_group] * edge_t, axis=1)))
    ws, ts = np.array([(W * counts).sum()]), np.array([(T * counts).sum()])
    stages = []
    for j, k in enumerate(step_group):
        cs = options[k]
        w = (ws[:, None] + W[free[k], cs]).ravel()
        t = (ts[:, None] + T[free[k], cs]).ravel()
        room = budget - rest_w[j] - w
        bound = t + rest_t[j] + np.interp(room, edges_w[j], edges_t[j])
        ok = np.flatnonzero((room >= 0) & (bound <= upper))
        ok = ok[np.argsort(w[ok], kind="stable")]
        front = np.ones(len(ok), dtype=bool)  # faster than all with less workspace; margin: rounding of sums
        front[1:] = t[ok][1:] < np.minimum.accumulate(t[ok])[:-1] * (1 - 1e-12)
        keep = ok[front]
        if len(keep) > _DP_WIDTH:
            keep = keep[np.argsort(bound[keep], kind="stable")[:_DP_WIDTH]]
        if not len(keep):
            return None
        stages.append((cs, keep))
        ws, ts = w[keep], t[keep]
    i = int(np.argmin(ts))
    for g, (cs, keep) in zip(free[step_group[::-1]], stages[::-1]):
        i, c = divmod(int(keep[i]), len(cs))
        counts[g, cs[c]] += 1
    return counts


@dataclass
class _Reduced:
    """The model ``wd`` solves: kernels grouped by identical sets, and the configurations kept."""

    kernels: list[list[int]]  # per group, its kernels in ascending order
    sets: list[list[tuple[int, float]]]  # per group, (workspace, time) per configuration
    chains: list[list[tuple[int, int]]]  # per group, (configuration, bound on its count) kept, by workspace
    incumbent: np.ndarray  # counts of the incumbent, (groups, configurations)


def _reduce(values: list[list[tuple[int, float]]], budget: int, warm_start: Sequence[int] | None) -> _Reduced:
    """Steps 1-4 of the module docstring; ``warm_start`` becomes the incumbent when it is faster."""
    index: dict[tuple, list[int]] = {}
    for k, vals in enumerate(values):
        index.setdefault(tuple(vals), []).append(k)
    kernels = list(index.values())
    sets = [values[ks[0]] for ks in kernels]
    n_groups, width = len(sets), max(len(s) for s in sets)
    valid = np.zeros((n_groups, width), dtype=bool)
    W = np.zeros((n_groups, width))  # bytes as float64: exact below 2**53
    T = np.zeros((n_groups, width))
    for g, s in enumerate(sets):
        valid[g, : len(s)] = True
        W[g, : len(s)] = [w for w, _ in s]
        T[g, : len(s)] = [t for _, t in s]
    m = np.array([len(ks) for ks in kernels], dtype=float)

    lam, lower, pick = _lagrange(W, T, valid, m, budget)
    v = np.where(valid, T + lam * W, np.inf)
    reduced_cost = v - v.min(axis=1, keepdims=True)

    def bounds(counts: np.ndarray) -> tuple[np.ndarray, float]:
        """Upper bound on each n_gc for a choice no slower than ``counts``, and the reduced-cost gap."""
        upper = float((T * counts).sum())
        gap = upper - lower + _FIX_MARGIN * max(1.0, abs(upper))
        with np.errstate(divide="ignore"):
            bound = np.where(reduced_cost > 0, np.floor(gap / reduced_cost), np.inf)
        return np.where(valid, np.maximum(np.minimum(bound, m[:, None]), counts), 0), gap

    counts = np.zeros((n_groups, width))
    counts[np.arange(n_groups), pick] = m
    counts = _greedy(W, T, counts, valid, budget - float((W * counts).sum()))
    if warm_start is not None:
        group = np.empty(len(values), dtype=int)
        for g, ks in enumerate(kernels):
            group[ks] = g
        warm = np.zeros_like(counts)
        np.add.at(warm, (group, np.asarray(warm_start, dtype=int)), 1)
        if (W * warm).sum() <= budget and (T * warm).sum() < (T * counts).sum():
            counts = warm
    bound, gap = bounds(counts)
    better = _dp(W, T, m, bound > 0, budget, gap + lower)
    if better is not None and (T * better).sum() < (T * counts).sum():
        counts = better
    bound, _ = bounds(counts)
    by_workspace = np.lexsort((-T, W), axis=-1).tolist()  # per group; among equal workspaces the slower first
    bound = bound.tolist()
    chains = [[(c, int(bound[g][c])) for c in row if bound[g][c] > 0] for g, row in enumerate(by_workspace)]
    return _Reduced(kernels, sets, chains, counts)


def _problem(red: _Reduced, budget: int) -> pulp.LpProblem:
    """Step 5's model, in incremental form: y_gj counts the kernels of group g at position j or later
    of its chain (the configurations kept, by workspace), so n_gj = y_gj - y_g,j+1 with y_g1 = m_g.

    A unimodular change of variables: same LP bound, same integer points. Branching on y_gj splits a
    group's kernels by workspace rather than singling out one configuration; HiGHS needs fewer nodes
    and LP iterations on this form than on the counts (bundled ResNet-50, AlexNet, GoogLeNet and
    DenseNet-40 profiles, 44 budgets each, same incumbent and options: 14-31 % fewer nodes, 8-36 %
    fewer LP iterations). Each group's first configuration moves into the objective constant and
    the budget; the objective constant is ``problem.objective.constant`` (LP files may omit it).
    """
    prob = pulp.LpProblem("wd", pulp.LpMinimize)
    # PuLP >= 3.3 attaches variables to the model; older PuLP (pyproject allows 2.8) has no add_variable
    new_var = getattr(prob, "add_variable", None) or (lambda name, lo, up, cat: pulp.LpVariable(name, lo, up, cat))
    objective, workspace, base_ms, rest = [], [], 0.0, budget
    for g, chain in enumerate(red.chains):
        m = len(red.kernels[g])
        first_w, first_t = red.sets[g][chain[0][0]]
        base_ms += m * first_t
        rest -= m * first_w
        prev = None
        for j in range(1, len(chain)):
            c, bound = chain[j]
            lower = m - chain[0][1] if j == 1 else 0  # n of the first configuration <= its bound
            y = new_var(f"y_{g}_{c}", lower, bound if j == len(chain) - 1 else m, cat=pulp.LpInteger)
            y.setInitialValue(int(sum(red.incumbent[g, k] for k, _ in chain[j:])))
            (w, t), (pw, pt) = red.sets[g][c], red.sets[g][chain[j - 1][0]]
            objective.append((y, t - pt))
            workspace.append((y, (w - pw) / MiB))
            if prev is not None:
                order = pulp.LpAffineExpression([(prev, 1), (y, -1)])  # the count of configuration j-1
                prob += pulp.LpConstraint(order, pulp.LpConstraintGE, f"order_{g}_{c}", 0)
                if chain[j - 1][1] < m:
                    prob += pulp.LpConstraint(order, pulp.LpConstraintLE, f"bound_{g}_{c}", chain[j - 1][1])
            prev = y
    prob.setObjective(pulp.LpAffineExpression(objective, constant=base_ms))
    prob += pulp.LpConstraint(pulp.LpAffineExpression(workspace), pulp.LpConstraintLE, "workspace", rest / MiB)
    return prob


def _counts(red: _Reduced, prob: pulp.LpProblem) -> list[list[int]] | None:
    """Per group, the count of each configuration in the solver's solution; None if it has none."""
    y = {}
    for v in prob.variables():  # names are y_<group>_<configuration>, and PuLP may add a __dummy
        if v.name.startswith("y_"):
            if v.varValue is None:
                return None
            _, g, c = v.name.split("_")
            y[int(g), int(c)] = round(v.varValue)
    counts = []
    for g, chain in enumerate(red.chains):
        after = [len(red.kernels[g])] + [y[g, c] for c, _ in chain[1:]] + [0]
        n = [0] * len(red.sets[g])
        for j, (c, _) in enumerate(chain):
            n[c] = after[j] - after[j + 1]
        if min(n) < 0:
            return None
        counts.append(n)
    return counts


def wd_problem(kernel_sets: Sequence[Sequence[Configuration]], budget: int) -> pulp.LpProblem:
    """The PuLP model ``wd`` solves: Eq. 1-4 aggregated, reduced and in increments (module docstring).

    Group g holds the kernels sharing the g-th distinct set, in kernel order. Variable ``y_g_c``
    counts the kernels of group g that take configuration c or one after it in the group's chain
    (the configurations reduced-cost fixing keeps, by workspace); rows ``order_g_c`` keep the
    counts non-negative, ``bound_g_c`` carry fixing's bounds, ``workspace`` is Eq. 2 in MiB less
    every group's first configuration. Each variable's initial value is the incumbent. For
    debugging: ``wd_problem(sets, budget).writeLP("wd.lp")`` (or ``writeMPS``).
    """
    values = _values(kernel_sets)
    _check(values, budget)
    if not values:
        return pulp.LpProblem("wd", pulp.LpMinimize)
    return _problem(_reduce(values, budget, None), budget)


class _TimedHiGHS(pulp.HiGHS):
    """PuLP's HiGHS interface with a bulk model load (PuLP's loads column by column, ~40 µs per
    integrality call), and timing load and solve apart."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.load_s = self.solve_s = 0.0

    def createAndConfigureSolver(self, lp):
        """PuLP's own, except that the model is made silent before highspy's constructor logs HiGHS's
        banner (it does so while registering callbacks, before PuLP can set ``output_flag``)."""
        import highspy

        log = bool(self.msg)

        class Model(highspy.Highs):
            def enableCallbacks(self):
                self.setOptionValue("output_flag", log)
                super().enableCallbacks()

        lp.solverModel = Model()
        lp.solverModel.setOptionValue("output_flag", log)
        options = {
            "mip_rel_gap": self.gapRel,
            "mip_abs_gap": self.gapAbs,
            "threads": self.threads,
            "time_limit": None if self.timeLimit is None else float(self.timeLimit),
            **self.optionsDict,
        }
        for key, value in options.items():
            if value is not None:
                lp.solverModel.setOptionValue(key, value)

    def buildSolverModel(self, lp):
        import highspy  # present whenever this backend is chosen

        start = time.perf_counter()
        inf = highspy.kHighsInf
        variables = lp.variables()
        for i, v in enumerate(variables):
            v.index = i
        n = len(variables)
        cost = np.array([lp.objective.get(v, 0.0) for v in variables], dtype=float)
        lower = np.array([-inf if v.lowBound is None else v.lowBound for v in variables], dtype=float)
        upper = np.array([inf if v.upBound is None else v.upBound for v in variables], dtype=float)
        h = lp.solverModel
        h.addCols(n, cost, lower, upper, 0, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32), np.zeros(0))
        h.changeObjectiveOffset(float(lp.objective.constant))
        integer = np.array([i for i, v in enumerate(variables) if v.cat == pulp.LpInteger], dtype=np.int32)
        if self.mip and len(integer):
            h.changeColsIntegrality(
                len(integer), integer, np.full(len(integer), highspy.HighsVarType.kInteger.value, dtype=np.uint8)
            )
        starts, index, coef, row_lo, row_up = [], [], [], [], []
        for i, constraint in enumerate(lp._constraints.values()):
            constraint.index = i
            starts.append(len(index))
            for var, a in constraint.items():
                if a != 0:
                    index.append(var.index)
                    coef.append(a)
            lb, ub = constraint.getLb(), constraint.getUb()
            row_lo.append(-inf if lb is None else lb)
            row_up.append(inf if ub is None else ub)
        h.addRows(
            len(starts),
            np.array(row_lo, dtype=float),
            np.array(row_up, dtype=float),
            len(index),
            np.array(starts, dtype=np.int32),
            np.array(index, dtype=np.int32),
            np.array(coef, dtype=float),
        )
        self.load_s = time.perf_counter() - start

    def callSolver(self, lp):
        start = time.perf_counter()
        super().callSolver(lp)
        self.solve_s = time.perf_counter() - start


def _cbc(**kwargs) -> pulp.LpSolver:
    """CBC: an installed ``cbc`` (COIN_CMD) if there is one, else the binary bundled with PuLP (deprecated
    in PuLP 3.3 in favour of ``pip install pulp[cbc]``, still the only CBC most installs have)."""
    coin = pulp.COIN_CMD(**kwargs)
    if coin.available():
        return coin
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return pulp.PULP_CBC_CMD(**kwargs)


def _resolve_solver(solver: str) -> str:
    if solver not in SOLVERS:
        raise EngineError(f"unknown ILP solver {solver!r}; expected one of {', '.join(SOLVERS)}")
    highs = pulp.HiGHS().available()
    if solver == "auto":
        return "highs" if highs else "cbc"
    if solver == "highs" and not highs:
        raise EngineError("ILP solver 'highs' is not available (pip install highspy), use solver='cbc'")
    if solver == "cbc" and not _cbc().available():
        raise EngineError("ILP solver 'cbc' is not available in this PuLP installation")
    return solver


def wd(
    kernel_sets: Sequence[Sequence[Configuration]],
    budget: int,
    *,
    solver: str = "auto",
    time_limit_s: float = 10.0,
    warm_start: Sequence[int] | None = None,
) -> WDResult:
    """Solve WD: one configuration per kernel, total workspace <= ``budget`` bytes, least total time.

    ``kernel_sets``: one (desirable) set per kernel, repeated kernels included, since each kernel gets
    its own segment. ``warm_start``: per kernel an index into its set (e.g. from WR or the front); it
    replaces the greedy incumbent (module docstring, step 3) when it fits the budget and is faster.
    Raises InfeasibleBudgetError naming the least feasible budget when ``budget`` is below it.
    """
    name = _resolve_solver(solver)
    if warm_start is not None:
        if len(warm_start) != len(kernel_sets):
            raise ValueError(f"warm_start has {len(warm_start)} entries for {len(kernel_sets)} kernels")
        for k, (i, configs) in enumerate(zip(warm_start, kernel_sets)):
            if not 0 <= i < len(configs):
                raise ValueError(
                    f"warm_start[{k}] = {i} is not an index into kernel {k}'s {len(configs)} configurations"
                )
    start = time.perf_counter()
    values = _values(kernel_sets)
    _check(values, budget)
    n_vars = sum(len(c) for c in kernel_sets)
    if not kernel_sets:
        return WDResult([], [], 0.0, 0, 0, 0.0, 0.0, name, "optimal", 0, time.perf_counter() - start)
    red = _reduce(values, budget, warm_start)
    reduce_s = time.perf_counter() - start
    start = time.perf_counter()
    prob = _problem(red, budget)
    build_s = time.perf_counter() - start
    if name == "highs":
        import highspy

        backend = _TimedHiGHS(
            msg=SOLVER_LOG["on"],
            timeLimit=time_limit_s,
            gapRel=_GAP,
            gapAbs=_GAP,
            mip_feasibility_tolerance=_FEAS_TOL,
            primal_feasibility_tolerance=_FEAS_TOL,
            **_HIGHS_OPTIONS,
        )
        prob.solve(backend)
        build_s += backend.load_s
        solve_s = backend.solve_s
        model_status = prob.solverModel.getModelStatus()
        status = (
            "optimal"
            if model_status == highspy.HighsModelStatus.kOptimal
            else "time_limit"
            if model_status == highspy.HighsModelStatus.kTimeLimit
            else prob.solverModel.modelStatusToString(model_status)
        )
    else:
        backend = _cbc(msg=SOLVER_LOG["on"], timeLimit=time_limit_s, gapRel=_GAP, gapAbs=_GAP, warmStart=True)
        start = time.perf_counter()
        prob.solve(backend)
        solve_s = time.perf_counter() - start
        status = (
            "optimal"
            if prob.sol_status == pulp.LpSolutionOptimal
            else "time_limit"
            if prob.sol_status == pulp.LpSolutionIntegerFeasible
            else pulp.LpStatus[prob.status].lower()
        )
    counts = _counts(red, prob)
    if counts is None:
        raise EngineError(
            f"ILP solver {name} returned no valid solution (status {status!r}) for a budget of {format_size(budget)}"
        )
    choice = [0] * len(kernel_sets)
    for g, kernels in enumerate(red.kernels):
        for k, c in zip(kernels, [c for c, n in enumerate(counts[g]) for _ in range(n)]):
            choice[k] = c
    chosen = [configs[i] for configs, i in zip(kernel_sets, choice)]
    total_ws = sum(c.workspace for c in chosen)
    if total_ws > budget:
        raise EngineError(f"ILP solver {name} returned a choice of {total_ws} B, over the budget of {budget} B")
    return WDResult(
        choice,
        chosen,
        sum(c.time_ms for c in chosen),
        total_ws,
        n_vars,
        solve_s,
        build_s,
        name,
        status,
        sum(len(c) - 1 for c in red.chains),
        reduce_s,
    )
