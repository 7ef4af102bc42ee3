"""``python -m engine networks``: the zoo table, one network's kernels, and one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from engine.cli import main
from engine.zoo import NETWORKS, get_network

ROOT = Path(__file__).resolve().parent.parent


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "engine", "networks", *args], cwd=ROOT, capture_output=True, text=True, timeout=60
    )


@pytest.mark.parametrize(
    "args,message",
    [
        (["--network", "lenet"], "error: unknown network 'lenet'; known: alexnet"),
        (["--network", "resnet-1920"], "error: resnet-1920: a bottleneck ResNet has 3*blocks+2 layers"),
        (["--network", "missing.yaml"], "error: spec 'missing.yaml': file not found"),
        (["--batch", "0"], "error: mini-batch size must be a positive integer, got 0"),
    ],
)
def test_bad_input_is_one_line_exit_2(args, message):
    proc = run_cli(*args)
    assert proc.returncode == 2
    assert proc.stdout == ""
    assert proc.stderr.startswith(message)
    assert proc.stderr.count("\n") == 1 and "Traceback" not in proc.stderr


def test_zoo_table_json(capsys):
    assert main(["networks", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    rows = {r["network"]: r for r in out["networks"]}
    assert list(rows) == list(NETWORKS)
    assert rows["resnet50"] == {
        "network": "resnet50",
        "batch": 64,
        "params": 25_557_032,
        "conv_layers": 53,
        "kernels": 158,
        "unique_kernels": 68,
        "description": "ResNet-50 (torchvision)",
    }
    assert rows["googlenet"]["conv_layers"] == 57
    assert set(out["generators"]) == {"resnet-N", "vgg-N"}


def test_zoo_table_text_with_batch(capsys):
    assert main(["networks", "--batch", "8"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split()[:3] == ["network", "batch", "params"]
    row = next(line for line in lines if line.startswith("alexnet-caffe "))
    assert row.split()[:6] == ["alexnet-caffe", "8", "60,965,224", "5", "14", "14"]
    assert any(line.strip().startswith("resnet-N") for line in lines)


def test_network_kernels_json(capsys):
    assert main(["networks", "--network", "resnet18", "--batch", "32", "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    net = get_network("resnet18", 32)
    assert info["batch"] == 32 and info["kernels"] == len(info["kernel_list"]) == 59
    assert [k["id"] for k in info["kernel_list"][:4]] == [
        "conv1:F",
        "conv1:BF",
        "layer1.0.conv1:F",
        "layer1.0.conv1:BD",
    ]
    assert info["kernel_list"][0]["key"] == "Forward/tf32/NCHW/c3h224w224/k64r7s7/p3x3/s2x2/d1x1/g1"
    assert info["unique_kernels"] == len(info["unique_kernel_list"]) == len(net.unique_kernels()) == 32
    # layer1's four 3x3 convs are one signature per direction
    first = next(u for u in info["unique_kernel_list"] if u["key"].startswith("Forward/tf32/NCHW/c64h56w56/k64r3s3"))
    assert first["count"] == 4
    assert first["kernels"] == ["layer1.0.conv1:F", "layer1.0.conv2:F", "layer1.1.conv1:F", "layer1.1.conv2:F"]
    assert sum(u["count"] for u in info["unique_kernel_list"]) == 59


def test_network_kernels_text(capsys):
    assert main(["networks", "--network", "alexnet-caffe", "--batch", "200"]) == 0
    out = capsys.readouterr().out
    assert "batch 200, 60,965,224 parameters, 5 conv layers, 14 kernels, 14 unique" in out
    assert "conv1:BD" not in out
    assert "conv2:BD  BackwardData/tf32/NCHW/c96h27w27/k256r5s5/p2x2/s1x1/d1x1/g2" in out


def test_network_from_spec_file(tmp_path):
    spec = {
        "name": "mini",
        "input": [3, 8, 8],
        "layers": [
            {"op": "conv", "name": "a", "k": 4, "r": 3, "pad": 1},
            {"op": "conv", "name": "b", "k": 4, "r": 3, "pad": 1},
            {"op": "fc", "out_features": 2},
        ],
    }
    path = tmp_path / "mini.yaml"
    path.write_text(yaml.safe_dump(spec))
    proc = run_cli("--network", str(path), "--json")
    assert proc.returncode == 0, proc.stderr
    info = json.loads(proc.stdout)
    assert info["network"] == "mini" and info["batch"] == 32
    assert [k["id"] for k in info["kernel_list"]] == ["a:F", "a:BF", "b:F", "b:BD", "b:BF"]
    path.write_text("input: [3, 8, 8]\nlayers:\n  - {op: conv, r: 3}\n")
    proc = run_cli("--network", str(path))
    assert proc.returncode == 2
    assert proc.stderr.strip().endswith("layer #1 (conv): missing field 'k'")
