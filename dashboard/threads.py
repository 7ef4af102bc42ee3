"""``panel serve --num-threads N`` is turned off for this app: a page's events run on its own event loop.

With Panel's thread pool every browser event goes to a pool thread while the page's loop goes on reading the
websocket. Two things then went wrong in the browser tests' 60-action walk, beside a CPU hog:
- a refresh run on a pool thread, setting a widget from the state, met the user's next choice of that widget
  waiting in Panel's queue and dropped it (Panel's ``_update_model`` takes a differing Python value over a
  pending browser one): the page ended on an earlier choice than the last (3 of 16 runs, and 1 of 16 with the
  pool made to run one page's events one at a time in order);
- a tab's view refreshed while Panel's other thread had the tab out of the page, and the page asked a CDN
  for its stylesheets.
Served without the pool, as the README says, the walk passes. The pool buys no parallelism under Python's
GIL (ten pages moving sliders cost the server 0.041 CPU seconds a move against 0.024 without it:
benchmarks/reports/dashboard.md); ``--num-procs N`` spreads pages over cores.
"""

from __future__ import annotations

import logging
import os

import panel as pn

log = logging.getLogger(__name__)


def page_events_on_loop() -> None:
    """Stop Panel's thread pool if ``--num-threads`` (or PANEL_NUM_THREADS) started one, saying so once."""
    if pn.config.nthreads is None:
        return
    log.warning(
        "ucudnn-explorer: --num-threads %s is not used: each page's events run on its own event loop, in "
        "order (with threads a quick choice could be lost); serve with --num-procs N to use several cores",
        pn.config.nthreads,
    )
    os.environ.pop("PANEL_NUM_THREADS", None)  # Panel reads it before its own setting
    pn.config.nthreads = None  # Panel shuts its pool down
