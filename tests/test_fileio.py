"""engine.fileio: writes that survive a killed writer, reads bounded before anything is built, and no writer
in the project that goes around them."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import stat
import subprocess
import sys
import time
import zlib
from pathlib import Path

import pytest

from engine import fileio
from engine.errors import EngineError, PlanFormatError, ProfileFormatError
from engine.fileio import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_JSON_BYTES,
    atomic_write,
    gunzip_bounded,
    load_json_file,
    parse_json,
    read_bounded,
)
from engine.testing.cli import device_node

ROOT = Path(__file__).resolve().parent.parent


def test_atomic_write_text_bytes_gzip_and_permissions(tmp_path):
    path = tmp_path / "a.json"
    atomic_write(path, "old\n")
    path.chmod(0o640)
    atomic_write(path, b"new\n")
    assert path.read_text() == "new\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o640  # replacing a file keeps its permissions
    gz = atomic_write(tmp_path / "b.json.gz", "{}", gzip_suffix=True)
    assert gzip.decompress(gz.read_bytes()) == b"{}"
    assert atomic_write(tmp_path / "c.gz", "{}").read_bytes() == b"{}"  # gzip only when asked
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.json", "b.json.gz", "c.gz"]  # no temporary left


def test_failure_between_write_and_rename_keeps_the_old_file(tmp_path, monkeypatch):
    path = tmp_path / "plan.json"
    path.write_text("the good plan")

    def broken_replace(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(EngineError, match=r"cannot write plan to '.*plan.json': No space left on device"):
        atomic_write(path, "x" * 10_000, what="plan")
    assert path.read_text() == "the good plan"
    assert [p.name for p in tmp_path.iterdir()] == ["plan.json"]  # the temporary file is removed


def test_unwritable_folder_is_one_engine_error(tmp_path):
    with pytest.raises(EngineError, match="cannot write front to .*No such file or directory"):
        atomic_write(tmp_path / "missing" / "f.csv", "x", what="front")


_KILLED_WRITER = """
import os, sys, time
from pathlib import Path
sys.path.insert(0, {root!r})
from engine.fileio import atomic_write
path = Path(sys.argv[1])
def stalled(*args):  # the data is in the temporary file; stall before it is renamed over the target
    print("writing", flush=True)
    time.sleep(60)
if sys.argv[2] == "atomic":
    os.fsync = stalled
    atomic_write(path, "new plan " * 100_000)
else:  # what the project did before: truncate, then write
    with open(path, "w") as f:
        f.write("new plan " * 10)
        f.flush()
        stalled()
        f.write("new plan " * 100_000)
"""


@pytest.mark.parametrize("how", ["atomic", "in-place"])
def test_writer_killed_mid_write(tmp_path, how):
    """A writer SIGKILLed during the write: atomic_write leaves the old file intact; the in-place write it
    replaced leaves a truncated one (the control that shows the kill lands mid-write)."""
    path = tmp_path / "plan.json"
    path.write_text("the good plan")
    script = tmp_path / "writer.py"
    script.write_text(_KILLED_WRITER.format(root=str(ROOT)))
    proc = subprocess.Popen([sys.executable, str(script), str(path), how], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL
    if how == "atomic":
        assert path.read_text() == "the good plan"
    else:
        assert path.read_text() == "new plan " * 10


def test_read_bounded_limits(tmp_path):
    with pytest.raises(ProfileFormatError, match="does not exist"):
        read_bounded(tmp_path / "none.json", "profile 'none.json'", ProfileFormatError)
    with pytest.raises(ProfileFormatError, match="is not a regular file"):
        read_bounded(tmp_path, "profile 'dir'", ProfileFormatError)
    if Path("/dev/zero").exists():
        with pytest.raises(ProfileFormatError, match="is not a regular file"):
            read_bounded("/dev/zero", "profile '/dev/zero'", ProfileFormatError)
    big = tmp_path / "big.json"
    with open(big, "wb") as f:  # sparse: no disk used
        f.truncate(MAX_FILE_BYTES + 1)
    with pytest.raises(EngineError, match="is larger than 64 MiB"):
        read_bounded(big, "plan 'big.json'")


def _bomb(decompressed: int) -> bytes:
    """gzip of ``decompressed`` zero bytes, made in chunks (a few hundred KB on disk)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    chunk = bytes(1 << 20)
    return b"".join([*(z.compress(chunk) for _ in range(decompressed >> 20)), z.flush()])


