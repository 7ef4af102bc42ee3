"""WD: the network-wide 0-1 ILP over the kernels' desirable sets (mu-cudnn-arxiv.txt §III-C, Eq. 1-4).

    minimise   Σ_k Σ_c T_k(c) x_kc                     (1)
    subject to Σ_k Σ_c M_k(c) x_kc <= M                 (2)
               Σ_c x_kc = 1 for every kernel k          (3)
               x_kc in {0, 1}                           (4)

A multiple-choice knapsack; each kernel gets its own workspace segment. Unlike mu-cuDNN's GLPK call
(ucudnn-reference.md §11, bug 7) the model has MiB-scaled workspace coefficients, a time limit, an
optional warm start, a near-zero optimality gap (the result must be the optimum, not a 1e-4 one),
tight feasibility tolerances (so "1 byte over the budget" is infeasible despite the scaling) and a
clear error naming the least feasible budget. ``wd_problem`` returns the PuLP model for export
(``problem.writeLP(path)`` / ``writeMPS``).
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pulp

from ..errors import EngineError, InfeasibleBudgetError
from ..units import MiB, format_size
from .types import Configuration

SOLVERS = ("auto", "highs", "cbc")
_GAP = 1e-9        # relative and absolute (ms) optimality gap: effectively exact
_FEAS_TOL = 1e-9   # MiB, i.e. ~0.001 byte: a solution 1 byte over the budget is infeasible


@dataclass
class WDResult:
    choice: list[int]                    # per kernel, index into its set
    configurations: list[Configuration]  # per kernel, the chosen configuration
    time_ms: float                       # Σ of the chosen configurations' times
    workspace: int                       # Σ of their workspaces, bytes
    n_variables: int                     # 0-1 variables of the ILP
    solve_time_s: float                  # the solver's own run: HiGHS run(); CBC: its process incl. file I/O
    build_time_s: float                  # building the PuLP model and loading it into the solver
    solver: str                          # "highs" or "cbc"
    status: str                          # "optimal", or "time_limit" when stopped with a feasible solution


def _values(kernel_sets: Sequence[Sequence[Configuration]]) -> list[list[tuple[int, float]]]:
    """(workspace, time) per configuration per kernel, computed once (they are properties)."""
    out = []
    for k, configs in enumerate(kernel_sets):
        if not configs:
            raise ValueError(f"kernel {k} has an empty configuration set; every kernel needs at least one")
        out.append([(c.workspace, c.time_ms) for c in configs])
    return out


def minimum_budget(kernel_sets: Sequence[Sequence[Configuration]]) -> int:
    """Least total workspace any choice needs: each kernel's smallest configuration."""
    return sum(min(w for w, _ in vals) for vals in _values(kernel_sets))


def _check(values: list[list[tuple[int, float]]], budget: int) -> None:
    minimum = sum(min(w for w, _ in vals) for vals in values)
    if budget < minimum:
        raise InfeasibleBudgetError(
            f"total workspace budget {budget} B ({format_size(budget)}) is below {minimum} B "
            f"({format_size(minimum)}), the sum of every kernel's smallest workspace", minimum=minimum)


def _problem(values: list[list[tuple[int, float]]], budget: int) -> pulp.LpProblem:
    _check(values, budget)
    prob = pulp.LpProblem("wd", pulp.LpMinimize)
    # PuLP >= 3.3 attaches variables to the model; older PuLP (pyproject allows 2.8) has no add_variable
    new_var = getattr(prob, "add_variable", None) or (lambda name, lo, up, cat: pulp.LpVariable(name, lo, up, cat))
    objective, workspace = [], []
    for k, vals in enumerate(values):
        xs = [new_var(f"x_{k}_{c}", 0, 1, cat=pulp.LpBinary) for c in range(len(vals))]
        objective += [(x, t) for x, (_, t) in zip(xs, vals)]
        workspace += [(x, w / MiB) for x, (w, _) in zip(xs, vals)]
        prob += pulp.LpConstraint(pulp.LpAffineExpression([(x, 1) for x in xs]), pulp.LpConstraintEQ,
                                  f"one_{k}", 1)
    prob.setObjective(pulp.LpAffineExpression(objective))
    prob += pulp.LpConstraint(pulp.LpAffineExpression(workspace), pulp.LpConstraintLE, "workspace",
                              budget / MiB)
    return prob


def wd_problem(kernel_sets: Sequence[Sequence[Configuration]], budget: int) -> pulp.LpProblem:
    """The PuLP model of Eq. 1-4; variable ``x_k_c`` selects configuration c of kernel k.

    For debugging: ``wd_problem(sets, budget).writeLP("wd.lp")`` (or ``writeMPS``).
    """
    return _problem(_values(kernel_sets), budget)


