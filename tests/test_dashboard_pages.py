"""Served pages built one at a time in the order they loaded (dashboard/pages.py, issue 25)."""

from __future__ import annotations

import asyncio
import weakref

from bokeh.document import Document

from dashboard import pages


class Context:  # what Bokeh gives a served document (only its presence matters here)
    pass


def served(n: int):
    docs, ticks, contexts = [], {}, []
    for i in range(n):
        doc = Document()
        contexts.append(Context())
        doc._session_context = weakref.ref(contexts[-1])
        doc.add_next_tick_callback = lambda cb, i=i: ticks.setdefault(i, []).append(cb)  # the loop, by hand
        docs.append(doc)
    return docs, ticks, contexts


def test_pages_are_built_in_turn_and_a_closed_page_does_not_stall_the_rest():
    async def main():
        docs, ticks, contexts = served(4)
        built = []
        for i, doc in enumerate(docs):
            pages.build_in_turn(doc, lambda i=i: built.append(i))
        assert list(ticks) == [0] and not built  # only the first page's build is scheduled
        ticks[0].pop()()
        assert built == [0] and list(ticks) == [0]  # the next waits until the first page could be written
        await asyncio.sleep(2 * pages.GAP_S)
        assert list(ticks) == [0, 1]
        for cb in docs[1].callbacks.session_destroyed_callbacks:  # page 1 closed before its build ran
            cb(contexts[1])
        ticks[1].pop()()  # Bokeh would drop it; running it anyway must not start two builds at once
        await asyncio.sleep(2 * pages.GAP_S)
        assert list(ticks) == [0, 1, 2] and len(ticks[2]) == 1
        docs[3]._session_context = None  # page 3 went away while it waited: skipped
        ticks[2].pop()()
        await asyncio.sleep(2 * pages.GAP_S)
        assert built == [0, 1, 2] and 3 not in ticks and not pages._building

    asyncio.run(main())