@pytest.mark.slow
def test_gzip_bomb_corrupt_and_truncated(tmp_path):
    bomb = _bomb(MAX_JSON_BYTES + (4 << 20))
    assert len(bomb) < 1 << 20
    t0 = time.perf_counter()
    with pytest.raises(EngineError, match=f"decompresses to more than {MAX_JSON_BYTES // 2**20} MiB"):
        gunzip_bounded(bomb, "plan 'bomb.json.gz'")
    assert time.perf_counter() - t0 < 2
    good = gzip.compress(b'{"a": 1}' * 1000)
    corrupt = good[:20] + bytes(b ^ 0xFF for b in good[20:40]) + good[40:]  # valid header, corrupt payload
    with pytest.raises(EngineError, match="is not valid gzip"):
        gunzip_bounded(corrupt, "plan 'c.json.gz'")
    with pytest.raises(EngineError, match="is not valid gzip: the compressed data ends early"):
        gunzip_bounded(good[:-12], "plan 't.json.gz'")
    assert gunzip_bounded(good + gzip.compress(b" "), "two members") == b'{"a": 1}' * 1000 + b" "


def test_parse_json_limits():
    with pytest.raises(EngineError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_json(b"[" * 100_000 + b"]" * 100_000, "plan 'deep.json'")
    deep = 1
    for _ in range(MAX_DEPTH):
        deep = [deep]
    with pytest.raises(EngineError, match=f"nested deeper than {MAX_DEPTH} levels"):
        parse_json(json.dumps({"a": deep}), "x")
    assert parse_json(json.dumps({"rows": deep}), "x", skip=("rows",))  # left to the caller's own checks
    for text in ("NaN", "[Infinity]", '{"a": -Infinity}'):
        with pytest.raises(EngineError, match="is not valid JSON: .*is not a number JSON allows"):
            parse_json(text, "plan 'x'")
    with pytest.raises(EngineError, match="is not valid JSON"):
        parse_json(b"\xff\xfe{", "plan 'x'")
    with pytest.raises(PlanFormatError, match="is not valid JSON"):
        parse_json("1" * 5000, "plan 'x'", PlanFormatError)  # Python refuses > 4300 digits


def test_load_json_file_reads_gzip_by_suffix(tmp_path):
    atomic_write(tmp_path / "d.json.gz", json.dumps({"a": [1, 2]}), gzip_suffix=True)
    assert load_json_file(tmp_path / "d.json.gz", "x") == {"a": [1, 2]}


# Every file the project writes goes through engine.fileio. These write streams, not documents: the logs of a
# server and of worker processes (engine/testing/serve.py, benchmarks/profile_multigpu.py), the attempt log the
# fake GPU workers append to (engine/testing/fake_gpu.py) and an append-only JSONL of measurements kept as they
# come (tools/engine_sweep.py).
_STREAMS = {
    "benchmarks/profile_multigpu.py": 1,
    "engine/testing/fake_gpu.py": 2,
    "engine/testing/serve.py": 1,
    "tools/engine_sweep.py": 1,
}
_RAW_WRITE = re.compile(
    r"\.write_text\(|\.write_bytes\(|open\([^)]*[\"'][wax]b?\+?[\"']|\.open\([\"'][wax]|"
    r"json\.dump\(|gzip\.open\(|\.to_csv\(|savefig\((?![^,)]*buf)|"
    r"yaml\.(safe_)?dump\(\w+,\s*\w+\s*[,)]"
)


def test_no_writer_goes_around_atomic_write():
    found = {}
    for folder in ("engine", "dashboard", "benchmarks", "tools"):  # every folder of project code
        for path in sorted((ROOT / folder).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel == "engine/fileio.py":
                continue
            hits = [line.strip() for line in path.read_text().splitlines() if _RAW_WRITE.search(line)]
            if hits:
                found[rel] = hits
    assert {k: len(v) for k, v in found.items()} == _STREAMS, found


def test_the_scan_sees_raw_writes():
    """The pattern of the test above catches each way of writing it is meant to catch."""
    for line in (
        "Path(p).write_text(t)",
        "p.write_bytes(b)",
        'open(p, "w")',
        "open(p, 'wb')",
        'OUT.open("w")',
        "json.dump(d, f)",
        'gzip.open(p, "wt")',
        "df.to_csv(p)",
        "fig.savefig(p)",
        "yaml.safe_dump(d, f)",
    ):
        assert _RAW_WRITE.search(line), line
    for line in (
        'open(p, "rb")',
        "json.dumps(d)",
        "yaml.safe_dump(spec, sort_keys=False)",
        "p.read_text()",
        'fig.savefig(buf, format="png")',
    ):
        assert not _RAW_WRITE.search(line), line


@pytest.mark.slow
def test_the_largest_bundled_profile_loads_within_the_limits():
    """The limits leave room for real data: the largest bundled profile (231,523 rows, 55 MB of JSON) loads."""
    from engine.profile import Profile, bundled_profiles

    largest = max(bundled_profiles().values(), key=lambda p: p.stat().st_size, default=None)
    if largest is None:
        pytest.skip("no bundled profiles")
    assert len(gzip.decompress(largest.read_bytes())) > MAX_JSON_BYTES / 4
    assert Profile.load(largest).table.shape[0] > 100_000


# ------------------------------------------------------------------------ what is not a regular file


def test_device_files_are_written_not_replaced(tmp_path):
    """A null device takes the data and stays a device; a full one's ENOSPC is one EngineError; an empty name
    or a folder is refused."""
    null, full = device_node(tmp_path, "null", 3), device_node(tmp_path, "full", 7)
    before = os.stat(null)
    atomic_write(null, "x" * 10_000, what="plan")
    after = os.stat(null)
    assert stat.S_ISCHR(after.st_mode) and (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)
    with pytest.raises(EngineError, match=r"^cannot write memory snapshot to '.*full': No space left on device$"):
        atomic_write(full, b"x" * 10_000, what="memory snapshot")
    assert stat.S_ISCHR(os.stat(full).st_mode)
    with pytest.raises(EngineError, match="the file name is empty"):
        atomic_write("", "x", what="plan")
    with pytest.raises(EngineError, match="is a folder"):
        atomic_write(tmp_path, "x", what="plan")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["full", "null"]


def test_a_fifo_is_written_straight(tmp_path):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    reader = subprocess.Popen(["cat", str(fifo)], stdout=subprocess.PIPE)
    atomic_write(fifo, "through the pipe\n")
    assert reader.communicate(timeout=30)[0] == b"through the pipe\n"
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)


_TO_STDOUT = """
import sys
sys.path.insert(0, {root!r})
from engine.fileio import atomic_write
print("before")
atomic_write(sys.argv[1], "the data\\n")
print("after")
"""


@pytest.mark.parametrize("name", ["stdout", "/dev/fd/1"])
@pytest.mark.parametrize("into", ["file", "pipe"])
def test_dev_stdout_goes_where_stdout_goes(tmp_path, name, into):
    """``--json /dev/stdout`` with stdout redirected to a file: the data lands in that file, in order with what
    the process printed, and the shell's file is not replaced by another. ``stdout`` is a link of our own made
    as /dev/stdout is (-> /proc/self/fd/1), so a failure cannot replace the machine's."""
    if name == "stdout":
        name = str(tmp_path / "stdout")
        os.symlink("/proc/self/fd/1", name)
    script = tmp_path / "w.py"
    script.write_text(_TO_STDOUT.format(root=str(ROOT)))
    if into == "file":
        out = tmp_path / "out.txt"
        with open(out, "wb") as f:
            inode = os.fstat(f.fileno()).st_ino
            subprocess.run([sys.executable, str(script), name], stdout=f, check=True, timeout=60)
        assert out.read_text() == "before\nthe data\nafter\n" and out.stat().st_ino == inode
    else:
        got = subprocess.run([sys.executable, str(script), name], stdout=subprocess.PIPE, check=True, timeout=60)
        assert got.stdout == b"before\nthe data\nafter\n"
    assert os.path.islink(name) or name.startswith("/dev/fd/")


def test_a_symlink_to_a_file_replaces_the_file_and_keeps_the_link(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    atomic_write(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_stale_temporary_files_of_a_killed_writer_are_removed(tmp_path):
    """A writer killed between write and rename leaves ``.NAME.XXXXXXXX.tmp``; the next write to NAME removes
    it once it is older than STALE_TMP_S, and leaves young ones (a writer still running), other names' and
    files not of our pattern alone."""
    path = tmp_path / "plan.json"
    stale = tmp_path / ".plan.json.k1ll3d_1.tmp"
    young = tmp_path / ".plan.json.running.tmp"
    other = tmp_path / ".front.csv.abcdefgh.tmp"
    foreign = tmp_path / ".plan.json.not-ours.tmp"
    for f in (stale, young, other, foreign):
        f.write_text("half")
    old = time.time() - fileio.STALE_TMP_S - 60
    for f in (stale, other, foreign):
        os.utime(f, (old, old))
    atomic_write(path, "new")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["plan.json", young.name, other.name, foreign.name])


def test_killed_writer_leaves_a_temporary_file_the_next_write_removes(tmp_path):
    """End to end: SIGKILL during fsync leaves the pattern's file behind; aged past the limit, the next write
    removes it."""
    path = tmp_path / "plan.json"
    path.write_text("the good plan")
    script = tmp_path / "writer.py"
    script.write_text(_KILLED_WRITER.format(root=str(ROOT)))
    proc = subprocess.Popen([sys.executable, str(script), str(path), "atomic"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "writing"
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    left = [p for p in tmp_path.iterdir() if p.name.startswith(".plan.json.")]
    assert len(left) == 1 and re.fullmatch(r"\.plan\.json\.[A-Za-z0-9_]{8}\.tmp", left[0].name)
    atomic_write(path, "next")  # young: a writer may still be at it
    assert left[0].exists()
    old = time.time() - fileio.STALE_TMP_S - 1
    os.utime(left[0], (old, old))
    atomic_write(path, "again")
    assert not left[0].exists() and path.read_text() == "again"
