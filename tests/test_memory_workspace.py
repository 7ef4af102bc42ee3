"""Workspace under a plan (free(s) = capacity - live(s)) and the time model, on a SYNTHETIC profile."""

from __future__ import annotations

import math

import pytest

from engine.errors import EngineError
from engine.kernels import KernelSignature
from engine.memory import plan_memory
from engine.memory.timemodel import TimeParams
from engine.profile import Profile
from engine.zoo import get_network
from engine.testing.synthetic import synthetic_profile, synthetic_rows

GiB = 2**30


@pytest.fixture(scope="module")
def prof():
    return synthetic_profile("alexnet", 64)  # SYNTHETIC, powerOfTwo sizes 1..64


def test_free_is_capacity_minus_live(prof):
    cap = 2 * GiB
    res = plan_memory("alexnet", "liveness", batch=64, capacity=cap, profile=prof)
    t, k = res.ticks, res.kernels
    assert len(k) == 5 * 3 - 1  # conv1 has no BackwardData
    for r in k.itertuples():
        assert r.free == cap - t.live[r.tick]
    assert (res.ticks.free == cap - res.ticks.live).all()


def test_fit_is_fastest_within_free_superneurons_order(prof):
    # a capacity that forces slower plans at some kernels
    free_peak = plan_memory("alexnet", "liveness", batch=64, profile=prof).summary["peak_live"]
    cap = int(free_peak + 40 * 2**20)
    res = plan_memory("alexnet", "liveness", batch=64, capacity=cap, profile=prof, workspace="fit")
    by_tick = res.kernels.groupby("tick")
    for _tick, grp in by_tick:
        free = grp.free.iloc[0]
        assert grp.workspace.sum() <= free  # BD and BF buffers coexist
        used = 0
        for r in grp.itertuples():
            cands = prof.candidates(r.signature, [64])[64]
            fitting = [m for m in cands if m.workspace <= free - used]
            assert r.time_ms == min(m.time_ms for m in fitting)
            used += r.workspace
    slow = plan_memory("alexnet", "liveness", batch=64, capacity=cap, profile=prof, workspace="m")
    fast = plan_memory("alexnet", "liveness", batch=64, profile=prof, workspace="p")
    assert fast.summary["conv_ms"] <= res.summary["conv_ms"] <= slow.summary["conv_ms"]
    assert res.summary["peak"] <= cap


def test_wr_per_step_beats_fit(prof):
    free_peak = plan_memory("alexnet", "liveness", batch=64, profile=prof).summary["peak_live"]
    cap = int(free_peak + 40 * 2**20)
    fit = plan_memory("alexnet", "liveness", batch=64, capacity=cap, profile=prof, workspace="fit-seq")
    wr = plan_memory("alexnet", "liveness", batch=64, capacity=cap, profile=prof, workspace="wr")
    assert (wr.kernels.workspace <= wr.kernels.free).all()
    for a, b in zip(wr.kernels.itertuples(), fit.kernels.itertuples()):
        assert a.time_ms <= b.time_ms + 1e-9  # undivided is one of WR's options
    assert wr.summary["peak"] <= cap


def test_static_rules(prof):
    res = plan_memory("alexnet", "baseline-vdnn-p", batch=64, profile=prof)
    assert res.ticks.workspace.nunique() == 1 and res.ticks.workspace.iloc[0] == res.kernels.workspace.max()
    m = plan_memory("alexnet", "baseline-vdnn-m", batch=64, profile=prof)
    assert m.ticks.workspace.max() == 0  # eng0 (the GEMM plan) needs none
    caffe = plan_memory("alexnet", "baseline-caffe", batch=64, profile=prof)
    per_layer = caffe.kernels.groupby("layer").workspace.max().sum()
    assert caffe.ticks.workspace.iloc[0] == per_layer


def test_time_model_accounts_every_millisecond(prof):
    res = plan_memory("alexnet", "sn-recompute", batch=64, profile=prof, capacity=4 * GiB)
    t = res.ticks
    assert res.summary["iteration_ms"] == pytest.approx(t.compute_ms.sum() + t.stall_ms.sum())
    assert res.summary["recompute_ms"] == pytest.approx(t[t.phase == "R"].compute_ms.sum())
    conv = t[t.op == "conv"]
    assert conv.compute_ms.sum() == pytest.approx(res.kernels.time_ms.sum())
    for c in res.copies.itertuples():
        if not math.isnan(c.deadline_tick):
            assert t.start_ms[int(c.deadline_tick)] >= c.end_ms - 1e-9


