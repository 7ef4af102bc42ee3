"""The zoo against the published architectures: parameter counts, conv shapes, layer lists, kernels."""

from __future__ import annotations

import pytest

from engine.errors import EngineError, SpecError, UnknownNetworkError
from engine.kernels import KernelKind
from engine.units import MiB
from engine.zoo import DEFAULT_BATCH, NETWORKS, default_batch, get_network, resnet_stages, vgg_groups

# torchvision's numbers (sum(p.numel() for p in model.parameters())), Caffe's bvlc_alexnet, and
# DenseNet-40 (k=12) of Huang et al. (1.0M in their Table 2).
GOLDEN_PARAMS = {
    "alexnet": 61_100_840,
    "alexnet-caffe": 60_965_224,
    "resnet18": 11_689_512,
    "resnet34": 21_797_672,
    "resnet50": 25_557_032,
    "resnet101": 44_549_160,
    "resnet152": 60_192_808,
    "vgg16": 138_357_544,
    "googlenet": 6_624_904,
}
GOLDEN_CONVS = {
    "alexnet": 5,
    "alexnet-caffe": 5,
    "resnet18": 20,
    "resnet34": 36,
    "resnet50": 53,
    "resnet101": 104,
    "resnet152": 155,
    "vgg16": 13,
    "googlenet": 57,
    "densenet40": 39,
}


def convs(net):
    return net.conv_layers()


def conv_shape(net, name):
    """(c_in, h_in, k, r, stride, pad, groups, h_out) of a conv layer."""
    layer = net.layer(name)
    p = layer.params
    c, h, _ = net.layer(layer.inputs[0]).out_shape
    return (c, h, p["k"], p["r"], p["stride_h"], p["pad_h"], p["groups"], layer.out_shape[1])


@pytest.mark.slow
@pytest.mark.parametrize("name,params", GOLDEN_PARAMS.items())
def test_golden_parameter_counts(name, params):
    assert get_network(name, 2).param_count == params


def test_densenet40_parameter_counts():
    assert get_network("densenet40", 2, growth=12).param_count == 1_019_722
    # k=40 (mu-cuDNN): same arithmetic, by hand. Block inputs 16+40i, 160+..., widths kept by transitions.
    k, c, total = 40, 16, 3 * 16 * 9
    for block in range(3):
        for _ in range(12):
            total += 2 * c + 9 * k * c  # BN scale/shift + 3x3 conv without bias
            c += k
        if block < 2:
            total += 2 * c + c * c  # transition BN + 1x1 conv
    total += 2 * c + c * 10 + 10  # final BN + fc
    assert c == 1456
    assert get_network("densenet40", 2).param_count == total == 10_550_362


@pytest.mark.parametrize("name,count", GOLDEN_CONVS.items())
def test_conv_counts_and_kernel_counts(name, count):
    net = get_network(name, 2)
    assert len(convs(net)) == count
    kernels = net.kernels()
    # three kernels per conv, minus BackwardData of the one conv that reads the input images
    assert len(kernels) == 3 * count - 1
    first = convs(net)[0]
    assert first.inputs == ("data",)
    assert [k.kind for k in kernels if k.layer == first.name] == [KernelKind.FORWARD, KernelKind.BACKWARD_FILTER]
    assert all(k.signature.n == 2 for k in kernels)


def test_every_zoo_network_has_a_default_batch_and_ends_in_softmax():
    assert set(DEFAULT_BATCH) == set(NETWORKS)
    for name in NETWORKS:
        net = get_network(name)
        assert net.batch == DEFAULT_BATCH[name] == default_batch(name)
        assert net.layers[-1].op == "softmax"


# ------------------------------------------------------------------------------------ AlexNet


def test_alexnet_caffe_layer_list_is_superneurons_fig10():
    net = get_network("alexnet-caffe", 200)
    assert [layer.name for layer in net.layers] == [
        "data",
        "conv1",
        "relu1",
        "lrn1",
        "pool1",
        "conv2",
        "relu2",
        "lrn2",
        "pool2",
        "conv3",
        "relu3",
        "conv4",
        "relu4",
        "conv5",
        "relu5",
        "pool5",
        "fc6",
        "relu6",
        "drop6",
        "fc7",
        "relu7",
        "drop7",
        "fc8",
        "prob",
    ]
    assert len(net.layers) - 1 == 23


