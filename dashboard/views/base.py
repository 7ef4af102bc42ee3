"""Shared base for views: one ``PlannerState``, widgets built after ``super().__init__`` (panel-patterns §2)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import Callable

import panel as pn
import param
from panel.io.state import set_curdoc

from ..state import PlannerState


def session_doc():
    """The served page's Bokeh document, or None in a notebook or a test."""
    doc = pn.state.curdoc
    return doc if doc is not None and doc.session_context is not None else None


@contextlib.contextmanager
def page_hold(doc, thread: int):
    """Panel's hold of a page's document, on the page's own thread (``thread``) only.

    There every edit must be held: Panel queues a message while the websocket is busy, and an edit made
    outside a hold is written at once by Bokeh, ahead of the queue; the browser then meets a model before
    its definition ("reference pNNN isn't known") and the page stops updating. On another thread nothing is
    edited (refreshes are handed to the page's thread), and a hold there lasts until a next-tick callback
    releases it: a browser message handled in between makes Bokeh count the held new models as already
    sent (``Document.apply_json_patch``), and the same error follows. Panel queues for its current document,
    so that is made ``doc`` (a callback of one page may edit another's, e.g. the shared GPU runner's)."""
    if doc is None or threading.get_ident() != thread:
        yield
        return
    with set_curdoc(doc), pn.io.hold(doc):
        yield


class StateView(pn.viewable.Viewer):
    """A view of one page's state. Subclasses define ``_build`` (create their components once, the layout
    shown in ``self.panel``) and ``_refresh`` (update them whenever one of ``_watch`` changes: part of the
    state -> names of its params). Views that draw a plan watch only ``planning.result``, the one consistent
    snapshot, and read nothing else that could already have moved on.

    Refreshes edit raw Bokeh models, which Bokeh allows only on the page's own thread with the document
    locked; state changes made on another thread (the GPU job's; Panel's thread pool is off:
    dashboard/threads.py) are therefore handed to the page's event loop. Every input (``listen``) and every
    handed-over refresh holds the page's lock (``state.lock``), so the job's changes and the user's do not
    interleave. The refreshes one state change hands over go to the loop
    together (``_Handover``): one callback, each view refreshed once, in one held message - not one callback
    and one websocket message per view, which the browser lays out one after another (issue 25: the slider
    took 189 ms in Chromium against 96 ms before).

    A view in a tab is ``shown`` only while its tab is open (``set_shown``): while hidden, a change only marks it
    stale (and runs ``_refresh_hidden``), and opening the tab refreshes it once from the current state, so a
    slider move redraws only what is seen (issue 25: ten sessions on two CPUs).
    """

    state = param.ClassSelector(class_=PlannerState, constant=True)
    _watch: dict[str, tuple[str, ...]] = {"planning": ("result",)}

    def __init__(self, shown: bool = True, **params):
        super().__init__(**params)
        self.shown, self._stale = shown, False
        # set by the page for a view in a tab: whether its tab is the chosen one (true from the click on,
        # before Panel has moved the tab out of the page)
        self.tab_open: Callable[[], bool] | None = None
        self._doc = session_doc()
        self._thread = threading.get_ident()
        self._build()
        for part, names in self._watch.items():
            getattr(self.state, part).param.watch(self._dispatch, list(names))
        self._update()

    def _dispatch(self, *events) -> None:
        if self._doc is not None and threading.get_ident() != self._thread:
            _Handover.of(self._doc).add(self, events)
        else:
            self._update(*events)

    def _update(self, *events) -> None:
        with page_hold(self._doc, self._thread):
            if self.shown and (self.tab_open is None or self.tab_open()):
                self._stale = False
                self._refresh(*events)
            else:
                self._stale = True
                self._refresh_hidden(*events)

    def _refresh_hidden(self, *_events) -> None:
        """What must stay current while the view's tab is closed (nothing, unless a view says otherwise)."""

    def set_shown(self, shown: bool) -> None:
        """The view's tab opened (True) or closed: opening refreshes a stale view once."""
        self.shown = shown
        if shown and self._stale:
            self._dispatch()

    def locked(self, fn, *args):
        with self.state.lock:
            return fn(*args)

    def listen(self, widget, names, fn) -> None:
        """``fn(event)`` on a change of a widget's ``names``, under the page's lock and (on the page's thread) a
        hold of its document: Panel runs a widget's event with the document unlocked, and a refresh's raw
        Bokeh edit (the memory plot's data on a typed capacity) then raised in Bokeh's session."""
        widget.param.watch(lambda *events: self.locked(self._held, fn, *events), names)

    def _held(self, fn, *events):
        with page_hold(self._doc, self._thread):
            return fn(*events)

    def __panel__(self):
        return self.panel

    @staticmethod
    def caption(testid: str) -> pn.pane.HTML:
        """Small text under a plot: the numbers behind its title, readable by people and tests."""
        return pn.pane.HTML(
            "",
            styles={"font-size": "0.82em", "color": "#444"},
            margin=(0, 10, 6, 10),
            sizing_mode="stretch_width",
            name=testid,
        )

    def _push(self, *panes) -> None:
        """Raw Bokeh edits reach a notebook only when pushed; on a server this is a no-op."""
        pn.io.push_notebook(*panes)


class _Handover:
    """Refreshes handed from other threads to one page's event loop, run there as one batch: one next-tick
    callback per burst, each view once (with all its events, in order), under the page's lock and Panel's
    ``hold`` so the browser gets one message."""

    _pages: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()  # Document -> _Handover
    _guard = threading.Lock()

    def __init__(self, doc):
        self.doc = weakref.ref(doc)
        self.pending: dict[StateView, list] = {}  # insertion order = first hand-over order

    @classmethod
    def of(cls, doc) -> _Handover:
        with cls._guard:
            page = cls._pages.get(doc)
            if page is None:
                page = cls._pages[doc] = cls(doc)
            return page

    def add(self, view: StateView, events) -> None:
        with self._guard:
            first = not self.pending
            self.pending.setdefault(view, []).extend(events)
        doc = self.doc()
        if first and doc is not None:
            doc.add_next_tick_callback(self._run)

    def _run(self) -> None:
        with self._guard:
            batch, self.pending = self.pending, {}
        if not batch:
            return
        doc = self.doc()
        lock = next(iter(batch)).state.lock
        with lock, set_curdoc(doc), pn.io.hold(doc):
            for view, events in batch.items():
                view._update(*events)
