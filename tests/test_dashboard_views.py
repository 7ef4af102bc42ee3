"""Views without a browser: widgets drive the state, the state drives the Bokeh sources (SYNTHETIC data)."""

from __future__ import annotations

import json
import math
from types import SimpleNamespace

import numpy as np
import panel as pn
import pytest
from bokeh.document import Document
from pyviz_comms import Comm

from dashboard.jobs import JobRunner
from dashboard.state import PlannerState
from dashboard.ui import Dashboard
from dashboard.views.controls import nearest_step
from engine.profile import bundled_profiles
from engine.units import GiB, MiB
from engine.testing.synthetic import synthetic_profile


@pytest.fixture(scope="module")
def profile_path(tmp_path_factory):
    path = tmp_path_factory.mktemp("profiles") / "SYNTHETIC-alexnet.profile.json.gz"
    return synthetic_profile("alexnet", 32, "powerOfTwo").save(path)  # SYNTHETIC


@pytest.fixture(autouse=True)
def _panel_state():
    yield
    pn.state.reset()


@pytest.fixture
def dash(profile_path):
    return Dashboard(
        PlannerState(profiles={"SYNTHETIC-alexnet": profile_path}), gpu=(False, "no GPU in tests"), runner=JobRunner()
    )


def test_dashboard_renders_to_bokeh_models(dash):
    root = pn.panel(dash).get_root(Document(), comm=Comm())
    assert root is not None
    assert "summary-time" in dash.summary.pane.object


def test_slider_moves_budget_and_every_view(dash):
    """The open tab's view follows every move; a closed tab's view is refreshed once, when it opens."""
    s = dash.state
    slider = dash.controls.slider
    dash.tabs.active = 1  # the timeline is drawn when its tab first opens
    timeline = list(dash.timeline.plot.source.data["right"])
    dash.tabs.active = 2
    before = {
        "summary": dash.summary.pane.object,
        "marks": dict(dash.pareto.plot.marks.data),
        "bars": {k: list(src.data["top"]) for k, src in dash.workspace.plot.sources.items()},
        "table": dash.plan.table.value.copy(),
    }
    slider.value = slider.end
    assert s.budget == dash.controls.steps[-1] == max(dash.controls.steps)
    assert dash.summary.pane.object != before["summary"]
    assert dash.pareto.plot.marks.data["y"] != before["marks"]["y"]
    assert not dash.plan.table.value.equals(before["table"])
    # closed tabs: not redrawn on the move, redrawn from the current state when opened
    assert list(dash.timeline.plot.source.data["right"]) == timeline
    assert all(list(src.data["top"]) == before["bars"][k] for k, src in dash.workspace.plot.sources.items())
    dash.tabs.active = 1
    assert list(dash.timeline.plot.source.data["right"]) != timeline
    dash.tabs.active = 0
    assert any(list(src.data["top"]) != before["bars"][k] for k, src in dash.workspace.plot.sources.items())
    assert dash.plan.table.value.reset_index(drop=True).equals(s.result.plan.reset_index(drop=True))
    # the plot data agree with the result
    assert math.isclose(max(dash.timeline.plot.source.data["right"]), s.result.choice.time_ms)
    wd_tops = [
        src.data["top"][i]
        for src in [dash.workspace.plot.sources["BF"]]
        for i, m in enumerate(src.data["mode"])
        if m == "WD"
    ]
    assert math.isclose(sum(wd_tops) * MiB, s.result.wd.workspace, rel_tol=1e-9)


def test_state_budget_moves_slider_to_nearest_step(dash):
    dash.state.budget = 100 * MiB
    steps = dash.controls.steps
    i = dash.controls.slider.value
    assert i == nearest_step(steps, 100 * MiB) and 0.8 < steps[i] / (100 * MiB) < 1.2
    assert steps == sorted(steps) and steps[0] == 0


def test_exact_budget_text(dash):
    dash.controls.exact.value = "3 MiB"
    assert dash.state.budget == 3 * MiB and not dash.controls.exact_error.visible
    dash.controls.exact.value = "lots"
    assert dash.controls.exact_error.visible and "invalid size" in dash.controls.exact_error.object
    assert dash.state.budget == 3 * MiB
    dash.controls.exact.value = "120"  # a bare number is refused, not taken as 120 bytes
    assert "'120' has no unit" in dash.controls.exact_error.object and dash.state.budget == 3 * MiB


