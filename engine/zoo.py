"""The network zoo: exact training graphs of the architectures the papers use.

``get_network(name, batch)`` accepts a zoo name (``NETWORKS``), a generator name such as
``resnet-152`` or ``vgg-116`` (``GENERATORS``), a path to a JSON/YAML spec
(docs/network-spec.md), or a PyTorch model such as ``torchvision:resnet50`` (engine.netnames, engine.pytorch.loader).
Every graph ends in a softmax (the loss layer of a training step), and layer
names follow the defining framework (Caffe names for Caffe/VGG nets, torchvision module paths for
torchvision nets), so kernel ids can be matched against the papers and against real models.

The module is over 300 statements because it is one registry: every architecture's builder sits beside the
``register`` call and the name resolution (``get_network``) that find it, and a new network touches only
this file.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from pathlib import Path

from .errors import PolicyError, SpecError, UnknownNetworkError
from .fileio import short
from .network import NetBuilder, Network
from .netnames import SYNTAX as TORCH_SYNTAX
from .netnames import default_batch as torch_default_batch
from .netnames import is_torch_name
from .policies import MAX_BATCH

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


@register("alexnet-caffe", 256)
def alexnet_caffe(batch: int = 256, image: int = 227, num_classes: int = 1000) -> Network:
    """Caffe's bvlc_alexnet (two-column grouping: groups=2 in conv2/4/5; LRN after relu1/relu2;
    Caffe's ceil-mode pooling), 60,965,224 parameters. This is the network of mu-cuDNN's Caffe runs
    (mu-cuDNN arXiv:1804.04806 §IV) and the 23-layer AlexNet of SuperNeurons Fig. 10."""
    b = NetBuilder("alexnet-caffe", batch, (3, image, image), "AlexNet as Caffe's bvlc_alexnet (groups=2, LRN)")
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
    b.fc(num_classes, name="fc8"); b.softmax(name="prob")
    return b.build()


# ----------------------------------------------------------------------------------------- ResNet

def _basic_block(b: NetBuilder, prefix: str, planes: int, stride: int) -> None:
    """torchvision BasicBlock: 3x3-BN-ReLU-3x3-BN, + shortcut, ReLU."""
    src = b.last
    b.conv(planes, 3, stride=stride, pad=1, bias=False, name=f"{prefix}.conv1")
    b.bn(name=f"{prefix}.bn1"); b.relu(name=f"{prefix}.relu1")
    b.conv(planes, 3, pad=1, bias=False, name=f"{prefix}.conv2"); out = b.bn(name=f"{prefix}.bn2")
    shortcut = _downsample(b, prefix, src, planes, stride)
    b.add([out, shortcut], name=f"{prefix}.add"); b.relu(name=f"{prefix}.relu")


def _bottleneck(b: NetBuilder, prefix: str, planes: int, stride: int) -> None:
    """torchvision Bottleneck (ResNet v1.5: the stride sits on the 3x3 conv): 1x1-3x3-1x1(x4), BN
    after each conv, + shortcut, ReLU."""
    src = b.last
    b.conv(planes, 1, bias=False, name=f"{prefix}.conv1"); b.bn(name=f"{prefix}.bn1"); b.relu(name=f"{prefix}.relu1")
    b.conv(planes, 3, stride=stride, pad=1, bias=False, name=f"{prefix}.conv2")
    b.bn(name=f"{prefix}.bn2"); b.relu(name=f"{prefix}.relu2")
    b.conv(4 * planes, 1, bias=False, name=f"{prefix}.conv3"); out = b.bn(name=f"{prefix}.bn3")
    shortcut = _downsample(b, prefix, src, 4 * planes, stride)
    b.add([out, shortcut], name=f"{prefix}.add"); b.relu(name=f"{prefix}.relu")


def _downsample(b: NetBuilder, prefix: str, src: str, channels: int, stride: int) -> str:
    """The shortcut: identity, or 1x1 conv + BN where the shape changes (torchvision option B)."""
    if stride == 1 and b.shape(src)[0] == channels:
        return src
    b.conv(channels, 1, stride=stride, bias=False, src=src, name=f"{prefix}.downsample.0")
    return b.bn(name=f"{prefix}.downsample.1")


def _resnet(name: str, batch: int, stages, bottleneck: bool, image: int, num_classes: int,
            description: str) -> Network:
    b = NetBuilder(name, batch, (3, image, image), description)
    b.conv(64, 7, stride=2, pad=3, bias=False, name="conv1"); b.bn(name="bn1"); b.relu(name="relu")
    b.pool(3, 2, pad=1, name="maxpool")
    block = _bottleneck if bottleneck else _basic_block
    for i, n in enumerate(stages):
        for j in range(n):
            block(b, f"layer{i + 1}.{j}", 64 * 2**i, 2 if i > 0 and j == 0 else 1)
    b.pool(None, mode="avg", name="avgpool"); b.fc(num_classes, name="fc"); b.softmax(name="prob")
    return b.build()


# He et al. 2016 (CVPR) Table 1; ResNet-200 from He et al. 2016 (ECCV, "Identity mappings"), as in
# fb.resnet.torch.
BASIC_STAGES = {18: (2, 2, 2, 2), 34: (3, 4, 6, 3)}
MAX_DEPTH = 3002  # resnet-N / vgg-N: about 10,000 layers at most
PUBLISHED_STAGES = {50: (3, 4, 6, 3), 101: (3, 4, 23, 3), 152: (3, 8, 36, 3), 200: (3, 24, 36, 3)}


def resnet_stages(depth: int) -> tuple[int, int, int, int]:
    """Bottleneck blocks per stage for an ImageNet ResNet of ``depth`` weight layers.

    A bottleneck ResNet has depth = 3 * (n1 + n2 + n3 + n4) + 2 (stem conv + fc; the shortcut
    convs are not counted), so depth must be 2 mod 3. Published depths (50, 101, 152, 200) use their
    published stages; any other depth >= 50 keeps ResNet-101's (3, 4, ., 3) and puts the rest in
    conv4_x, which is how ResNet-50 -> 101 grows and how SuperNeurons' generator deepens (Table 4
    varies n3 only). Layrub's ResNet-302...1517 (doi:10.1145/3243904 Table 6) all satisfy the rule. Note
    SuperNeurons' own Table 4 depths 148, 480, 592, 1920 and "ResNet-2500" do not satisfy its own
    formula 3*(n1+..+n4)+2 (a known inconsistency of the paper), so they are rejected rather than
    guessed.
    """
    if depth in PUBLISHED_STAGES:
        return PUBLISHED_STAGES[depth]
    if depth < 50 or (depth - 2) % 3:
        lo = max(50, depth - (depth - 2) % 3)
        hint = f"nearest: resnet-{lo}, resnet-{lo + 3}" if depth >= 50 else "use resnet-18, resnet-34 or N >= 50"
        raise SpecError(f"resnet-{depth}: a bottleneck ResNet has 3*blocks+2 layers, so N must be >= 50 and "
                        f"N mod 3 == 2 (or 18/34 for the basic-block ResNets); {hint}")
    return (3, 4, (depth - 2) // 3 - 10, 3)


def _check_depth(family: str, depth: int) -> None:
    """Generated networks stop well past the deepest the papers train, before millions of layers are built."""
    if depth > MAX_DEPTH:
        raise SpecError(f"{family}-{depth}: N may be at most {MAX_DEPTH} (some 10,000 layers; the papers' deepest "
                        f"network is SuperNeurons' ResNet-2500)")


def resnet(depth: int, batch: int = 16, image: int = 224, num_classes: int = 1000,
           stages: tuple[int, ...] | None = None) -> Network:
    """``resnet-N``: torchvision-style ImageNet ResNet of N weight layers (see ``resnet_stages``).

    ``stages`` overrides the bottleneck layout, e.g. SuperNeurons' (6, 32, n3, 6) (Table 4); it must
    give 3*sum+2 == N. Default batch 16 as in SuperNeurons Table 4 (Layrub uses 32).
    """
    _check_depth("resnet", depth)
    if depth in BASIC_STAGES and stages is None:
        return _resnet(f"resnet-{depth}", batch, BASIC_STAGES[depth], False, image, num_classes,
                       f"ResNet-{depth} (basic blocks {list(BASIC_STAGES[depth])})")
    if stages is None:
        stages = resnet_stages(depth)
    else:
        stages = tuple(stages)
        if len(stages) != 4 or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in stages):
            raise SpecError(f"resnet-{depth}: stages must be 4 positive integers, got {list(stages)}")
        if 3 * sum(stages) + 2 != depth:
            raise SpecError(f"resnet-{depth}: stages {list(stages)} give depth {3 * sum(stages) + 2}, not {depth}")
    return _resnet(f"resnet-{depth}", batch, stages, True, image, num_classes,
                   f"ResNet-{depth} (bottleneck blocks {list(stages)})")


@register("resnet18", 64)
def resnet18(batch: int = 64, image: int = 224, num_classes: int = 1000) -> Network:
    """torchvision resnet18: 11,689,512 parameters."""
    return _resnet("resnet18", batch, BASIC_STAGES[18], False, image, num_classes, "ResNet-18 (torchvision)")


@register("resnet34", 64)
def resnet34(batch: int = 64, image: int = 224, num_classes: int = 1000) -> Network:
    """torchvision resnet34 (Layrub's ResNet-34): 21,797,672 parameters."""
    return _resnet("resnet34", batch, BASIC_STAGES[34], False, image, num_classes, "ResNet-34 (torchvision)")


@register("resnet50", 64)
def resnet50(batch: int = 64, image: int = 224, num_classes: int = 1000) -> Network:
    """torchvision resnet50: 25,557,032 parameters, 53 convs. Batch 64 as in mu-cuDNN Fig. 11."""
    return _resnet("resnet50", batch, PUBLISHED_STAGES[50], True, image, num_classes, "ResNet-50 (torchvision)")


@register("resnet101", 64)
def resnet101(batch: int = 64, image: int = 224, num_classes: int = 1000) -> Network:
    """torchvision resnet101: 44,549,160 parameters."""
    return _resnet("resnet101", batch, PUBLISHED_STAGES[101], True, image, num_classes, "ResNet-101 (torchvision)")


@register("resnet152", 32)
def resnet152(batch: int = 32, image: int = 224, num_classes: int = 1000) -> Network:
    """torchvision resnet152: 60,192,808 parameters."""
    return _resnet("resnet152", batch, PUBLISHED_STAGES[152], True, image, num_classes, "ResNet-152 (torchvision)")


# -------------------------------------------------------------------------------------------- VGG

# Simonyan & Zisserman 2015 Table 1, convs per group: A=11, B=13, D=16, E=19 weight layers.
VGG_GROUPS = {11: (1, 1, 2, 2, 2), 13: (2, 2, 2, 2, 2), 16: (2, 2, 3, 3, 3), 19: (2, 2, 4, 4, 4)}
_VGG_WIDTHS = (64, 128, 256, 512, 512)


def vgg_groups(depth: int) -> tuple[int, ...]:
    """3x3 convs per group for VGG-``depth`` (conv + 3 fc weight layers).

    11/13/16/19 are the published configurations. vDNN's very deep VGG-116/216/316/416 add "20 more
    CONV layers to each of the five CONV layer groups" per +100 layers, with the group's width
    (vDNN arXiv:1602.08124 §IV-C), so depth 16 + 100*m has groups (2, 2, 3, 3, 3) + 20*m.
    """
    if depth in VGG_GROUPS:
        return VGG_GROUPS[depth]
    m, rest = divmod(depth - 16, 100)
    if depth > 16 and rest == 0:
        return tuple(n + 20 * m for n in VGG_GROUPS[16])
    raise SpecError(f"vgg-{depth}: N must be 11, 13, 16, 19 (Simonyan & Zisserman) or 16 + 100*m "
                    f"(vDNN's VGG-116/216/316/416: +20 convs per group per +100)")


def _vgg(name: str, batch: int, groups, image: int, num_classes: int, description: str) -> Network:
    """VGG without BN. No adaptive pool: like the original Caffe/Torch VGG, fc6 reads the last pool
    (512 x image/32 x image/32); at 224 this is exactly torchvision's (its AdaptiveAvgPool2d(7) is an
    identity there)."""
    b = NetBuilder(name, batch, (3, image, image), description)
    for g, (n, width) in enumerate(zip(groups, _VGG_WIDTHS), start=1):
        for i in range(1, n + 1):
            b.conv(width, 3, pad=1, name=f"conv{g}_{i}"); b.relu(name=f"relu{g}_{i}")
        b.pool(2, 2, name=f"pool{g}")
    b.fc(4096, name="fc6"); b.relu(name="relu6"); b.dropout(name="drop6")
    b.fc(4096, name="fc7"); b.relu(name="relu7"); b.dropout(name="drop7")
    b.fc(num_classes, name="fc8"); b.softmax(name="prob")
    return b.build()


def vgg(depth: int, batch: int = 32, image: int = 224, num_classes: int = 1000) -> Network:
    """``vgg-N`` (see ``vgg_groups``); default batch 32 as vDNN's very deep study (arXiv:1602.08124 §IV-C)."""
    _check_depth("vgg", depth)
    groups = vgg_groups(depth)
    return _vgg(f"vgg-{depth}", batch, groups, image, num_classes, f"VGG-{depth} (convs per group {list(groups)})")


@register("vgg16", 64)
def vgg16(batch: int = 64, image: int = 224, num_classes: int = 1000) -> Network:
    """torchvision vgg16 (no BN): 138,357,544 parameters."""
    return _vgg("vgg16", batch, VGG_GROUPS[16], image, num_classes, "VGG-16 (torchvision, no BN)")


# -------------------------------------------------------------------------------------- GoogLeNet

def _basic_conv(b: NetBuilder, prefix: str, k: int, r: int, stride=1, pad=0, src=None) -> str:
    """torchvision BasicConv2d: conv(bias=False) + BN(eps=0.001) + ReLU."""
    b.conv(k, r, stride=stride, pad=pad, bias=False, src=src, name=f"{prefix}.conv")
    b.bn(name=f"{prefix}.bn", eps=0.001)
    return b.relu(name=f"{prefix}.relu")


def _inception(b: NetBuilder, prefix: str, ch1x1, ch3x3red, ch3x3, ch5x5red, ch5x5, pool_proj) -> str:
    src = b.last
    b1 = _basic_conv(b, f"{prefix}.branch1", ch1x1, 1, src=src)
    _basic_conv(b, f"{prefix}.branch2.0", ch3x3red, 1, src=src)
    b2 = _basic_conv(b, f"{prefix}.branch2.1", ch3x3, 3, pad=1)
    _basic_conv(b, f"{prefix}.branch3.0", ch5x5red, 1, src=src)
    b3 = _basic_conv(b, f"{prefix}.branch3.1", ch5x5, 3, pad=1)  # torchvision: 3x3, the paper: 5x5
    b.pool(3, 1, pad=1, ceil_mode=True, src=src, name=f"{prefix}.branch4.0")
    b4 = _basic_conv(b, f"{prefix}.branch4.1", pool_proj, 1)
    return b.concat([b1, b2, b3, b4], name=f"{prefix}.concat")


@register("googlenet", 128)
def googlenet(batch: int = 128, image: int = 224, num_classes: int = 1000) -> Network:
    """Inception v1 exactly as torchvision's GoogLeNet without the auxiliary heads: 6,624,904
    parameters, 57 convs, BN after every conv, ceil-mode max pools.

    Deviation from Szegedy et al. 2015 (inherited from torchvision, kept so parameter counts and
    kernels match the model people run): the "5x5" branch uses a 3x3 conv; the BN variant is used.
    Default batch 128 as Layrub's GoogLeNet(128).
    """
    b = NetBuilder("googlenet", batch, (3, image, image), "GoogLeNet / Inception v1 (torchvision, no aux heads)")
    _basic_conv(b, "conv1", 64, 7, stride=2, pad=3)
    b.pool(3, 2, ceil_mode=True, name="maxpool1")
    _basic_conv(b, "conv2", 64, 1)
    _basic_conv(b, "conv3", 192, 3, pad=1)
    b.pool(3, 2, ceil_mode=True, name="maxpool2")
    _inception(b, "inception3a", 64, 96, 128, 16, 32, 32)
    _inception(b, "inception3b", 128, 128, 192, 32, 96, 64)
    b.pool(3, 2, ceil_mode=True, name="maxpool3")
    _inception(b, "inception4a", 192, 96, 208, 16, 48, 64)
    _inception(b, "inception4b", 160, 112, 224, 24, 64, 64)
    _inception(b, "inception4c", 128, 128, 256, 24, 64, 64)
    _inception(b, "inception4d", 112, 144, 288, 32, 64, 64)
    _inception(b, "inception4e", 256, 160, 320, 32, 128, 128)
    b.pool(2, 2, ceil_mode=True, name="maxpool4")
    _inception(b, "inception5a", 256, 160, 320, 32, 128, 128)
    _inception(b, "inception5b", 384, 192, 384, 48, 128, 128)
    b.pool(None, mode="avg", name="avgpool"); b.dropout(0.2, name="dropout")
    b.fc(num_classes, name="fc"); b.softmax(name="prob")
    return b.build()


# --------------------------------------------------------------------------------------- DenseNet

@register("densenet40", 256)
def densenet40(batch: int = 256, image: int = 32, growth: int = 40, num_classes: int = 10) -> Network:
    """DenseNet-40 for CIFAR (Huang et al. 2017, basic DenseNet without bottleneck or compression):
    a 3x3 conv to 16 channels, 3 dense blocks of 12 layers (BN-ReLU-conv3x3 producing ``growth``
    maps, concatenated to the block input), BN-ReLU-conv1x1-avgpool2 transitions keeping the width,
    then BN-ReLU-global avgpool-fc. Convs have no bias. mu-cuDNN runs it with growth rate k = 40 at
    32x32, 10 classes and batch 256 (mu-cuDNN arXiv:1804.04806 §IV-B2, Fig. 11c); k = 12 is the paper's
    1,019,722-parameter model.
    """
    b = NetBuilder("densenet40" if growth == 40 else f"densenet40-k{growth}", batch, (3, image, image),
                   f"DenseNet-40 (k={growth}, CIFAR)")
    b.conv(16, 3, pad=1, bias=False, name="conv1")
    for blk in range(1, 4):
        for i in range(1, 13):
            src, p = b.last, f"block{blk}.layer{i}"
            b.bn(name=f"{p}.bn"); b.relu(name=f"{p}.relu")
            new = b.conv(growth, 3, pad=1, bias=False, name=f"{p}.conv")
            b.concat([src, new], name=f"{p}.concat")
        if blk < 3:
            p = f"trans{blk}"
            b.bn(name=f"{p}.bn"); b.relu(name=f"{p}.relu")
            b.conv(b.shape(b.last)[0], 1, bias=False, name=f"{p}.conv")
            b.pool(2, 2, mode="avg", name=f"{p}.pool")
    b.bn(name="bn"); b.relu(name="relu"); b.pool(None, mode="avg", name="avgpool")
    b.fc(num_classes, name="fc"); b.softmax(name="prob")
    return b.build()


# ------------------------------------------------------------------------------------- generators

# pattern -> (builder taking the depth first, default batch, help)
GENERATORS: dict[str, tuple[Builder, int, str]] = {
    "resnet-N": (resnet, 16, "ImageNet ResNet of N layers: 18, 34 (basic) or N >= 50 with N mod 3 == 2 "
                             "(bottleneck; Layrub, SuperNeurons)"),
    "vgg-N": (vgg, 32, "VGG of N layers: 11, 13, 16, 19, or 16 + 100*m (vDNN's VGG-116...416)"),
}
_GENERATOR_RE = re.compile(r"^(resnet|vgg)-(\d{1,9})$")
_SPEC_SUFFIXES = (".json", ".yaml", ".yml")


def _check_options(label: str, fn: Builder, options: dict, skip: int) -> None:
    """Unknown or non-positive options get one clear line instead of a TypeError deep inside."""
    allowed = list(inspect.signature(fn).parameters)[skip:]
    for key, value in options.items():
        if key not in allowed:
            raise SpecError(f"network {label!r} has no option {key!r}; it takes: {', '.join(allowed)}")
        if key in ("image", "growth", "num_classes") and (isinstance(value, bool) or not isinstance(value, int)
                                                          or value < 1):
            raise SpecError(f"network {label!r}: option {key} must be a positive integer, got {value!r}")


def is_spec_path(name: str) -> bool:
    try:
        return str(name).lower().endswith(_SPEC_SUFFIXES) or Path(str(name)).is_file()
    except (OSError, ValueError):  # a name too long for a path, or with a NUL byte, is no file
        return False


def default_batch(name: str) -> int:
    """The mini-batch size a network is built with when none is given."""
    if is_torch_name(name):
        return torch_default_batch(name, DEFAULT_BATCH)
    key = name.lower()
    if key in DEFAULT_BATCH:
        return DEFAULT_BATCH[key]
    m = _GENERATOR_RE.match(key)
    if m:
        return GENERATORS[f"{m.group(1)}-N"][1]
    raise UnknownNetworkError(_unknown(name))


def _unknown(name: str) -> str:
    return (f"unknown network {short(name)}; known: {', '.join(sorted(NETWORKS))}, "
            f"generators {', '.join(GENERATORS)}, a .json/.yaml spec file, or a PyTorch model: {TORCH_SYNTAX}")


def get_network(name: str, batch: int | None = None, *, trusted: bool = False, **options) -> Network:
    """Build a network by zoo name, generator name or spec path; ``batch`` defaults per network.

    ``options`` are the builder's keyword arguments (``image``, ``num_classes``, ``growth`` for
    densenet40, ``stages`` for resnet-N); a spec file takes none. ``trusted``: the caller's user named
    ``name`` (a Python argument, not a name read from a file), so a ``package.module:callable`` is imported
    (engine.pytorch.loader.trust).
    """
    if batch is not None and (isinstance(batch, bool) or not isinstance(batch, int) or batch < 1):
        raise PolicyError(f"mini-batch size must be a positive integer, got {short(batch)}")
    if batch is not None and batch > MAX_BATCH:
        raise PolicyError(f"mini-batch size {batch} is above {MAX_BATCH}, the largest this engine plans")
    if is_torch_name(name):  # checked before lowercasing: module paths are case-sensitive
        if options:
            raise SpecError(f"a PyTorch network takes no build options, got {', '.join(options)}; "
                            f"give the input shape in the name, e.g. {name.split('@')[0]}@3x299x299")
        from .pytorch.loader import load_network, trust
        if trusted:
            trust(name)
        return load_network(name, batch or default_batch(name))
    key = str(name).lower()
    if key in NETWORKS:
        fn = NETWORKS[key]
        _check_options(key, fn, options, 1)
        return _build(key, fn, batch or DEFAULT_BATCH[key], **options)
    m = _GENERATOR_RE.match(key)
    if m:
        fn, default, _ = GENERATORS[f"{m.group(1)}-N"]
        _check_options(key, fn, options, 2)
        return _build(key, fn, int(m.group(2)), batch or default, **options)
    if is_spec_path(name):
        if options:
            raise SpecError(f"a spec file takes no build options, got {', '.join(options)}")
        from .spec import load_spec
        return load_spec(name, batch)
    raise UnknownNetworkError(_unknown(name))


def _build(label: str, fn: Builder, *args, **options) -> Network:
    try:
        return fn(*args, **options)
    except SpecError:
        raise
    except ValueError as err:  # e.g. an image too small for the network's downsampling
        opts = ", ".join(f"{k}={v}" for k, v in options.items())
        raise SpecError(f"cannot build {label!r}{f' with {opts}' if opts else ''}: {err}") from None
