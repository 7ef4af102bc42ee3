"""Byte sizes as people write them ("64MiB", "1.5 GiB", "512KB") and back."""

from __future__ import annotations

import re

from .errors import BudgetError

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3, "t": 1000**4, "tb": 1000**4,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4,
}
_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

MiB = 1024**2
GiB = 1024**3


def parse_size(text: str | int | float) -> int:
    """Parse a size; a bare number is bytes. Decimal (MB) and binary (MiB) units are distinct."""
    if isinstance(text, bool):
        raise BudgetError(f"invalid size {text!r}")
    if isinstance(text, (int, float)):
        if text < 0:
            raise BudgetError(f"invalid size {text!r}: must not be negative")
        return int(text)
    m = _RE.match(str(text))
    if not m:
        raise BudgetError(f"invalid size {text!r}: expected a number with an optional unit such as 64MiB or 1GiB")
    unit = m.group(2).lower()
    if unit not in _UNITS:
        raise BudgetError(f"invalid size {text!r}: unknown unit {m.group(2)!r} (use B, KiB, MiB, GiB, KB, MB, GB)")
    return int(round(float(m.group(1)) * _UNITS[unit]))


def format_size(n: int | float) -> str:
    """Binary units with three significant digits, e.g. ``64.0 MiB``."""
    n = float(n)
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}" if n / div < 100 else f"{n / div:.0f} {unit}"
    return f"{n:.0f} B"
