"""Report figures: matplotlib without a display, each PNG written atomically (a reader never sees half a file)."""

from __future__ import annotations

import io
from pathlib import Path

from engine.fileio import atomic_write


def pyplot():
    """matplotlib.pyplot on the Agg backend (reports are made on hosts without a display)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def write_png(fig, path: Path, dpi: int = 90) -> None:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi)
    pyplot().close(fig)
    atomic_write(path, buf.getvalue())
