"""Time-model calibration (engine/memory/calibrate.py) from SYNTHETIC measurements, and the command line's
account of which numbers are measured and which modelled.

Every measurements document here is SYNTHETIC (made-up rates and layer times, provenance.synthetic = true);
the last test runs the GPU-side layer timing on the CPU only to check that its layer names are the
importer's (its times mean nothing).
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest

from engine.memory import plan_memory
from engine.memory.calibrate import (
    FORMAT,
    VERSION,
    TimeParamsFormatError,
    duplex_from,
    load,
    load_time_params,
    merge,
    save,
    time_params,
)
from engine.memory.timemodel import TimeParams, layer_key, roofline_ms
from engine.testing.synthetic import synthetic_profile
from engine.zoo import get_network

ROOT = Path(__file__).resolve().parent.parent
GB = 1e9


def synthetic_doc(net=None, duplex=True) -> dict:
    """SYNTHETIC measurements: rates unlike the defaults so a test can tell them apart, and, for ``net``, a
    made-up time for every non-conv layer except the first one (left to the roofline)."""
    doc = {
        "format": FORMAT,
        "version": VERSION,
        "provenance": {"gpu": "SYNTHETIC GPU", "date": "2000-01-01", "synthetic": True, "command": "tests"},
        "copy": {
            "h2d": 20 * GB,
            "d2h": 30 * GB,
            "duplex_h2d": 19 * GB if duplex else 10 * GB,
            "duplex_d2h": 28 * GB if duplex else 15 * GB,
            "bytes": 1 << 28,
        },
        "hbm": {"rate": 1.5e12, "ops": {"add": 1.5e12}},
        "fc": {"flops": 1e14, "shapes": [[64, 9216, 4096, 1e14]]},
    }
    if net is not None:
        others = [layer.name for layer in net.layers if layer.op not in ("conv", "data")]
        doc["layers"] = {
            layer_key(net.name, net.batch): {
                name: {"F": 0.01 * (i + 1), "B": 0.02 * (i + 1), "op": "SYNTHETIC"}
                for i, name in enumerate(others)
                if i > 0
            }
        }
    return doc


def test_measured_values_replace_the_assumed_ones():
    p = time_params(synthetic_doc())
    assert (p.h2d, p.d2h, p.bandwidth, p.hbm, p.fc_flops) == (20 * GB, 30 * GB, 25 * GB, 1.5e12, 1e14)
    assert p.duplex and set(p.measured) == {"h2d", "d2h", "bandwidth", "duplex", "hbm", "fc_flops"}
    assert p.rate("prefetch") == 20 * GB and p.rate("offload") == 30 * GB
    assert p.source.startswith("SYNTHETIC")
    assert not time_params(synthetic_doc(duplex=False)).duplex  # 25 GB/s together is not 1.5 x 25 alone
    assert duplex_from({"h2d": 1.0}) is None
    # a partial document leaves the rest assumed
    partial = time_params({"format": FORMAT, "version": VERSION, "hbm": {"rate": 3e12}})
    assert partial.measured == ("hbm",) and partial.bandwidth == TimeParams().bandwidth


def test_measured_layer_times_drive_the_time_model_and_the_rest_is_modelled():
    net = get_network("alexnet", 64)
    prof = synthetic_profile("alexnet", 64)  # SYNTHETIC
    params = time_params(synthetic_doc(net))
    res = plan_memory(net, "vdnn-all-p", profile=prof, time_params=params)
    t = res.ticks
    table = synthetic_doc(net)["layers"][layer_key(net.name, 64)]
    other = t[(t.op != "conv")]
    assert set(t[t.op == "conv"].time_source) == {"profile"}
    for r in other.itertuples():
        if r.layer in table:
            assert r.time_source == "measured"
            assert r.compute_ms == table[r.layer]["B" if r.phase == "B" else "F"]
        else:
            assert r.time_source == "roofline"
            assert r.compute_ms == pytest.approx(roofline_ms(res.plan, r.layer, r.phase, params))
    s = res.summary
    assert s["layer_runs_measured"] == (other.time_source == "measured").sum() > 0
    assert s["layer_runs_modelled"] == (other.time_source == "roofline").sum() > 0
    # offloads at the measured device->host rate, prefetches at host->device
    for c in res.copies.itertuples():
        rate = 30 * GB if c.direction == "offload" else 20 * GB
        assert c.end_ms - c.start_ms == pytest.approx(c.bytes / rate * 1e3)
    note = res.time_note
    assert "measured" in note and "modelled by roofline" in note and "SYNTHETIC" in note
    assert json.loads(json.dumps(res.to_dict(ticks=False)))["time_model"] == note


def test_layer_times_apply_only_to_their_network_and_batch():
    prof = synthetic_profile("alexnet", 64)  # SYNTHETIC
    params = time_params(synthetic_doc(get_network("alexnet", 64)))
    other = plan_memory("alexnet", "liveness", batch=32, profile=synthetic_profile("alexnet", 32), time_params=params)
    assert other.summary["layer_runs_measured"] == 0
    default = plan_memory("alexnet", "liveness", batch=64, profile=prof)
    assert "(assumed)" in default.time_note and "(measured)" not in default.time_note.split(";", 1)[1]


def test_save_load_round_trip_and_merge(tmp_path):
    net = get_network("alexnet", 64)
    path = tmp_path / "SYNTHETIC-time-params.json"
    save(path, synthetic_doc(net))
    assert load(path) == synthetic_doc(net)
    assert load_time_params(path) == time_params(synthetic_doc(net))
    host_only = synthetic_doc()
    layers_only = {"format": FORMAT, "version": VERSION, "layers": synthetic_doc(net)["layers"]}
    assert time_params(merge(host_only, layers_only)) == time_params(synthetic_doc(net))


@pytest.mark.parametrize(
    "mutate,match",
    [
        (lambda d: d.update(format="other"), "format"),
        (lambda d: d.update(version=2), "version"),
        (lambda d: d.update(version=True), "version"),
        (lambda d: d["copy"].update(h2d=-1), "copy.h2d"),
        (lambda d: d["copy"].update(h2d=float("nan")), "copy.h2d"),
        (lambda d: d["copy"].update(sideways=1.0), "copy.sideways"),
        (lambda d: d["hbm"].update(rate="fast"), "hbm.rate"),
        (lambda d: d.update(extra=1), "extra"),
        (lambda d: d.update(layers={"n/b1": {"relu1": {"F": -0.5}}}), "relu1.F"),
        (lambda d: d.update(layers={"n/b1": []}), "layers"),
    ],
)
def test_malformed_measurements_are_one_line_errors(tmp_path, mutate, match):
    doc = synthetic_doc()
    mutate(doc)
    with pytest.raises(TimeParamsFormatError, match=match) as err:
        time_params(doc)
    assert "\n" not in str(err.value)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(doc, allow_nan=True))
    with pytest.raises(TimeParamsFormatError):
        load(path)


def cli(*args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "engine", "memory", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"},
    )


@pytest.mark.slow
def test_memory_command_says_what_is_measured(tmp_path):
    net = get_network("alexnet", 64)
    prof = tmp_path / "SYNTHETIC-alexnet-b64.profile.json.gz"
    synthetic_profile("alexnet", 64).save(prof)
    tp = tmp_path / "SYNTHETIC-time-params.json"
    save(tp, synthetic_doc(net))
    one = cli(
        "--network",
        "alexnet",
        "--batch",
        "64",
        "--policy",
        "vdnn-all-p",
        "--profile",
        str(prof),
        "--time-params",
        str(tp),
    )
    assert one.returncode == 0, one.stderr
    line = next(ln for ln in one.stdout.splitlines() if ln.startswith("time model:"))
    assert "runs measured" in line and "20.0 GB/s host->device (measured)" in line
    assert "HBM 1.50 TB/s (measured)" in line
    several = cli(
        "--network",
        "alexnet",
        "--batch",
        "64",
        "--policy",
        "liveness,vdnn-all-p",
        "--profile",
        str(prof),
        "--time-params",
        str(tp),
        "--bandwidth",
        "16GB",
    )
    assert several.returncode == 0, several.stderr
    line = next(ln for ln in several.stdout.splitlines() if ln.startswith("time model:"))
    assert "copies 16.0 GB/s (assumed)" in line and "layer times held" in line
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    err = cli("--network", "alexnet", "--batch", "64", "--profile", str(prof), "--time-params", str(bad))
    assert err.returncode == 2 and len(err.stderr.strip().splitlines()) == 1 and "format" in err.stderr


@pytest.mark.slow
def test_layer_timing_names_are_the_importers_on_the_cpu():
    """The GPU calibration's layer timing, run on the CPU (times meaningless): every non-conv layer of the
    imported network gets a time, under the importer's names (a module called three times: relu, relu_1,
    relu_2), functional adds included."""
    torch = pytest.importorskip("torch")
    torchvision = pytest.importorskip("torchvision")
    from engine.pytorch.calibrate import measure_layers
    from engine.pytorch.loader import load_network

    net = load_network("torchvision:resnet18", 2)
    torch.manual_seed(0)
    table, unmatched = measure_layers(torchvision.models.resnet18(), (3, 224, 224), 2, net, repeats=1)
    others = {layer.name for layer in net.layers if layer.op not in ("conv", "data")}
    assert set(table) == others and not unmatched
    assert table["prob"]["op"] == "cross_entropy" and table["layer1.0.add"]["B"] == 0.0
    assert all(v["F"] >= 0 and v["B"] >= 0 and math.isfinite(v["F"]) for v in table.values())


def test_layer_timing_replays_functional_pools_and_pieces_of_containers_on_the_cpu():
    """Layers no module call gives are replayed from the traced graph (times meaningless on the CPU): a
    functional max-pool (the Network's own pool layer, not generic), the pieces of a chunk and of
    MultiheadAttention's (output, weights) pair, read through ``getitem``; every non-conv layer gets a time."""
    torch = pytest.importorskip("torch")
    from engine.pytorch.calibrate import measure_layers
    from engine.pytorch.importer import import_model

    nn, F = torch.nn, torch.nn.functional

    class Pieces(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(3, 16, 3, padding=1)
            self.attention = nn.MultiheadAttention(8, 2, batch_first=True)
            self.fc = nn.Linear(8, 10)

        def forward(self, x):
            a, b = F.max_pool2d(self.conv(x), 2).chunk(2, dim=1)
            t = (a * torch.sigmoid(b)).flatten(2).transpose(1, 2)
            return self.fc(self.attention(t, t, t, need_weights=False)[0].mean(1))

    torch.manual_seed(0)
    model = Pieces()
    net = import_model(model, (3, 8, 8), 2, "pieces")
    table, unmatched = measure_layers(model, (3, 8, 8), 2, net, repeats=1)
    assert set(table) == {x.name for x in net.layers if x.op not in ("conv", "data")} and not unmatched
    replayed = {k: v["op"] for k, v in table.items() if v["op"].endswith("(replayed)")}
    assert {"pool (replayed)", "_operator.getitem (replayed)"} <= set(replayed.values()), replayed
    assert sum(op == "_operator.getitem (replayed)" for op in replayed.values()) == 3
    assert all(math.isfinite(v["F"]) and v["F"] >= 0 and v["B"] >= 0 for v in table.values())


def test_layer_timing_times_depthwise_convolutions_on_the_cpu():
    """Depthwise convolutions, which ATen runs with its own kernels (not cuDNN), are timed with the other layers;
    other convolutions, grouped ones included, keep the profile's times."""
    torch = pytest.importorskip("torch")
    from engine.pytorch.calibrate import measure_layers
    from engine.pytorch.importer import import_model

    nn = torch.nn
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.Conv2d(16, 16, 7, padding=3, groups=16),
        nn.Conv2d(16, 16, 3, padding=1, groups=4), nn.Flatten(), nn.Linear(16 * 8 * 8, 10),
    )  # fmt: skip
    net = import_model(model, (3, 8, 8), 2, "depthwise")
    table, unmatched = measure_layers(model, (3, 8, 8), 2, net, repeats=1)
    assert (
        unmatched == ["3"] and "1" in table
    )  # 3: Flatten, no layer of its own; and table["1"]["op"] == "Conv2d" and table["1"]["B"] > 0
    assert "0" not in table and "2" not in table
