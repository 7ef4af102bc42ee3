"""WD 0-1 ILP (mu-cuDNN arXiv:1804.04806 §III-C, Eq. 1-4) against exhaustive search. SYNTHETIC data only."""

from __future__ import annotations

import contextlib
import importlib
import itertools

import pulp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineError, InfeasibleBudgetError
from engine.optimize import Configuration, MicroConfig, desirable, minimum_budget, wd, wd_problem

wd_module = importlib.import_module("engine.optimize.wd")  # the package re-exports the function wd
GiB = 1024**3
MiB = 1024**2


def cfg(ws: int, t: float) -> Configuration:
    return Configuration((MicroConfig(1, f"w{ws}t{t}", t, ws),))


def exhaustive(kernel_sets, budget):
    best = None
    for combo in itertools.product(*kernel_sets):
        if sum(c.workspace for c in combo) <= budget:
            t = sum(c.time_ms for c in combo)
            best = t if best is None else min(best, t)
    return best


set_st = st.lists(st.tuples(st.integers(0, 50), st.integers(1, 60)), min_size=1, max_size=5).map(
    lambda pts: desirable(cfg(w, float(t)) for w, t in pts)
)
kernel_sets_st = st.lists(set_st, min_size=1, max_size=5)


@st.composite
def repeated_kernel_sets(draw):
    """Up to 3 distinct sets, each shared by up to 4 kernels in interleaved order (as in ResNet blocks);
    equal sets are sometimes the same list object and sometimes equal copies."""
    distinct = draw(st.lists(set_st.filter(lambda s: len(s) <= 4), min_size=1, max_size=3))
    kernels = draw(st.lists(st.integers(0, len(distinct) - 1), min_size=2, max_size=6))
    return [distinct[i] if draw(st.booleans()) else list(distinct[i]) for i in kernels]


@contextlib.contextmanager
def hull_incumbent():
    """Make wd's incumbent the bare hull choice (no greedy fill, no dynamic program), so the solver
    has to find the optimum itself from a weaker bound."""
    greedy, dp = wd_module._greedy, wd_module._dp
    wd_module._greedy = lambda W, T, counts, valid, slack: counts
    wd_module._dp = lambda *args: None
    try:
        yield
    finally:
        wd_module._greedy, wd_module._dp = greedy, dp


def check_choice(kernel_sets, budget, r, expected):
    """A valid WD answer: one configuration per kernel, within the budget, as fast as the optimum."""
    assert len(r.choice) == len(kernel_sets) == len(r.configurations)
    assert all(0 <= i < len(s) for s, i in zip(kernel_sets, r.choice))
    assert r.configurations == [s[i] for s, i in zip(kernel_sets, r.choice)]
    assert r.workspace == sum(c.workspace for c in r.configurations) <= budget
    assert r.time_ms == pytest.approx(sum(c.time_ms for c in r.configurations), abs=1e-12)
    assert r.time_ms == pytest.approx(expected, abs=1e-9)


@settings(max_examples=120, deadline=None)
@given(kernel_sets_st, st.integers(0, 260))
def test_wd_equals_exhaustive_search(kernel_sets, budget):
    expected = exhaustive(kernel_sets, budget)
    if expected is None:
        with pytest.raises(InfeasibleBudgetError) as err:
            wd(kernel_sets, budget)
        assert err.value.minimum == sum(s[0].workspace for s in kernel_sets)
        return
    r = wd(kernel_sets, budget)
    assert r.status == "optimal" and r.solver == "highs"
    check_choice(kernel_sets, budget, r, expected)
    assert r.n_variables == sum(len(s) for s in kernel_sets)


@settings(max_examples=200, deadline=None)
@given(repeated_kernel_sets(), st.integers(0, 300), st.booleans())
def test_wd_with_repeated_kernels_equals_exhaustive_search(kernel_sets, budget, weak_incumbent):
    """Aggregated groups map back to a valid per-kernel choice, whether the incumbent was already
    optimal or the solver had to improve it."""
    expected = exhaustive(kernel_sets, budget)
    if expected is None:
        with pytest.raises(InfeasibleBudgetError):
            wd(kernel_sets, budget)
        return
    with hull_incumbent() if weak_incumbent else contextlib.nullcontext():
        r = wd(kernel_sets, budget)
    assert r.status == "optimal"
    check_choice(kernel_sets, budget, r, expected)
    assert r.n_variables == sum(len(s) for s in kernel_sets)
    distinct = {tuple((c.workspace, c.time_ms) for c in s): len(s) for s in kernel_sets}
    assert r.n_solver_variables <= sum(n - 1 for n in distinct.values())  # per group, less its first


def test_a_start_that_is_not_the_optimum_is_improved_not_returned_as_optimal():
    """Hypothesis found it in CI: with the bare hull choice (36 ms) as HiGHS's start, HiGHS 1.16's presolve
    read that start as 18 ms in its reduced space, met its bound and returned the start as optimal."""
    s = [cfg(0, 9.0), cfg(1, 6.0), cfg(28, 2.0), cfg(29, 1.0)]
    sets = [list(s) for _ in range(6)]
    with hull_incumbent():
        r = wd(sets, 112)
    check_choice(sets, 112, r, 21.0)  # three kernels on 1 B, three on 29 B
    assert r.status == "optimal"