def test_alexnet_caffe_tensor_sizes_match_superneurons():
    """SuperNeurons (arXiv:1801.04380) Table 1 / Fig. 10: fp32 outputs at b200 in MiB; l^b(POOL5) and l^b(LRN1)
    follow."""
    net = get_network("alexnet-caffe", 200)
    mib = {layer.name: net.batch * layer.out_elems * 4 / MiB for layer in net.layers}
    assert mib["conv1"] == pytest.approx(221.5576, abs=5e-5)
    assert mib["conv2"] == pytest.approx(142.38, abs=5e-3)
    assert mib["conv3"] == mib["conv4"] == pytest.approx(49.51, abs=5e-3)
    assert mib["conv5"] == pytest.approx(33.0078, abs=5e-5)
    assert mib["pool5"] == pytest.approx(7.03125)
    assert 2 * mib["conv5"] + 2 * mib["pool5"] == pytest.approx(80.078, abs=1e-3)
    assert 4 * mib["lrn1"] == pytest.approx(886.23, abs=5e-3)


def test_alexnet_caffe_shapes_and_parameter_arithmetic():
    net = get_network("alexnet-caffe", 1)
    # (c_in, h_in, k, r, stride, pad, groups, h_out) of bvlc_alexnet's deploy.prototxt
    assert conv_shape(net, "conv1") == (3, 227, 96, 11, 4, 0, 1, 55)
    assert conv_shape(net, "conv2") == (96, 27, 256, 5, 1, 2, 2, 27)
    assert conv_shape(net, "conv3") == (256, 13, 384, 3, 1, 1, 1, 13)
    assert conv_shape(net, "conv4") == (384, 13, 384, 3, 1, 1, 2, 13)
    assert conv_shape(net, "conv5") == (384, 13, 256, 3, 1, 1, 2, 13)
    assert [net.layer(p).out_shape for p in ("pool1", "pool2", "pool5")] == [(96, 27, 27), (256, 13, 13), (256, 6, 6)]
    assert all(net.layer(p).params["ceil_mode"] for p in ("pool1", "pool2", "pool5"))
    assert net.layer("lrn1").params == {"size": 5, "alpha": 1e-4, "beta": 0.75, "k": 1.0}
    by_hand = (
        96 * 3 * 11 * 11
        + 96
        + 256 * 48 * 25
        + 256
        + 384 * 256 * 9
        + 384
        + 384 * 192 * 9
        + 384
        + 256 * 192 * 9
        + 256
        + 9216 * 4096
        + 4096
        + 4096 * 4096
        + 4096
        + 4096 * 1000
        + 1000
    )
    assert net.param_count == by_hand == 60_965_224
    assert net.layer("fc6").params["in_features"] == 256 * 6 * 6


def test_alexnet_torchvision_shapes():
    net = get_network("alexnet", 1)
    assert conv_shape(net, "conv1") == (3, 224, 64, 11, 4, 2, 1, 55)
    assert conv_shape(net, "conv2") == (64, 27, 192, 5, 1, 2, 1, 27)
    assert conv_shape(net, "conv3") == (192, 13, 384, 3, 1, 1, 1, 13)
    assert conv_shape(net, "conv4") == (384, 13, 256, 3, 1, 1, 1, 13)
    assert conv_shape(net, "conv5") == (256, 13, 256, 3, 1, 1, 1, 13)
    assert net.layer("pool5").out_shape == (256, 6, 6)


# ------------------------------------------------------------------------------------- ResNet


