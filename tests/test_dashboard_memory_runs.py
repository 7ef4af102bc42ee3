"""The memory tab sets a GPU run's measurements beside its prediction (dashboard/memory_runs.py).

Every results file here is SYNTHETIC: made up in the format benchmarks/memory_training.py's ``measure`` writes,
created in tmp_path by the test, never committed. The profile is SYNTHETIC too (engine/testing/synthetic.py).
"""

from __future__ import annotations

import html
import json
import re

import panel as pn
import pytest

from dashboard import memory_runs
from dashboard.jobs import JobRunner
from dashboard.memory_runs import RESULTS_ENV, load_runs, measured, model_of, results_path
from dashboard.state import PlannerState
from dashboard.ui import Dashboard
from engine.testing.synthetic import synthetic_profile
from engine.units import format_size

GiB = 1 << 30
MiB = 1 << 20


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "SYNTHETIC-alexnet.profile.json.gz"
    return synthetic_profile("alexnet", 32, "powerOfTwo").save(path)  # SYNTHETIC, alexnet at mini-batch 32


@pytest.fixture(autouse=True)
def _panel_state():
    yield
    pn.state.reset()


def step(variant, peak, step_ms, capacity=None, batch=32, **extra):
    """One SYNTHETIC ``step`` case as the benchmark records it."""
    return dict(
        {
            "kind": "step",
            "model": "alexnet",
            "variant": variant,
            "batch": batch,
            "capacity": capacity,
            "ok": True,
            "peak": peak,
            "step_ms": step_ms,
            "step_ms_p10": 38.0,
            "step_ms_p90": 47.5,
            "steps": 4,
            "predicted": {
                "peak": 1.29 * GiB,
                "iteration_ms": 38.2,
                "offload_bytes": 320 * MiB,
                "recompute_count": 2,
                "time_model": "time model: SYNTHETIC calibration",
                "workspace_rule": "heuristic",
                "convention": "pytorch",
            },
            # cumulative offload counter: 300 MiB per step; 7 re-forwards per step
            "stats": [{"offloaded_bytes": (i + 1) * 300 * MiB, "recomputed_layers": 7} for i in range(4)],
        },
        **extra,
    )


def synthetic_results(**prov) -> dict:
    """SYNTHETIC: made-up measurements in the benchmark's format."""
    return {
        "provenance": dict(
            {
                "gpu": "SYNTHETIC GPU",
                "date": "2000-01-02T03:04:05Z",
                "torch": "0.0",
                "cudnn_version": "-",
                "command": "SYNTHETIC",
                "synthetic": True,
            },
            **prov,
        ),
        "results": [
            {
                "kind": "calibrate-host",
                "model": "host",
                "variant": "",
                "batch": 0,
                "capacity": None,
                "doc": {"copy": {"h2d": 50e9}},
            },
            step("vdnn-all-p", 1.37 * GiB, 41.7),
            step("vdnn-all-p", 1.11 * GiB, 44.4, capacity=12 * GiB),
            step("liveness", 2.5 * GiB, 20.0, batch=256),
            {
                "kind": "step",
                "model": "alexnet",
                "variant": "sn-recompute",
                "batch": 32,
                "capacity": None,
                "ok": False,
                "error": "RuntimeError: SYNTHETIC failure",
                "predicted": {"peak": GiB},
            },
        ],
        "capacity": {
            "alexnet/12": {
                "predicted": {"liveness": 3232, "vdnn-all-p": 3600},
                "best": "vdnn-all-p",
                "found": {"liveness": 3000, "vdnn-all-p": 3500},
            }
        },
    }


@pytest.fixture
def results(tmp_path):
    path = tmp_path / "SYNTHETIC-memory_training.json"
    path.write_text(json.dumps(synthetic_results()))
    return path


def page(profile_path, results_file, policy="vdnn-all-p", capacity=16 * GiB):
    state = PlannerState(profiles={"SYNTHETIC-alexnet": profile_path}, memory_results=str(results_file))
    state.update(memory_policy=policy, capacity=capacity)
    dash = Dashboard(state, gpu=(False, "no GPU in tests"), runner=JobRunner())
    dash.tabs.active = len(dash.tabs) - 1  # the memory tab plans when it opens
    return dash


def table(text: str) -> dict[str, list[str]]:
    """The rendered comparison table: row name -> [predicted here, predicted by the benchmark, measured]."""
    return {
        m.group(1): re.findall(r"<td[^>]*>(.*?)</td>", m.group(2))
        for m in re.finditer(r"<tr><td>(.*?)</td>(.*?)</tr>", text)
    }


