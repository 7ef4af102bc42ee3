"""Memory plans executed on generic layers (engine.pytorch.memory on the CPU): functions and tensor methods of a
model's forward, and modules the zoo has no layer for.

A model made of the constructs torchvision's modern networks are made of (a squeeze-excitation multiply of a
sigmoid, a Hardswish module, a permute, LayerNorm, ``F.gelu``, a layer-scale parameter multiply, a residual
add, a functional max-pool and ``torch.flatten``) is planned by ``plan_memory`` under every executable policy
and run by ``apply_memory_policy``: loss, every gradient and the running statistics equal a stock step's
(CPU fp32, as tests/test_torch_memory.py), and the runtime follows the plan (bytes moved, re-forwards at the
plan's R ticks, none outside it, no deviation where the plan counts tensors as PyTorch saves them). The
planner never re-forwards a layer that draws random numbers or runs a matmul (SuperNeurons' cost-aware rule),
and torchvision's MobileNetV3 runs under recomputation.
"""

from __future__ import annotations

import copy

import pytest

from engine.memory import plan_memory
from engine.pytorch import apply_memory_policy
from engine.pytorch.importer import import_model

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
nn = torch.nn
F = nn.functional

from test_torch_memory import EXECUTABLE, OFFLOADING, assert_same_step, step  # noqa: E402

RECOMPUTING = ("sn-recompute", "superneurons")


class Blocks(nn.Module):
    """An SE block (functional multiply by a sigmoid), a ConvNeXt-like block (permute, LayerNorm, F.gelu, a
    layer-scale parameter, permute back, residual add), a functional max-pool and torch.flatten."""

    def __init__(self):
        super().__init__()
        self.conv0, self.bn0, self.act = nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.Hardswish()
        self.se1, self.se2 = nn.Conv2d(8, 4, 1), nn.Conv2d(4, 8, 1)
        self.dw = nn.Conv2d(8, 8, 3, padding=1, groups=8)
        self.ln = nn.LayerNorm(8)
        self.scale = nn.Parameter(torch.full((8,), 0.5))
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = self.act(self.bn0(self.conv0(x)))
        s = torch.sigmoid(self.se2(F.relu(self.se1(F.adaptive_avg_pool2d(x, 1)))))
        x = x * s
        y = F.gelu(self.ln(self.dw(x).permute(0, 2, 3, 1)))
        x = x + (y * self.scale).permute(0, 3, 1, 2)
        return self.fc(torch.flatten(F.max_pool2d(x, 2), 1))


