"""Layrub (doi:10.1145/3243904 §3-4): intra-layer dX->X aliasing, inter-layer migration, hybrid."""

from __future__ import annotations

import pytest

from engine.memory import plan_memory
from engine.memory.policies import layrub, layrub_alias
from engine.memory.tensors import build_inventory
from engine.network import NetBuilder
from engine.testing.networks import alexnet_caffe, vgg


def test_alias_eligibility_alexnet():
    inv = build_inventory(alexnet_caffe(128), "caffe")
    new, aliased = layrub_alias(inv)
    # conv2, conv3, fc6 read a POOL output the POOL's backward still needs; conv1's input is the batch
    assert sorted(aliased) == ["conv4", "conv5", "fc7", "fc8"]
    assert new.tensors["G:relu3"].storage == new.tensors["Y:relu3"].storage == new.tensors["Y:conv3"].storage
    # ReLU keeps a 1-byte sign mask ("char", 1/4 of fp32) instead of its data
    mask = new.tensors["M:relu1:sign"]
    assert mask.nbytes * 4 == new.tensors["Y:relu1"].nbytes and "Y:relu1" not in new.bwd_uses["relu1"]


def test_intra_saves_exactly_the_aliased_diffs():
    net = vgg(16, 8)
    base = plan_memory(net, "baseline-caffe").summary["peak_live"]
    intra = plan_memory(net, "layrub-intra")
    inv = build_inventory(net, "caffe")
    saved = sum(inv.tensors[f"G:{net.layer(n).inputs[0]}"].nbytes for n in intra.options["aliased"])
    masks = sum(8 * net.layer(n).out_elems for n in net.by_name if net.layer(n).op == "relu")
    assert intra.summary["peak_live"] == base - saved + masks
    # VGG: every conv after the first reads a ReLU'd conv output or a pool output
    assert len(intra.options["aliased"]) == 8 + 2  # 13 convs - conv1_1 - 4 after pools; fc7, fc8


def test_inter_layer_one_layer_lookahead():
    inv = build_inventory(vgg(16, 8), "caffe")
    plan = layrub(inv, mode="inter", buffers="exact")
    n = len(inv.route)
    uses = {}
    for t in plan.ticks:
        for u in t.uses:
            uses.setdefault(inv.tensors[u].storage, []).append(t.index)
    for c in plan.copies:
        us = uses[c.storage]
        if c.direction == "offload":
            # Ref hits 0 after the last forward consumer: offloaded with it, synchronised at its end
            assert c.issue == max(u for u in us if u < n) and c.deadline == c.issue + 1
        else:
            first_b = min(u for u in us if u >= n)
            assert c.reason == "Loadin (l-1)" and c.issue == first_b - 1 and c.deadline == first_b


def test_constant_buffers_and_hybrid():
    net = vgg(16, 8)
    exact = plan_memory(net, "layrub-inter", buffers="exact")
    const = plan_memory(net, "layrub-inter", buffers="constant")
    assert const.peak >= exact.peak
    t = const.ticks
    assert t.activations.nunique() == 1 and t.gradients.nunique() == 1  # a constant region
    inv = build_inventory(net, "caffe")
    biggest = max(b for s, b in inv.storage_bytes().items() if inv.storage_class()[s] == "activations")
    assert t.activations.iloc[0] % biggest == 0
    hybrid = plan_memory(net, "layrub-hybrid", buffers="exact")
    base = plan_memory(net, "baseline-caffe")
    assert hybrid.summary["peak_data"] < exact.summary["peak_data"] < base.summary["peak_data"]


def test_bad_mode():
    inv = build_inventory(vgg(16, 2), "caffe")
    with pytest.raises(Exception, match="Layrub mode"):
        layrub(inv, mode="both")


def test_fan_out_is_not_aliased():
    b = NetBuilder("fan", 2, (3, 8, 8))
    b.conv(4, 3, pad=1, name="c1")
    b.relu(name="r1")
    x = b.conv(4, 3, pad=1, src="r1", name="c2")
    y = b.conv(4, 3, pad=1, src="r1", name="c3")
    b.add([x, y], name="add")
    b.fc(3, name="fc")
    b.softmax(name="prob")
    _, aliased = layrub_alias(build_inventory(b.build(), "caffe"))
    assert "c2" not in aliased and "c3" not in aliased
