"""One GPU job at a time per server: a worker thread with progress and cooperative cancel.

Panel has no cancellation (holoviz/panel#710) and a synchronous callback would block every page of the
server, so GPU work runs in a daemon thread that reports through params (safe from threads: Panel
schedules the browser update on the event loop) and polls a ``threading.Event`` between steps
(panel-patterns.md §4, the JobRunner pattern). Imports no Panel; views get the per-process singleton
through ``pn.state.as_cached``.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

import param

from engine.errors import EngineError

Work = Callable[[Callable[[int, int, str], None], Callable[[], bool]], object]


class Cancelled(EngineError):
    """The user pressed Cancel; raised by ``JobRunner.check`` and recognised by the runner."""


class JobRunner(param.Parameterized):
    """Runs one job at a time. ``start(kind, work, owner)`` calls ``work(progress, should_stop)`` in a thread;
    ``progress(done, total, message)`` updates the bar, ``should_stop()`` turns true after ``cancel()``."""

    running = param.Boolean(default=False, constant=True)
    kind = param.String(default="", constant=True, doc="'profile' or 'verify'")
    owner = param.String(default="", constant=True, doc="Token of the page that started the job")
    progress = param.Integer(default=0, bounds=(0, 100), constant=True)
    message = param.String(default="", constant=True)
    status = param.Selector(default="idle", objects=["idle", "running", "done", "failed", "cancelled"], constant=True)
    result = param.Parameter(default=None, constant=True)
    error = param.String(default="", constant=True)
    finished = param.Integer(default=0, constant=True, doc="Counts finished jobs; watch it to collect results")

    def __init__(self, **params):
        super().__init__(**params)
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self, kind: str, work: Work, owner: str = "") -> bool:
        """Start ``work`` unless a job is running; returns whether it started."""
        with self._lock:
            if self.running:
                return False
            self._stop = threading.Event()
            with param.edit_constant(self):
                self.param.update(
                    running=True,
                    kind=kind,
                    owner=owner,
                    progress=0,
                    status="running",
                    message=f"{kind}: starting",
                    result=None,
                    error="",
                )
            self._thread = threading.Thread(
                target=self._run, args=(kind, work, self._stop), daemon=True, name=f"ucudnn-{kind}"
            )
            self._thread.start()
            return True

    def cancel(self) -> None:
        self._stop.set()
        if self.running:
            with param.edit_constant(self):
                self.message = f"{self.kind}: cancelling after the current step"

    def join(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def _run(self, kind: str, work: Work, stop: threading.Event) -> None:
        last = [0.0]

        def progress(done: int, total: int, message: str = "") -> None:
            now = time.monotonic()  # at most ~10 browser updates per second
            if done < total and now - last[0] < 0.1:
                return
            last[0] = now
            pct = int(100 * done / total) if total else 0
            with param.edit_constant(self):
                self.param.update(progress=max(0, min(100, pct)), message=f"{kind}: {message}" if message else kind)

        result, error, status = None, "", "done"
        try:
            result = work(progress, stop.is_set)
            if stop.is_set():
                status, error = "cancelled", f"{kind} cancelled"
        except Cancelled:
            status, error = "cancelled", f"{kind} cancelled"
        except Exception as err:  # reported on the page, never a dead thread with a silent traceback
            status = "cancelled" if stop.is_set() else "failed"
            error = (
                f"{kind} cancelled"
                if stop.is_set()
                else (str(err) if isinstance(err, EngineError) else f"{type(err).__name__}: {err}")
            )
        finally:
            with param.edit_constant(self):
                self.param.update(
                    result=result if status == "done" else None,
                    error=error,
                    status=status,
                    progress=100 if status == "done" else self.progress,
                    message=f"{kind}: {status}" + (f": {error}" if error and status == "failed" else ""),
                    running=False,
                    finished=self.finished + 1,
                )

    @staticmethod
    def check(should_stop: Callable[[], bool]) -> None:
        """For work functions: raise ``Cancelled`` if cancel was requested."""
        if should_stop():
            raise Cancelled("cancelled")
