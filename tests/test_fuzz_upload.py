"""Fuzz of the dashboard's plan upload: the malformed plans of engine.testing.fuzz, as uploaded bytes. Each must show
one line in a "danger" alert and leave the controls alone; none may raise out of the widget callback."""

from __future__ import annotations

import json
import random

import panel as pn
import pytest

from dashboard.jobs import JobRunner
from dashboard.state import PlannerState
from dashboard.ui import Dashboard
from engine.units import MiB
from engine.testing.fuzz import SEED, byte_cases, plan_mutations
from engine.testing.synthetic import synthetic_profile

pytestmark = pytest.mark.slow  # hundreds of uploads through the widget


@pytest.fixture(scope="module")
def dash(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "SYNTHETIC-alexnet.profile.json.gz"
    synthetic_profile("alexnet", 32, "powerOfTwo").save(path)  # SYNTHETIC
    d = Dashboard(
        PlannerState(profiles={"SYNTHETIC-alexnet": path}), gpu=(False, "no GPU in tests"), runner=JobRunner()
    )
    yield d
    pn.state.reset()


def test_malformed_uploads_show_one_line(dash, record_property):
    rng = random.Random(SEED)
    s = dash.state
    s.mode = "WR"
    s.budget = 2 * MiB
    doc = json.loads(s.plan_json())
    cases = [(label, json.dumps(bad).encode(), "bad.plan.json") for label, bad in plan_mutations(doc, rng)]
    cases += [(label, data, "bad" + suffix) for label, data, suffix in byte_cases(json.dumps(doc, indent=1), rng)]
    before = (s.mode, s.batch, s.budget)
    for label, data, name in cases:
        dash.plan.alert.param.update(object="", visible=False)
        dash.plan.upload.file = (name, data)
        alert = dash.plan.alert
        assert alert.visible and alert.alert_type == "danger", f"{label}: {alert.alert_type} {alert.object[:200]!r}"
        assert alert.object.startswith(f"Cannot load {name}: ") and "\n" not in alert.object, label
        assert len(alert.object) < 1000, label
        assert (s.mode, s.batch, s.budget) == before, label
    record_property("fuzz_uploads", len(cases))
    print(f"\nfuzz: {len(cases)} malformed plan uploads, each one line in a danger alert")
