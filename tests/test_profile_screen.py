"""Which plans are timed with repeats (engine.gpu.screen), against brute force, on SYNTHETIC times."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from engine.gpu.screen import (
    MARGIN,
    SLOW_MS,
    WARM_UP_MARGIN,
    Timed,
    dominators,
    framework_choices,
    left_at_warm_up,
    timed,
)


def can_stand_for(q: Timed, p: Timed) -> bool:
    """Brute force: q is in every engine set p is in, at no more workspace."""
    return (
        q.usable
        and q.workspace <= p.workspace
        and (q.heuristic or not p.heuristic)
        and (q.deterministic or not p.deterministic)
    )


plan = st.builds(
    lambda t, spread, ws, h, d, u: (t, t * spread, ws, h, d, u),
    st.floats(0.01, 10.0),
    st.floats(0.9, 1.0),
    st.sampled_from([0, 0, 1 << 10, 1 << 20, 1 << 24]),
    st.booleans(),
    st.booleans(),
    st.booleans() | st.just(True),
)


def on_a_front(plans: list[Timed], true: list[float]) -> set[int]:
    """Brute force: the plans on the (workspace, true time) front of some engine set (all, heuristic only,
    deterministic only, both) they are in."""
    out = set()
    for heuristic in (False, True):
        for deterministic in (False, True):
            in_set = [
                i
                for i, p in enumerate(plans)
                if p.usable and (p.heuristic or not heuristic) and (p.deterministic or not deterministic)
            ]
            out |= {
                i
                for i in in_set
                if not any(plans[j].workspace <= plans[i].workspace and true[j] < true[i] for j in in_set if j != i)
            }
    return out


def make(specs) -> list[Timed]:
    return [Timed(f"p{i}", t, low, ws, h, d, u) for i, (t, low, ws, h, d, u) in enumerate(specs)]


def beaten_by(plans: list[Timed], i: int, margin: float) -> list[int]:
    """Brute force: every plan that can stand for plan i and ran more than ``margin`` faster than i's least."""
    p = plans[i]
    return [j for j, q in enumerate(plans) if j != i and can_stand_for(q, p) and (1 + margin) * q.time < p.low]


@settings(max_examples=300, deadline=None)
@given(st.lists(plan, min_size=1, max_size=12), st.sets(st.integers(0, 11), max_size=3))
def test_a_plan_is_timed_once_exactly_when_a_plan_that_stands_for_it_was_beyond_the_margin_faster(specs, keep):
    plans = make(specs)
    dom = dominators(plans, keep)
    for i in range(len(plans)):
        beaten = beaten_by(plans, i, MARGIN)
        assert (dom[i] is not None) == (bool(beaten) and i not in keep)
        if dom[i] is not None:
            assert dom[i] in beaten and dom[dom[i]] is None  # a dominator is itself timed with repeats


@settings(max_examples=300, deadline=None)
@given(st.lists(plan, min_size=1, max_size=12), st.data())
def test_no_plan_timed_once_is_in_a_desirable_set_whatever_its_runs_within_the_noise(specs, data):
    """If each plan's true time is within 1 +- d of its measured time (low for a plan timed once, d =
    MARGIN / (2 + MARGIN)), every plan on the (workspace, time) front of every engine set was repeated."""
    plans = make(specs)
    dom = dominators(plans)
    d = MARGIN / (2 + MARGIN) * 0.999
    true = [(p.low if dom[i] is not None else p.time) * data.draw(st.floats(1 - d, 1 + d)) for i, p in enumerate(plans)]
    assert not any(dom[i] is not None for i in on_a_front(plans, true))


warm_up = st.builds(
    lambda t, ws, h, d, u: (t, t, ws, h, d, u),
    st.sampled_from([0.5, 4.0, 9.9, 10.0, 18.0, 20.0, 36.0, 300.0]) | st.floats(0.5, 60.0),  # ms: about SLOW_MS
    st.sampled_from([0, 0, 1 << 10, 1 << 20]),
    st.booleans(),
    st.booleans(),
    st.booleans() | st.just(True),
)


@settings(max_examples=300, deadline=None)
@given(st.lists(warm_up, min_size=1, max_size=10), st.sets(st.integers(0, 9), max_size=2))
def test_a_slow_plan_is_left_at_its_warm_up_exactly_when_one_that_stands_for_it_was_over_twice_as_fast(specs, keep):
    plans = make(specs)
    left = left_at_warm_up(plans, keep)
    for i, p in enumerate(plans):
        beaten = beaten_by(plans, i, WARM_UP_MARGIN)
        assert (left[i] is not None) == (bool(beaten) and i not in keep and p.low >= SLOW_MS)
        if left[i] is not None:
            assert left[i] in beaten and left[left[i]] is None  # the plan it names is itself timed again


@settings(max_examples=300, deadline=None)
@given(st.lists(warm_up, min_size=1, max_size=10), st.data())
def test_no_plan_left_at_its_warm_up_is_on_a_front_if_warm_ups_over_10_ms_run_under_1_9x_their_time(specs, data):
    """The rule's claim (engine.gpu.screen): true times with each warm-up at most 1.9x its plan's time (a slow
    plan; any factor for a faster one) and at most 5 % faster than it: every plan on the (workspace, time) front
    of every engine set is timed again."""
    plans = make(specs)
    left = left_at_warm_up(plans)
    true = []
    for p in plans:
        ratio = [1 / 1.05, 1.0, 1.899] if p.low >= SLOW_MS else [1 / 1.05, 1.0, 100.0]  # warm-up / true time
        true.append(p.low / data.draw(st.sampled_from(ratio) | st.floats(ratio[0], ratio[-1])))
    assert not any(left[i] is not None for i in on_a_front(plans, true))


def test_the_framework_choice_at_every_limit_is_repeated():
    # (heuristic rank, workspace): rank 0 needs 8 MiB, rank 1 none; swept plans are never a framework's choice
    ranked = [(-1, 0), (1, 0), (0, 8 << 20), (2, 1 << 20), (-1, 1 << 10)]
    assert framework_choices(ranked) == {2, 1}
    plans = make([(1.0, 1.0, 0, False, True, True), (5.0, 5.0, 0, True, True, True), (0.1, 0.1, 0, True, True, True)])
    assert dominators(plans) == [2, 2, None]
    assert dominators(plans, keep={1}) == [2, None, None]


def test_a_row_is_seen_with_its_engine_sets_and_precision():
    row = dict(
        signature="Forward/tf32/NCHW/c3h8w8/k4r3s3/p1x1/s1x1/d1x1/g1",
        plan="eng0",
        workspace=64,
        heuristic_rank=-1,
        numerical_notes="TENSOR_CORE|NONDETERMINISTIC",
    )
    t = timed(row, 2.0, 1.5)
    assert (t.name, t.time, t.low, t.workspace, t.heuristic, t.deterministic, t.usable) == (
        "eng0",
        2.0,
        1.5,
        64,
        False,
        False,
        True,
    )
    assert not timed(dict(row, numerical_notes="DOWN_CONVERT_INPUTS"), 1, 1).usable
