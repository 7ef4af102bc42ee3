"""Generated blocks of README.md and docs: text between a begin and an end marker, never edited by hand.

``python benchmarks/side_by_side.py report``, ``python benchmarks/profiling.py report`` and
``python benchmarks/reproduction.py`` rewrite their blocks from committed data; tests/test_reports.py
checks that every block equals what its script makes.
"""

from __future__ import annotations

from pathlib import Path

from engine.fileio import atomic_write

README = Path(__file__).resolve().parent.parent / "README.md"


def markers(name: str) -> tuple[str, str]:
    """Markers of block ``name`` ("script" or "script:part"), naming the script that writes it."""
    script = name.split(":")[0]
    return (
        f"<!-- generated: {name} (python benchmarks/{script}.py); do not edit -->",
        f"<!-- end generated: {name} -->",
    )


def read_block(text: str, name: str) -> str:
    """The text between ``name``'s markers, without the newlines next to them."""
    begin, end = markers(name)
    if begin not in text or end not in text:
        raise SystemExit(f"README lacks the markers of block {name!r}: {begin} ... {end}")
    return text.split(begin, 1)[1].split(end, 1)[0].strip("\n")


def write_block(path: Path, name: str, block: str) -> None:
    """Replace ``name``'s block in the file at ``path``."""
    text = path.read_text()
    read_block(text, name)  # both markers present
    begin, end = markers(name)
    head, rest = text.split(begin, 1)
    atomic_write(path, head + begin + "\n" + block + "\n" + end + rest.split(end, 1)[1])
