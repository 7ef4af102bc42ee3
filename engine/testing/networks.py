"""Networks the tests share: the papers' AlexNet and VGG from the zoo, a small fork/join DAG, and two
convolutions small enough to profile on a GPU in seconds."""

from __future__ import annotations

from ..network import NetBuilder, Network
from ..zoo import get_network


def alexnet_caffe(batch: int = 200) -> Network:
    """SuperNeurons' 23-layer AlexNet (arXiv:1801.04380 §4.1.1): the zoo's Caffe bvlc_alexnet, 227x227."""
    return get_network("alexnet-caffe", batch)


def vgg(depth: int = 16, batch: int = 32, image: int = 224) -> Network:
    """vDNN's VGG-16 and VGG-116/216/316/416 (+20 convs per group per +100, vDNN arXiv:1602.08124 §IV-C), from
    the zoo."""
    return get_network(f"vgg-{depth}", batch, image=image)


def fork_join(batch: int = 8) -> Network:
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


def tiny_network(batch: int = 8) -> Network:
    """Two 3x3 convolutions on 8x16x16 inputs: the GPU and distributed profiling tests profile it in seconds."""
    b = NetBuilder("tiny", batch, (8, 16, 16))
    b.conv(16, 3, pad=1, name="conv1")
    b.relu()
    b.conv(16, 3, pad=1, name="conv2")
    b.relu()
    return b.build()