class Chancy(nn.Module):
    """A random function (RReLU in training), a matmul with a parameter, and a functional dropout."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3, padding=1)
        self.bn = nn.BatchNorm2d(8)
        self.mix = nn.Parameter(torch.randn(16, 16) / 16)
        self.fc = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = F.rrelu(self.bn(self.conv(x)), training=self.training)
        x = torch.matmul(x, self.mix)
        x = F.dropout(torch.tanh(F.max_pool2d(x, 2)), 0.3)  # training=self.training would be frozen by the trace
        return self.fc(torch.flatten(x, 1))


def built(make, shape=(3, 16, 16), batch=4):
    torch.manual_seed(0)
    stock = make()
    net = import_model(stock, shape, batch, make.__name__)
    return stock, net, torch.randn(batch, *shape), torch.randint(0, 10, (batch,))


def planned(net, policy):
    """The policy's plan with tensors as PyTorch saves them (Layrub in its own Caffe convention); superneurons
    and vdnn-dyn under a capacity below their free peak (LRU evictions, offloads), as tests/test_torch_memory.py."""
    convention = "caffe" if policy == "layrub-inter" else "pytorch"
    options = {}
    if policy in ("superneurons", "vdnn-dyn"):
        free = plan_memory(
            net, policy="superneurons" if policy == "superneurons" else "vdnn-conv-p", convention=convention
        )
        options["capacity"] = int(free.peak * (0.8 if policy == "superneurons" else 1.0))
    return plan_memory(net, policy=policy, convention=convention, **options)


def run_and_compare(stock, net, x, target, policy, steps=2):
    managed = copy.deepcopy(stock)
    result = planned(net, policy)
    runtime = apply_memory_policy(managed, result, example_input=x)
    for n in range(steps):  # the second step accumulates into .grad and reuses the host buffers
        assert_same_step(stock, managed, step(stock, x, target), step(managed, x, target), f"{policy} step {n + 1}: ")
    return runtime, result


@pytest.mark.slow
@pytest.mark.parametrize("policy", EXECUTABLE)
def test_generic_layers_step_equals_stock_and_follows_the_plan(policy):
    stock, net, x, target = built(Blocks)
    ops = {layer.params["op"] for layer in net.layers if layer.op == "generic"}
    assert {"Hardswish", "torch.sigmoid", "_operator.mul", "Tensor.permute", "LayerNorm"} <= ops, ops
    runtime, result = run_and_compare(stock, net, x, target, policy)
    s, summary = runtime.stats, result.summary
    last = runtime._last  # the backward reached the plan's last tick: nothing of the step is still held
    assert last.done and not last.held and not last.recompute.cache
    assert s["recomputed_layers"] == result.plan.recompute_count and s["recompute_extra"] == 0, runtime.deviations
    assert s["prefetch_late"] == s["on_demand"] == 0
    if policy == "layrub-inter":  # extras Caffe keeps and PyTorch does not (batch norm's xnorm, ...): named only
        assert all("autograd saved no tensor" in d for d in runtime.deviations), runtime.deviations
    else:
        assert not runtime.deviations
        assert s["offloaded_bytes"] == summary["offload_bytes"] and s["prefetched_bytes"] == summary["prefetch_bytes"]
    if policy in OFFLOADING:
        assert s["offloaded_bytes"] > 0 and s["offloads"] == s["prefetches"] > 0
    redone = [t.layer for t in result.plan.ticks if t.phase == "R"]
    assert [name for kind, name, _, _ in runtime.trace if kind == "recompute"] == redone
    if policy in RECOMPUTING:  # functional generic layers among them, called again from their recorded call
        functional = {n for n in redone if n in runtime.layers.functional}
        assert {net.layer(n).params.get("op") for n in functional} >= {"torch.sigmoid", "_operator.mul"}, functional


@pytest.mark.slow
@pytest.mark.parametrize("policy", RECOMPUTING)
def test_planner_never_reforwards_random_or_matmul_layers(policy):
    stock, net, x, target = built(Chancy)
    kinds = {layer.name: layer.params["op"] for layer in net.layers if layer.op == "generic"}
    rrelu = next(n for n, op in kinds.items() if "rrelu" in op)
    matmul = next(n for n, op in kinds.items() if "matmul" in op)
    assert net.layer(rrelu).params["random"] and net.layer(matmul).params["flops"][0] > 0
    runtime, result = run_and_compare(stock, net, x, target, policy)
    redone = {t.layer for t in result.plan.ticks if t.phase == "R"}
    assert redone and rrelu not in redone and matmul not in redone, redone
    assert "tanh" in redone  # a cheap deterministic function is re-forwarded
    assert runtime.stats["recomputed_layers"] == result.plan.recompute_count
    assert runtime.stats["recompute_extra"] == 0 and not runtime.deviations


@pytest.mark.slow
def test_functional_dropout_is_replayed_in_reforwards():
    """The plan re-forwards dropout (its random state is replayed); as a function the runtime records that
    state at the call its torch-function mode sees."""
    stock, net, x, target = built(Chancy)
    result = planned(net, "sn-recompute")
    dropout = next(n.name for n in net.layers if n.op == "dropout")
    assert dropout in {t.layer for t in result.plan.ticks if t.phase == "R"}
    runtime, _ = run_and_compare(stock, net, x, target, "sn-recompute", steps=1)
    assert dropout in runtime.layers.functional


@pytest.mark.slow
@pytest.mark.parametrize("policy", ["sn-recompute", "vdnn-all-p"])
def test_torchvision_mobilenet_v3_small_runs_under_the_plan(policy):
    stock, net, x, target = built(lambda: torchvision.models.mobilenet_v3_small(num_classes=10), (3, 32, 32), 2)
    runtime, result = run_and_compare(stock, net, x, target, policy, steps=1)
    s = runtime.stats
    assert s["recomputed_layers"] == result.plan.recompute_count and s["recompute_extra"] == 0
    # the last block's in-place Hardswish (before the average pool) saves no tensor of the BN output the plan
    # offloads at 1x1 spatial size: named, as on the main path before generic re-forwards
    assert all("autograd saved no tensor of it here" in d for d in runtime.deviations), runtime.deviations
    assert s["offloaded_bytes"] > 0
    if policy == "sn-recompute":
        assert any(t.phase == "R" and t.layer in runtime.layers.functional for t in result.plan.ticks)


class Copied(nn.Module):
    """``torch.flatten`` of a channels-last tensor (a permute's) copies it, where the importer, as for every
    flattening reshape, has the next layer read the flattened layer's output itself."""

    def __init__(self):
        super().__init__()
        self.conv, self.fc = nn.Conv2d(3, 8, 3, padding=1), nn.Linear(8 * 8 * 16, 10)

    def forward(self, x):
        x = torch.tanh(F.max_pool2d(self.conv(x).permute(0, 2, 3, 1), (2, 1)).permute(0, 3, 1, 2))
        return self.fc(torch.flatten(x, 1))


@pytest.mark.slow
def test_a_copy_the_plan_takes_for_a_view_is_kept_and_named():
    """The runtime names a saved tensor by the storage it is in: a copy is no layer's output, so it is kept as
    autograd saved it (never swapped for a re-forwarded tensor of another layout) and named as a deviation."""
    stock, net, x, target = built(Copied)
    runtime, result = run_and_compare(stock, net, x, target, "sn-recompute", steps=1)
    assert "tanh" in {t.layer for t in result.plan.ticks if t.phase == "R"}
    assert runtime.deviations == [
        "fc reads a tensor that is not tanh's output (made by an operation the trace did not have: a copy, or a "
        "dropout whose training flag the eval trace froze); kept as it is"
    ]
