"""Brute-force enumerations the optimizer tests compare WR, desirable sets and WD against."""

from __future__ import annotations

from collections.abc import Iterator


def partitions(n: int, sizes: list[int], largest: int | None = None) -> Iterator[tuple[int, ...]]:
    """Multisets of ``sizes`` summing to n, as non-increasing tuples."""
    if n == 0:
        yield ()
        return
    for s in sorted(sizes, reverse=True):
        if s <= n and (largest is None or s <= largest):
            for rest in partitions(n - s, sizes, s):
                yield (s,) + rest
