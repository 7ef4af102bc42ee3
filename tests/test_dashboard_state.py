"""PlannerState: control cascades, per-budget results, no-profile behaviour (SYNTHETIC profiles, no browser)."""

from __future__ import annotations

import math

import pytest

from dashboard.profiles import PROFILE_ENV
from dashboard.state import DEFAULT_LIMIT, PlannerState
from engine.profile import bundled_profiles
from engine.units import MiB
from engine.testing.synthetic import engine_set_profile, synthetic_profile


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "SYNTHETIC-alexnet.profile.json.gz"
    return synthetic_profile("alexnet", 32, "powerOfTwo").save(path)  # SYNTHETIC


@pytest.fixture
def state(profile_path):
    return PlannerState(profiles={"SYNTHETIC-alexnet": profile_path})


def test_defaults_come_from_the_profile(state):
    assert (state.profile, state.network, state.batch, state.precision, state.layout) == (
        "SYNTHETIC-alexnet",
        "alexnet",
        32,
        "tf32",
        "NCHW",
    )
    assert state.policy == "powerOfTwo" and state.mode == "WD"
    assert state.planning.param.policy.objects == ["undivided", "powerOfTwo"]
    assert state.result is not None and state.result.choice.feasible and state.error == ""
    n = len(state.analysis.kernels)
    assert state.budget in state.budget_steps()
    assert 0.8 < state.budget / (DEFAULT_LIMIT * n) < 1.25  # Fig. 14's pairing: 8 MiB per kernel in total
    assert any("SYNTHETIC" in text for _, text in state.messages)


def test_budget_change_updates_the_result(state):
    small = state.result.summary["time_ms"]
    state.budget = 1024 * MiB
    big = state.result.summary
    assert big["time_ms"] < small and big["budget"] == 1024 * MiB
    assert big["workspace"] <= 1024 * MiB
    assert big["speedup"] >= 1.0 - 1e-12
    assert math.isclose(big["gap_ms"], big["time_ms"] - big["optimum_ms"])


