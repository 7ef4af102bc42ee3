"""The exact WD network front against exhaustive search and the ILP. SYNTHETIC data only.

Times are whole numbers of ms in the property tests, so sums are exact and ties are real ties.
"""

from __future__ import annotations

import itertools

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InfeasibleBudgetError
from engine.optimize import Configuration, MicroConfig, desirable, network_front, wd


def cfg(ws: int, t: float) -> Configuration:
    return Configuration((MicroConfig(1, f"w{ws}t{t}", t, ws),))


def pareto_points(points):
    """(workspace, time) Pareto set by the definition: sorted, each strictly faster than all cheaper."""
    out = []
    for w, t in sorted(set(points)):
        if not out or t < out[-1][1]:
            if out and out[-1][0] == w:
                continue
            out.append((w, t))
    return out


def exhaustive_front(kernel_sets):
    return pareto_points(
        (sum(c.workspace for c in combo), sum(c.time_ms for c in combo)) for combo in itertools.product(*kernel_sets)
    )


set_st = st.lists(st.tuples(st.integers(0, 40), st.integers(1, 50)), min_size=1, max_size=5).map(
    lambda pts: desirable(cfg(w, float(t)) for w, t in pts)
)


@st.composite
def networks(draw, max_kernels=5):
    """Kernel sets where some kernels repeat an earlier kernel's set (like a ResNet's repeated layers)."""
    sets = []
    for _ in range(draw(st.integers(1, max_kernels))):
        if sets and draw(st.booleans()):
            sets.append(sets[draw(st.integers(0, len(sets) - 1))])
        else:
            sets.append(draw(set_st))
    return sets


@settings(max_examples=200, deadline=None)
@given(networks())
def test_front_equals_exhaustive_pareto_front(kernel_sets):
    f = network_front(kernel_sets)
    assert list(zip(f.workspace.tolist(), f.time_ms.tolist())) == exhaustive_front(kernel_sets)
    for i in range(len(f)):  # every point is rebuilt by its per-kernel choice
        ch = f.choice(i)
        chosen = [s[c] for s, c in zip(kernel_sets, ch)]
        assert sum(c.workspace for c in chosen) == f.workspace[i]
        assert sum(c.time_ms for c in chosen) == f.time_ms[i]


@settings(max_examples=40, deadline=None)
@given(networks(max_kernels=6), st.lists(st.floats(0, 1), min_size=1, max_size=4))
def test_front_equals_the_ilp_optimum_at_sampled_budgets(kernel_sets, fractions):
    f = network_front(kernel_sets)
    lo, hi = int(f.workspace[0]), int(f.workspace[-1])
    for x in fractions:
        budget = lo + int(x * (hi - lo))
        i = f.at_budget(budget)
        assert f.workspace[i] <= budget
        assert wd(kernel_sets, budget).time_ms == pytest.approx(f.time_ms[i], abs=1e-9)


def test_large_merges_take_the_block_pruning_path_and_stay_exact():
    """Fronts big enough that _merge prunes blocks (n*m > 4096): compare against all pairwise sums."""
    rng = np.random.default_rng(7)

    def random_front(n):
        ws = np.cumsum(rng.integers(1, 1000, n))
        t = np.cumsum(rng.integers(1, 100, n))[::-1].astype(float)  # strictly decreasing, non-convex
        return [cfg(int(w), float(x)) for w, x in zip(ws, t)]

    for n, m in ((705, 60), (300, 250), (2001, 3)):  # 705, 2001: a one-point block at the fast end
        a, b = random_front(n), random_front(m)
        f = network_front([a, b])
        sums = ((x.workspace + y.workspace, x.time_ms + y.time_ms) for x in a for y in b)
        assert list(zip(f.workspace.tolist(), f.time_ms.tolist())) == pareto_points(sums)
        i = len(f) // 2
        ca, cb = f.choice(i)
        assert (a[ca].workspace + b[cb].workspace, a[ca].time_ms + b[cb].time_ms) == (f.workspace[i], f.time_ms[i])


def test_a_front_too_large_to_hold_is_refused_in_one_line(monkeypatch):
    """A merge that would enumerate more sums than MAX_PAIRS is refused before it allocates them (ResNet-3002 b32
    once asked for 96 million, 0.7 GiB at once, and died of memory); under the limit the front is unchanged."""
    from engine.errors import EngineError
    from engine.optimize import front

    rng = np.random.default_rng(3)
    sets = [
        [cfg(int(w), float(t)) for w, t in zip(np.cumsum(rng.integers(1, 9, 300)), np.linspace(9, 1, 300) + k)]
        for k in range(2)
    ]
    whole = network_front(sets)
    monkeypatch.setattr(front, "MAX_PAIRS", 1000)
    with pytest.raises(EngineError, match=r"too large to compute here: one merge would enumerate [\d,]+ sums"):
        network_front(sets)
    monkeypatch.setattr(front, "MAX_PAIRS", 10**9)
    assert network_front(sets).time_ms.tolist() == whole.time_ms.tolist()


def test_identical_kernels_each_get_a_choice():
    s = [cfg(0, 10.0), cfg(5, 4.0), cfg(9, 1.0)]
    f = network_front([s, s, s])
    i = f.at_budget(14)  # 9+5+0 (1+4+10 = 15 ms) beats 5+5+0 (18 ms) and 9+0+0 (21 ms)
    assert (f.workspace[i], f.time_ms[i]) == (14, 15.0)
    assert sorted(f.choice(i)) == [0, 1, 2]
    assert len(f) == len(exhaustive_front([s, s, s]))


def test_at_budget_to_frame_and_errors():
    sets = [[cfg(10, 5.0), cfg(20, 1.0)], [cfg(5, 3.0)]]
    f = network_front(sets)
    assert f.workspace.dtype == np.int64
    assert f.to_frame().equals(pd.DataFrame({"workspace": [15, 25], "time_ms": [8.0, 4.0]}))
    assert f.at_budget(24) == 0 and f.at_budget(25) == 1 and f.at_budget(10**12) == 1
    with pytest.raises(InfeasibleBudgetError, match="below 15 B") as err:
        f.at_budget(14)
    assert err.value.minimum == 15
    with pytest.raises(IndexError):
        f.choice(2)
    with pytest.raises(ValueError, match="kernel 1 has an empty configuration set"):
        network_front([sets[0], []])
    empty = network_front([])
    assert len(empty) == 1 and empty.workspace[0] == 0 and empty.choice(0) == []


def test_rounding_noise_does_not_add_points():
    """0.1 + 0.2 and 0.3 differ only in the last bit: needing more workspace for that is no trade-off."""
    f = network_front([[cfg(0, 0.1 + 0.2), cfg(1, 0.3)], [cfg(0, 1.0)]])
    assert len(f) == 1 and f.workspace[0] == 0
    f = network_front([[cfg(0, 0.1 + 0.2), cfg(1, 0.3 * (1 - 1e-9))], [cfg(0, 1.0)]])
    assert len(f) == 2  # a real (if tiny) gain is kept
