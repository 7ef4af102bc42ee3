"""The app turns Panel's thread pool off (dashboard/threads.py): --num-threads lost quick choices."""

from __future__ import annotations

import logging

import panel as pn

from dashboard.threads import page_events_on_loop


def test_panels_thread_pool_is_turned_off_with_one_warning(monkeypatch, caplog):
    pn.config.nthreads = 2  # what ``panel serve --num-threads 2`` sets: Panel starts its pool
    monkeypatch.setenv("PANEL_NUM_THREADS", "2")  # the same by the environment, which Panel reads first
    pool = pn.state._thread_pool
    assert pool is not None
    try:
        with caplog.at_level(logging.WARNING, logger="dashboard.threads"):
            page_events_on_loop()
            page_events_on_loop()  # every page runs app.py: said once
        assert pn.state._thread_pool is None and pn.config.nthreads is None
        assert pool._shutdown
        assert len(caplog.records) == 1 and "--num-threads 2 is not used" in caplog.records[0].getMessage()
    finally:
        monkeypatch.delenv("PANEL_NUM_THREADS", raising=False)
        pn.config.nthreads = None


def test_without_a_pool_nothing_changes(caplog):
    assert pn.config.nthreads is None
    with caplog.at_level(logging.WARNING, logger="dashboard.threads"):
        page_events_on_loop()
    assert pn.state._thread_pool is None and not caplog.records
