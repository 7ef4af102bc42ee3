"""User network specs: round trips of every zoo network, the documented example, and errors."""

from __future__ import annotations

import copy
import json
import re
from pathlib import Path

import pytest
import yaml

from engine.errors import SpecError
from engine.spec import load_spec, save_spec, to_spec
from engine.zoo import NETWORKS, get_network

DOC = Path(__file__).resolve().parent.parent / "docs" / "network-spec.md"


def layers_of(net):
    return [(x.name, x.op, x.inputs, x.out_shape, x.params) for x in net.layers]


@pytest.mark.slow
@pytest.mark.parametrize("name", [*NETWORKS, "resnet-302", "vgg-116"])
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_round_trip_through_files(name, suffix, tmp_path):
    net = get_network(name, 3)
    path = tmp_path / f"net{suffix}"
    save_spec(net, path)
    back = load_spec(path)
    assert (back.name, back.batch, back.description) == (net.name, 3, net.description)
    assert layers_of(back) == layers_of(net)
    assert [k.id for k in back.kernels()] == [k.id for k in net.kernels()]
    assert get_network(str(path), 7).batch == 7


def test_spec_is_compact():
    """Inputs are written only where they are not the previous layer; pairs collapse when square."""
    spec = to_spec(get_network("resnet18", 1))
    by_name = {e["name"]: e for e in spec["layers"]}
    assert "inputs" not in by_name["bn1"]
    assert by_name["layer1.0.add"]["inputs"] == ["layer1.0.bn2", "maxpool"]
    assert by_name["conv1"]["stride"] == 2 and by_name["conv1"]["pad"] == 3
    assert spec["input"] == [3, 224, 224]


def doc_example() -> dict:
    block = re.search(r"```yaml\n(.*?)```", DOC.read_text(), re.S).group(1)
    return yaml.safe_load(block)


def test_documented_example_loads(tmp_path):
    spec = doc_example()
    net = load_spec(spec)
    assert net.name == "tiny-res" and net.batch == 128
    assert net.layer("b1.add").out_shape == (16, 32, 32)
    assert net.layer("b2.add").out_shape == (32, 16, 16)
    assert net.layer("avgpool").out_shape == (32, 1, 1)
    # by hand: convs 3*16*9, 2*16*16*9, 16*32*9, 32*32*9, 16*32 (no bias); 6 BNs; fc 32*10+10
    assert net.param_count == 432 + 2 * 2304 + 4608 + 9216 + 512 + 2 * (16 * 3 + 32 * 3) + 330 == 19994
    assert [k.id for k in net.kernels()][:2] == ["conv1:F", "conv1:BF"]
    assert len(net.kernels()) == 6 * 3 - 1
    # the same mapping as JSON
    path = tmp_path / "tiny.json"
    path.write_text(json.dumps(spec))
    assert layers_of(load_spec(path, 4)) == layers_of(load_spec(spec, 4))


def test_defaults_and_automatic_names():
    net = load_spec(
        {
            "input": [3, 8, 8],
            "layers": [
                {"op": "conv", "k": 4, "r": 3, "pad": 1},
                {"op": "relu", "name": "conv2"},
                {"op": "conv", "k": 4, "r": 3, "s": 1, "pad": [0, 1]},
                {"op": "pool", "size": "global", "mode": "avg"},
                {"op": "fc", "out_features": 3, "bias": False},
                {"op": "softmax"},
            ],
        }
    )
    assert [x.name for x in net.layers] == ["data", "conv1", "conv2", "conv3", "pool1", "fc1", "softmax1"]
    assert net.name == "custom" and net.batch == 32
    assert net.layer("conv3").out_shape == (4, 6, 10)
    assert net.layer("pool1").out_shape == (4, 1, 1)
    assert net.layer("fc1").params == {"in_features": 4, "out_features": 3, "bias": False}
    assert net.param_count == 4 * 3 * 9 + 4 + 4 * 4 * 3 + 4 + 4 * 3