def test_resnet50_structure():
    net = get_network("resnet50", 1)
    layers = net.layers
    assert sum(1 for c in convs(net) if ".downsample." in c.name) == 4
    assert all(not c.params["bias"] for c in convs(net))
    # BN right after every conv, and nothing else reads a conv
    assert all([net.layer(n).op for n in net.consumers[c.name]] == ["bn"] for c in convs(net))
    adds = [x for x in layers if x.op == "add"]
    assert len(adds) == 16
    assert all([net.layer(n).op for n in net.consumers[a.name]] == ["relu"] for a in adds)
    stage_out = {f"layer{i}": net.layer(f"layer{i}.{n - 1}.relu").out_shape for i, n in zip(range(1, 5), (3, 4, 6, 3))}
    assert stage_out == {
        "layer1": (256, 56, 56),
        "layer2": (512, 28, 28),
        "layer3": (1024, 14, 14),
        "layer4": (2048, 7, 7),
    }
    assert conv_shape(net, "conv1") == (3, 224, 64, 7, 2, 3, 1, 112)
    assert net.layer("maxpool").out_shape == (64, 56, 56)
    # v1.5: stride 2 on the 3x3 conv, and on the shortcut
    assert conv_shape(net, "layer2.0.conv1")[4] == 1
    assert conv_shape(net, "layer2.0.conv2") == (128, 56, 128, 3, 2, 1, 1, 28)
    assert conv_shape(net, "layer2.0.downsample.0") == (256, 56, 512, 1, 2, 0, 1, 28)
    assert net.layer("avgpool").out_shape == (2048, 1, 1)
    assert net.layer("fc").params["in_features"] == 2048
    # 68 unique signatures: the repeated 3x3/1x1 convs within a stage share kernels
    assert len(net.unique_kernels()) == 68


def test_resnet18_structure():
    net = get_network("resnet18", 1)
    assert sum(1 for c in convs(net) if ".downsample." in c.name) == 3  # layer1 needs no projection
    assert sum(1 for x in net.layers if x.op == "add") == 8
    assert net.layer("layer4.1.relu").out_shape == (512, 7, 7)


def test_image_option_changes_shapes():
    net = get_network("resnet50", 1, image=160)
    assert net.layer("layer4.2.relu").out_shape == (2048, 5, 5)
    assert net.param_count == GOLDEN_PARAMS["resnet50"]
    assert get_network("alexnet-caffe", 1, image=227 + 32).layer("conv1").out_shape == (96, 63, 63)
    # VGG has no adaptive pool (as Caffe/Torch VGG): fc6 reads 512 x image/32 x image/32
    assert get_network("vgg16", 1, image=256).layer("fc6").params["in_features"] == 512 * 8 * 8
    assert get_network("densenet40", 1, image=64).layer("trans2.pool").out_shape == (976, 16, 16)


@pytest.mark.parametrize(
    "depth,stages",
    [
        (50, (3, 4, 6, 3)),
        (101, (3, 4, 23, 3)),
        (152, (3, 8, 36, 3)),
        (200, (3, 24, 36, 3)),
        (302, (3, 4, 90, 3)),
        (1517, (3, 4, 495, 3)),
    ],
)
def test_resnet_stages(depth, stages):
    assert resnet_stages(depth) == stages
    assert 3 * sum(stages) + 2 == depth


@pytest.mark.slow
@pytest.mark.parametrize("depth", [50, 101, 152, 302, 695, 1001, 1172, 1304, 1517, 18, 34])
def test_resnet_n_has_n_weight_layers(depth):
    """Layrub's depths (Table 6) and the basic ResNets: convs without shortcuts + fc == N."""
    net = get_network(f"resnet-{depth}")
    main_convs = [c for c in convs(net) if ".downsample." not in c.name]
    fcs = [x for x in net.layers if x.op == "fc"]
    assert len(main_convs) + len(fcs) == depth
    assert sum(1 for c in convs(net) if ".downsample." in c.name) == (4 if depth >= 50 else 3)
    assert net.name == f"resnet-{depth}"
    assert net.batch == 16


