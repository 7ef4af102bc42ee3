"""One planning function: the dashboard's slider and Export, ``python -m engine plan`` and a direct
``engine.planner.make_plan`` call (what verify and the PyTorch runtime use) write the same plan JSON byte for
byte for the same inputs, and the side-by-side benchmark plans exactly the CLI's plan.

Normalised before comparing, and only these: ``provenance.created`` (the wall-clock time the plan was made),
``provenance.command`` (who made it: "dashboard", the CLI's argv, or the caller's string) and, in WD plans,
``solver.solve_time_s`` / ``solver.build_time_s`` (how long the ILP took). Everything else, including every
float, must be the same bytes. The profile is SYNTHETIC (engine/testing/synthetic.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import panel as pn
import pytest
from bokeh.document import Document
from pyviz_comms import Comm

from dashboard.jobs import JobRunner
from dashboard.state import PlannerState
from dashboard.ui import Dashboard
from engine.planner import make_plan
from engine.profile import Profile
from engine.testing.synthetic import synthetic_profile
from engine.zoo import get_network

ROOT = Path(__file__).resolve().parent.parent
VOLATILE = {"provenance": ("created", "command"), "solver": ("solve_time_s", "build_time_s")}


def normalised(text: str) -> str:
    doc = json.loads(text)
    for section, fields in VOLATILE.items():
        for f in fields:
            if f in doc.get(section, {}):
                doc[section][f] = "<normalised>"
    return json.dumps(doc, indent=1)


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "SYNTHETIC-alexnet-b64.profile.json.gz"
    return synthetic_profile("alexnet", 64, "powerOfTwo").save(path)  # SYNTHETIC


@pytest.fixture(autouse=True)
def _panel_state():
    yield
    pn.state.reset()


def cli_plan(tmp_path: Path, profile_path: Path, mode: str, budget: int) -> str:
    out = tmp_path / f"cli-{mode}-{budget}.plan.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "plan",
            "--profile",
            str(profile_path),
            "--network",
            "alexnet",
            "--batch",
            "64",
            "--policy",
            "powerOfTwo",
            "--mode",
            mode,
            "--budget",
            f"{budget}B",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    return out.read_text()


@pytest.mark.slow
@pytest.mark.parametrize("mode,step", [("WD", 0.5), ("WD", 0.8), ("WR", 0.5)])
def test_slider_cli_and_make_plan_write_the_same_plan(tmp_path, profile_path, mode, step):
    dash = Dashboard(
        PlannerState(profiles={"SYNTHETIC-alexnet": profile_path}, mode=mode),
        gpu=(False, "no GPU in tests"),
        runner=JobRunner(),
    )
    pn.panel(dash).get_root(Document(), comm=Comm())
    slider = dash.controls.slider
    slider.value = int(step * slider.end)  # a slider position, as a user drags it
    budget = dash.state.budget
    assert budget == dash.controls.steps[slider.value] and dash.state.result.choice.feasible
    exported = dash.plan._export().getvalue()  # what the Export button downloads
    shown = dash.state.result.choice.plan  # what the page shows is that very object
    assert dash.state.make_plan() is shown and exported == shown.to_json()

    cli = cli_plan(tmp_path, profile_path, mode.lower(), budget)
    direct = make_plan(
        Profile.load(str(profile_path)),
        get_network("alexnet", 64),
        mode=mode.lower(),
        budget=budget,
        policy="powerOfTwo",
        command="tests/test_one_planner.py",
    ).to_json()
    assert normalised(exported) == normalised(cli) == normalised(direct)
    assert json.loads(cli)["budget"] == budget and json.loads(cli)["mode"] == mode.lower()


@pytest.mark.slow
def test_side_by_side_benchmark_plans_the_clis_plan(tmp_path):
    """benchmarks/side_by_side.py keeps only what it measures of a plan (kernels, pieces, offsets, arena): for
    the paper's AlexNet WD budget on the bundled H100 profile that part of the CLI's plan is the same bytes."""
    if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
        sys.path.insert(0, str(ROOT))
    from benchmarks import side_by_side

    name = "h100-alexnet-b256-tf32-nchw-powerOfTwo"
    entry = side_by_side.plan_network("alexnet", 256, "tf32", "NCHW", name)
    bench = next(
        c
        for c in entry["configs"]
        if (c["row"], c["engines"], c["budget"]) == ("wd", "all", side_by_side.PAPER_WD_BUDGET)
    )
    out = tmp_path / "cli.plan.json"
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "engine",
            "plan",
            "--profile",
            name,
            "--network",
            "alexnet",
            "--batch",
            "256",
            "--mode",
            "wd",
            "--budget",
            f"{side_by_side.PAPER_WD_BUDGET}B",
            "-o",
            str(out),
        ],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr
    cli = json.loads(out.read_text())
    as_measured = [
        {
            "id": k["id"],
            "signature": k["signature"],
            "workspace": k["workspace"],
            "offset": k["offset"],
            "micro": [{f: m[f] for f in ("batch", "plan", "time_ms", "workspace")} for m in k["micro"]],
        }
        for k in cli["kernels"]
    ]
    assert json.dumps(bench["kernels"]) == json.dumps(as_measured) and bench["arena"] == cli["arena_size"]