def test_pool_options_and_multi_inputs():
    net = load_spec(
        {
            "name": "t",
            "input": [2, 7, 7],
            "batch": 5,
            "layers": [
                {"op": "pool", "name": "p", "size": 2, "stride": 2, "ceil_mode": True},
                {"op": "pool", "name": "q", "inputs": "data", "size": [3, 3], "stride": 2, "pad": 1},
                {"op": "concat", "name": "cat", "inputs": ["p", "q"]},
                {"op": "lrn", "size": 3},
                {"op": "bn", "eps": 0.001},
                {"op": "dropout", "p": 0},
            ],
        }
    )
    assert net.batch == 5
    assert net.layer("p").out_shape == (2, 4, 4) and net.layer("q").out_shape == (2, 4, 4)
    assert net.layer("cat").out_shape == (4, 4, 4)
    assert net.kernels() == []


BASE = {
    "name": "t",
    "input": [3, 16, 16],
    "layers": [
        {"op": "conv", "name": "c1", "k": 8, "r": 3, "pad": 1},
        {"op": "relu", "name": "r1"},
        {"op": "fc", "name": "f", "out_features": 10},
    ],
}


def edited(path, value):
    """BASE with one field replaced; ``path`` is a tuple of keys/indices (one past the end of a list
    appends); value ``...`` deletes the field."""
    spec = copy.deepcopy(BASE)
    target = spec
    for key in path[:-1]:
        target = target[key]
    if value is ...:
        del target[path[-1]]
    elif isinstance(target, list) and path[-1] == len(target):
        target.append(value)
    else:
        target[path[-1]] = value
    return spec


ERRORS = [
    (edited(("input",), ...), r"^spec: field 'input' must be \[C, H, W\]"),
    (edited(("input",), [3, 16]), r"field 'input' must be \[C, H, W\]"),
    (edited(("input",), [3, 0, 16]), r"field 'input' must be"),
    (edited(("batch",), 0), r"field 'batch' must be a positive integer, got 0"),
    (edited(("nam",), "x"), r"unknown top-level field 'nam'"),
    (edited(("name",), 5), r"field 'name' must be a non-empty string"),
    (edited(("layers",), []), r"field 'layers' must be a non-empty list"),
    (edited(("layers", 1), "relu"), r"layer #2 must be a mapping"),
    (edited(("layers", 1, "op"), "gelu"), r"layer #2 'r1' \(gelu\): field 'op' must be one of conv, relu"),
    (edited(("layers", 0, "k"), ...), r"layer #1 'c1' \(conv\): missing field 'k'"),
    (edited(("layers", 0, "k"), 0), r"layer #1 'c1' \(conv\): field 'k' must be a positive integer, got 0"),
    (edited(("layers", 0, "k"), True), r"field 'k' must be a positive integer, got True"),
    (edited(("layers", 0, "kernel"), 3), r"layer #1 'c1' \(conv\): unknown field 'kernel'; conv takes name, inputs, k"),
    (edited(("layers", 0, "stride"), 0), r"field 'stride' must be an integer >= 1"),
    (edited(("layers", 0, "pad"), -1), r"field 'pad' must be an integer >= 0"),
    (edited(("layers", 0, "pad"), [1, 2, 3]), r"field 'pad' must be an integer >= 0 or a pair"),
    (edited(("layers", 0, "bias"), "no"), r"field 'bias' must be true or false"),
    (edited(("layers", 0, "groups"), 2), r"layer #1 'c1' \(conv\): channels 3->8 not divisible by groups 2$"),
    (
        edited(("layers", 0, "r"), 21),
        r"layer #1 'c1' \(conv\): output shape \(8, -2, -2\) is empty; the input is too small$",
    ),
    (edited(("layers", 1, "inputs"), ["nope"]), r"layer #2 'r1' \(relu\): input 'nope' is not an earlier layer"),
    (edited(("layers", 1, "inputs"), ["c1", "data"]), r"'inputs' must name exactly one layer for relu, got 2"),
    (edited(("layers", 1, "inputs"), 3), r"field 'inputs' must be a list of layer names"),
    (edited(("layers", 1, "name"), "c1"), r"layer #2 'c1' \(relu\): duplicate layer name 'c1'"),
    (edited(("layers", 1, "name"), "data"), r"duplicate layer name 'data'"),
    (edited(("layers", 2, "out_features"), ...), r"layer #3 'f' \(fc\): missing field 'out_features'"),
    (
        edited(("layers", 2), {"op": "add", "inputs": ["r1"]}),
        r"layer #3 \(add\): field 'inputs' must list at least two",
    ),
    (edited(("layers", 2), {"op": "concat"}), r"layer #3 \(concat\): field 'inputs' must list at least two"),
    (edited(("layers", 2), {"op": "add", "inputs": ["r1", "data"]}), r"layer #3 \(add\): add of mismatched shapes"),
    (edited(("layers", 2), {"op": "concat", "inputs": ["r1", "p"]}), r"input 'p' is not an earlier layer"),
    (edited(("layers", 2), {"op": "pool", "size": 0}), r"field 'size' must be a positive integer, a pair"),
    (edited(("layers", 2), {"op": "pool", "size": 2, "mode": "min"}), r"field 'mode' must be 'max' or 'avg'"),
    (edited(("layers", 2), {"op": "pool", "size": 32}), r"layer #3 \(pool\): output shape \(8, 0, 0\) is empty"),
    (edited(("layers", 2), {"op": "dropout", "p": 1}), r"field 'p' must be a probability in \[0, 1\)"),
    (edited(("layers", 2), {"op": "lrn", "alpha": -1}), r"field 'alpha' must be a positive number"),
    (
        edited(("layers", 3), {"op": "conv", "name": "c2", "k": 4, "r": 1}),
        r"layer #4 'c2' \(conv\): input 'f' is a flat vector \(10,\); conv needs a \(C, H, W\) feature map",
    ),
    ([1, 2], r"^spec: the top level must be a mapping"),
]


