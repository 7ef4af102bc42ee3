"""Served pages built one at a time, in the order they loaded, each sent before the next is built.

``panel serve`` builds a page on its one event loop (Python's GIL: one page at a time whatever the threads).
Built while its request is answered, every page requested at once waited for all of them: the server answered
the waiting requests before the first page's scripts and websocket (issue 25: ten pages finished together).
Built on Panel's ``onload`` as next-tick callbacks, the builds still ran back to back, each page's message
queued behind the later builds. Here a page is built in its turn and the next build waits until the loop
has had a moment to write the finished page out, so pages finish one after another: the median page waits
for half the others, not for all of them.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable

import panel as pn
from panel.io.state import set_curdoc

GAP_S = 0.05  # after a build, for its message to be written before the next build takes the loop

_turns: deque = deque()
_guard = threading.Lock()
_building = False


def build_in_turn(doc, build: Callable[[], None]) -> None:
    """Run ``build()`` for ``doc`` on the page's loop with its document locked and held (one message), after
    the pages that asked before it. Thread-safe, so safe whichever thread Panel runs onload callbacks on."""
    global _building
    with _guard:
        _turns.append((doc, build))
        if _building:
            return
        _building = True
    _next()


def _next() -> None:
    global _building
    with _guard:
        if not _turns:
            _building = False
            return
        doc, build = _turns.popleft()
    done = threading.Lock()

    def finish(*_session_context) -> None:  # once per turn: built, or the page closed before its turn came
        from tornado.ioloop import IOLoop

        if done.acquire(blocking=False):
            IOLoop.current().call_later(GAP_S, _next)

    def run() -> None:
        try:
            with set_curdoc(doc), pn.io.hold(doc):
                build()
        finally:
            finish()

    if doc.session_context is None:  # the page went away while it waited
        _next()
        return
    doc.on_session_destroyed(finish)
    doc.add_next_tick_callback(run)