def test_measured_run_is_shown_beside_the_prediction(profile_path, results):
    dash = page(profile_path, results)
    mem = dash.memory
    text = mem.measured.object
    rows = table(text)
    here = dash.state.memory()["summary"].iloc[0]
    assert rows["peak"][1:] == ["1.29 GiB", "1.37 GiB"]  # benchmark's prediction, measured
    assert rows["step time"][1:] == ["38.2 ms", "41.7 ms (38.0-47.5)"]
    assert rows["offloaded per step"][1:] == ["320 MiB", "300 MiB"]  # per step from the cumulative counter
    assert rows["recomputations per step"][1:] == ["2", "7"]
    assert rows["step time"][0] == f"{here['iteration_ms']:.1f} ms"  # this tab's own prediction beside them
    assert rows["peak"][0] == format_size(here["peak"])
    assert "SYNTHETIC data, SYNTHETIC GPU, 2000-01-02" in text and "no memory cap" in text
    assert "time model: SYNTHETIC calibration" in text  # which times the benchmark measured
    assert "3500 for vdnn-all-p (predicted 3600)" in text  # the capacity search
    assert not mem.measured_error.visible
    assert mem.plot.measured.data["peak"] == pytest.approx([1.37, 1.37])  # the measured peak line, in GiB
    assert mem.plot.extra["measured peak"].visible


def test_a_capped_run_is_preferred_under_its_own_capacity(profile_path, results):
    dash = page(profile_path, results, capacity=12 * GiB)
    assert table(dash.memory.measured.object)["peak"][2] == "1.11 GiB"
    assert "under a 12 GiB cap" in dash.memory.measured.object
    dash.state.capacity = 16 * GiB  # no run there: the uncapped one
    assert table(dash.memory.measured.object)["peak"][2] == "1.37 GiB"


def test_no_matching_run_says_so_and_names_the_command(profile_path, results):
    dash = page(profile_path, results, policy="superneurons")
    mem = dash.memory
    text = mem.measured.object
    assert "no measured run for alexnet b32 under superneurons" in text
    assert "python benchmarks/memory_training.py measure" in text and "alexnet b32" in text
    assert "<table>" not in text and not mem.plot.measured.data["peak"] and not mem.plot.extra["measured peak"].visible
    dash.state.memory_policy = "vdnn-all-p"  # a match: shown
    assert "<table>" in mem.measured.object
    dash.state.batch = 16  # the run is for b32 only
    assert "no measured run for alexnet b16 under vdnn-all-p" in mem.measured.object
    assert not mem.plot.measured.data["peak"]


def test_a_failed_run_shows_why(profile_path, results):
    dash = page(profile_path, results, policy="sn-recompute")
    text = dash.memory.measured.object
    assert "the run failed: RuntimeError: SYNTHETIC failure" in text and "<table>" not in text
    assert not dash.memory.plot.measured.data["peak"]


def test_without_a_results_file_the_tab_names_the_command(profile_path, tmp_path, monkeypatch):
    monkeypatch.setattr(memory_runs, "DEFAULT_RESULTS", tmp_path / "memory_training.json")
    monkeypatch.delenv(RESULTS_ENV, raising=False)
    state = PlannerState(profiles={"SYNTHETIC-alexnet": profile_path})
    assert state.memory_results == str(tmp_path / "memory_training.json")
    dash = Dashboard(state, gpu=(False, "no GPU in tests"), runner=JobRunner())
    dash.tabs.active = len(dash.tabs) - 1
    assert "no measured run yet" in dash.memory.measured.object
    assert "python benchmarks/memory_training.py measure" in dash.memory.measured.object
    assert not dash.memory.measured_error.visible  # an absent default is no error


def test_the_environment_names_the_results_file(profile_path, results, monkeypatch):
    assert results_path({}) == memory_runs.DEFAULT_RESULTS
    assert results_path({RESULTS_ENV: str(results)}) == results
    monkeypatch.setenv(RESULTS_ENV, str(results))
    assert PlannerState(profiles={"SYNTHETIC-alexnet": profile_path}).memory_results == str(results)


def test_an_absent_default_file_is_no_run_and_no_error(tmp_path, monkeypatch):
    monkeypatch.setattr(memory_runs, "DEFAULT_RESULTS", tmp_path / "memory_training.json")
    m = measured(tmp_path / "memory_training.json", "alexnet", 32, "vdnn-all-p", None)
    assert m.runs is None and m.run is None and m.error == ""
    assert "does not exist" in measured(tmp_path / "other.json", "alexnet", 32, "vdnn-all-p", None).error


def test_predicted_times_say_what_is_measured_and_what_modelled(profile_path, results):
    dash = page(profile_path, results)
    note = dash.state.memory()["summary"].time_note.iloc[0]
    assert note.startswith("time model: convolutions from the profile (measured)") and "(assumed)" in note
    assert html.escape(note) in dash.memory.text.object


