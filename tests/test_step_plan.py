"""Per-kernel WR limits in make_plan, the memory planner's ``wr`` rule through the same function, and
``step_plan`` (a memory plan's free(s) per kernel as a Plan).

Profiles are SYNTHETIC (engine/testing/synthetic.py) except where a test names a bundled H100 profile.
Small cases are checked against brute force over every partition of the mini-batch.
"""

from __future__ import annotations

import json
import math
import random

import pytest

from engine.errors import EngineError, InfeasibleBudgetError, PlanFormatError
from engine.kernels import KernelKind
from engine.memory import plan_memory, step_limits, step_plan
from engine.network import NetBuilder
from engine.optimize import wr
from engine.plan import Plan, check_network
from engine.planner import make_plan
from engine.profile import Profile, resolve_profile
from engine.summary import plan_summary
from engine.testing.reference import partitions
from engine.testing.synthetic import GEMM, synthetic_profile, synthetic_profile_of

MiB = 2**20


def twins(batch: int = 16):
    """Three 3x3 convolutions of one signature (64 channels, 56x56) in a row: layers sharing kernel signatures,
    which a per-step plan may still give different limits."""
    b = NetBuilder("twins", batch, (64, 56, 56))
    for i in (1, 2, 3):
        b.conv(64, 3, pad=1, name=f"conv{i}")
        b.relu(name=f"relu{i}")
    b.fc(10, name="fc")
    b.softmax(name="prob")
    return b.build()


def profile_of(net, policy="powerOfTwo") -> Profile:
    """SYNTHETIC profile of every kernel of ``net`` at the policy's sizes."""
    return synthetic_profile_of(net, policy, "tf32", "NCHW", command="tests/test_step_plan.py")


def brute(profile: Profile, key: str, batch: int, limit: int) -> float | None:
    """Fastest time of any configuration of ``batch`` whose every piece fits ``limit``: every partition of the
    measured sizes, each piece its fastest plan within the limit (pieces are independent: workspace is a max)."""
    cands = profile.candidates(key)
    best = None
    for parts in partitions(batch, [b for b in cands if b <= batch]):
        fits = [[m.time_ms for m in cands[b] if m.workspace <= limit] for b in parts]
        if all(fits):
            t = sum(min(f) for f in fits)
            best = t if best is None else min(best, t)
    return best


def normalised(plan: Plan) -> str:
    doc = json.loads(plan.to_json())
    doc["provenance"]["created"] = "-"
    return json.dumps(doc, indent=1)


@pytest.fixture(scope="module")
def small():
    net = twins(16)
    return net, profile_of(net)


def without_gemm(profile: Profile) -> Profile:
    """The SYNTHETIC profile without its zero-workspace plan: every kernel then needs workspace."""
    return Profile(
        profile.table[profile.table.plan != GEMM].reset_index(drop=True), profile.provenance, profile.networks
    )


def workspaces(profile: Profile, key: str) -> list[int]:
    return sorted({m.workspace for ms in profile.candidates(key).values() for m in ms})


@pytest.mark.parametrize("seed", range(6))
def test_per_kernel_limits_are_respected_and_optimal(small, seed):
    net, prof = small
    rng = random.Random(seed)
    kernels = net.kernels()
    limits = {}
    for k in kernels:
        ws = workspaces(prof, k.signature.key)
        limits[k.id] = rng.choice(ws) + rng.choice([0, 0, 1, 4096])  # at a plan's workspace, or just above it
    plan = make_plan(prof, net, mode="wr", budget=max(limits.values()), policy="powerOfTwo", limits=limits)
    for pk in plan.kernels:
        assert pk.workspace <= limits[pk.id] == plan.limit(pk.id)
        assert pk.time_ms == pytest.approx(brute(prof, pk.signature, net.batch, limits[pk.id]), rel=1e-12)
    # the plan round-trips and names only the kernels below its budget
    assert set(plan.limits) == {k for k, v in limits.items() if v != plan.budget}
    back = Plan.from_dict(json.loads(plan.to_json()))
    check_network(back, net)
    assert back.to_json() == plan.to_json()


