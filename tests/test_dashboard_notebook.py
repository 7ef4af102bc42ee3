"""examples/explore.ipynb runs top to bottom in a real Jupyter kernel and embeds the dashboard and single
components (SYNTHETIC profile), quietly, and is a valid nbformat 4.5 file (every cell has an id)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")
pytestmark = pytest.mark.slow  # a Jupyter kernel: ~10 s

ROOT = Path(__file__).resolve().parents[1]
NOTEBOOK = ROOT / "examples" / "explore.ipynb"


def test_notebook_executes_and_embeds_the_dashboard(tmp_path, monkeypatch):
    from engine.testing.synthetic import synthetic_profile

    profile = synthetic_profile("alexnet", 32, "powerOfTwo").save(tmp_path / "SYNTHETIC-alexnet.profile.json.gz")
    monkeypatch.setenv("UCUDNN_PROFILE", str(profile))
    monkeypatch.delenv("UCUDNN_PROFILE_DIR", raising=False)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p))
    raw = json.loads(NOTEBOOK.read_text())
    assert (raw["nbformat"], raw["nbformat_minor"]) >= (4, 5) and all(c.get("id") for c in raw["cells"])
    assert not [o for c in raw["cells"] for o in c.get("outputs", [])]  # committed without outputs
    nb = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(nb)
    client = nbclient.NotebookClient(
        nb, timeout=180, kernel_name="python3", resources={"metadata": {"path": str(ROOT)}}
    )
    client.execute()
    outputs = [o for cell in nb.cells if cell.cell_type == "code" for o in cell.get("outputs", [])]
    assert not [o for o in outputs if o.get("output_type") == "error"]
    text = "\n".join(str(o.get("text", "")) + str(o.get("data", {}).get("text/plain", "")) for o in outputs)
    assert "Traceback" not in text
    views = [
        cell
        for cell in nb.cells
        if cell.cell_type == "code"
        and any("application/vnd.holoviews_exec.v0+json" in o.get("data", {}) for o in cell.get("outputs", []))
    ]
    assert [c.source.splitlines()[-1] for c in views] == [  # the extension; the dashboard; two components alone
        "pn.extension(*EXTENSIONS)",
        "dash",
        "pn.Column(SummaryView(state=state), ParetoView(state=state))",
    ]
    for cell in views[1:]:  # each rendered a Bokeh document, not just a placeholder
        data = next(o["data"] for o in cell.outputs if "application/vnd.holoviews_exec.v0+json" in o.get("data", {}))
        assert "text/html" in data and len(data["text/html"]) > 200
    assert "HiGHS" not in text  # the WD cell's solver keeps quiet (its banner came through the kernel's stdout)
    assert "x over undivided at the same memory" in text
    assert "conv1:F" in text  # the plan table
    assert "plan.json: wd powerOfTwo, 14 kernels" in text  # the SYNTHETIC profile it was pointed at
    assert "torchvision:alexnet: 14 kernels, predicted" in text  # the PyTorch cell's plan, from the bundled profile
    assert "no GPU here" in text or "planned:" in text
