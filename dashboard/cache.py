"""One bounded, thread-safe LRU for what the dashboard computes once per process and shares between
sessions (analyses, plans, memory timelines). Imports no Panel.

Keys hold the objects themselves (a ``Profile``, an ``Analysis``): both compare and hash by identity, so a
key is unique while the cache holds it and no ``id()`` can be reused by a later object. Values are
read-only; two threads missing the same key may both compute it (same result, the later one kept).
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable


class LRU:
    """``get(key, make)``: the cached value, or ``make()`` stored as the most recent of ``size``."""

    def __init__(self, size: int):
        self.size = size
        self._items: OrderedDict = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], object]):
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()  # outside the lock: other sessions keep reading while one computes
        with self._lock:
            self._items[key] = value
            while len(self._items) > self.size:
                self._items.popitem(last=False)
        return value

    def __len__(self) -> int:
        return len(self._items)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()