def test_a_typed_budget_is_kept_exactly_and_shown_the_same_everywhere(dash):
    c, s = dash.controls, dash.state
    c.exact.value = "120MiB"
    assert s.budget == 120 * MiB and s.result.choice.budget == 120 * MiB
    assert "120 MiB" in c.slider.label and "budget 120 MiB in total" in dash.summary.pane.object
    assert c.exact.value == "120MiB"  # the typed text stays while it is the budget
    assert c.steps[c.slider.value] != 120 * MiB  # the slider sits on the nearest step, the plan uses 120 MiB
    c.mode.value = "WR"
    assert s.budget == 120 * MiB // len(s.analysis.kernels) and "per kernel" in dash.summary.pane.object
    c.mode.value = "WD"
    assert s.budget == 120 * MiB  # exact round trip, not (120 MiB // n) * n
    s.budget = 120  # 120 B: WD -> WR -> WD comes back to 120 B, not 112 B
    c.mode.value = "WR"
    c.mode.value = "WD"
    assert s.budget == 120
    s.budget = 5 * MiB
    c.engines.value = "heuristics"  # the engine set keeps the budget
    assert s.budget == 5 * MiB and s.result.choice.budget == 5 * MiB
    c.engines.value = "all"
    assert s.budget == 5 * MiB


def test_memory_capacity_typed_and_dropdown_agree(dash):
    mem = dash.memory
    mem.exact.value = "1GiB"
    assert dash.state.capacity == GiB and mem.capacity.value == GiB
    assert "typed: 1 GiB" in mem.capacity.options
    mem.capacity.value = 16 * GiB
    assert dash.state.capacity == 16 * GiB and mem.exact.value == ""
    mem.exact.value = "12"
    assert mem.error.visible and "no unit" in mem.error.object and dash.state.capacity == 16 * GiB


def test_typed_sizes_clear_their_error_and_a_zero_capacity_is_refused(dash):
    c, mem = dash.controls, dash.memory
    c.exact.value = "lots"
    assert c.exact_error.visible
    c.exact.value = ""  # the text the error quoted is gone, and so is the error
    assert not c.exact_error.visible
    mem.exact.value = "abc"
    assert mem.error.visible
    mem.capacity.value = 16 * GiB  # a pick from the list clears the typed text and its error
    assert dash.state.capacity == 16 * GiB and mem.exact.value == "" and not mem.error.visible
    mem.exact.value = "0B"  # as the CLI's --capacity 0: refused, not silently unbounded
    assert mem.error.visible and "positive" in mem.error.object and dash.state.capacity == 16 * GiB


@pytest.mark.slow
def test_mode_and_policy_widgets(dash):
    dash.controls.mode.value = "WR"
    assert dash.state.mode == "WR" and "per kernel" in dash.controls.slider.label
    assert dash.controls.steps[-1] < dash.state.analysis.policies["powerOfTwo"].max_workspace * 4
    dash.controls.policy.value = "undivided"
    assert dash.state.policy == "undivided"
    assert "1.00x" in dash.summary.pane.object


@pytest.mark.slow
def test_kernel_pick_from_table_bar_and_select(dash):
    dash.tabs.active = 2
    frame = dash.plan.table.value
    row = int(frame.index[frame.kernel == "conv4:BF"][0])
    dash.plan.table.selection = [row]
    assert dash.state.kernel == "conv4:BF" and "conv4:BF" in dash.desirable.plot.fig.title.text
    assert list(dash.plan.table.selection) == [row]
    dash.tabs.active = 0
    src = dash.workspace.plot.sources["F"]
    i = src.data["kernel"].index("conv2:F")
    src.selected.indices = [i]
    assert dash.state.kernel == "conv2:F"
    dash.desirable.picker.value = "conv5:BD"
    assert dash.state.kernel == "conv5:BD"
    pts = dash.desirable.plot.points.data
    assert len(pts["x"]) == len(dash.state.result.desirable)
    assert list(pts["line"]).count("#d62728") == 1  # the chosen configuration is marked


