"""What the planner counts for a PyTorch training step beyond the network's tensors, each found by a GPU trace
(benchmarks/reports/memory_training.md): the input batch the training loop holds, cuDNN's workspace as PyTorch
picks it without ``cudnn.benchmark``, and the cuBLAS/cuBLASLt workspaces PyTorch keeps. The profile here is the
bundled H100 VGG-16 profile (real measurements); byte counts passed as ``framework_bytes`` are SYNTHETIC."""

from __future__ import annotations

import pytest

from engine.errors import EngineError
from engine.memory import plan_memory
from engine.memory.workspace import framework_first_beyond
from engine.memory.calibrate import FORMAT, VERSION, TimeParamsFormatError, check, framework_bytes, merge
from engine.profile import Profile, resolve_profile
from engine.zoo import get_network

MiB = 1 << 20


@pytest.fixture(scope="module")
def vgg():
    return Profile.load(resolve_profile("h100-vgg16-b64-tf32-nchw-powerOfTwo"))


def _key(net, kid):
    return next(k.signature.key for k in net.kernels() if k.id == kid)


@pytest.mark.slow
def test_framework_first_takes_the_heuristic_first_plan_even_when_the_profiler_did_not_time_it(vgg):
    key = _key(get_network("vgg16", 64), "conv1_2:F")
    t = vgg.table
    ranked = t[(t.signature == key) & (t.micro_batch == 64) & (t.heuristic_rank >= 0)].sort_values("heuristic_rank")
    first = ranked.iloc[0]
    assert first.status == "skipped"  # above the profiling cap, or runtime-compiled
    m, timed = vgg.framework_first(key, 64, None)
    assert (m.plan, m.workspace, timed) == (first.plan, first.workspace, False)
    ok = t[(t.signature == key) & (t.micro_batch == 64) & (t.status == "ok")]
    assert m.time_ms == ok.time_ms.min()  # the stand-in: the fastest measured plan's time
    m, timed = vgg.framework_first(key, 64, 1 << 30)  # what PyTorch can allocate within 1 GiB
    fits = ranked[ranked.workspace <= 1 << 30].iloc[0]
    assert (m.plan, timed) == (fits.plan, fits.status == "ok") and m.workspace <= 1 << 30
    assert vgg.framework_first(key, 64, 0) is None or vgg.framework_first(key, 64, 0)[0].workspace == 0


@pytest.mark.slow
def test_beyond_the_measured_sizes_the_heuristic_order_below_is_extrapolated(vgg):
    """At a mini-batch the profile never measured (a capacity run's), PyTorch still runs it undivided: cuDNN's order
    at the largest measured size below, each plan's time scaled by the batch and its workspace grown as it grew
    between the two largest sizes; under a limit, the first plan whose grown workspace fits."""
    key = _key(get_network("vgg16", 64), "conv2_1:F")
    t = vgg.table
    at = {b: t[(t.signature == key) & (t.micro_batch == b)].set_index("plan") for b in (32, 64)}
    ranked = at[64][at[64].heuristic_rank >= 0].sort_values("heuristic_rank")
    fastest = at[64][at[64].status == "ok"].time_ms.min()

    def grown(plan):
        w64, w32 = at[64].workspace[plan], at[32].workspace.get(plan, at[64].workspace[plan])
        return int(w64 + max(0, (w64 - w32) / 32) * (100 - 64))

    for limit in (float("inf"), 64 * MiB, 0):
        m = framework_first_beyond(vgg, key, 100, limit)
        first = next(p for p in ranked.index if grown(p) <= limit)
        r = ranked.loc[first]
        assert (m.batch, m.plan, m.workspace) == (100, first, grown(first))
        assert m.time_ms == pytest.approx((r.time_ms if r.status == "ok" else fastest) * 100 / 64)
    assert framework_first_beyond(vgg, key, 1, float("inf")) is None  # nothing measured below batch 1
    res = plan_memory(
        get_network("vgg16", 100),
        "liveness",
        profile=vgg,
        workspace="heuristic",
        convention="pytorch",
        capacity=12 << 30,
    )
    assert (res.kernels.division == "1x100").all()
    assert any("undivided, as PyTorch runs them" in n for n in res.notes)


