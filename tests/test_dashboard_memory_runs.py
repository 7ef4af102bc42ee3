"""The memory benchmark's measured runs as the memory tab reads them (dashboard/memory_runs.py).

Every results file here is SYNTHETIC: made up in the format benchmarks/memory_training.py's ``measure`` writes,
created in tmp_path by the test, never committed.
"""

from __future__ import annotations

import json

import pytest

from dashboard import memory_runs
from dashboard.memory_runs import RESULTS_ENV, load_runs, measured, model_of, results_path

GiB = 1 << 30
MiB = 1 << 20


def step(variant, peak, step_ms, capacity=None, batch=32, **extra):
    """One SYNTHETIC ``step`` case as the benchmark records it."""
    return dict({"kind": "step", "model": "alexnet", "variant": variant, "batch": batch, "capacity": capacity,
                 "ok": True, "peak": peak, "step_ms": step_ms, "step_ms_p10": 38.0, "step_ms_p90": 47.5, "steps": 4,
                 "predicted": {"peak": 1.29 * GiB, "iteration_ms": 38.2, "offload_bytes": 320 * MiB,
                               "recompute_count": 2, "time_model": "time model: SYNTHETIC calibration",
                               "workspace_rule": "heuristic", "convention": "pytorch"},
                 # cumulative offload counter: 300 MiB per step; 7 re-forwards per step
                 "stats": [{"offloaded_bytes": (i + 1) * 300 * MiB, "recomputed_layers": 7} for i in range(4)]},
                **extra)


def synthetic_results(**prov) -> dict:
    """SYNTHETIC: made-up measurements in the benchmark's format."""
    return {"provenance": dict({"gpu": "SYNTHETIC GPU", "date": "2000-01-02T03:04:05Z", "torch": "0.0",
                                "cudnn_version": "-", "command": "SYNTHETIC", "synthetic": True}, **prov),
            "results": [
                {"kind": "calibrate-host", "model": "host", "variant": "", "batch": 0, "capacity": None,
                 "doc": {"copy": {"h2d": 50e9}}},
                step("vdnn-all-p", 1.37 * GiB, 41.7),
                step("vdnn-all-p", 1.11 * GiB, 44.4, capacity=12 * GiB),
                step("liveness", 2.5 * GiB, 20.0, batch=256),
                {"kind": "step", "model": "alexnet", "variant": "sn-recompute", "batch": 32, "capacity": None,
                 "ok": False, "error": "RuntimeError: SYNTHETIC failure", "predicted": {"peak": GiB}}],
            "capacity": {"alexnet/12": {"predicted": {"liveness": 3232, "vdnn-all-p": 3600}, "best": "vdnn-all-p",
                                        "found": {"liveness": 3000, "vdnn-all-p": 3500}}}}


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "SYNTHETIC-memory_training.json"
    path.write_text(json.dumps(synthetic_results()))
    return path


def test_the_environment_names_the_results_file(results):
    assert results_path({}) == memory_runs.DEFAULT_RESULTS
    assert results_path({RESULTS_ENV: str(results)}) == results


def test_an_absent_default_file_is_no_run_and_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_runs, "DEFAULT_RESULTS", tmp_path / "memory_training.json")
    m = measured(tmp_path / "memory_training.json", "alexnet", 32, "vdnn-all-p", None)
    assert m.runs is None and m.run is None and m.error == ""
    assert "does not exist" in measured(tmp_path / "other.json", "alexnet", 32, "vdnn-all-p", None).error


BAD = {
    "not json": (b"{not json", "is not valid JSON"),
    "a list": (b"[]", "must be a JSON object"),
    "results not a list": (b'{"results": 5}', "field results must be a list"),
    "row not an object": (b'{"results": ["x"]}', "field results[0] must be an object"),
    "peak not a number": (json.dumps({"results": [step("vdnn-all-p", "lots", 41.7)]}).encode(),
                          "field results[0].peak must be a non-negative number"),
    "huge batch": (json.dumps({"results": [step("vdnn-all-p", GiB, 41.7, batch=10**400)]}).encode(),
                   "field results[0].batch must be a positive integer"),
    "negative time": (json.dumps({"results": [step("vdnn-all-p", GiB, -1)]}).encode(),
                      "field results[0].step_ms must be a positive number"),
    "NaN literal": (b'{"results": [], "x": NaN}', "is not valid JSON"),
    "deep nest": (b'{"results": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper"),
    "too large": (b" " * (17 << 20), "larger than 16 MiB"),
}


@pytest.mark.parametrize("name", list(BAD))
def test_a_malformed_file_is_one_line(tmp_path, name):
    content, needle = BAD[name]
    bad = tmp_path / "SYNTHETIC-bad.json"
    bad.write_bytes(content)
    m = measured(bad, "alexnet", 32, "vdnn-all-p", None)
    assert needle in m.error and "\n" not in m.error and len(m.error) < 400 and m.run is None


def test_matching_rules_and_rereading_a_changed_file(results):
    runs = load_runs(results)
    assert model_of("torchvision:alexnet") == model_of("alexnet") == "alexnet"
    assert runs.find("torchvision:alexnet", 32, "vdnn-all-p", None).peak == 1.37 * GiB
    assert runs.find("alexnet", 32, "vdnn-all-p", None, precision="fp16", layout="NHWC") is None  # TF32 NCHW only
    assert runs.find("alexnet", 256, "liveness", 12 * GiB).step_ms == 20.0   # no capped run: the uncapped one
    assert runs.find("vgg16", 32, "vdnn-all-p", None) is None
    assert runs.scopes() == ["alexnet b32", "alexnet b256"] and runs.synthetic
    doc = synthetic_results()
    doc["results"][1]["peak"] = 2.75 * GiB                                   # the file changes on disk
    results.write_text(json.dumps(doc, indent=1))
    assert load_runs(results).find("alexnet", 32, "vdnn-all-p", None).peak == 2.75 * GiB
