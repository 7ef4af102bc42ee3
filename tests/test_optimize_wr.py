"""WR dynamic program (mu-cuDNN arXiv:1804.04806 §III-B) against brute force over all partitions of B.

All profiles here are SYNTHETIC: hand-made or random micro-configurations, no measurement.
Times are whole numbers of ms so that sums are exact and ties are real ties.
"""

from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import InfeasibleBudgetError
from engine.optimize import MicroConfig, canonical, micro_front, wr
from engine.testing.reference import partitions

MiB = 1024**2


def brute_wr(candidates, batch, limit):
    """Fastest configuration by enumerating every partition and every plan per part."""
    best = None
    for parts in partitions(batch, [b for b in candidates if b <= batch]):
        options = [[m for m in candidates[b] if limit is None or m.workspace <= limit] for b in parts]
        if any(not o for o in options):
            continue
        for combo in itertools.product(*options):
            t = sum(m.time_ms for m in combo)
            if best is None or t < best:
                best = t
    return best


def brute_min_workspace(candidates, batch):
    best = None
    for parts in partitions(batch, [b for b in candidates if b <= batch and candidates[b]]):
        w = max(min(m.workspace for m in candidates[b]) for b in parts)
        best = w if best is None else min(best, w)
    return best


@st.composite
def small_candidates(draw, max_batch=8):
    batch = draw(st.integers(1, max_batch))
    sizes = draw(st.sets(st.integers(1, batch), min_size=1, max_size=4))
    cands = {}
    for b in sorted(sizes):
        n = draw(st.integers(1, 3))
        cands[b] = [
            MicroConfig(b, f"p{i}", float(draw(st.integers(1, 40))), draw(st.integers(0, 20))) for i in range(n)
        ]
    limit = draw(st.one_of(st.none(), st.integers(0, 22)))
    return cands, batch, limit


@settings(max_examples=300, deadline=None)
@given(small_candidates())
def test_wr_equals_brute_force_over_all_partitions(case):
    cands, batch, limit = case
    expected = brute_wr(cands, batch, limit)
    if expected is None:
        with pytest.raises(InfeasibleBudgetError) as err:
            wr(cands, batch, limit)
        minimum = brute_min_workspace(cands, batch)
        assert err.value.minimum == (-1 if minimum is None else minimum)
        if minimum is not None:
            assert limit is not None and limit < minimum
        return
    c = wr(cands, batch, limit)
    assert c.time_ms == expected
    assert c.batch == batch
    assert limit is None or c.workspace <= limit
    assert c == canonical(c.micro)
    for m in c.micro:  # every piece is a profiled micro-configuration of its size
        assert m in cands[m.batch]


def test_wr_prefers_fewer_pieces_on_exact_ties():
    # SYNTHETIC linear model: any split costs exactly the same; the undivided run must win
    cands = {b: [MicroConfig(b, "lin", float(b), 0)] for b in (1, 2, 4, 8)}
    assert wr(cands, 8, None).division == "1x8"
    # without the undivided size, 2 pieces of 4 beat 4 of 2 and 8 of 1
    del cands[8]
    assert wr(cands, 8, None).division == "2x4"


def test_wr_splits_to_use_a_faster_plan_under_the_limit():
    # SYNTHETIC: the fast plan needs b MiB, so at 4 MiB it runs on pieces of 4
    cands = {
        b: [MicroConfig(b, "fast", 0.1 * b + 0.01, b * MiB), MicroConfig(b, "slow", 10.0 * b, 0)]
        for b in (1, 2, 4, 8, 16)
    }
    c = wr(cands, 16, 4 * MiB)
    assert c.division == "4x4" and {m.plan for m in c.micro} == {"fast"}
    assert c.workspace == 4 * MiB
    assert wr(cands, 16, 0).division == "1x16" and wr(cands, 16, 0).workspace == 0
    assert wr(cands, 16, None).division == "1x16" and wr(cands, 16, None).micro[0].plan == "fast"


def test_test_dp_oracle_wr_end():
    """mu-cuDNN's test/dp, SYNTHETIC: the fastest point, 25.68 ms in 8 pieces."""
    cands = _test_dp_candidates()
    c = wr(cands, 256, 64 * MiB - 1)
    assert c.time_ms == pytest.approx(25.68)
    assert c.workspace == 32 * MiB and len(c.micro) == 8
    c = wr(cands, 256, 1)
    assert c.time_ms == pytest.approx(2585.60) and c.workspace == 1 and len(c.micro) == 256


def _test_dp_candidates():
    cands = {}
    for b in (1 << i for i in range(9)):
        rows = [MicroConfig(b, "fast", 0.1 * b + 0.01, b * MiB), MicroConfig(b, "slow", 10 * b + 0.1, b)]
        cands[b] = [m for m in rows if m.workspace < 64 * MiB]
    return cands


def test_infeasible_limit_names_the_minimum():
    cands = {4: [MicroConfig(4, "a", 1.0, 100)], 2: [MicroConfig(2, "b", 1.0, 50)]}
    with pytest.raises(InfeasibleBudgetError, match="below 50 B") as err:
        wr(cands, 4, 49)
    assert err.value.minimum == 50


def test_no_partition_at_all():
    cands = {2: [MicroConfig(2, "a", 1.0, 0)], 4: [MicroConfig(4, "a", 1.0, 0)]}
    with pytest.raises(InfeasibleBudgetError, match="cannot partition") as err:
        wr(cands, 5, None)
    assert err.value.minimum == -1
    with pytest.raises(InfeasibleBudgetError, match="cannot partition"):
        wr({}, 3, None)


def test_sizes_above_the_batch_and_mislabelled_rows():
    cands = {1: [MicroConfig(1, "a", 1.0, 0)], 8: [MicroConfig(8, "a", 0.1, 0)]}
    assert wr(cands, 4, None).division == "4x1"  # size 8 > B takes no part
    with pytest.raises(ValueError, match="listed under size 2"):
        wr({2: [MicroConfig(1, "a", 1.0, 0)]}, 2, None)
    with pytest.raises(ValueError, match="mini-batch size"):
        wr(cands, 0, None)


def test_micro_front_prunes_dominated_plans():
    ms = [
        MicroConfig(4, "a", 5.0, 0),
        MicroConfig(4, "b", 6.0, 10),
        MicroConfig(4, "c", 2.0, 10),
        MicroConfig(4, "d", 2.0, 20),
        MicroConfig(4, "e", 1.0, 30),
        MicroConfig(4, "f", 5.0, 0),
    ]
    assert [m.plan for m in micro_front(ms)] == ["a", "c", "e"]
    assert [m.plan for m in micro_front(ms, limit=25)] == ["a", "c"]
