"""Route, inventory and residency invariants of every policy, on random chains and DAGs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.memory import plan_memory
from engine.memory.policies import MEMORY_POLICIES, get_policy
from engine.memory.tensors import CONVENTIONS, build_inventory, route_construct
from engine.memory.timeline import memory_curve
from engine.network import NetBuilder
from engine.testing.networks import fork_join

PLAN_POLICIES = [
    p for p in MEMORY_POLICIES if p != "vdnn-dyn"
]  # vdnn-dyn composes the others (engine/memory/iteration.py)


def build_plan(net, policy, convention=None, **kw):
    info = get_policy(policy)
    inv = build_inventory(net, convention or info.convention)
    kwargs = {**info.kwargs, **kw}
    if policy == "superneurons":
        kwargs.setdefault("capacity", None)
    return info.build(inv, **kwargs)


def resident_at(plan):
    """tick -> set of storages on the GPU."""
    out = {t.index: set() for t in plan.ticks}
    for stg, spans in plan.intervals.items():
        for a, b in spans:
            for i in range(a, b + 1):
                out[i].add(stg)
    return out


def assert_uses_resident(plan):
    res = resident_at(plan)
    inv = plan.inventory
    pooled = {stg for stg, cls in inv.storage_class().items() if cls in plan.class_override}  # static pools
    for t in plan.ticks:
        missing = {inv.tensors[u].storage for u in t.uses} - res[t.index] - pooled
        assert not missing, f"{plan.policy}: tick {t.index} ({t.layer} {t.phase}) misses {sorted(missing)}"


@st.composite
def networks(draw):
    """Random chains of conv/relu/pool/bn/lrn/dropout, optionally with a residual or concat block."""
    batch = draw(st.integers(1, 4))
    b = NetBuilder("rand", batch, (draw(st.sampled_from([3, 4])), 16, 16))
    b.conv(draw(st.sampled_from([4, 8])), 3, pad=1, name="c0")
    ops = draw(
        st.lists(
            st.sampled_from(["conv", "relu", "pool", "bn", "lrn", "dropout", "res", "cat"]), min_size=1, max_size=8
        )
    )
    for i, op in enumerate(ops):
        c, h, _ = b.shape(b.last)
        if op == "conv":
            b.conv(c, 3, pad=1, name=f"conv{i}")
        elif op == "relu":
            b.relu(name=f"relu{i}")
        elif op == "pool" and h >= 4:
            b.pool(2, 2, name=f"pool{i}")
        elif op == "bn":
            b.bn(name=f"bn{i}")
        elif op == "lrn":
            b.lrn(name=f"lrn{i}")
        elif op == "dropout":
            b.dropout(name=f"drop{i}")
        elif op == "res":
            src = b.last
            x = b.conv(c, 3, pad=1, src=src, name=f"rconv{i}")
            x = b.relu(src=x, name=f"rrelu{i}")
            b.add([x, src], name=f"radd{i}")
        elif op == "cat":
            src = b.last
            x = b.conv(c, 1, src=src, name=f"cconv{i}")
            b.concat([x, src], name=f"cat{i}")
    b.fc(5, name="fc")
    b.softmax(name="prob")
    return b.build()


def test_route_is_superneurons_dfs_on_fork_join():
    net = fork_join()
    route = route_construct(net)
    assert sorted(route) == sorted(x.name for x in net.layers[1:])
    pos = {n: i for i, n in enumerate(route)}
    for layer in net.layers[1:]:
        for src in layer.inputs:
            assert src == "data" or pos[src] < pos[layer.name]
    # depth first: the first branch of relu1 (conv_a, bn_a) runs before the second (conv_c), and the
    # join waits for both; pool_skip is relu1's last consumer and runs after the add/pool branch
    assert route[:6] == ["conv1", "relu1", "conv_a", "bn_a", "conv_c", "add"]
    assert pos["pool_skip"] > pos["pool"] and route[-3:] == ["cat", "fc", "prob"]


@pytest.mark.parametrize("convention", list(CONVENTIONS))
def test_inventory_gradients_match_activation_sizes(convention):
    net = fork_join(4)
    inv = build_inventory(net, convention)
    for name, t in inv.tensors.items():
        if name.startswith("G:"):
            src = name[2:].split("@")[0]
            assert t.nbytes == inv.tensors[f"Y:{src}"].nbytes
    # an alias is never larger than the storage its creator allocated (concat's dX are views)
    sizes = {}
    for t in inv.tensors.values():
        assert sizes.setdefault(t.storage, t.nbytes) >= t.nbytes


@pytest.mark.parametrize("policy", PLAN_POLICIES)
def test_every_policy_keeps_what_a_tick_uses_on_fork_join(policy):
    plan = build_plan(fork_join(), policy)
    assert_uses_resident(plan)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(net=networks(), policy=st.sampled_from(PLAN_POLICIES))
def test_every_policy_keeps_what_a_tick_uses(net, policy):
    plan = build_plan(net, policy)
    assert_uses_resident(plan)
    # nothing is resident twice, spans are ordered
    for spans in plan.intervals.values():
        assert all(a <= b for a, b in spans)
        assert all(spans[i][1] < spans[i + 1][0] for i in range(len(spans) - 1))


@settings(max_examples=30, deadline=None)
@given(net=networks(), convention=st.sampled_from(list(CONVENTIONS)))
def test_liveness_never_above_network_wide(net, convention):
    live = memory_curve(build_plan(net, "liveness", convention)).live
    whole = memory_curve(build_plan(net, "baseline-superneurons", convention)).live
    assert np.all(live <= whole + 1e-6)
    assert whole.max() == pytest.approx(sum(build_inventory(net, convention).storage_bytes().values()))


@settings(max_examples=30, deadline=None)
@given(net=networks())
def test_recompute_strategies_order(net):
    runs = {s: build_plan(net, "sn-recompute", strategy=s) for s in ("speed", "memory", "cost-aware")}
    counts = {s: p.recompute_count for s, p in runs.items()}
    assert counts["speed"] <= counts["cost-aware"] <= counts["memory"]
    # only non-checkpoint layers are re-forwarded, none twice before one backward layer
    for p in runs.values():
        assert all(net.layer(t.layer).op not in ("conv", "fc", "softmax") for t in p.ticks if t.phase == "R")
        per_step = [(t.step, t.layer) for t in p.ticks if t.phase == "R"]
        assert len(per_step) == len(set(per_step))


@settings(max_examples=25, deadline=None)
@given(net=networks())
def test_lru_cache_respects_capacity_when_it_can(net):
    free_plan = build_plan(net, "superneurons")
    floor_plan = build_plan(net, "superneurons", capacity=0)
    hi, lo = memory_curve(free_plan).live.max(), memory_curve(floor_plan).live.max()
    assert lo <= hi + 1e-6
    cap = int((hi + lo) / 2)
    plan = build_plan(net, "superneurons", capacity=cap)
    assert_uses_resident(plan)
    assert memory_curve(plan).live.max() <= max(cap, lo) + 1e-6


@pytest.mark.slow
@pytest.mark.parametrize("convention", ["superneurons", "torch", "caffe", "pytorch"])
@pytest.mark.parametrize("policy", [p for p in MEMORY_POLICIES if not p.startswith("baseline-vdnn")])
def test_every_tensor_is_resident_when_a_tick_uses_it(policy, convention):
    """Under every policy and tensor convention, a tick's tensors are on the GPU at that tick. (baseline-vdnn
    is left out: its gradients are one static pool, sized by class_override, not intervals.) This caught
    recomputation under an in-place convention dropping the checkpoint that shares a re-forwarded storage."""
    capacity = 1 << 30 if policy in ("superneurons", "vdnn-dyn") else None
    plan = plan_memory("resnet18", policy, batch=8, convention=convention, capacity=capacity).plan
    missing = [
        (i, u)
        for i, tick in enumerate(plan.ticks)
        for u in tick.uses
        if not any(a <= i <= b for a, b in plan.intervals.get(plan.inventory.tensors[u].storage, []))
    ]
    assert not missing, missing[:5]