def test_pareto_shows_each_policy_front_and_baselines(dash):
    plot = dash.pareto.plot
    assert len(plot.fronts["powerOfTwo"].data["x"]) > 1 and len(plot.fronts["undivided"].data["x"]) > 1
    assert len(plot.fronts["all"].data["x"]) == 0 and not plot.items["all"].visible
    whats = plot.marks.data["what"]
    assert any("current plan" in w for w in whats) and any("undivided" in w for w in whats)
    assert any("unlimited optimum" in w for w in whats)
    assert plot.budget_span.visible
    assert plot.fig.xaxis[0].axis_label and plot.fig.yaxis[0].axis_label.endswith("[ms]")


def test_gpu_buttons_disabled_without_gpu_and_say_why(dash):
    g = dash.gpu
    assert g.profile_btn.disabled and g.verify_btn.disabled
    assert "no GPU in tests" in g.status.object and "no GPU in tests" in g.profile_btn.description
    assert not g.start_profile() and not g.start_verify()


@pytest.mark.slow
def test_verify_results_flow_into_timeline_and_summary(profile_path, monkeypatch):
    """A fake verify_plan stands in for engine.gpu (no GPU here); the view must run it in the runner's
    thread and copy the report into this page's state."""
    import dashboard.views.gpu as G

    state = PlannerState(profiles={"SYNTHETIC-alexnet": profile_path})
    ids = [k.id for k in state.analysis.kernels]

    def fake_verify_plan(plan, *, progress, should_stop):
        for i, kid in enumerate(ids):
            progress(i + 1, len(ids), kid)
        return {
            "kernels": [{"id": kid, "measured_ms": 0.25} for kid in ids],
            "totals": {"all_passed": False, "failed": ["conv2:F"]},
        }

    monkeypatch.setattr(G, "gpu_function", lambda name: {"verify_plan": fake_verify_plan}[name])
    monkeypatch.setattr(PlannerState, "make_plan", lambda self: "plan")
    runner = JobRunner()
    d = Dashboard(state, gpu=(True, "FAKE GPU"), runner=runner)
    assert not d.gpu.verify_btn.disabled
    assert d.gpu.start_verify()
    runner.join(5)
    assert runner.status == "done"
    assert math.isclose(state.result.summary["measured_ms"], 0.25 * len(ids))
    assert "WRONG RESULTS in conv2:F" in d.summary.pane.object
    d.tabs.active = 1
    plot = d.timeline.plot
    labels = plot.fig.yaxis[0].major_label_overrides
    measured_lanes = {y for y, lane in labels.items() if lane.endswith("(measured)")}
    assert sum(y in measured_lanes for y in plot.source.data["y"]) == len(ids)
    assert "measured" in plot.names["engine"].args["names"] and "measured" in plot.fig.title.text


@pytest.mark.slow
def test_profile_job_adds_a_live_profile(profile_path, monkeypatch):
    import dashboard.views.gpu as G

    state = PlannerState(profiles={"SYNTHETIC-alexnet": profile_path})
    calls = {}

    def fake_profile_network(network, *, policy, precision, layout, progress, should_stop, command):
        calls.update(network=network.name, batch=network.batch, policy=policy)
        progress(1, 1, "done")
        p = synthetic_profile("alexnet", 16, "powerOfTwo")  # SYNTHETIC stand-in for a measured profile
        p.provenance.update(gpu="FAKE GPU", date="2026-01-01")
        return p

    monkeypatch.setattr(G, "gpu_function", lambda name: {"profile_network": fake_profile_network}[name])
    runner = JobRunner()
    d = Dashboard(state, gpu=(True, "FAKE GPU"), runner=runner)
    assert d.gpu.start_profile()
    runner.join(5)
    assert calls == {"network": "alexnet", "batch": 32, "policy": "powerOfTwo"}
    assert state.profile == "live: FAKE GPU 2026-01-01" and state.batch == 16


@pytest.mark.slow
def test_busy_runner_disables_other_pages(profile_path):
    runner = JobRunner()
    a = Dashboard(PlannerState(profiles={"p": profile_path}), gpu=(True, "FAKE GPU"), runner=runner)
    b = Dashboard(PlannerState(profiles={"p": profile_path}), gpu=(True, "FAKE GPU"), runner=runner)
    import threading

    release = threading.Event()
    runner.start("profile", lambda p, s: release.wait(5), owner=a.gpu.token)
    try:
        assert b.gpu.profile_btn.disabled and "another page" in b.gpu.status.object
        assert a.gpu.cancel_btn.visible and not b.gpu.cancel_btn.visible
    finally:
        release.set()
        runner.join(5)
    assert not b.gpu.profile_btn.disabled