class _TimedHiGHS(pulp.HiGHS):
    """PuLP's HiGHS interface with a bulk model load (PuLP's loads column by column, ~40 µs per
    integrality call), timing load and solve apart, and passing a warm start."""

    def __init__(self, warm: list[float] | None, **kwargs):  # warm: a value per lp.variables() entry
        super().__init__(**kwargs)
        self.warm = warm
        self.load_s = self.solve_s = 0.0

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
        h.addCols(n, cost, lower, upper, 0, np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.int32),
                  np.zeros(0))
        integer = np.array([i for i, v in enumerate(variables) if v.cat == pulp.LpInteger], dtype=np.int32)
        if self.mip and len(integer):
            h.changeColsIntegrality(len(integer), integer,
                                    np.full(len(integer), highspy.HighsVarType.kInteger.value, dtype=np.uint8))
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
        h.addRows(len(starts), np.array(row_lo, dtype=float), np.array(row_up, dtype=float), len(index),
                  np.array(starts, dtype=np.int32), np.array(index, dtype=np.int32), np.array(coef, dtype=float))
        self.load_s = time.perf_counter() - start

    def callSolver(self, lp):
        import highspy

        if self.warm is not None:
            sol = highspy.HighsSolution()
            sol.col_value = [self.warm[v.index] for v in lp.variables()]
            sol.value_valid = True
            lp.solverModel.setSolution(sol)
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
        raise ValueError(f"unknown ILP solver {solver!r}; expected one of {', '.join(SOLVERS)}")
    highs = pulp.HiGHS().available()
    if solver == "auto":
        return "highs" if highs else "cbc"
    if solver == "highs" and not highs:
        raise EngineError("ILP solver 'highs' is not available (pip install highspy), use solver='cbc'")
    if solver == "cbc" and not _cbc().available():
        raise EngineError("ILP solver 'cbc' is not available in this PuLP installation")
    return solver


def wd(kernel_sets: Sequence[Sequence[Configuration]], budget: int, *, solver: str = "auto",
       time_limit_s: float = 10.0, warm_start: Sequence[int] | None = None) -> WDResult:
    """Solve WD: one configuration per kernel, total workspace <= ``budget`` bytes, least total time.

    ``kernel_sets``: one (desirable) set per kernel, repeated kernels included, since each kernel gets
    its own segment. ``warm_start``: per kernel an index into its set (e.g. from WR or the front).
    Raises InfeasibleBudgetError naming the least feasible budget when ``budget`` is below it.
    """
    name = _resolve_solver(solver)
    if warm_start is not None:
        if len(warm_start) != len(kernel_sets):
            raise ValueError(f"warm_start has {len(warm_start)} entries for {len(kernel_sets)} kernels")
        for k, (i, configs) in enumerate(zip(warm_start, kernel_sets)):
            if not 0 <= i < len(configs):
                raise ValueError(f"warm_start[{k}] = {i} is not an index into kernel {k}'s "
                                 f"{len(configs)} configurations")
    start = time.perf_counter()
    prob = _problem(_values(kernel_sets), budget)
    build_s = time.perf_counter() - start
    n_vars = sum(len(c) for c in kernel_sets)
    if not kernel_sets:
        return WDResult([], [], 0.0, 0, 0, 0.0, build_s, name, "optimal")
    if warm_start is not None:
        for v in prob.variables():  # names are x_<kernel>_<configuration>
            _, k, c = v.name.split("_")
            v.setInitialValue(int(warm_start[int(k)] == int(c)))
    if name == "highs":
        import highspy

        warm = None if warm_start is None else [float(v.varValue) for v in prob.variables()]
        backend = _TimedHiGHS(warm, msg=False, timeLimit=time_limit_s, gapRel=_GAP, gapAbs=_GAP,
                              mip_feasibility_tolerance=_FEAS_TOL, primal_feasibility_tolerance=_FEAS_TOL)
        prob.solve(backend)
        build_s += backend.load_s
        solve_s = backend.solve_s
        model_status = prob.solverModel.getModelStatus()
        status = ("optimal" if model_status == highspy.HighsModelStatus.kOptimal else
                  "time_limit" if model_status == highspy.HighsModelStatus.kTimeLimit else
                  prob.solverModel.modelStatusToString(model_status))
    else:
        backend = _cbc(msg=False, timeLimit=time_limit_s, gapRel=_GAP, gapAbs=_GAP,
                       warmStart=warm_start is not None)
        start = time.perf_counter()
        prob.solve(backend)
        solve_s = time.perf_counter() - start
        status = ("optimal" if prob.sol_status == pulp.LpSolutionOptimal else
                  "time_limit" if prob.sol_status == pulp.LpSolutionIntegerFeasible else
                  pulp.LpStatus[prob.status].lower())
    values = {v.name: v.varValue for v in prob.variables()}
    choice = []
    for k, configs in enumerate(kernel_sets):
        picked = [c for c in range(len(configs)) if (values.get(f"x_{k}_{c}") or 0.0) > 0.5]
        if len(picked) != 1:
            raise EngineError(f"ILP solver {name} returned no valid solution (status {status!r}) "
                              f"for a budget of {format_size(budget)}")
        choice.append(picked[0])
    chosen = [configs[i] for configs, i in zip(kernel_sets, choice)]
    total_ws = sum(c.workspace for c in chosen)
    if total_ws > budget:
        raise EngineError(f"ILP solver {name} returned a choice of {total_ws} B, over the budget of {budget} B")
    return WDResult(choice, chosen, sum(c.time_ms for c in chosen), total_ws, n_vars, solve_s, build_s,
                    name, status)