@pytest.mark.parametrize("spec,message", ERRORS)
def test_malformed_specs_name_the_layer_and_field(spec, message):
    with pytest.raises(SpecError, match=message) as info:
        load_spec(spec)
    assert "\n" not in str(info.value)


def test_file_errors(tmp_path):
    with pytest.raises(SpecError, match=r"spec '.*missing.yaml': file not found"):
        load_spec(tmp_path / "missing.yaml")
    bad_json = tmp_path / "bad.json"
    bad_json.write_text('{"input": [3, 8, 8],\n "layers": [}')
    with pytest.raises(SpecError, match=r"bad.json': invalid JSON at line 2 column"):
        load_spec(bad_json)
    bad_yaml = tmp_path / "bad.yaml"
    bad_yaml.write_text("input: [3, 8, 8\nlayers: x\n")
    with pytest.raises(SpecError, match=r"bad.yaml': invalid YAML: ") as info:
        load_spec(bad_yaml)
    assert "\n" not in str(info.value)
    other = tmp_path / "net.txt"
    other.write_text("{}")
    with pytest.raises(SpecError, match=r"unknown file type '.txt'"):
        load_spec(other)
    with pytest.raises(SpecError, match=r"unknown file type"):
        save_spec(get_network("alexnet", 1), tmp_path / "net.toml")


def test_get_network_with_spec_path(tmp_path):
    path = tmp_path / "t.yaml"
    path.write_text(yaml.safe_dump(BASE))
    net = get_network(str(path))
    assert net.name == "t" and net.batch == 32
    assert net.layer("f").params["in_features"] == 8 * 16 * 16
    with pytest.raises(SpecError, match="a spec file takes no build options"):
        get_network(str(path), image=32)
