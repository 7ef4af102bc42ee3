"""WD 0-1 ILP (mu-cudnn-arxiv.txt §III-C, Eq. 1-4) against exhaustive search. SYNTHETIC data only."""

from __future__ import annotations

import itertools

import pulp
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import EngineError, InfeasibleBudgetError
from engine.optimize import Configuration, MicroConfig, desirable, minimum_budget, wd, wd_problem

GiB = 1024**3


def cfg(ws: int, t: float) -> Configuration:
    return Configuration((MicroConfig(1, f"w{ws}t{t}", t, ws),))


def exhaustive(kernel_sets, budget):
    best = None
    for combo in itertools.product(*kernel_sets):
        if sum(c.workspace for c in combo) <= budget:
            t = sum(c.time_ms for c in combo)
            best = t if best is None else min(best, t)
    return best


kernel_sets_st = st.lists(
    st.lists(st.tuples(st.integers(0, 50), st.integers(1, 60)), min_size=1, max_size=5).map(
        lambda pts: desirable(cfg(w, float(t)) for w, t in pts)),
    min_size=1, max_size=5)


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
    assert r.time_ms == pytest.approx(expected, abs=1e-9)
    assert r.workspace <= budget
    assert r.configurations == [s[i] for s, i in zip(kernel_sets, r.choice)]
    assert r.workspace == sum(c.workspace for c in r.configurations)
    assert r.n_variables == sum(len(s) for s in kernel_sets)


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
    sets = [[cfg(0, 9.0), cfg(10, 5.0), cfg(30, 1.0)], [cfg(0, 8.0), cfg(20, 3.0)], [cfg(5, 4.0), cfg(25, 2.0)]]
    cold = wd(sets, 40)
    assert cold.time_ms == exhaustive(sets, 40)
    warm = wd(sets, 40, warm_start=[0, 0, 0])
    assert warm.time_ms == cold.time_ms and warm.status == "optimal"
    assert cold.solve_time_s > 0 and cold.build_time_s > 0
    try:
        cbc = wd(sets, 40, solver="cbc", warm_start=[0, 1, 0])
    except EngineError as err:
        pytest.skip(str(err))
    assert cbc.solver == "cbc" and cbc.time_ms == cold.time_ms and cbc.status == "optimal"


def test_bad_arguments():
    sets = [[cfg(0, 1.0)]]
    with pytest.raises(ValueError, match="unknown ILP solver 'glpk'"):
        wd(sets, 10, solver="glpk")
    with pytest.raises(ValueError, match="warm_start has 2 entries for 1 kernels"):
        wd(sets, 10, warm_start=[0, 0])
    with pytest.raises(ValueError, match=r"warm_start\[0\] = 3"):
        wd(sets, 10, warm_start=[3])
    with pytest.raises(ValueError, match="kernel 1 has an empty configuration set"):
        wd([[cfg(0, 1.0)], []], 10)
    empty = wd([], 0)
    assert empty.choice == [] and empty.time_ms == 0.0 and empty.workspace == 0


def test_wd_problem_exports_the_lp(tmp_path):
    sets = [[cfg(0, 9.0), cfg(10 * 1024**2, 5.0)], [cfg(0, 8.0)]]
    prob = wd_problem(sets, 10 * 1024**2)
    assert isinstance(prob, pulp.LpProblem)
    assert len(prob.variables()) == 3
    path = tmp_path / "wd.lp"
    prob.writeLP(str(path))
    text = path.read_text()
    assert "workspace:" in text and "one_0:" in text and "one_1:" in text
    assert "10 x_0_1" in text  # coefficients are in MiB