def test_repeated_kernels_get_one_configuration_each():
    # 3 + 2 identical kernels in interleaved order; the optimum mixes configurations within a group
    a = [cfg(0, 10.0), cfg(6 * MiB, 4.0)]
    c = [cfg(0, 10.0), cfg(5 * MiB, 6.0), cfg(9 * MiB, 3.0)]
    sets = [a, c, list(a), c, a]
    for budget, weak in itertools.product((0, 11 * MiB, 15 * MiB, 20 * MiB, 25 * MiB, 40 * MiB), (False, True)):
        with hull_incumbent() if weak else contextlib.nullcontext():
            r = wd(sets, budget)
        check_choice(sets, budget, r, exhaustive(sets, budget))
        assert r.n_variables == 12 and r.n_solver_variables <= 3
    r = wd(sets, 15 * MiB)  # one a-kernel on 6 MiB, one c-kernel on 9 MiB: 4 + 3 + 3 x 10 = 37 ms
    assert sorted(r.choice[k] for k in (0, 2, 4)) == [0, 0, 1] and sorted(r.choice[k] for k in (1, 3)) == [0, 2]
    assert r.time_ms == 37.0
    r = wd(sets, 20 * MiB)  # all three a-kernels on 6 MiB, both c-kernels on 0: 3 x 4 + 2 x 10 = 32 ms
    assert [r.choice[k] for k in (0, 2, 4)] == [1, 1, 1] and r.time_ms == 32.0


def test_one_byte_over_the_budget_is_infeasible_at_gib_scale():
    # workspaces ~ GiB with a 1-byte difference: MiB scaling must not blur it
    fast = cfg(3 * GiB + 1, 1.0)
    sets = [[cfg(0, 10.0), fast], [cfg(0, 10.0), cfg(2 * GiB, 2.0)]]
    r = wd(sets, 5 * GiB + 1)
    assert r.choice == [1, 1] and r.workspace == 5 * GiB + 1 and r.time_ms == 3.0
    r = wd(sets, 5 * GiB)  # one byte short: both fast ones no longer fit together
    assert r.workspace <= 5 * GiB and r.time_ms == 11.0 and r.choice == [1, 0]


def test_infeasible_budget_names_the_minimum():
    sets = [[cfg(100, 5.0), cfg(200, 1.0)], [cfg(50, 5.0)]]
    assert minimum_budget(sets) == 150
    with pytest.raises(InfeasibleBudgetError, match="below 150 B") as err:
        wd(sets, 149)
    assert err.value.minimum == 150
    assert wd(sets, 150).choice == [0, 0]


def test_warm_start_and_cbc_agree_with_cold_highs():
    x = [cfg(0, 9.0), cfg(10, 5.0), cfg(30, 1.0)]
    sets = [x, [cfg(0, 8.0), cfg(20, 3.0)], [cfg(5, 4.0), cfg(25, 2.0)], x, x]
    for budget in (5, 40, 70, 100):
        cold = wd(sets, budget)
        check_choice(sets, budget, cold, exhaustive(sets, budget))
        for start in ([0, 0, 0, 0, 0], [2, 1, 1, 2, 2]):  # the second (135 B) fits none: ignored
            warm = wd(sets, budget, warm_start=start)
            assert warm.time_ms == cold.time_ms and warm.status == "optimal"
        assert cold.solve_time_s > 0 and cold.build_time_s > 0 and cold.reduce_time_s > 0
        try:
            cbc = wd(sets, budget, solver="cbc", warm_start=[0, 1, 0, 0, 0])
        except EngineError as err:
            pytest.skip(str(err))
        assert cbc.solver == "cbc" and cbc.status == "optimal"
        check_choice(sets, budget, cbc, cold.time_ms)


def test_bad_arguments():
    sets = [[cfg(0, 1.0)]]
    with pytest.raises(EngineError, match="unknown ILP solver 'glpk'"):
        wd(sets, 10, solver="glpk")
    with pytest.raises(ValueError, match="warm_start has 2 entries for 1 kernels"):
        wd(sets, 10, warm_start=[0, 0])
    with pytest.raises(ValueError, match=r"warm_start\[0\] = 3"):
        wd(sets, 10, warm_start=[3])
    with pytest.raises(ValueError, match="kernel 1 has an empty configuration set"):
        wd([[cfg(0, 1.0)], []], 10)
    empty = wd([], 0)
    assert empty.choice == [] and empty.time_ms == 0.0 and empty.workspace == 0


def test_wd_problem_exports_the_model_wd_solves(tmp_path):
    a = [cfg(0, 10.0), cfg(6 * MiB, 4.0)]
    c = [cfg(0, 10.0), cfg(5 * MiB, 6.0), cfg(9 * MiB, 3.0)]
    sets = [a, c, a, c, a]
    prob = wd_problem(sets, 20 * MiB)
    assert isinstance(prob, pulp.LpProblem)
    names = {v.name for v in prob.variables()}
    assert names and names <= {"y_0_1", "y_1_1", "y_1_2"}  # group 0 = a (kernels 0, 2, 4), group 1 = c
    assert prob.objective.constant == 50.0  # every kernel at its group's least-workspace configuration
    path = tmp_path / "wd.lp"
    prob.writeLP(str(path))
    text = path.read_text()
    assert "workspace:" in text and "6 y_0_1" in text  # coefficients are workspace steps in MiB
    prob.solve(pulp.HiGHS(msg=False) if pulp.HiGHS().available() else pulp.PULP_CBC_CMD(msg=False))
    assert pulp.value(prob.objective) == pytest.approx(exhaustive(sets, 20 * MiB)) == wd(sets, 20 * MiB).time_ms
    with pytest.raises(InfeasibleBudgetError):
        wd_problem(sets, -1)