def test_timeline_lanes_colours_and_hover_names(dash):
    dash.tabs.active = 1
    plot = dash.timeline.plot
    labels = plot.fig.yaxis[0].major_label_overrides
    assert [labels[y] for y in sorted(labels, reverse=True)] == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    data, frame = plot.source.data, dash.state.result.timeline
    assert len(data["y"]) == len(frame) and np.allclose(data["right"], frame.end_ms)
    engines = plot.names["engine"].args["names"]
    assert [engines[i] for i in data["engine"]] == frame.engine.tolist()
    assert [plot.names["kernel"].args["names"][i] for i in data["kernel"]] == frame.kernel.tolist()
    colors = dash.state.analysis.engine_colors
    assert list(plot.cmap.palette) == [colors[e] for e in engines]
    assert sorted(item.label.value for item in plot.legend.items) == sorted(engines)
    legend_colors = [plot.cmap.palette[data["engine"][item.index]] for item in plot.legend.items]
    assert legend_colors == [colors[item.label.value] for item in plot.legend.items]


def test_workspace_bars_pair_wr_and_wd_per_layer(dash):
    plot = dash.workspace.plot
    assert list(plot.x_range.factors) == ["conv1", "conv2", "conv3", "conv4", "conv5"]
    data = plot.sources["F"].data
    assert data["x"][:1] == [("conv1", plot.OFFSET["WR"])] and ("conv1", plot.OFFSET["WD"]) in data["x"]
    assert set(np.asarray(data["alpha"])) == {0.5, 1.0}
    assert "light bars" in dash.workspace.text.object and "dark bars" in dash.workspace.text.object


@pytest.mark.slow
def test_export_writes_a_plan_that_loads_back(dash, tmp_path):
    from engine.plan import load_plan

    dash.state.budget = 20 * MiB
    text = dash.plan._export().read()
    assert dash.plan.alert.alert_type == "success"
    assert dash.plan.download.filename.endswith(".plan.json") and "WD" in dash.plan.download.filename
    path = tmp_path / "plan.json"
    path.write_text(text)
    plan = load_plan(path)
    assert plan.mode == "wd" and plan.budget == 20 * MiB and plan.network == "alexnet" and plan.batch == 32
    assert math.isclose(plan.totals.time_ms, dash.state.result.choice.time_ms, rel_tol=1e-9)
    assert json.loads(text)["format"] == "ucudnn-explorer-plan"


@pytest.mark.slow
def test_loading_a_plan_moves_the_controls(dash, tmp_path):
    s = dash.state
    s.update(mode="WR")
    s.budget = 2 * MiB
    text = s.plan_json()
    s.update(mode="WD", batch=16)
    drop(dash.plan.upload, "mine.plan.json", text.encode())
    assert dash.plan.alert.alert_type == "success" and "mine.plan.json" in dash.plan.alert.object
    assert (s.mode, s.batch, s.budget) == ("WR", 32, 2 * MiB)


@pytest.mark.slow
@pytest.mark.parametrize(
    "content,needle",
    [(b"{not json", "not valid JSON"), (b'{"format": "something-else"}', "field format"), (None, "field budget")],
)
def test_loading_a_malformed_plan_shows_an_error(dash, content, needle):
    if content is None:  # a real plan with one field broken
        doc = json.loads(dash.state.plan_json())
        doc["budget"] = "lots"
        content = json.dumps(doc).encode()
    before = (dash.state.mode, dash.state.budget)
    drop(dash.plan.upload, "bad.plan.json", content)
    assert dash.plan.alert.visible and dash.plan.alert.alert_type == "danger"
    assert "Cannot load bad.plan.json" in dash.plan.alert.object and needle in dash.plan.alert.object
    assert (dash.state.mode, dash.state.budget) == before