def test_layers_of_one_signature_keep_their_own_limits(small):
    net, prof = small
    key = net.kernels()[0].signature.key
    ws = workspaces(prof, key)
    tight, loose = ws[0], ws[-1]
    plan = make_plan(prof, net, mode="wr", budget=loose, policy="powerOfTwo", limits={"conv2:F": tight})
    by_id = {k.id: k for k in plan.kernels}
    assert by_id["conv1:F"].signature == by_id["conv2:F"].signature == by_id["conv3:F"].signature
    assert by_id["conv2:F"].workspace <= tight
    assert by_id["conv1:F"].time_ms < by_id["conv2:F"].time_ms  # the tight limit costs time
    assert by_id["conv1:F"].micro == by_id["conv3:F"].micro  # same signature, same limit: same plan
    assert [k.id for k in plan.kernels] == [k.id for k in net.kernels()]
    assert "limit" in plan_summary(plan).splitlines()[1]


@pytest.mark.parametrize("budget_mib", [2, 8, 64, 4096])
def test_limits_all_equal_to_the_budget_give_the_plain_wr_plan_byte_for_byte(budget_mib):
    prof = synthetic_profile("alexnet", 64)  # SYNTHETIC
    from engine.zoo import get_network

    net = get_network("alexnet", 64)
    budget = budget_mib * MiB
    plain = make_plan(prof, net, mode="wr", budget=budget, command="t")
    every = make_plan(prof, net, mode="wr", budget=budget, command="t", limits={k.id: budget for k in net.kernels()})
    some = make_plan(prof, net, mode="wr", budget=budget, command="t", limits={"conv3:BF": f"{budget_mib}MiB"})
    assert normalised(plain) == normalised(every) == normalised(some)
    assert "limits" not in json.loads(every.to_json()) and every.limits is None


def test_an_infeasible_limit_is_one_line_naming_the_kernel(small):
    net, prof = small[0], without_gemm(small[1])
    key = net.kernels()[0].signature.key
    least = min(workspaces(prof, key))
    assert least > 0
    with pytest.raises(InfeasibleBudgetError) as err:
        make_plan(prof, net, mode="wr", budget=1 << 30, policy="powerOfTwo", limits={"conv2:BF": least - 1})
    msg = str(err.value)
    assert "\n" not in msg and "conv2:BF" in msg and err.value.minimum > least - 1
    # the budget message is unchanged when the budget, not a limit, is short
    with pytest.raises(InfeasibleBudgetError, match="per-kernel workspace budget"):
        make_plan(prof, net, mode="wr", budget=least - 1, policy="powerOfTwo", limits={"conv2:BF": 1 << 30})


def test_bad_limits_are_refused(small):
    net, prof = small
    with pytest.raises(EngineError, match="conv9:F"):
        make_plan(prof, net, mode="wr", budget=MiB, limits={"conv9:F": MiB})
    with pytest.raises(EngineError, match="WR"):
        make_plan(prof, net, mode="wd", budget=64 * MiB, limits={"conv1:F": MiB})
    plan = make_plan(prof, net, mode="wr", budget=64 * MiB, policy="powerOfTwo", limits={"conv1:F": 0})
    doc = json.loads(plan.to_json())
    bad = dict(doc, limits={"conv1:F": 0, "conv7:F": 5})
    with pytest.raises(PlanFormatError, match="conv7:F"):
        Plan.from_dict(bad)
    doc2 = json.loads(plan.to_json())
    doc2["limits"]["conv1:F"] = -1
    with pytest.raises(PlanFormatError, match="limits"):
        Plan.from_dict(doc2)
    conv2 = next(k for k in doc["kernels"] if k["id"] == "conv2:F")
    assert conv2["workspace"] > 0
    doc3 = json.loads(plan.to_json())
    doc3["limits"]["conv2:F"] = conv2["workspace"] - 1
    with pytest.raises(PlanFormatError, match="above its limit"):
        Plan.from_dict(doc3)
    doc4 = json.loads(plan.to_json())
    doc4["limits"] = {}
    with pytest.raises(PlanFormatError, match="limits"):
        Plan.from_dict(doc4)


# --- the memory planner's wr rule --------------------------------------------------------------------


