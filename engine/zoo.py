"""The network zoo: exact training graphs of the architectures the papers use.

``get_network(name, batch)`` accepts a zoo name, a generator name such as ``resnet-152`` or
``vgg-116``, or a path to a JSON/YAML spec (docs/network-spec.md).
"""

from __future__ import annotations

from collections.abc import Callable

from .errors import UnknownNetworkError
from .network import NetBuilder, Network

Builder = Callable[..., Network]
NETWORKS: dict[str, Builder] = {}
DEFAULT_BATCH: dict[str, int] = {}


def register(name: str, default_batch: int):
    def deco(fn: Builder) -> Builder:
        NETWORKS[name] = fn
        DEFAULT_BATCH[name] = default_batch
        return fn
    return deco


@register("alexnet", 256)
def alexnet(batch: int = 256, image: int = 224, num_classes: int = 1000) -> Network:
    """Single-column AlexNet exactly as torchvision builds it (61,100,840 parameters at 1000 classes)."""
    b = NetBuilder("alexnet", batch, (3, image, image), "AlexNet, single column (torchvision)")
    b.conv(64, 11, stride=4, pad=2, name="conv1"); b.relu(name="relu1"); b.pool(3, 2, name="pool1")
    b.conv(192, 5, pad=2, name="conv2"); b.relu(name="relu2"); b.pool(3, 2, name="pool2")
    b.conv(384, 3, pad=1, name="conv3"); b.relu(name="relu3")
    b.conv(256, 3, pad=1, name="conv4"); b.relu(name="relu4")
    b.conv(256, 3, pad=1, name="conv5"); b.relu(name="relu5"); b.pool(3, 2, name="pool5")
    b.dropout(name="drop6"); b.fc(4096, name="fc6"); b.relu(name="relu6")
    b.dropout(name="drop7"); b.fc(4096, name="fc7"); b.relu(name="relu7")
    b.fc(num_classes, name="fc8"); b.softmax(name="prob")
    return b.build()


def get_network(name: str, batch: int | None = None, **options) -> Network:
    """Build a network by zoo name, generator name or spec path; ``batch`` defaults per network."""
    if batch is not None and (not isinstance(batch, int) or batch < 1):
        raise ValueError(f"mini-batch size must be a positive integer, got {batch!r}")
    if name in NETWORKS:
        return NETWORKS[name](batch or DEFAULT_BATCH[name], **options)
    raise UnknownNetworkError(
        f"unknown network {name!r}; known: {', '.join(sorted(NETWORKS))}"
    )