def test_what_a_user_uploads_or_types_is_shown_never_run(dash):
    """A plan whose network name is an ``<img onerror=...>`` ran its script in the page (the alert renders
    Markdown with raw HTML); a file name with ``**`` turned bold; a typed budget too. Each now shows as written."""
    doc = json.loads(dash.state.plan_json())
    doc["network"]["name"] = "<img src=/probe onerror=alert(1)>"
    drop(dash.plan.upload, "<b>x</b>**bold**.plan.json", json.dumps(doc).encode())
    shown = dash.plan.alert.object
    assert dash.plan.alert.visible and "<img" not in shown and "&lt;img src=/probe onerror=alert(1)&gt;" in shown
    assert "\\*\\*bold\\*\\*" in shown and "<b>" not in shown
    dash.controls.exact.value = "<img src=/b onerror=alert(2)>"
    assert dash.controls.exact_error.visible and "<img" not in dash.controls.exact_error.object


def drop(widget, name: str, data: bytes, chunk: int | None = None) -> None:
    """Send ``data`` to a FileDropper as the browser does: upload events of ``chunk_size`` bytes (the last one
    may be empty)."""
    size = chunk or widget.chunk_size
    total = (len(data) + 1 + size - 1) // size  # the browser's ceil((size + 1) / chunk): an empty file is one chunk
    for i in range(total):
        part = data[i * size : (i + 1) * size]
        widget._process_event(
            SimpleNamespace(
                event_name="upload_event",
                data={"chunk": i + 1, "total_chunks": total, "name": name, "data": part, "type": "application/json"},
            )
        )


def test_upload_arrives_in_chunks_and_is_bounded(dash, monkeypatch):
    """Chunks below Tornado's 20 MB message limit are joined into one plan; an empty file and one past the
    engine's file limit each get a one-line alert, and a too-large file's chunks are not kept."""
    import dashboard.views.plan as P

    up = dash.plan.upload
    assert up.chunk_size < 20 * 10**6
    text = dash.state.plan_json().encode()
    drop(up, "chunked.plan.json", text, chunk=1000)  # many chunks
    assert dash.plan.alert.alert_type == "success" and "Loaded chunked.plan.json" in dash.plan.alert.object
    assert not up.value and not up._file_buffer  # nothing kept after the hand-over
    drop(up, "empty.plan.json", b"")
    assert dash.plan.alert.object == "Cannot load empty.plan.json: the file is empty"
    monkeypatch.setattr(P, "MAX_FILE_BYTES", 5000)
    drop(up, "huge.plan.json", b" " * 20_000, chunk=1000)
    assert dash.plan.alert.alert_type == "danger" and "huge.plan.json: larger than" in dash.plan.alert.object
    assert not up._file_buffer and not up.value


def test_chunks_handled_at_once_and_out_of_order_join_in_order(dash):
    """Served with Panel's thread pool (--num-threads, before the app turned it off), each chunk's event ran on a
    pool thread: chunks may arrive reversed and at once, and the file must still be the one sent (FileDropper's
    own buffer raised KeyError in CI)."""
    import random
    import threading

    up = dash.plan.upload
    text = dash.state.plan_json().encode()
    events = []
    drop(SimpleNamespace(chunk_size=1000, _process_event=events.append), "shuffled.plan.json", text)
    random.Random(0).shuffle(events)
    threads = [threading.Thread(target=up._process_event, args=(e,)) for e in events]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert dash.plan.alert.alert_type == "success" and "Loaded shuffled.plan.json" in dash.plan.alert.object
    assert up.file == ("shuffled.plan.json", text) and not up._uploads


@pytest.mark.slow
def test_export_is_disabled_without_a_plan():
    d = Dashboard(PlannerState(profiles={}), gpu=(False, "none"), runner=JobRunner())
    assert d.plan.download.disabled
    assert "No bundled profile" in d.summary.pane.object