def test_slower_link_stalls_more(prof):
    fast = plan_memory("alexnet", "vdnn-all-m", batch=64, profile=prof)
    slow = plan_memory("alexnet", "vdnn-all-m", batch=64, profile=prof, time_params=TimeParams(bandwidth=1e9))
    assert slow.summary["stall_ms"] > fast.summary["stall_ms"]
    assert slow.summary["iteration_ms"] - fast.summary["iteration_ms"] == pytest.approx(
        slow.summary["stall_ms"] - fast.summary["stall_ms"]
    )


def test_missing_profile_entry_names_the_kernel():
    net = get_network("alexnet", 32)
    rows = synthetic_rows(KernelSignature.from_key(next(iter(net.unique_kernels())), 32), [32])
    part = Profile.from_records(rows, {"synthetic": True})
    with pytest.raises(
        EngineError,
        match=r"lacks 13 of the 14 convolution kernels of alexnet b32 tf32/NCHW \(first: "
        r"conv1:BF\); measure them on a GPU with: python -m engine profile "
        r"--network alexnet --batch 32 --dtype tf32 --layout NCHW",
    ):
        plan_memory(net, "liveness", profile=part)


def test_stock_pytorch_runs_depthwise_convolutions_without_cudnn_workspace():
    """ATen runs a depthwise convolution in fp32/TF32 NCHW with its own kernels: under the framework's rule the
    plan counts no workspace for it and takes its calibrated time; Caffe's rule (cuDNN for every convolution), or a
    channels_last profile (cuDNN there), still counts cuDNN's. SYNTHETIC profile."""
    torch = pytest.importorskip("torch")
    from engine.pytorch.importer import import_model
    from engine.testing.synthetic import synthetic_profile_of

    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 16, 3, padding=1, groups=16), nn.ReLU(),
        nn.Conv2d(16, 16, 3, padding=1, groups=4), nn.Flatten(), nn.Linear(16 * 16 * 16, 10),
    )  # fmt: skip
    net = import_model(model, (3, 16, 16), 32, "depthwise")
    dw = {layer.name for layer in net.layers if layer.op == "conv" and layer.params["groups"] == layer.params["c"]}
    assert dw == {"2"}
    for layout in ("NCHW", "NHWC"):
        prof = synthetic_profile_of(net, layout=layout)
        stock = plan_memory(net, "vdnn-all-p", convention="pytorch", profile=prof, layout=layout).kernels
        cudnn = plan_memory(
            net, "vdnn-all-p", convention="pytorch", profile=prof, layout=layout, workspace="per-layer-heuristic"
        ).kernels
        assert {r.signature for r in stock.itertuples()} == {r.signature for r in cudnn.itertuples()}
        assert (cudnn[cudnn.layer.isin(dw)].workspace > 0).all()  # cuDNN's heuristic-first synthetic plan takes some
        on_aten = stock.layer.isin(dw) & (layout == "NCHW")
        assert (stock[on_aten].workspace == 0).all() and (stock[~on_aten].workspace > 0).all()
        assert (stock[on_aten].time_ms > 0).all()
        assert all(
            KernelSignature.from_key(k).aten_depthwise == (layout == "NCHW")
            for k in stock[stock.layer.isin(dw)].signature
        )
    # its time: the calibrated one of the layer where stock PyTorch runs it on ATen, else cuDNN's from the profile
    tp = TimeParams(layer_ms=(("depthwise/b32", "2", "F", 7.0), ("depthwise/b32", "2", "B", 9.0)))
    for layout, rule in (("NCHW", None), ("NCHW", "per-layer-heuristic"), ("NHWC", None)):
        prof = synthetic_profile_of(net, layout=layout)
        ticks = plan_memory(
            net, "vdnn-all-p", convention="pytorch", profile=prof, layout=layout, workspace=rule, time_params=tp
        ).ticks
        row = ticks[ticks.layer == "2"].set_index("phase")
        if layout == "NCHW" and rule is None:
            assert (row.compute_ms.F, row.compute_ms.B) == (7.0, 9.0) and set(row.time_source) == {"measured"}
        else:
            assert row.compute_ms.F < 1 and set(row.time_source) == {"profile"}
