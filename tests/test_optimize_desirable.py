"""Desirable sets D(C) and the set-valued DP C(B) (mu-cuDNN arXiv:1804.04806 §III-C1).

All data here is SYNTHETIC (hand-made or seeded random). Times in the property tests are whole
numbers of ms, so sums are exact and ties are real ties.
"""

from __future__ import annotations


import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InfeasibleBudgetError
from engine.optimize import Configuration, MicroConfig, canonical, desirable, desirable_set, wr

MiB = 1024**2


def one(ws: int, t: float, name: str = "p", batch: int = 1) -> Configuration:
    return Configuration((MicroConfig(batch, name, t, ws),))


def dominated(c: Configuration, others) -> bool:
    """Another configuration at least as fast that needs no more workspace, and not an exact tie."""
    return any(
        o.time_ms <= c.time_ms and o.workspace <= c.workspace and (o.time_ms, o.workspace) != (c.time_ms, c.workspace)
        for o in others
    )


configs_st = st.lists(st.tuples(st.integers(0, 30), st.integers(1, 30), st.integers(1, 3)), max_size=25).map(
    lambda rows: [
        Configuration(tuple(MicroConfig(1, f"p{i}_{j}", float(t) / n, w) for j in range(n)))
        for i, (w, t, n) in enumerate(rows)
    ]
)


@settings(max_examples=300, deadline=None)
@given(configs_st)
def test_desirable_keeps_exactly_the_pareto_points(configs):
    d = desirable(configs)
    ws = [c.workspace for c in d]
    ts = [c.time_ms for c in d]
    assert ws == sorted(ws) and len(set(ws)) == len(ws)
    assert all(a > b for a, b in zip(ts, ts[1:]))
    for c in d:
        assert not dominated(c, configs)
    # nothing Pareto-optimal is lost: every undominated (workspace, time) point is represented
    kept = {(c.workspace, c.time_ms) for c in d}
    for c in configs:
        if not dominated(c, configs):
            assert (c.workspace, c.time_ms) in kept


def test_desirable_ties_keep_fewer_pieces_then_canonical_order():
    a = Configuration((MicroConfig(2, "x", 1.0, 5), MicroConfig(2, "x", 1.0, 5)))  # 2 pieces, 2 ms
    b = Configuration((MicroConfig(4, "y", 2.0, 5),))  # 1 piece, 2 ms
    c = Configuration((MicroConfig(4, "a", 2.0, 5),))  # same, earlier plan
    assert desirable([a, b, c]) == [c]
    assert desirable([a]) == [a]
    # micro-configurations come back in canonical order (descending batch, then plan)
    mixed = Configuration((MicroConfig(1, "b", 1.0, 0), MicroConfig(3, "a", 1.0, 0), MicroConfig(1, "a", 1.0, 0)))
    assert [(m.batch, m.plan) for m in desirable([mixed])[0].micro] == [(3, "a"), (1, "a"), (1, "b")]


def test_desirable_set_oracle_mu_cudnn_random_points():
    """mu-cuDNN's test/desirableSet, SYNTHETIC, seeded: 10,000 points with
    memory uniform in [0, 64 MiB) and time = 1 - mem/64MiB + U(0,1); membership must equal
    "not dominated" (checked by an independent all-pairs comparison)."""
    rng = np.random.default_rng(20180412)
    mem = rng.integers(0, 64 * MiB, 10_000)
    t = 1 - mem / (64 * MiB) + rng.uniform(0, 1, 10_000)
    configs = [one(int(w), float(x), f"p{i}") for i, (w, x) in enumerate(zip(mem, t))]
    kept = {c.micro[0].plan for c in desirable(configs)}
    expected = set()
    for lo in range(0, len(mem), 1000):  # all pairs, in chunks
        w, x = mem[lo : lo + 1000, None], t[lo : lo + 1000, None]
        at_least_as_good = (mem[None, :] <= w) & (t[None, :] <= x)
        beaten = at_least_as_good & ((mem[None, :] != w) | (t[None, :] != x))
        expected |= {f"p{lo + i}" for i in np.flatnonzero(~beaten.any(axis=1))}
    assert kept == expected
    assert 5 <= len(kept) < 200


