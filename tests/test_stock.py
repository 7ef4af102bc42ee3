"""engine.stock: which layers of a WR plan the PyTorch runtime leaves to stock PyTorch (never slower than stock).

The rule on hand-made plans (each case names the one quantity that decides it), the estimate of what stock
PyTorch runs from a SYNTHETIC profile, the plan format's ``stock`` field, and the memory planner counting the
layers left stock as stock PyTorch's."""

from __future__ import annotations

import json

import pytest

from engine.errors import PlanFormatError
from engine.kernels import KernelKind
from engine.memory import plan_memory
from engine.plan import Plan, PlanKernel, PlanMicro, PlanTotals, StockEstimate
from engine.planner import make_plan
from engine.stock import BENCHMARK_LIMIT, HOST_MS_PER_PIECE, REL_GAIN, stock_estimate, stock_layers
from engine.testing.synthetic import synthetic_profile
from engine.units import MiB
from engine.zoo import get_network

SIG = "Forward/tf32/NCHW/c3h8w8/k4r3s3/p1x1/s1x1/d1x1/g1"


def kernel(layer, kind, times, stock, workspace=MiB):
    """A kernel of ``len(times)`` pieces taking ``times`` ms, its stock estimate ``stock``."""
    micro = [PlanMicro(1, "eng0", 0, {}, t, workspace) for t in times]
    return PlanKernel(f"{layer}:{kind.short}", layer, kind, SIG, micro, workspace, sum(times), None, None, stock)


def plan(kernels, mode="wr", budget=64 * MiB, limits=None):
    totals = PlanTotals(sum(k.time_ms for k in kernels), 0, 0, None, 0.0, 0, None)
    return Plan(mode, "powerOfTwo", budget, "net", 8, "tf32", "NCHW", kernels, totals, {}, limits=limits)


def est(ms, workspace=MiB, bench=None):
    return StockEstimate(ms, ms if bench is None else bench, workspace)


F, BD, BF = KernelKind.FORWARD, KernelKind.BACKWARD_DATA, KernelKind.BACKWARD_FILTER


def margin(stock_ms, pieces, graphs):
    return REL_GAIN * stock_ms + (0.0 if graphs else HOST_MS_PER_PIECE * pieces)


@pytest.mark.parametrize("graphs", [True, False])
def test_a_layer_stays_stock_exactly_when_the_gain_is_within_the_margin(graphs):
    m = margin(10.0, 3, graphs)
    for gain in (-1.0, 0.0, m - 1e-6, m + 1e-6, 5.0):
        p = plan([kernel("a", F, [4.0 - gain / 3], est(4.0)), kernel("a", BD, [3.0 - gain / 3], est(3.0)),
                  kernel("a", BF, [3.0 - gain / 3], est(3.0))])  # fmt: skip
        assert ("a" in stock_layers(p, False, graphs)) == (gain <= m), gain


def test_each_piece_raises_the_margin_only_when_pieces_are_launched_from_the_host():
    """Piece by piece each costs the host a cuDNN execute; as one CUDA graph (apply_plan's default) about 1 us."""
    one = plan([kernel("a", F, [9.0], est(10.0))])
    many = plan([kernel("a", F, [9.0 / 12] * 12, est(10.0))])  # 1 ms gain: above 0.55 ms, below 1.1 ms
    assert "a" not in stock_layers(one, False, graphs=False) and "a" in stock_layers(many, False, graphs=False)
    assert "a" not in stock_layers(many, False) and "a" not in stock_layers(many, False, graphs=True)
    assert "5% of stock's time" in stock_layers(plan([kernel("a", F, [9.8], est(10.0))]), False)["a"]


def test_stock_that_may_take_more_workspace_than_the_limit_is_replaced_whatever_the_gain():
    fits = [kernel("a", F, [1.0], est(1.0, workspace=64 * MiB)), kernel("a", BF, [1.0], est(1.0))]
    over = [kernel("a", F, [1.0], est(1.0, workspace=64 * MiB + 1)), kernel("a", BF, [1.0], est(1.0))]
    assert "a" in stock_layers(plan(fits), False) and "a" not in stock_layers(plan(over), False)
    # a per-kernel limit (a per-step plan) is the kernel's own
    assert "a" not in stock_layers(plan(fits, limits={"a:F": 32 * MiB}), False)
    assert "a" in stock_layers(plan(over, limits={"a:F": 128 * MiB}), False)


def test_cudnn_benchmark_picks_the_estimate_compared():
    k = kernel("a", F, [2.0], est(4.0, bench=2.0))  # the heuristic's first plan is slow, benchmark finds a fast one
    assert "a" not in stock_layers(plan([k]), False) and "a" in stock_layers(plan([k]), True)


def test_an_unknown_stock_time_keeps_stock_where_it_fits_and_no_estimate_replaces():
    """Stock's time unknown (a plan it may run was not timed): no gain can be shown, so the layer stays stock when
    stock's plans fit the limit; a plan file made before the field has no estimate: replaced, as before."""
    untimed = kernel("a", F, [0.1], StockEstimate(None, 1.0, MiB))  # heuristic first untimed, 10x the plan's time
    too_big = kernel("b", F, [0.1], StockEstimate(None, None, 65 * MiB))
    older = kernel("c", F, [1.0], None)
    p = plan([untimed, too_big, older])
    why = stock_layers(p, False)
    assert set(why) == {"a"} and "did not time" in why["a"]
    assert stock_layers(p, True) == {}  # benchmark on: stock's 1.0 ms against the plan's 0.1 ms: replaced