@pytest.mark.parametrize(
    "gen,zoo",
    [
        ("resnet-18", "resnet18"),
        ("resnet-34", "resnet34"),
        ("resnet-50", "resnet50"),
        ("resnet-101", "resnet101"),
        ("resnet-152", "resnet152"),
        ("vgg-16", "vgg16"),
    ],
)
def test_generators_reproduce_zoo_networks(gen, zoo):
    a, b = get_network(gen, 4), get_network(zoo, 4)
    assert [(x.name, x.op, x.inputs, x.out_shape, x.params) for x in a.layers] == [
        (x.name, x.op, x.inputs, x.out_shape, x.params) for x in b.layers
    ]


def test_resnet_stages_override_superneurons_generator():
    """SuperNeurons Table 4: n1=6, n2=32, n4=6, vary n3; depth = 3*(n1+n2+n3+n4)+2."""
    net = get_network("resnet-302", 1, stages=(6, 32, 56, 6))
    assert sum(1 for x in net.layers if x.op == "add") == 100
    assert net.layer("layer2.31.relu").out_shape == (512, 28, 28)
    with pytest.raises(SpecError, match="give depth 302, not 305"):
        get_network("resnet-305", 1, stages=(6, 32, 56, 6))
    with pytest.raises(SpecError, match="4 positive integers"):
        get_network("resnet-302", 1, stages=(100, 0))


@pytest.mark.parametrize("depth", [1920, 2500, 49, 51, 52, 20, 0])
def test_resnet_n_rejects_impossible_depths(depth):
    with pytest.raises(SpecError, match=f"resnet-{depth}: .*N mod 3 == 2"):
        get_network(f"resnet-{depth}")


# ---------------------------------------------------------------------------------------- VGG


def test_vgg16_structure():
    net = get_network("vgg16", 1)
    assert all(conv_shape(net, c.name)[3:6] == (3, 1, 1) for c in convs(net))
    assert [c.params["k"] for c in convs(net)] == [64] * 2 + [128] * 2 + [256] * 3 + [512] * 6
    assert net.layer("pool5").out_shape == (512, 7, 7)
    assert net.layer("fc6").params["in_features"] == 25088
    assert [x.name for x in net.layers[-8:]] == ["fc6", "relu6", "drop6", "fc7", "relu7", "drop7", "fc8", "prob"]


@pytest.mark.parametrize("depth", [11, 13, 16, 19, 116, 216, 316, 416])
def test_vgg_n_has_n_weight_layers(depth):
    net = get_network(f"vgg-{depth}")
    assert len(convs(net)) + sum(1 for x in net.layers if x.op == "fc") == depth
    assert net.batch == 32


def test_vgg_deepening_follows_vdnn():
    """vDNN arXiv:1602.08124 §IV-C: +100 layers = 20 more 3x3 convs in each of the 5 groups, at the group's width."""
    assert vgg_groups(116) == (22, 22, 23, 23, 23)
    assert vgg_groups(416) == (82, 82, 83, 83, 83)
    net = get_network("vgg-216", 1)
    widths = {}
    for c in convs(net):
        widths.setdefault(c.name.split("_")[0], set()).add((c.params["k"], c.params["r"], c.params["pad_h"]))
    assert widths == {
        "conv1": {(64, 3, 1)},
        "conv2": {(128, 3, 1)},
        "conv3": {(256, 3, 1)},
        "conv4": {(512, 3, 1)},
        "conv5": {(512, 3, 1)},
    }
    assert net.layer("pool5").out_shape == (512, 7, 7)
    # only the first conv of each group and the group-5 repeats differ: few unique kernels
    assert len(net.unique_kernels()) == len(get_network("vgg-16", 1).unique_kernels())


@pytest.mark.parametrize("depth", [17, 66, 100, 115, 15])
def test_vgg_n_rejects_other_depths(depth):
    with pytest.raises(SpecError, match=f"vgg-{depth}: N must be"):
        get_network(f"vgg-{depth}")


# ---------------------------------------------------------------------------------- GoogLeNet