def test_set_dp_oracle_mu_cudnn_test_dp():
    """mu-cuDNN's test/dp, SYNTHETIC: a 3->64 3x3 224^2 layer at N=256, powers of
    two, plans "fast" (0.1 b + 0.01 ms, b MiB) and "slow" (10 b + 0.1 ms, b bytes), rows kept only if
    memory < 64 MiB. Exactly 15 points from 25.68 ms / 32 MiB / 8 pieces to 2585.60 ms / 1 B / 256 pieces."""
    cands = {}
    for b in (1 << i for i in range(9)):
        rows = [MicroConfig(b, "fast", 0.1 * b + 0.01, b * MiB), MicroConfig(b, "slow", 10 * b + 0.1, b)]
        cands[b] = [m for m in rows if m.workspace < 64 * MiB]
    got = [(round(c.time_ms, 2), c.workspace, len(c.micro)) for c in desirable_set(cands, 256)]
    slow = [(round(2560 + 0.1 * 256 / p, 2), p, 256 // p) for p in (1, 2, 4, 8, 16, 32, 64, 128, 256)]
    fast = [(round(25.6 + 0.01 * 256 / p, 2), p * MiB, 256 // p) for p in (1, 2, 4, 8, 16, 32)]
    assert got == slow + fast
    assert len(got) == 15
    assert got[-1] == (25.68, 32 * MiB, 8) and got[0] == (2585.60, 1, 256)


def all_configurations(candidates, batch):
    """Every configuration (multiset of micro-configurations summing to batch), by enumeration."""
    micros = sorted((m for b, ms in candidates.items() if b <= batch for m in ms), key=lambda m: (-m.batch, m.plan))

    def rec(total, start):
        if total == 0:
            yield ()
            return
        for i in range(start, len(micros)):
            if micros[i].batch <= total:
                for rest in rec(total - micros[i].batch, i):
                    yield (micros[i],) + rest

    return [Configuration(c) for c in rec(batch, 0)]


@st.composite
def small_candidates(draw):
    batch = draw(st.integers(1, 7))
    sizes = draw(st.sets(st.integers(1, batch), min_size=1, max_size=3))
    cands = {
        b: [
            MicroConfig(b, f"p{i}", float(draw(st.integers(1, 30))), draw(st.integers(0, 12)))
            for i in range(draw(st.integers(1, 3)))
        ]
        for b in sorted(sizes)
    }
    return cands, batch


@settings(max_examples=250, deadline=None)
@given(small_candidates(), st.one_of(st.none(), st.integers(0, 13)))
def test_set_dp_equals_desirable_of_all_configurations(case, limit):
    cands, batch = case
    every = [c for c in all_configurations(cands, batch) if limit is None or c.workspace <= limit]
    if not every:
        with pytest.raises(InfeasibleBudgetError):
            desirable_set(cands, batch, limit)
        return
    got = desirable_set(cands, batch, limit)
    expected = desirable(every)
    assert [(c.workspace, c.time_ms, len(c.micro)) for c in got] == [
        (c.workspace, c.time_ms, len(c.micro)) for c in expected
    ]
    for c in got:
        assert c.batch == batch and c == canonical(c.micro)


@settings(max_examples=200, deadline=None)
@given(small_candidates(), st.integers(0, 13))
def test_wr_optimum_is_the_fastest_desirable_configuration_within_the_limit(case, limit):
    cands, batch = case
    try:
        full = desirable_set(cands, batch)
    except InfeasibleBudgetError:
        return
    fits = [c for c in full if c.workspace <= limit]
    if not fits:
        with pytest.raises(InfeasibleBudgetError):
            wr(cands, batch, limit)
        return
    assert wr(cands, batch, limit).time_ms == fits[-1].time_ms
    # and the limited DP is the full set cut at the limit
    assert [(c.workspace, c.time_ms) for c in desirable_set(cands, batch, limit)] == [
        (c.workspace, c.time_ms) for c in fits
    ]
