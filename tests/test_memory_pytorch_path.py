"""What a memory prediction counts for a PyTorch step: the convolutions' workspace (stock cuDNN's from a profile, or a
conv plan's per call or in its arena), the capacity reserve, and a lower bound said so where nothing gives the
workspace. The profile is the bundled H100 AlexNet b256 one; the plans are made from it here."""

from __future__ import annotations

import pytest

from engine.errors import EngineError
from engine.kernels import KernelKind
from engine.memory import plan_memory
from engine.memory.reserve import RESERVE, planning_capacity
from engine.planner import make_plan
from engine.profile import Profile, resolve_profile
from engine.zoo import get_network

GiB = 1 << 30
MiB = 1 << 20


@pytest.fixture(scope="module")
def alexnet():
    prof = Profile.load(resolve_profile("h100-alexnet-b256-tf32-nchw-powerOfTwo"))
    net = get_network("alexnet", 256)
    wr = make_plan(prof, net, mode="wr", budget=64 * MiB, policy="powerOfTwo")
    wd = make_plan(prof, net, mode="wd", budget=256 * MiB, policy="powerOfTwo")
    return prof, net, wr, wd


def test_without_a_profile_the_peak_is_a_lower_bound_and_says_so(alexnet):
    prof, net, _, _ = alexnet
    bare = plan_memory(net, "vdnn-all-p", convention="pytorch")
    assert bare.peak_is_lower_bound and bare.summary["workspace_unknown"] == 14  # conv1 has no BackwardData
    assert any("lower bound, not a prediction of what runs: 14 convolution kernel runs" in n for n in bare.notes)
    full = plan_memory(net, "vdnn-all-p", convention="pytorch", profile=prof)
    assert not full.peak_is_lower_bound and full.summary["workspace_unknown"] == 0
    assert full.peak >= bare.peak and full.summary["peak_live"] == bare.summary["peak_live"]


def test_the_pytorch_convention_predicts_stock_cudnn_whatever_the_papers_rule(alexnet):
    prof, net, _, _ = alexnet
    for policy in ("liveness", "vdnn-all-p", "sn-recompute"):
        res = plan_memory(net, policy, convention="pytorch", profile=prof)
        same = plan_memory(net, policy, convention="pytorch", profile=prof, workspace="heuristic")
        assert res.workspace_rule == "heuristic" and res.peak == same.peak
    assert plan_memory(net, "vdnn-all-p", profile=prof).workspace_rule == "p"  # the paper's, in its convention


def test_a_conv_plan_counts_its_kernels_workspace_per_call_or_in_its_arena(alexnet):
    prof, net, wr, wd = alexnet
    per_call = plan_memory(net, "liveness", convention="pytorch", profile=prof, conv_plan=wr, plan_workspace="per-call")
    arena = plan_memory(net, "liveness", convention="pytorch", profile=prof, conv_plan=wr)  # apply_plan's default
    assert per_call.workspace_rule == "plan" and arena.workspace_rule == "plan-arena"
    by_id = {k.id: k for k in wr.kernels}
    for r in per_call.kernels.itertuples():
        k = by_id[f"{r.layer}:{KernelKind(r.kind).short}"]
        assert r.workspace == k.workspace and r.plans == "+".join(m.plan for m in k.micro)
    ticks = per_call.ticks
    conv_ticks = per_call.kernels.groupby("tick").workspace.max()
    assert all(ticks.workspace[t] == w for t, w in conv_ticks.items())  # no framework bytes given
    assert (ticks.workspace.drop(conv_ticks.index) == 0).all()
    assert (arena.ticks.workspace == wr.totals.max_workspace).all()  # one buffer, allocated by apply_plan
    wd_arena = plan_memory(net, "liveness", convention="pytorch", profile=prof, conv_plan=wd)
    assert (wd_arena.ticks.workspace == wd.arena_size).all()
    assert not arena.peak_is_lower_bound
    without_profile = plan_memory(net, "liveness", convention="pytorch", conv_plan=wr)  # every kernel planned
    assert not without_profile.peak_is_lower_bound and without_profile.peak == arena.peak


def test_a_conv_plan_is_checked_against_the_network(alexnet):
    prof, net, wr, _ = alexnet
    with pytest.raises(EngineError, match="conv_plan is for mini-batch 256, the network is built for 128"):
        plan_memory(get_network("alexnet", 128), "liveness", conv_plan=wr)
    with pytest.raises(EngineError, match="plans none of vgg16's convolution kernels"):
        plan_memory("vgg16", "liveness", batch=256, conv_plan=wr)
    with pytest.raises(EngineError, match=r"made for other convolutions: its conv1:F is .*, alexnet-caffe's is"):
        plan_memory("alexnet-caffe", "liveness", batch=256, conv_plan=wr)  # same layer names, other shapes
    with pytest.raises(EngineError, match="either conv_plan .* or a workspace rule"):
        plan_memory(net, "liveness", conv_plan=wr, workspace="p")
    with pytest.raises(EngineError, match="conv_plan must be an engine.plan.Plan"):
        plan_memory(net, "liveness", conv_plan="plan.json")
    with pytest.raises(EngineError, match="plan_workspace must be 'arena' or 'per-call'"):
        plan_memory(net, "liveness", conv_plan=wr, plan_workspace="pool")
    with pytest.raises(EngineError, match="plan_workspace goes with conv_plan"):
        plan_memory(net, "liveness", plan_workspace="arena")


def test_plans_that_fill_the_capacity_leave_the_reserve_in_the_pytorch_convention(alexnet):
    prof, net, _, _ = alexnet
    cap = 2 * GiB
    sn = plan_memory(net, "superneurons", convention="pytorch", profile=prof, capacity=cap)
    assert sn.capacity == planning_capacity(cap, RESERVE) == int(cap * 0.95) and sn.reserve == RESERVE
    assert sn.peak <= sn.capacity and any("planned for 95% of the 2 GiB cap" in n for n in sn.notes)
    # the least cap, not the least capacity to plan for
    floor = plan_memory(net, "superneurons", convention="pytorch", profile=prof, capacity=cap, reserve=0)
    assert sn.summary["min_capacity"] == pytest.approx(floor.summary["min_capacity"] / (1 - RESERVE))
    wr = plan_memory(net, "vdnn-all-p", convention="pytorch", profile=prof, capacity=cap, workspace="wr")
    assert wr.capacity == int(cap * 0.95)  # a dynamic rule fills the capacity too
    stock = plan_memory(net, "vdnn-all-p", convention="pytorch", profile=prof, capacity=cap)
    assert stock.capacity == cap and stock.reserve == 0  # heuristic: PyTorch's own choice
    paper = plan_memory(net, "superneurons", profile=prof, capacity=cap)  # the paper's convention: the whole cap
    assert paper.capacity == cap and paper.reserve == 0
    assert plan_memory(net, "superneurons", profile=prof, capacity=cap, reserve=0.1).capacity == int(cap * 0.9)
    with pytest.raises(EngineError, match=r"reserve must be a fraction of the capacity in \[0, 1\)"):
        plan_memory(net, "superneurons", capacity=cap, reserve=1.5)