BAD = {
    "not json": (b"{not json", "is not valid JSON"),
    "a list": (b"[]", "must be a JSON object"),
    "results not a list": (b'{"results": 5}', "field results must be a list"),
    "row not an object": (b'{"results": ["x"]}', "field results[0] must be an object"),
    "peak not a number": (
        json.dumps({"results": [step("vdnn-all-p", "lots", 41.7)]}).encode(),
        "field results[0].peak must be a non-negative number",
    ),
    "huge batch": (
        json.dumps({"results": [step("vdnn-all-p", GiB, 41.7, batch=10**400)]}).encode(),
        "field results[0].batch must be a positive integer",
    ),
    "negative time": (
        json.dumps({"results": [step("vdnn-all-p", GiB, -1)]}).encode(),
        "field results[0].step_ms must be a positive number",
    ),
    "NaN literal": (b'{"results": [], "x": NaN}', "is not valid JSON"),
    "deep nest": (b'{"results": ' + b"[" * 100_000 + b"]" * 100_000 + b"}", "nested deeper"),
    "too large": (None, "larger than 16 MiB"),  # 17 MiB of NUL bytes, written as a sparse file
}


def bad_file(folder, name: str):
    content, needle = BAD[name]
    path = folder / f"SYNTHETIC-bad-{name.replace(' ', '-')}.json"
    if content is None:
        with open(path, "wb") as f:
            f.truncate(17 << 20)
    else:
        path.write_bytes(content)
    return path, needle


@pytest.mark.parametrize("name", list(BAD))
def test_a_malformed_file_is_one_line(tmp_path, name):
    bad, needle = bad_file(tmp_path, name)
    m = measured(bad, "alexnet", 32, "vdnn-all-p", None)
    assert needle in m.error and "\n" not in m.error and len(m.error) < 400 and m.run is None and m.runs is None


def shown(markdown: str) -> str:
    """The text an alert shows (dashboard.errors.literal escapes HTML and Markdown marks)."""
    import html
    import re

    return html.unescape(re.sub(r"\\(.)", r"\1", markdown))


def test_a_malformed_file_is_one_line_on_the_page_and_the_tab_still_works(profile_path, tmp_path):
    dash = page(profile_path, tmp_path / "unused.json")
    mem = dash.memory
    for name in BAD:  # one page for every file: the Dashboard is what costs memory and time here
        bad, needle = bad_file(tmp_path, name)
        dash.state.memory_results = str(bad)
        assert mem.measured_error.visible and needle in shown(mem.measured_error.object), name
        assert mem.measured.object == "" and not mem.plot.measured.data["peak"], name
        assert len(mem.plot.stack.data["tick"]) > 0 and "Peak" in mem.text.object, name  # still drawn


def test_switching_files_refreshes_the_tab(profile_path, results, tmp_path):
    dash = page(profile_path, results)
    assert dash.memory.plot.measured.data["peak"]
    dash.state.memory_results = str(tmp_path / "absent.json")  # named explicitly: an error
    assert dash.memory.measured_error.visible and "does not exist" in dash.memory.measured_error.object
    dash.state.memory_results = str(tmp_path)  # a folder
    assert "is not a regular file" in dash.memory.measured_error.object
    dash.state.memory_results = str(results)
    assert not dash.memory.measured_error.visible and "1.37 GiB" in dash.memory.measured.object


def test_strings_from_the_file_are_escaped(profile_path, tmp_path):
    doc = synthetic_results(gpu="<script>alert(1)</script>")
    doc["results"][-1]["error"] = "<img src=x onerror=alert(2)>"
    path = tmp_path / "SYNTHETIC-hostile.json"
    path.write_text(json.dumps(doc))
    dash = page(profile_path, path)
    text = dash.memory.measured.object
    assert "<script>" not in text and "&lt;script&gt;" in text
    dash.state.memory_policy = "sn-recompute"
    assert "<img" not in dash.memory.measured.object and "&lt;img" in dash.memory.measured.object


def test_matching_rules_and_rereading_a_changed_file(results):
    runs = load_runs(results)
    assert model_of("torchvision:alexnet") == model_of("alexnet") == "alexnet"
    assert runs.find("torchvision:alexnet", 32, "vdnn-all-p", None).peak == 1.37 * GiB
    assert runs.find("alexnet", 32, "vdnn-all-p", None, precision="fp16", layout="NHWC") is None  # TF32 NCHW only
    assert runs.find("alexnet", 256, "liveness", 12 * GiB).step_ms == 20.0  # no capped run: the uncapped one
    assert runs.find("vgg16", 32, "vdnn-all-p", None) is None
    assert runs.scopes() == ["alexnet b32", "alexnet b256"] and runs.synthetic
    doc = synthetic_results()
    doc["results"][1]["peak"] = 2.75 * GiB  # the file changes on disk
    results.write_text(json.dumps(doc, indent=1))
    assert load_runs(results).find("alexnet", 32, "vdnn-all-p", None).peak == 2.75 * GiB