def test_memory_tab_plans_on_demand(dash):
    """The memory planner runs when its tab opens, not on budget moves; its frames reach the plot."""
    mem = dash.memory
    assert mem.plot is None and not mem.plots.objects  # nothing planned (or drawn) while the tab is closed
    dash.tabs.active = len(dash.tabs) - 1
    data, lines = mem.plot.stack.data, mem.plot.lines.data
    assert len(data["tick"]) > 0
    stacked = sum(np.asarray(data[c]) for c in data if c != "tick")
    assert np.allclose(stacked, lines["total"])  # the classes add up to the total line
    assert np.allclose(lines["capacity"], dash.state.capacity / 2**30)
    assert "Peak" in mem.text.object and dash.state.memory_policy in mem.plot.fig.title.text
    # which iteration times are measured (the profile's convolutions) and which modelled (the assumed constants)
    assert "Predicted times</b>: time model: convolutions from the profile (measured)" in mem.text.object
    assert "(assumed)" in mem.text.object
    dash.state.memory_policy = "vdnn-all-p"  # vDNN offloads: copies appear on the lanes
    assert len(mem.plot.copies.data["left"]) > 0 and "offloaded" in mem.text.object
    mem.exact.value = "3 GiB"
    assert dash.state.capacity == 3 * 2**30 and "capacity 3 GiB" in mem.plot.fig.title.text
    mem.exact.value = "three"
    assert mem.error.visible and "invalid size" in mem.error.object


@pytest.fixture(scope="module")
def two_gpus(tmp_path_factory):
    """SYNTHETIC AlexNet b32 on two made-up GPUs, named as bundles are; the second GPU is twice as fast."""
    from engine.profile import Profile

    folder = tmp_path_factory.mktemp("gpus")
    a = synthetic_profile("alexnet", 32, "powerOfTwo")
    t = a.table.copy()
    t[["time_ms", "time_min_ms", "time_max_ms"]] = t[["time_ms", "time_min_ms", "time_max_ms"]] / 2
    b = Profile(t, dict(a.provenance, gpu="SYNTHETIC fast GPU"), a.networks)
    return {
        "gpua-alexnet-b32": a.save(folder / "a.profile.json.gz"),
        "gpub-alexnet-b32": b.save(folder / "b.profile.json.gz"),
        "gpua-vgg16-b32": profile_path_of(folder, "vgg16"),
    }


def profile_path_of(folder, network):
    return synthetic_profile(network, 8, "powerOfTwo").save(folder / f"{network}.profile.json.gz")


def test_compare_draws_the_same_scope_on_another_gpu_beside_this_one(two_gpus):
    state = PlannerState(profiles=two_gpus, profile="gpua-alexnet-b32")
    dash = Dashboard(state, gpu=(False, "no GPU in tests"), runner=JobRunner())
    assert state.selection.param.compare.objects == ["", "gpub-alexnet-b32"] and dash.controls.compare.visible
    assert list(dash.controls.compare.options) == ["(none)", "gpub-alexnet-b32"]
    assert not len(dash.pareto.plot.other.data["x"])
    dash.controls.compare.value = "gpub-alexnet-b32"
    cmp = state.comparison
    assert cmp.gpu == "SYNTHETIC fast GPU" and math.isclose(cmp.here_optimum_ms, 2 * cmp.optimum_ms)
    total = state.budget * (len(state.analysis.kernels) if state.mode == "WR" else 1)
    assert cmp.budget == total and math.isclose(cmp.here_at_budget_ms, 2 * cmp.at_budget_ms)
    np.testing.assert_allclose(dash.pareto.plot.other.data["time_ms"], cmp.front.time_ms)
    assert dash.pareto.plot.other_item.label.value == "WD front, powerOfTwo, SYNTHETIC fast GPU"
    assert "SYNTHETIC fast GPU's WD front" in dash.pareto.text.object and "2.00x as fast" in dash.pareto.text.object
    state.budget = state.budget * 4  # the comparison follows the budget
    assert state.comparison.budget == state.budget
    state.profile = "gpua-vgg16-b32"  # no profile of VGG-16 on another GPU: nothing to compare
    assert state.selection.param.compare.objects == [""] and state.compare == "" and state.comparison is None
    assert not dash.controls.compare.visible and not len(dash.pareto.plot.other.data["x"])


def test_compare_with_the_same_gpu_says_why_in_one_line(two_gpus):
    same = dict(two_gpus, **{"gpuc-alexnet-b32": two_gpus["gpua-alexnet-b32"]})
    state = PlannerState(profiles=same, profile="gpua-alexnet-b32")
    state.compare = "gpuc-alexnet-b32"
    assert state.comparison is None and state.result is not None
    assert state.compare_error.startswith("cannot compare with gpuc-alexnet-b32: both profiles were measured on")


