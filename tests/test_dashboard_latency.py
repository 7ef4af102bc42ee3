"""What one budget-slider move costs the page (issue 25), counted rather than timed (SYNTHETIC data)."""

from __future__ import annotations

import threading

import panel as pn
import param
import pytest
from bokeh.document import Document

from dashboard.jobs import JobRunner
from dashboard.state import PlannerState
from dashboard.ui import Dashboard
from dashboard.views.base import StateView, page_hold
from engine.testing.synthetic import synthetic_profile
from engine.units import format_size


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


def views(dash) -> list[StateView]:
    return [v for v in vars(dash).values() if isinstance(v, StateView)]


def test_a_change_on_another_thread_reaches_the_page_as_one_held_batch(dash):
    """A change made on another thread (the GPU job's; with ``--num-threads``, before the app turned Panel's
    pool off, every slider event) is handed to the page; its refreshes used to go one next-tick callback per
    view, each sent as its own message (issue 25)."""
    doc = Document()
    ticks = []
    doc.add_next_tick_callback = ticks.append  # the page's event loop, run by hand below
    refreshed = counted(dash, doc, -1)  # every change now comes from "another thread"
    slider = dash.controls.slider
    slider.value = slider.end if slider.value != slider.end else slider.start
    budget = dash.state.budget
    assert len(ticks) == 1 and not refreshed  # handed over, not yet run
    ticks[0]()
    watching = {type(v).__name__ for v in views(dash) if "result" in v._watch.get("planning", ())}
    assert watching >= {"Controls", "SummaryView", "ParetoView", "WorkspaceView", "TimelineView", "PlanView"}
    assert set(refreshed) == watching - {"TimelineView", "PlanView"}  # closed tabs: marked stale, not redrawn
    assert dash.timeline._stale and dash.plan._stale
    assert all(holds == ["combine"] for holds in refreshed.values()), refreshed  # each once, all in one hold
    assert format_size(budget) in dash.summary.pane.object
    assert dash.controls.steps[slider.value] == budget
    ticks[0]()  # a stale callback finds nothing left to do
    assert all(len(h) == 1 for h in refreshed.values())


def counted(dash, doc, thread: int) -> dict[str, list]:
    """Each view's refreshes (the document's hold at each), its page ``doc`` on ``thread``."""
    refreshed: dict[str, list] = {}
    for view in views(dash):
        view._doc, view._thread = doc, thread
        inner = view._refresh

        def counting(*events, view=view, inner=inner):
            refreshed.setdefault(type(view).__name__, []).append(doc.callbacks.hold_value)
            return inner(*events)

        view._refresh = counting
    return refreshed


def drain(ticks: list) -> None:
    """Run the page's loop by hand until no callback is left."""
    while ticks:
        ticks.pop(0)()


def test_a_view_whose_tab_closed_is_not_drawn_by_a_refresh_handed_over_before(dash):
    """A change made on another thread (the GPU job's) is handed to the page's loop; if the view's tab closes
    before that runs (Panel's watcher may take the tab out of the page before ours runs), the view must not be
    drawn: an HTML pane out of the page is given Panel's CDN stylesheet URLs (Panel reads them from the
    model's document, which it then lacks; a remote request from a page served offline, seen in a browser
    stress walk)."""
    doc = Document()
    ticks = []
    doc.add_next_tick_callback = ticks.append
    refreshed = counted(dash, doc, threading.get_ident())
    dash.tabs.active = 1  # opened on the page's thread: drawn at once
    assert refreshed["TimelineView"] == ["combine"] and dash.timeline.shown
    for view in views(dash):
        view._thread = -1  # what follows comes from "another thread"
    slider = dash.controls.slider
    slider.value = slider.start if slider.value != slider.start else slider.end  # handed over to the loop ...
    with param.discard_events(dash.tabs):  # ... and the tab is closed before our watcher runs
        dash.tabs.active = 0
    drain(ticks)
    assert refreshed["TimelineView"] == ["combine"] and dash.timeline._stale


def test_a_refresh_on_the_pages_thread_is_held_and_none_is_held_on_another(dash):
    """On the page's thread an edit outside a hold is written at once, ahead of the messages Panel queued
    while the websocket was busy: the browser met a model before its definition ("reference p3369 isn't
    known", a CI run). A hold taken on another thread lasts until a next tick, and a browser message handled
    in between makes Bokeh count the held new models as already sent."""
    doc = Document()
    refreshed = counted(dash, doc, threading.get_ident())
    dash.tabs.active = 1  # Panel's watcher runs on the page's thread
    assert refreshed["TimelineView"] == ["combine"]
    holds = []

    def elsewhere():
        with page_hold(doc, threading.get_ident() + 1):
            holds.append(doc.callbacks.hold_value)

    worker = threading.Thread(target=elsewhere)
    worker.start()
    worker.join()
    assert holds == [None]


def test_a_budget_move_does_not_recount_the_slider_steps(dash, monkeypatch):
    """The steps follow the analysis and mode; reckoning them on every move cost ~15 ms for ResNet-50."""
    calls = []
    original = dash.state.budget_steps
    monkeypatch.setattr(dash.state, "budget_steps", lambda: calls.append(1) or original())
    slider = dash.controls.slider
    for v in (slider.end, slider.start, slider.end // 2):
        slider.value = v
    assert calls == []
    wd = list(dash.controls.steps)
    dash.state.mode = "WR" if dash.state.mode == "WD" else "WD"
    assert calls and dash.controls.steps != wd and dash.controls.steps == original()


def test_a_page_carries_no_glyph_the_browser_can_derive(dash):
    """A page's server time and the browser's grow with its Bokeh model count (issue 25: ten sessions on two
    CPUs). bokeh.plotting gives every renderer its own muted and non-selection glyph: two models more per
    glyph, which the browser derives itself; only a renderer with a selection look keeps its non-selection
    one."""
    from bokeh.models import GlyphRenderer

    doc = Document()
    with pn.io.server.set_curdoc(doc):
        pn.panel(dash).server_doc(doc)
    renderers = [m for m in doc.models if isinstance(m, GlyphRenderer)]
    assert len(renderers) >= 15  # the three figures of the first view (SYNTHETIC AlexNet)
    assert all(r.muted_glyph == "auto" for r in renderers)
    assert all((r.nonselection_glyph == "auto") == (r.selection_glyph == "auto") for r in renderers)
    glyphs = {m.id for r in renderers for m in (r.glyph, r.nonselection_glyph, r.selection_glyph) if m != "auto"}
    assert len(glyphs) == len(renderers) + 2 * sum(r.selection_glyph != "auto" for r in renderers)


def test_pages_at_one_budget_share_one_snapshot(profile_path):
    """Ten pages moving to the same budget made the same frames ten times (issue 25): a snapshot with no
    measurement or comparison is made once per process; a page's own (measured) one is not shared."""
    a, b = (PlannerState(profiles={"SYNTHETIC-alexnet": profile_path}) for _ in range(2))
    assert a.result is b.result
    a.budget = b.budget = a.budget // 2
    assert a.result is b.result and a.result.choice.budget == a.budget
    b.measured = {k.id: 1.0 for k in b.analysis.kernels}
    assert b.result is not a.result and a.result.measured is None and b.result.measured