def old_wr_rule(profile: Profile, key: str, batch: int, free: float):
    """The rule as engine/memory/workspace.py had it before it went through make_plan's function: WR over every
    measured size at max(free, 0)."""
    return wr(profile.candidates(key), batch, None if math.isinf(free) else int(max(free, 0)))


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["liveness", "vdnn-all-p", "sn-recompute"])
@pytest.mark.parametrize("extra_mib", [1, 32, 256])
def test_memory_wr_rule_chooses_what_it_chose_before(policy, extra_mib):
    prof = Profile.load(resolve_profile("h100-alexnet-b256-tf32-nchw-powerOfTwo"))
    base = plan_memory("alexnet", policy, batch=256, profile=prof).summary["peak_live"]
    res = plan_memory("alexnet", policy, batch=256, capacity=int(base + extra_mib * MiB), profile=prof, workspace="wr")
    for r in res.kernels.itertuples():
        old = old_wr_rule(prof, r.signature, 256, r.free)
        assert (r.time_ms, r.workspace, r.division, r.plans) == (
            old.time_ms,
            old.workspace,
            old.division,
            "+".join(m.plan for m in old.micro),
        )
        assert r.workspace <= r.free


def test_memory_wr_rule_on_a_synthetic_profile_matches_brute_force(small):
    net, prof = small
    base = plan_memory(net, "liveness", profile=prof).summary["peak_live"]
    for extra in (0, 1, 64 * 1024, MiB, 16 * MiB):
        res = plan_memory(net, "liveness", capacity=int(base + extra), profile=prof, workspace="wr")
        for r in res.kernels.itertuples():
            best = brute(prof, r.signature, net.batch, int(r.free))
            assert r.fits == (best is not None)
            if best is not None:
                assert r.time_ms == pytest.approx(best, rel=1e-12) and r.workspace <= r.free


# --- step_plan -----------------------------------------------------------------------------------------


def _memory(net, prof, policy="liveness", extra=MiB):
    base = plan_memory(net, policy, profile=prof).summary["peak_live"]
    return plan_memory(net, policy, capacity=int(base + extra), profile=prof, workspace="wr")


@pytest.mark.parametrize("extra", [64 * 1024, MiB, 8 * MiB])
def test_step_plan_holds_the_memory_planners_choices_at_free_s(small, extra):
    net, prof = small
    res = _memory(net, prof, extra=extra)
    plan = step_plan(res, prof, command="tests")
    limits, runs = step_limits(res)
    by_id = {k.id: k for k in plan.kernels}
    assert [k.id for k in plan.kernels] == [k.id for k in net.kernels()]
    for r in res.kernels.itertuples():
        kid = f"{r.layer}:{KernelKind(r.kind).short}"
        assert runs[kid] == 1
        assert plan.limit(kid) == limits[kid] == math.floor(r.free)
        k = by_id[kid]
        assert (k.division, "+".join(m.plan for m in k.micro)) == (r.division, r.plans)
        assert k.time_ms == pytest.approx(r.time_ms) and k.workspace == r.workspace <= r.free
    assert plan.totals.time_ms == pytest.approx(res.summary["conv_ms"])
    check_network(Plan.from_dict(json.loads(plan.to_json())), net)
    # free(s) differs between layers of one signature, and so do their limits
    assert len({plan.limit(f"conv{i}:F") for i in (1, 2, 3)}) > 1


def test_step_plan_on_the_bundled_h100_profile():
    prof = Profile.load(resolve_profile("h100-alexnet-b256-tf32-nchw-powerOfTwo"))
    from engine.zoo import get_network

    net = get_network("alexnet", 256)
    res = _memory(net, prof, "sn-recompute", 64 * MiB)
    plan = step_plan(res, prof)
    assert plan.totals.time_ms == pytest.approx(res.summary["conv_ms"])
    assert all(k.workspace <= plan.limit(k.id) for k in plan.kernels)
    assert any("per-step plan" in n for n in plan.notes)


def test_step_plan_refuses_what_it_cannot_plan(small):
    net, prof = small
    with pytest.raises(EngineError, match="capacity"):
        step_plan(plan_memory(net, "liveness", profile=prof, workspace="wr"), prof)
    with pytest.raises(EngineError, match="wr"):
        step_plan(plan_memory(net, "liveness", capacity=1 << 30, profile=prof, workspace="fit"), prof)
    # a capacity that leaves some conv less than its least workspace (1 MiB without GEMM): the one-line error
    prof = without_gemm(prof)
    free = plan_memory(net, "liveness", capacity=1 << 40, profile=prof, workspace="wr")
    cap = int(free.ticks.live[free.kernels.tick].max()) + MiB // 2  # 0.5 MiB free at the fullest conv tick
    res = plan_memory(net, "liveness", capacity=cap, profile=prof, workspace="wr")
    assert not res.kernels.fits.all()
    with pytest.raises(InfeasibleBudgetError) as err:
        step_plan(res, prof)
    assert "\n" not in str(err.value) and "least it can run in" in str(err.value)