def test_mode_switch_keeps_the_same_total(state):
    n = len(state.analysis.kernels)
    state.budget = 14 * MiB
    state.mode = "WR"
    assert state.budget == 14 * MiB // n
    assert state.result.choice.mode == "WR"
    state.mode = "WD"
    assert state.budget == (14 * MiB // n) * n


def test_policy_undivided_has_speedup_one(state):
    state.policy = "undivided"
    assert math.isclose(state.result.summary["speedup"], 1.0)


def test_batch_change_recomputes_analysis(state):
    first = state.analysis
    state.batch = 8
    assert state.analysis is not first and state.analysis.scope.batch == 8
    assert all(sum(m.batch for m in c.micro) == 8 for s in state.analysis.policies["powerOfTwo"].sets for c in s)


def test_kernel_selection_and_default(state):
    assert state.result.kernel  # defaults to the slowest kernel of the plan
    state.kernel = "conv3:BD"
    assert state.result.kernel == "conv3:BD" and state.result.desirable.chosen.sum() == 1
    state.kernel = "nonsense"
    assert state.result.kernel in {k.id for k in state.analysis.kernels}


def test_infeasible_budget_is_an_error_message_not_an_exception():
    """SYNTHETIC profile without its zero-workspace plan: a 0 B limit cannot be met."""
    from engine.profile import Profile

    p = synthetic_profile("alexnet", 8, "powerOfTwo")
    p = Profile(p.table[p.table.plan != "eng0"], p.provenance, p.networks)
    s = PlannerState(profiles={"SYNTHETIC-no-gemm": p}, mode="WR")
    s.budget = 0
    assert s.result is not None and not s.result.choice.feasible
    assert "is below" in s.error and s.result.plan.empty and s.result.timeline.empty
    s.mode = "WD"
    assert "below" in s.error
    s.budget = 1 << 40
    assert s.error == "" and s.result.choice.feasible


def test_measurement_belongs_to_the_plan_it_verified(state):
    ids = [k.id for k in state.analysis.kernels]
    state.set_verification(
        {"kernels": [{"id": i, "measured_ms": 0.5} for i in ids], "totals": {"all_passed": True, "failed": []}}
    )
    assert math.isclose(state.result.summary["measured_ms"], 0.5 * len(ids))
    assert state.result.summary["all_passed"] is True
    assert (state.result.timeline.row == "measured").sum() == len(ids)
    state.budget = state.budget * 2
    assert state.measured is None and "measured_ms" not in state.result.summary


def test_no_profile_still_loads_and_offers_the_zoo():
    s = PlannerState(profiles={})
    assert s.result is None and "No bundled profile" in s.error
    assert "alexnet" in s.selection.param.network.objects and "resnet50" in s.selection.param.network.objects
    assert s.network and s.batch and s.precision and s.layout
    s.network = "resnet50"
    assert s.batch in s.selection.param.batch.objects and s.result is None


def test_bad_profile_file_is_reported(tmp_path):
    bad = tmp_path / "broken.profile.json"
    bad.write_text("{not json")
    s = PlannerState(profiles={"broken": bad})
    assert s.result is None and "not valid" in s.error


def test_environment_profiles_and_warnings(profile_path, tmp_path):
    s = PlannerState(environ={PROFILE_ENV: f"{profile_path}:{tmp_path / 'gone.json'}"})
    assert s.profile == "SYNTHETIC-alexnet" and s.result is not None  # what the environment asked for
    assert set(bundled_profiles()) <= set(s.selection.param.profile.objects)
    assert any("gone.json" in text for _, text in s.messages)


def test_default_is_a_measured_profile_never_a_synthetic_one(profile_path, tmp_path):
    import shutil

    synthetic = tmp_path / "zzz-looks-real.profile.json.gz"  # SYNTHETIC content under an innocent name
    shutil.copy(profile_path, synthetic)
    bundled = bundled_profiles()
    s = PlannerState(profiles={"zzz-looks-real": synthetic, **bundled})
    if bundled:
        assert s.profile in bundled and not s.current_profile.synthetic
    else:
        assert s.profile == "zzz-looks-real"  # nothing else exists; the page says SYNTHETIC
        assert any("SYNTHETIC" in text for _, text in s.messages)


def test_live_profile_can_be_added(state):
    live = synthetic_profile("alexnet", 16, "powerOfTwo")  # SYNTHETIC, stands in for a GPU profile
    state.add_profile("live: test", live)
    assert state.profile == "live: test" and state.batch == 16 and state.result.choice.feasible


def test_engine_set_switch_recomputes_and_comes_back(tmp_path):
    st = PlannerState(profiles={"SYNTHETIC-engines": engine_set_profile()}, budget=256 * MiB)
    all_ms = st.result.summary["time_ms"]
    st.engines = "heuristics"
    assert st.error == "" and st.result is not None
    assert st.result.summary["time_ms"] >= all_ms
    assert "eng3_k2=3" not in set(st.current_profile.table.plan)
    restricted = st.current_profile
    st.engines = "all"
    assert math.isclose(st.result.summary["time_ms"], all_ms)
    st.engines = "heuristics"
    assert st.current_profile is restricted  # kept: the optimizers' caches stay warm


@pytest.mark.parametrize("first", ["policy", "engines"])
def test_a_chosen_policy_survives_an_engine_set_switch_in_either_order(first):
    """Served with --num-threads (before the app turned Panel's pool off), two clicks reached the state in either
    order: an engine-set switch used to
    put the policy back to the profile's recorded one, so "undivided" then "heuristics" ended on powerOfTwo."""
    st = PlannerState(profiles={"SYNTHETIC-engines": engine_set_profile()}, budget=256 * MiB)
    clicks = {"policy": dict(policy="undivided"), "engines": dict(engines="heuristics")}
    for name in (first, *(set(clicks) - {first})):
        st.update(**clicks[name])
    assert (st.policy, st.engines) == ("undivided", "heuristics") and st.result.summary["speedup"] == 1.0
    st.update(profile="SYNTHETIC-engines")  # the same profile chosen again keeps it too
    assert st.policy == "undivided"


def test_a_model_the_profile_does_not_list_is_planned_where_its_kernels_were_measured():
    """ResNet-101's convolutions are ResNet-50's (more of them): the bundled ResNet-50 profile plans it; a
    model with other kernels gets the command that would profile it; a name that runs code is refused."""
    pytest.importorskip("torchvision")
    name = "h100-resnet50-b64-tf32-nchw-powerOfTwo"
    s = PlannerState(profiles={name: bundled_profiles()[name]})
    sel = s.selection
    sel.model = "torchvision:resnet101"
    assert (sel.network, sel.batch, sel.precision, sel.layout) == ("torchvision:resnet101", 64, "tf32", "NCHW")
    assert s.analysis is not None and s.result is not None and not sel.error
    assert s.analysis.scope.network == "torchvision:resnet101"
    sel.network = "resnet50"  # the profile's own network is still offered
    assert s.analysis.scope.network == "resnet50"

    sel.model = "torchvision:mobilenet_v3_small"
    notes = " ".join(text for _, text in sel.messages)
    assert "--network torchvision:mobilenet_v3_small --batch 64" in notes and s.analysis is not None
    assert "torchvision:mobilenet_v3_small" not in sel.param.network.objects

    sel.model = "os:system"
    said = " ".join(text for _, text in sel.messages)
    assert "os:system names Python code to run" in said and "start the server with UCUDNN_MODELS=os:system" in said
    assert "--network" not in said  # the command line's advice, which a page cannot follow
    assert s.analysis is not None


def test_the_server_may_offer_its_own_models(monkeypatch):
    """A module:callable named in UCUDNN_MODELS by whoever starts the server is imported; others are not."""
    pytest.importorskip("torchvision")
    from dashboard.selection import MODELS_ENV, SelectionState

    name = "h100-resnet18-b128-tf32-nchw-powerOfTwo"
    env = {MODELS_ENV: "torchvision.models:resnet34"}
    sel = SelectionState(profiles={name: bundled_profiles()[name]}, environ=env)
    sel.model = "torchvision.models:resnet34"  # ResNet-34 has ResNet-18's kernels
    assert sel.network == "torchvision.models:resnet34" and sel.analysis is not None