@pytest.mark.slow
def test_the_heuristic_rule_follows_the_free_memory(vgg):
    free = plan_memory("vgg16", "liveness", profile=vgg, workspace="heuristic", convention="pytorch")
    k = free.kernels.set_index("layer").loc["conv1_2"]
    assert (k.workspace > 1000 * MiB).any()  # the heuristic-first plans need about 1.5 GiB
    live = free.ticks.live[free.ticks.layer == "conv1_2"].max()
    tight = plan_memory(
        "vgg16", "liveness", profile=vgg, workspace="heuristic", convention="pytorch", capacity=int(live + 500 * MiB)
    )  # 500 MiB free at conv1_2: PyTorch skips what it cannot allocate
    mine = tight.kernels[tight.kernels.layer == "conv1_2"]
    assert (mine.workspace <= mine.free).all() and mine.fits.all()
    assert tight.kernels.set_index("layer").loc["conv1_2"].workspace.max() < k.workspace.max()


def test_pytorch_convention_keeps_the_input_batch_resident():
    torch_plan = plan_memory("alexnet", "vdnn-all-p", convention="pytorch")
    assert not [c for c in torch_plan.plan.copies if c.storage == "Y:data"]
    caffe_plan = plan_memory("alexnet", "vdnn-all-p", convention="caffe")
    assert [c for c in caffe_plan.plan.copies if c.storage == "Y:data"]  # a framework that owns its data blob


def test_framework_bytes_count_as_workspace_all_iteration():
    a = plan_memory("alexnet", "liveness", convention="pytorch")
    b = plan_memory("alexnet", "liveness", convention="pytorch", framework_bytes=65 * MiB)
    assert b.peak == a.peak + 65 * MiB
    assert (b.ticks.workspace - a.ticks.workspace == 65 * MiB).all()
    with pytest.raises(EngineError, match="framework_bytes"):
        plan_memory("alexnet", "liveness", framework_bytes=-1)


def test_calibration_carries_the_framework_bytes():
    doc = {"format": FORMAT, "version": VERSION, "framework": {"bytes": 65 * MiB}}
    assert framework_bytes(check(doc)) == 65 * MiB
    assert framework_bytes(merge(doc, {"format": FORMAT, "version": VERSION, "hbm": {"rate": 1e12}})) == 65 * MiB
    assert framework_bytes({"format": FORMAT, "version": VERSION}) == 0
    for bad in (-1, 1.5, "65MiB", 1 << 41):
        with pytest.raises(TimeParamsFormatError, match="framework.bytes"):
            check({"format": FORMAT, "version": VERSION, "framework": {"bytes": bad}})


@pytest.mark.parametrize("policy", ["sn-recompute", "superneurons"])
def test_a_reforwarded_max_pool_keeps_its_indices_only_from_its_reforward_to_its_backward(policy):
    """The PyTorch runtime drops what a re-forwarded layer saved and its re-forward makes it again: AlexNet's
    pool1 indices (int64, twice pool1's fp32 output) are resident at pool1's forward and from its R tick to its
    backward, not through the rest of the step (a GPU trace found them counted there: 0.09 GiB at b256)."""
    res = plan_memory("alexnet", policy, convention="pytorch")
    plan, st = res.plan, res.plan.inventory.tensors["M:pool1:indices"].storage
    ticks = {(t.layer, t.phase): t.index for t in plan.ticks}
    assert ("pool1", "R") in ticks
    resident = {i for a, b in plan.intervals[st] for i in range(a, b + 1)}
    assert resident == {ticks["pool1", "F"]} | set(range(ticks["pool1", "R"], ticks["pool1", "B"] + 1))
    assert res.plan.inventory.tensors["M:pool1:indices"].nbytes == 2 * res.plan.inventory.tensors["Y:pool1"].nbytes
