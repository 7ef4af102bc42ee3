"""The tree is ruff-clean and ruff-formatted (the settings are in pyproject.toml), so CI's one test command checks
both."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RUFF = shutil.which("ruff")


@pytest.mark.skipif(RUFF is None, reason="ruff is not installed (it comes with the dev extra: pip install -e '.[dev]')")
@pytest.mark.parametrize("args", [["check", "--output-format", "concise", "."], ["format", "--check", "."]])
def test_ruff(args):
    r = subprocess.run([RUFF, *args], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-1000:]
