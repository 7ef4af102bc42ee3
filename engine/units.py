"""Byte sizes as people write them ("64MiB", "1.5 GiB", "512KB") and back."""

from __future__ import annotations

import re

from .errors import BudgetError
from .fileio import short

_UNITS = {
    "": 1,
    "b": 1,
    "k": 1000,
    "kb": 1000,
    "m": 1000**2,
    "mb": 1000**2,
    "g": 1000**3,
    "gb": 1000**3,
    "t": 1000**4,
    "tb": 1000**4,
    "kib": 1024,
    "mib": 1024**2,
    "gib": 1024**3,
    "tib": 1024**4,
}
_RE = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")

MiB = 1024**2
GiB = 1024**3
TiB = 1024**4
MAX_SIZE = 1 << 62  # sizes live in int64 on the GPU side; larger ones are typos


def parse_size(text: str | int | float) -> int:
    """Parse a size: an int or float is bytes; text needs a unit unless it is zero ("120" is refused: 120 bytes
    is never what someone typing a budget means). Decimal (MB) and binary (MiB) units are distinct."""
    shown = short(text)
    if isinstance(text, bool) or not isinstance(text, (str, int, float)):
        raise BudgetError(f"invalid size {shown}: give bytes (an integer) or text with a unit such as 64MiB or 1GiB")
    if isinstance(text, (int, float)):
        value = float(text) if isinstance(text, float) else text
    else:
        m = _RE.match(text) if len(text) <= 64 else None
        if not m:
            raise BudgetError(f"invalid size {shown}: expected a number with a unit such as 64MiB or 1GiB")
        unit = m.group(2).lower()
        if not unit and float(m.group(1)) != 0:
            number = m.group(1)
            raise BudgetError(
                f"{text.strip()!r} has no unit: write e.g. {number}MiB or {number}GiB (or {number}B for bytes)"
            )
        if unit not in _UNITS:
            raise BudgetError(f"invalid size {shown}: unknown unit {m.group(2)!r} (use B, KiB, MiB, GiB, KB, MB, GB)")
        value = float(m.group(1)) * _UNITS[unit]
    if value != value:
        raise BudgetError(f"invalid size {shown}: not a number")
    if value < 0:
        raise BudgetError(f"invalid size {shown}: must not be negative")
    if value > MAX_SIZE:
        raise BudgetError(f"invalid size {shown}: more than {MAX_SIZE // TiB} TiB, beyond any memory")
    if 0 < value < 0.5:  # would round to 0 B, which means something else (no workspace at all)
        raise BudgetError(f"invalid size {shown}: less than one byte")
    return int(round(value))


def format_size(n: int | float) -> str:
    """Binary units with three significant digits, e.g. ``64.0 MiB``."""
    n = float(n)
    for unit, div in (("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if abs(n) >= div:
            return f"{n / div:.3g} {unit}" if n / div < 100 else f"{n / div:.0f} {unit}"
    return f"{n:.0f} B"
