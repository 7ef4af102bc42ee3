"""SuperNeurons on AlexNet at batch 200: Fig. 10 and Table 1 follow from layer shapes.

Paper numbers (SuperNeurons arXiv:1801.04380 §3.4 Table 1, §4.1.1 Fig. 10) are MB = MiB of activation and
gradient tensors (superneurons-release's DATA tensors; the input batch, weights and workspace are
other types and not in the curve).
"""

from __future__ import annotations

import pytest

from engine.memory import plan_memory
from engine.memory.policies import sn_bottleneck, sn_segment_memory_centric, sn_segments
from engine.memory.tensors import build_inventory
from engine.memory.timeline import step_of_layer
from engine.zoo import get_network
from engine.testing.networks import alexnet_caffe
from engine.units import MiB


def data_peak(res):
    """(peak MiB of activations + gradients, its step) over the per-step curve."""
    t = res.ticks
    by_step = t.groupby("step")["data"].max()
    return by_step.max() / MiB, int(by_step.idxmax()), by_step / MiB


@pytest.fixture(scope="module")
def net():
    return alexnet_caffe(200)


def test_step_numbering(net):
    inv = build_inventory(net, "superneurons")
    assert len(inv.route) == 23
    assert step_of_layer(inv, "pool5", "B") == 32 and step_of_layer(inv, "pool2", "B") == 39
    assert step_of_layer(inv, "lrn1", "B") == 44


def test_layer_memory_of_the_cost_model(net):
    inv = build_inventory(net, "superneurons")
    assert inv.uses_bytes(inv.bwd_uses["pool5"]) / MiB == pytest.approx(80.078, abs=5e-4)  # 2*33.0078 + 2*7.03125
    layer, peak = sn_bottleneck(inv)
    assert layer == "lrn1" and peak / MiB == pytest.approx(886.23, abs=5e-3)  # 4 * 221.5576


def test_baseline_36_tensors_2189_437(net):
    res = plan_memory(net, "baseline-superneurons")
    assert res.summary["peak_data"] / MiB == pytest.approx(2189.437, abs=1e-3)
    assert res.summary["max_live_tensors"] == 36


def test_liveness_peak_at_bwd_pool5(net):
    res = plan_memory(net, "liveness")
    peak, step, curve = data_peak(res)
    assert step == 32 and peak == pytest.approx(1489.355, abs=2e-3)
    assert res.ticks.loc[res.ticks.step == 32, "live_tensors"].max() == 17  # "17 tensors" at the peak
    assert curve[32] - 80.078 == pytest.approx(1409.277, abs=2e-3)  # sum_{i<=14} l^f_i


def test_offload_peak_at_bwd_pool2(net):
    res = plan_memory(net, "sn-offload")
    peak, step, _ = data_peak(res)
    # paper: 1132.155 = 1489.355 - 357.2 (rounded); the exact drop is 357.299 (docs/reproduction.md)
    assert step == 39 and peak == pytest.approx(1132.056, abs=2e-3)
    live = res.ticks.groupby("step")["live_tensors"].max()
    assert live[39] == 9 and plan_memory(net, "liveness").ticks.groupby("step")["live_tensors"].max()[39] == 10


@pytest.mark.parametrize(
    "strategy,count,peak,step", [("speed", 14, 993.018, 43), ("memory", 23, 886.23, 44), ("cost-aware", 17, 886.23, 44)]
)
def test_table1_alexnet(net, strategy, count, peak, step):
    res = plan_memory(net, "sn-recompute", strategy=strategy)
    got, at, _ = data_peak(res)
    assert res.summary["recompute_count"] == count
    assert got == pytest.approx(peak, abs=5e-3) and at == step


def test_segments_and_cost_aware_choice(net):
    inv = build_inventory(net, "superneurons")
    segs = sn_segments(inv)
    starts = {}
    for chain in segs.values():
        starts[chain[0]] = max(starts.get(chain[0], 0), len(chain))
    assert sorted(starts.values(), reverse=True) == [3, 3, 2, 2, 2, 1, 1]
    for rule in ("code", "paper"):
        mc = sn_segment_memory_centric(inv, rule)
        assert {n for n, m in mc.items() if m} == {"relu1", "lrn1", "pool1"}


def test_recompute_peak_never_above_liveness_and_everything_needed_is_resident(net):
    live = plan_memory(net, "liveness").summary["peak_data"]
    for strategy in ("speed", "memory", "cost-aware"):
        assert plan_memory(net, "sn-recompute", strategy=strategy).summary["peak_data"] < live


def test_table1_on_zoo_alexnet_caffe():
    res = plan_memory(get_network("alexnet-caffe", 200), "sn-recompute")
    peak, step, _ = data_peak(res)
    assert (res.summary["recompute_count"], round(peak, 2), step) == (17, 886.23, 44)