@pytest.mark.skipif(not bundled_profiles(), reason="no bundled profiles")
@pytest.mark.parametrize(
    "walk",
    [
        ["h100-alexnet-b256-tf32-nchw-all", "h100-alexnet-b256-fp16-nhwc-powerOfTwo"],
        [
            "h100-resnet50-b64-tf32-nchw-powerOfTwo",
            "h100-alexnet-b256-tf32-nchw-all",
            "h100-vgg16-b64-tf32-nchw-powerOfTwo",
        ],
    ],
)
def test_profile_switches_keep_widgets_state_and_views_together(walk):
    """The switches that once tore the page (options changed before values, None sent back by the widgets,
    a view reading a policy the new analysis lacks), through the widgets with their Bokeh models made."""
    d = Dashboard(gpu=(False, "no GPU in tests"), runner=JobRunner())
    pn.panel(d).get_root(Document(), comm=Comm())
    s, c = d.state, d.controls
    for name in walk:
        c.profile.value = name
        gpu, net, batch, dtype, layout, policy = name.split("-")
        assert (s.network, s.batch, s.precision, s.layout, s.policy) == (
            net,
            int(batch[1:]),
            dtype,
            layout.upper(),
            policy,
        ), name
        for w in ("network", "batch", "precision", "layout", "policy", "mode", "engines", "profile"):
            assert getattr(c, w).value == getattr(s, w), (name, w)
        r = s.result
        assert r.analysis is s.analysis and r.choice.policy == s.policy and r.choice.feasible and s.error == ""
        assert f"{net}, B={batch[1:]}, {dtype}, {layout.upper()}" in d.pareto.plot.fig.title.text
        assert d.desirable.plot.fig.title.text.endswith(f"({policy})")
        assert f"{net} B={batch[1:]}" in d.summary.pane.object


def test_a_plan_made_from_another_listed_profile_switches_to_it(two_gpus):
    """A VGG-16 plan uploaded while AlexNet's profile is shown: the dashboard switches to the profile it came from."""
    from engine.planner import make_plan
    from engine.profile import Profile
    from engine.zoo import get_network

    state = PlannerState(profiles=two_gpus, profile="gpua-alexnet-b32")
    dash = Dashboard(state, gpu=(False, "no GPU in tests"), runner=JobRunner())
    vgg = Profile.load(two_gpus["gpua-vgg16-b32"])
    plan = make_plan(vgg, get_network("vgg16", 8), mode="wr", budget="8MiB")
    drop(dash.plan.upload, "vgg.plan.json", json.dumps(plan.to_dict()).encode())
    assert dash.plan.alert.alert_type == "success", dash.plan.alert.object
    assert "switched to profile gpua-vgg16-b32" in dash.plan.alert.object
    assert (state.selection.profile, state.selection.network, state.selection.batch) == ("gpua-vgg16-b32", "vgg16", 8)


def test_a_plan_is_shown_with_the_engine_set_it_was_made_with_and_a_failed_one_changes_nothing(two_gpus):
    """A plan made on the heuristic list was shown against all engines with a false difference; a plan the
    profile it came from cannot show (policy 'all' there) switched the page to that profile all the same."""
    from engine.planner import make_plan
    from engine.profile import Profile
    from engine.zoo import get_network

    state = PlannerState(profiles=two_gpus, profile="gpua-alexnet-b32")
    dash = Dashboard(state, gpu=(False, "no GPU in tests"), runner=JobRunner())
    alexnet = Profile.load(two_gpus["gpua-alexnet-b32"]).restrict("heuristics")
    plan = make_plan(alexnet, get_network("alexnet", 32), mode="wd", budget="8MiB")
    drop(dash.plan.upload, "h.plan.json", json.dumps(plan.to_dict()).encode())
    assert dash.plan.alert.alert_type == "success" and "engine set heuristics" in dash.plan.alert.object
    assert state.selection.engines == "heuristics" and state.result.choice.time_ms == pytest.approx(plan.totals.time_ms)
    state.selection.engines = "all"
    vgg = Profile.load(two_gpus["gpua-vgg16-b32"])
    doc = make_plan(vgg, get_network("vgg16", 8), mode="wr", budget="8MiB").to_dict()
    doc["policy"] = "all"  # valid in a file, but the profile measured powerOfTwo sizes only
    drop(dash.plan.upload, "all.plan.json", json.dumps(doc).encode())
    assert dash.plan.alert.alert_type == "warning" and "Cannot show all.plan.json (the page is unchanged)" in (
        dash.plan.alert.object
    )
    assert (state.selection.profile, state.selection.network, state.selection.engines) == (
        "gpua-alexnet-b32",
        "alexnet",
        "all",
    )


