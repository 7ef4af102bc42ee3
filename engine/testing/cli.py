"""``python -m engine`` as a user runs it, for the CLI tests: a subprocess, and the one-line error rule."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def engine(*args, cwd=ROOT) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "engine", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=cwd,
        env=env,
        timeout=120,
        check=False,
    )


def one_error_line(proc: subprocess.CompletedProcess, *fragments: str) -> str:
    assert proc.returncode != 0, proc.stdout
    assert "Traceback" not in proc.stderr, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), proc.stderr
    for f in fragments:
        assert f in lines[0], lines[0]
    return lines[0]


def device_node(folder: Path, name: str, minor: int) -> Path:
    """A character device of our own in ``folder`` (1, 3 is null, 1, 7 full), for tests of writes to devices: a
    test that fails must not replace the real /dev/null of the machine it runs on (as root, the code under test
    once did). Skips the test where it cannot be made (not root, or a folder mounted nodev)."""
    import pytest

    path = folder / name
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))
        os.close(os.open(path, os.O_WRONLY))
    except OSError as err:
        pytest.skip(f"cannot make a device node here: {err.strerror}")
    return path