def test_googlenet_structure():
    net = get_network("googlenet", 1)
    out = {
        name: net.layer(f"{name}.concat").out_shape
        for name in (
            "inception3a",
            "inception3b",
            "inception4a",
            "inception4b",
            "inception4c",
            "inception4d",
            "inception4e",
            "inception5a",
            "inception5b",
        )
    }
    assert out == {
        "inception3a": (256, 28, 28),
        "inception3b": (480, 28, 28),
        "inception4a": (512, 14, 14),
        "inception4b": (512, 14, 14),
        "inception4c": (512, 14, 14),
        "inception4d": (528, 14, 14),
        "inception4e": (832, 14, 14),
        "inception5a": (832, 7, 7),
        "inception5b": (1024, 7, 7),
    }
    assert [net.layer(p).out_shape[1] for p in ("maxpool1", "maxpool2", "maxpool3", "maxpool4")] == [56, 28, 14, 7]
    assert all(x.params["ceil_mode"] for x in net.layers if x.op == "pool" and x.params["mode"] == "max")
    assert not any("aux" in x.name for x in net.layers)
    assert all(not c.params["bias"] for c in convs(net))
    assert {x.params["eps"] for x in net.layers if x.op == "bn"} == {0.001}
    # torchvision's "5x5" branch is a 3x3 conv
    assert conv_shape(net, "inception3a.branch3.1.conv") == (16, 28, 32, 3, 1, 1, 1, 28)
    assert conv_shape(net, "inception5b.branch4.1.conv") == (832, 7, 128, 1, 1, 0, 1, 7)
    assert net.layer("fc").params["in_features"] == 1024
    assert net.layer("dropout").params["p"] == 0.2


# ----------------------------------------------------------------------------------- DenseNet


def test_densenet40_structure():
    net = get_network("densenet40", 1)
    assert net.layer("data").out_shape == (3, 32, 32)
    assert net.layer("block1.layer12.concat").out_shape == (16 + 12 * 40, 32, 32)
    assert net.layer("trans1.pool").out_shape == (496, 16, 16)
    assert net.layer("block2.layer12.concat").out_shape == (976, 16, 16)
    assert net.layer("trans2.pool").out_shape == (976, 8, 8)
    assert net.layer("block3.layer12.concat").out_shape == (1456, 8, 8)
    assert net.layer("fc").params == {"in_features": 1456, "out_features": 10, "bias": True}
    # BN-ReLU-conv3x3 per dense layer, concat with the layer's input
    assert [x.op for x in net.layers[2:6]] == ["bn", "relu", "conv", "concat"]
    assert net.layer("block1.layer2.concat").inputs == ("block1.layer1.concat", "block1.layer2.conv")
    assert conv_shape(net, "block2.layer3.conv") == (496 + 80, 16, 40, 3, 1, 1, 1, 16)
    assert conv_shape(net, "trans2.conv") == (976, 16, 976, 1, 1, 0, 1, 16)
    assert net.layer("trans1.pool").params["mode"] == "avg"


def test_densenet_growth_option():
    net = get_network("densenet40", 1, growth=12)
    assert net.name == "densenet40-k12"
    assert net.layer("block3.layer12.concat").out_shape == (16 + 36 * 12, 8, 8)


# ------------------------------------------------------------------------------- get_network


def test_get_network_errors():
    with pytest.raises(UnknownNetworkError, match="unknown network 'lenet'; known: alexnet"):
        get_network("lenet")
    with pytest.raises(SpecError, match="'alexnet' has no option 'growth'; it takes: image, num_classes"):
        get_network("alexnet", growth=12)
    with pytest.raises(SpecError, match="option image must be a positive integer"):
        get_network("resnet50", image=0)
    with pytest.raises(SpecError, match="cannot build 'alexnet-caffe' with image=32: layer 'pool5'"):
        get_network("alexnet-caffe", image=32)
    for bad in (0, -1, 2.5, True):
        with pytest.raises(ValueError, match="mini-batch size must be a positive integer"):
            get_network("alexnet", bad)
    assert issubclass(SpecError, EngineError)


def test_get_network_is_case_insensitive():
    assert get_network("ResNet-50", 2).param_count == GOLDEN_PARAMS["resnet50"]
    assert get_network("AlexNet-Caffe", 2).name == "alexnet-caffe"
