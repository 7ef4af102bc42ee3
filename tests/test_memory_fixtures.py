"""Networks the memory tests share, built with NetBuilder, and checks that they are what the papers
describe. The zoo carries the same networks (alexnet-caffe, vgg-N); tests that need the zoo's
exact builders skip until it has them."""

from __future__ import annotations

import pytest

from engine.network import NetBuilder
from engine.zoo import NETWORKS, get_network

MiB = 2**20


def alexnet_caffe(batch: int = 200):
    """SuperNeurons' 23-layer AlexNet (superneurons.txt §4.1.1): Caffe's bvlc_alexnet, 227x227."""
    b = NetBuilder("alexnet-caffe", batch, (3, 227, 227))
    b.conv(96, 11, stride=4, name="conv1"); b.relu(name="relu1"); b.lrn(name="lrn1")
    b.pool(3, 2, ceil_mode=True, name="pool1")
    b.conv(256, 5, pad=2, groups=2, name="conv2"); b.relu(name="relu2"); b.lrn(name="lrn2")
    b.pool(3, 2, ceil_mode=True, name="pool2")
    b.conv(384, 3, pad=1, name="conv3"); b.relu(name="relu3")
    b.conv(384, 3, pad=1, groups=2, name="conv4"); b.relu(name="relu4")
    b.conv(256, 3, pad=1, groups=2, name="conv5"); b.relu(name="relu5")
    b.pool(3, 2, ceil_mode=True, name="pool5")
    b.fc(4096, name="fc6"); b.relu(name="relu6"); b.dropout(name="drop6")
    b.fc(4096, name="fc7"); b.relu(name="relu7"); b.dropout(name="drop7")
    b.fc(1000, name="fc8"); b.softmax(name="prob")
    return b.build()


def vgg(depth: int = 16, batch: int = 32, image: int = 224):
    """vDNN's VGG-16 and VGG-116/216/316/416 (+20 convs per group per +100, vdnn.txt §IV-C)."""
    groups = tuple(n + 20 * ((depth - 16) // 100) for n in (2, 2, 3, 3, 3))
    b = NetBuilder(f"vgg-{depth}", batch, (3, image, image))
    for g, (n, width) in enumerate(zip(groups, (64, 128, 256, 512, 512)), start=1):
        for i in range(1, n + 1):
            b.conv(width, 3, pad=1, name=f"conv{g}_{i}"); b.relu(name=f"relu{g}_{i}")
        b.pool(2, 2, name=f"pool{g}")
    b.fc(4096, name="fc6"); b.relu(name="relu6"); b.dropout(name="drop6")
    b.fc(4096, name="fc7"); b.relu(name="relu7"); b.dropout(name="drop7")
    b.fc(1000, name="fc8"); b.softmax(name="prob")
    return b.build()


def fork_join(batch: int = 8):
    """A small DAG with a fan-out and both joins (add and concat), like SuperNeurons' Fig. 3c."""
    b = NetBuilder("forkjoin", batch, (3, 16, 16))
    b.conv(8, 3, pad=1, name="conv1")
    r1 = b.relu(name="relu1")
    a = b.conv(8, 3, pad=1, src=r1, name="conv_a")
    a = b.bn(src=a, name="bn_a")
    c = b.conv(8, 1, src=r1, name="conv_c")
    s = b.add([a, c], name="add")
    s = b.relu(src=s, name="relu_s")
    p = b.pool(2, 2, src=s, name="pool")
    q = b.pool(2, 2, src=r1, name="pool_skip")
    b.concat([p, q], name="cat")
    b.fc(10, name="fc")
    b.softmax(name="prob")
    return b.build()


def test_alexnet_caffe_has_superneurons_23_layers_and_shapes():
    net = alexnet_caffe()
    assert [layer.name for layer in net.layers[1:]] == [
        "conv1", "relu1", "lrn1", "pool1", "conv2", "relu2", "lrn2", "pool2", "conv3", "relu3", "conv4", "relu4",
        "conv5", "relu5", "pool5", "fc6", "relu6", "drop6", "fc7", "relu7", "drop7", "fc8", "prob"]
    shapes = {layer.name: layer.out_shape for layer in net.layers}
    assert shapes["conv1"] == (96, 55, 55) and shapes["pool1"] == (96, 27, 27)
    assert shapes["pool2"] == (256, 13, 13) and shapes["pool5"] == (256, 6, 6)
    assert net.param_count == 60_965_224          # bvlc_alexnet
    # memory-systems.md §4.6: CONV1 221.56, CONV2 142.38, CONV3 = CONV4 49.51, CONV5 33.01 MiB at b200
    mib = {n: 200 * 4 * net.layer(n).out_elems / MiB for n in ("conv1", "conv2", "conv3", "conv4", "conv5")}
    assert [round(mib[n], 2) for n in ("conv1", "conv2", "conv3", "conv4", "conv5")] == \
        [221.56, 142.38, 49.51, 49.51, 33.01]


def test_vgg_fixture_depths():
    assert len(vgg(16).conv_layers()) == 13 and len(vgg(416).conv_layers()) == 413
    assert vgg(16).param_count == 138_357_544


@pytest.mark.skipif("alexnet-caffe" not in NETWORKS, reason="zoo has no alexnet-caffe yet")
def test_zoo_alexnet_caffe_matches_fixture():
    zoo_net, ours = get_network("alexnet-caffe", 200), alexnet_caffe(200)
    assert [(x.name, x.op, x.out_shape) for x in zoo_net.layers] == [(x.name, x.op, x.out_shape) for x in ours.layers]
