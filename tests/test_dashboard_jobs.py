"""JobRunner: one job at a time, progress, cancel and errors (fake work functions, no GPU)."""

from __future__ import annotations

import threading

from dashboard.jobs import JobRunner
from engine.errors import EngineError


def test_job_reports_progress_and_result():
    runner = JobRunner()
    seen = []
    runner.param.watch(lambda e: seen.append(e.new), "progress")

    def work(progress, should_stop):
        for i in range(5):
            progress(i + 1, 5, f"step {i}")
        return "answer"

    assert runner.start("profile", work, owner="page-1")
    runner.join(5)
    assert runner.status == "done" and runner.result == "answer" and not runner.running
    assert runner.progress == 100 and seen[-1] == 100 and runner.finished == 1
    assert runner.owner == "page-1" and runner.error == ""


def test_only_one_job_at_a_time_and_cancel():
    runner = JobRunner()
    started, release = threading.Event(), threading.Event()

    def work(progress, should_stop):
        started.set()
        while not should_stop():
            release.wait(0.01)
        JobRunner.check(should_stop)
        return "never"

    assert runner.start("verify", work)
    started.wait(5)
    assert runner.running and not runner.start("profile", lambda p, s: None)
    runner.cancel()
    runner.join(5)
    assert runner.status == "cancelled" and runner.result is None and not runner.running
    assert "cancelled" in runner.error
    assert runner.start("profile", lambda p, s: 1)  # free again
    runner.join(5)
    assert runner.result == 1


def test_engine_cancellation_errors_count_as_cancelled():
    """engine.gpu raises its own EngineError when should_stop() turns true."""
    runner = JobRunner()

    def work(progress, should_stop):
        while not should_stop():
            pass
        raise EngineError("profiling cancelled after 3 of 10 graphs")

    runner.start("profile", work)
    runner.cancel()
    runner.join(5)
    assert runner.status == "cancelled"


def test_failure_is_reported_in_one_line():
    runner = JobRunner()

    def work(progress, should_stop):
        raise EngineError("no usable CUDA GPU: driver too old")

    runner.start("profile", work)
    runner.join(5)
    assert runner.status == "failed" and runner.error == "no usable CUDA GPU: driver too old"
    assert not runner.running and "failed" in runner.message
