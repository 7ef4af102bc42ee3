"""docs/models.md against the code (issue 23's acceptance): every torchvision classification model and the two
segmentation models, each either imported with its memory predicted or refused in one line, never a
traceback (tools/models_table.py lets anything but an EngineError through)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("torchvision")

ROOT = Path(__file__).resolve().parent.parent
TABLE = ROOT / "docs" / "models.md"


def _tool():
    spec = importlib.util.spec_from_file_location("models_table", ROOT / "tools" / "models_table.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


tool = _tool()


def _rows() -> dict[str, str]:
    lines = TABLE.read_text().splitlines()
    start = lines.index(tool.HEADER) + 2
    return {line.split("|")[1].strip(): line for line in lines[start:] if line.startswith("| ")}


def test_table_lists_every_model_and_meets_the_acceptance():
    rows = _rows()
    assert list(rows) == tool.models()
    assert TABLE.read_text() == tool.render(list(rows.values()))
    classification = [n for n in rows if n not in tool.SEGMENTATION]
    imported = [n for n in classification if "| yes |" in rows[n]]
    assert len(imported) >= 0.95 * len(classification)
    assert all("| yes |" in rows[n] for n in rows if n.startswith("regnet_") or n in tool.SEGMENTATION)


@pytest.mark.parametrize("name", ("alexnet", "mobilenet_v3_small", "regnet_x_400mf"))
def test_sample_rows_are_the_code(name):
    assert tool.row(name) == _rows()[name]


@pytest.mark.slow
@pytest.mark.parametrize("name", list(_rows()) if TABLE.exists() else [])
def test_every_row_is_the_code(name):
    """A fuzz case per model: it imports and is predicted as the table says, or is refused in its one line."""
    assert tool.row(name) == _rows()[name]