def test_wd_plans_keep_every_layer():
    assert stock_layers(plan([kernel("a", F, [1.0], est(1.0))], mode="wd"), False) == {}


def test_layers_are_judged_apart():
    p = plan([kernel("a", F, [1.0], est(1.0)), kernel("b", F, [1.0], est(5.0))])
    why = stock_layers(p, False)
    assert set(why) == {"a"} and "1.000 ms" in why["a"] and "cudnn.benchmark off" in why["a"]


def test_the_estimate_is_what_stock_pytorch_runs_from_the_profile():
    prof = synthetic_profile("alexnet", 256)
    key = next(iter(sorted(set(prof.table.signature))))
    ranked = prof.ranked(key, 256, None, timed_only=False)
    e = stock_estimate(prof, key, 256)
    assert e.heuristic_ms == pytest.approx(float(ranked.iloc[0].time_ms))
    assert e.benchmark_ms == pytest.approx(float(ranked.head(BENCHMARK_LIMIT).time_ms.min()))  # all timed
    assert e.workspace == int(ranked.head(BENCHMARK_LIMIT).workspace.max())
    assert stock_estimate(prof, key, 3) is None  # a batch the profile did not measure
    prof = synthetic_profile("alexnet", 256)
    t = prof.table
    t.loc[(t.signature == key) & (t.micro_batch == 256) & (t.heuristic_rank == 0), "status"] = "skipped"
    e = stock_estimate(prof, key, 256)
    assert e.heuristic_ms is None and e.benchmark_ms is None  # untimed: unknown, not a stand-in
    depthwise = "Forward/tf32/NCHW/c8h8w8/k8r3s3/p1x1/s1x1/d1x1/g8"
    assert stock_estimate(prof, depthwise, 256) is None  # ATen's kernels: no cuDNN estimate


def test_wr_plans_carry_the_estimate_and_it_round_trips():
    prof, net = synthetic_profile("alexnet", 256), get_network("alexnet", 256)
    wr = make_plan(prof, net, mode="wr", budget="64MiB")
    assert all(k.stock == stock_estimate(prof, k.signature, 256) for k in wr.kernels)
    assert Plan.from_dict(json.loads(wr.to_json())).kernels == wr.kernels
    assert all(k.stock is None for k in make_plan(prof, net, mode="wd", budget="512MiB").kernels)
    doc = json.loads(wr.to_json())
    del doc["kernels"][0]["stock"]  # plans made before the field still load
    assert Plan.from_dict(doc).kernels[0].stock is None


@pytest.mark.parametrize(
    "field,value", [("workspace", -1), ("workspace", 1.5), ("heuristic_ms", "fast"), ("benchmark_ms", 0)]
)
def test_a_malformed_estimate_is_named(field, value):
    doc = json.loads(make_plan(synthetic_profile("alexnet", 256), get_network("alexnet", 256), mode="wr",
                               budget="64MiB").to_json())  # fmt: skip
    doc["kernels"][0]["stock"][field] = value
    with pytest.raises(PlanFormatError, match=rf"kernels\[0\]\.stock\.{field}"):
        Plan.from_dict(doc)
    doc["kernels"][0]["stock"] = {"heuristic_ms": 1.0, "benchmark_ms": 1.0, "workspace": 0, "extra": 1}
    with pytest.raises(PlanFormatError, match="stock.extra"):
        Plan.from_dict(doc)


def test_the_memory_planner_counts_layers_left_stock_as_stock_pytorchs():
    """plan_memory(conv_plan=...) takes the plan's configurations for the layers apply_plan replaces and stock
    PyTorch's (the heuristic rule) for the ones it leaves stock."""
    prof, net = synthetic_profile("alexnet", 256), get_network("alexnet", 256)
    wr = make_plan(prof, net, mode="wr", budget="1GiB")
    stays = stock_layers(wr, False)
    assert stays and len(stays) < len({k.layer for k in wr.kernels})
    res = plan_memory(net, "liveness", convention="pytorch", profile=prof, conv_plan=wr)
    stock = plan_memory(net, "liveness", convention="pytorch", profile=prof)
    planned = {k.id: "+".join(m.plan for m in k.micro) for k in wr.kernels}
    for row in res.kernels.itertuples():
        kid = f"{row.layer}:{KernelKind(row.kind).short}"
        if row.layer in stays:
            same = stock.kernels[(stock.kernels.layer == row.layer) & (stock.kernels.kind == row.kind)]
            assert row.plans == same.plans.iloc[0], kid
        else:
            assert row.plans == planned[kid], kid
    # the arena of a WR plan applied with an arena is its largest planned kernel's, held at every tick
    arena = plan_memory(net, "liveness", convention="pytorch", profile=prof, conv_plan=wr, plan_workspace="arena")
    kept = max(k.workspace for k in wr.kernels if k.layer not in stays)
    assert kept < max(k.workspace for k in wr.kernels)  # a layer left stock held the largest
    assert arena.ticks.workspace.min() == kept