def test_a_choice_the_options_no_longer_hold_is_dropped_and_the_browser_shown_the_pages_value():
    """A comparison chosen in the browser as the profile switched arrived after the options had changed:
    Panel's Select raised "... not in list" in its callback (a browser stress walk). The page keeps its
    value and sends it back; a choice still offered is taken as before."""
    from dashboard.views.widgets import Choice

    w = Choice(options={"H200 (measured)": "h200", "H100": "h100"}, value="h100")
    model = w.get_root()
    model.value = "gone"  # what the browser's stale choice does to the page's model
    w._process_events({"value": "gone"})
    assert w.value == "h100" and model.value == "h100"
    w._process_events({"value": "h200"})
    assert w.value == "h200"
    stock = pn.widgets.Select(options=["h200", "h100"], value="h100")
    stock.get_root()
    with pytest.raises(ValueError, match="not in list"):  # why Choice exists (remove it once Panel copes)
        stock._process_events({"value": "gone"})


def test_a_click_on_a_button_the_options_no_longer_hold_is_dropped_and_taken_clicks_are_echoed(monkeypatch):
    """A policy click sent as the profile switched to fewer policies: Panel's RadioButtonGroup raised
    IndexError in its callback (a QA walk; the Mini-batch select then stayed empty). The page keeps its value and
    sends it back; a click still offered is taken, and echoed to the browser, as a select's choice is."""
    from dashboard.views import widgets

    echoed = []
    monkeypatch.setattr(widgets, "echo", lambda widget, prop: echoed.append(prop))
    w = widgets.Buttons(options=["undivided", "powerOfTwo"], value="powerOfTwo")
    model = w.get_root()
    model.active = 2  # the browser's click on the third button of the old options
    w._process_events({"active": 2})
    assert w.value == "powerOfTwo" and model.active == 1 and echoed == []
    w._process_events({"active": 0})
    assert w.value == "undivided" and echoed == ["active"]
    c = widgets.Choice(options=["8", "64"], value="64")
    c.get_root()
    c._process_events({"value": "8"})
    assert c.value == "8" and echoed == ["active", "value"]
    stock = pn.widgets.RadioButtonGroup(options=["undivided", "powerOfTwo"], value="powerOfTwo")
    stock.get_root()
    with pytest.raises(IndexError):  # why Buttons exists (remove it once Panel copes)
        stock._process_events({"active": 2})


def test_echo_sends_the_model_value_to_the_browser_again():
    """Panel sends nothing for a value the browser itself sent: the echo triggers the Bokeh model's property."""
    from dashboard.views.widgets import echo

    from dashboard.views.widgets import Choice

    w = Choice(options=["8", "64"], value="8")
    model = w.get_root()
    seen, processed = [], []
    model.on_change("value", lambda attr, old, new: seen.append((old, new)))
    w.param.watch(lambda e: processed.append(e.new), "value", onlychanged=False)
    echo(w, "value")
    assert seen == [("8", "8")]  # sent once, and not taken back as a browser change (it was echoed forever)
    assert processed == [] and not w._changing.get(model.ref["id"])
    model.value = "64"  # a browser choice (Bokeh patches the page's model, then Panel's callback runs)
    assert w.value == "64" and sorted(seen[1:]) == [("64", "64"), ("8", "64")]  # taken, and echoed once


def test_the_uploaders_own_limit_never_refuses_a_plan_file_the_engine_takes():
    """The browser's uploader counts 1000-byte KB and MB: "64MB" refused valid files of 64.0 to 67.1 million bytes."""
    from dashboard.views.plan import PlanDropper
    from engine.fileio import MAX_FILE_BYTES

    size = PlanDropper().max_file_size
    assert size.endswith("KB") and MAX_FILE_BYTES <= int(size[:-2]) * 1000 < MAX_FILE_BYTES + 1000
