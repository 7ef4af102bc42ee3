"""The project's only way to write and read its files: atomic writes, bounded reads.

A write to a regular file (or a new one) goes to a temporary file ``.NAME.XXXXXXXX.tmp`` in the same
folder, is fsync'ed and then renamed over the target, so a process killed mid-write leaves the old file
intact, never an empty or half-written one; a temporary file such a kill left is removed by a later
write to the same name once it is an hour old. Anything else (``/dev/null``, ``/dev/stdout``, a pipe)
is written straight, never replaced by a regular file; ``-`` is standard output (``data_to_stdout``). A
read is bounded before anything is built: the file size, the gzip-decompressed size and the JSON nesting
depth, so a crafted file (a gzip bomb, a 10 MB nest of brackets) fails with one clear line.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import re
import stat
import sys
import tempfile
import time
import zlib
from pathlib import Path

from .errors import EngineError

MiB = 1024**2
MAX_FILE_BYTES = 64 * MiB  # plans, profiles and specs on disk (the largest bundled profile is 6.4 MB)
MAX_JSON_BYTES = 64 * MiB  # after gzip decompression: the largest bundled profile is 55 MB and loads in about 2 s
MAX_DEPTH = 32  # JSON/YAML nesting; the formats need 6
STALE_TMP_S = 3600  # a temporary file this old is a killed writer's: no write takes an hour

GZIP_MAGIC = b"\x1f\x8b"  # the first bytes of every gzip file (RFC 1952)
STDOUT = "-"  # as a file to write: standard output
_DATA_OUT: list = []  # where STDOUT goes while a command's own messages go to stderr (data_to_stdout)

# read once at import: os.umask can only be read by setting it, which would race with other threads
_UMASK = os.umask(0)
os.umask(_UMASK)


def atomic_write(path: str | Path, data: bytes | str, gzip_suffix: bool = False, what: str = "") -> Path:
    """Write ``data`` to ``path``: atomically (temporary file, fsync, rename) where ``path`` is a regular file
    or missing, straight where it is a device, pipe or ``/dev/stdout``; gzip it when ``gzip_suffix`` and the
    name ends in ``.gz``. Raises EngineError naming ``what`` and the path."""
    label = _label(path, what)
    raw = data.encode() if isinstance(data, str) else bytes(data)
    if str(path) == STDOUT:
        _write_stdout(raw)
        return Path(path)
    path = Path(path)
    if gzip_suffix and path.suffix == ".gz":
        raw = gzip.compress(raw, mtime=0)
    try:
        target = _target(path)
        if target is None:
            _write_straight(path, raw)
        else:
            _write_atomic(target, raw)
    except BrokenPipeError:  # `-o /dev/stdout | head`: the reader has all it wants, as on plain stdout
        raise
    except OSError as err:
        raise EngineError(f"{label}: {err.strerror or err}") from None
    return path


def check_writable(path: str | Path, what: str) -> None:
    """Raise the EngineError ``atomic_write(path, ..., what=what)`` would, now: before a long computation whose
    result goes there (a profile, a plan), not after it. A regular file's folder must take a temporary file (one
    is made and removed); a device, pipe or descriptor is written straight and not checked."""
    label = _label(path, what)
    if str(path) == STDOUT:
        return
    try:
        target = _target(Path(path))
        if target is not None:
            fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
            os.close(fd)
            os.unlink(tmp)
    except OSError as err:
        raise EngineError(f"{label}: {err.strerror or err}") from None


@contextlib.contextmanager
def data_to_stdout():
    """While a command writes a file to ``-``: that file goes to standard output, and everything else the
    command prints goes to stderr, so the output is the file alone (``plan -o - | jq``)."""
    _DATA_OUT.append(sys.stdout)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        _DATA_OUT.pop()


def is_stdout(path) -> bool:
    """Whether writing ``path`` writes this process's standard output: ``-``, or a name for the file, pipe or
    terminal already open there (``/dev/stdout``, ``/dev/fd/1``, the very file stdout was redirected to)."""
    if str(path) == STDOUT:
        return True
    return bool(str(path)) and _same_inode(path, 1)


def same_file(a, b) -> bool:
    """Whether two names are one existing file (a hard link, a symlink, ``./x`` and ``x``)."""
    try:
        return os.path.samefile(a, b)
    except (OSError, ValueError, TypeError):
        return False


def _same_inode(path, fd: int) -> bool:
    try:
        st, open_ = os.stat(path), os.fstat(fd)
    except (OSError, ValueError, TypeError):
        return False
    return (st.st_dev, st.st_ino) == (open_.st_dev, open_.st_ino)


def shown(path) -> str:
    """How a message names a file written: ``-`` is standard output."""
    return "standard output" if str(path) == STDOUT else str(path)


def _write_stdout(raw: bytes) -> None:
    stream = _DATA_OUT[-1] if _DATA_OUT else sys.stdout
    stream.flush()
    if hasattr(stream, "buffer"):
        stream.buffer.write(raw)
        stream.buffer.flush()
    else:
        stream.write(raw.decode())
        stream.flush()


def _label(path, what: str) -> str:
    """How a failed write of ``what`` to ``path`` begins; an empty file name is refused here."""
    if not str(path):
        raise EngineError(f"cannot write {what or 'a file'}: the file name is empty")
    return f"cannot write {what + ' to ' if what else ''}{str(path)!r}"


def _target(path: Path) -> Path | None:
    """The regular file to replace atomically (a symlink's target), or None to write ``path`` straight."""
    if _proc_link(path) is not None:  # /dev/stdout -> /proc/self/fd/1: whatever the shell opened
        return None
    try:
        st = os.stat(path)
    except FileNotFoundError:
        return Path(os.path.realpath(path))  # a new file, or what a dangling symlink names
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(21, "is a folder")
    return Path(os.path.realpath(path)) if stat.S_ISREG(st.st_mode) else None


def _proc_link(path: Path) -> str | None:
    """The /proc path that ``path`` or a symlink on its way names (an open descriptor), else None."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on nested symlinks
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))  # /dev/fd/1: /proc/PID/fd/1
        if p == "/proc" or p.startswith("/proc/"):
            return p
        try:
            p = os.path.normpath(os.path.join(os.path.dirname(p), os.readlink(p)))
        except OSError:  # not a symlink
            return None
    return None


def _write_straight(path: Path, raw: bytes) -> None:
    """A device, a pipe or a descriptor. One of this process's own descriptors (``/dev/stdout``) is written
    through that descriptor, after our own buffered output, so a file the shell opened keeps one offset;
    a failed write (``/dev/full``) raises."""
    link = _proc_link(path)
    own = re.fullmatch(r"/proc/(?:self|thread-self|%d)(?:/task/\d+)?/fd/(\d+)" % os.getpid(), link or "")
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError, AttributeError):
            pass
    fd = os.dup(int(own.group(1))) if own else os.open(path, os.O_WRONLY)
    try:
        view = memoryview(raw)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _write_atomic(path: Path, raw: bytes) -> None:
    folder = path.parent
    _remove_stale(folder, path.name)
    tmp = None
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=folder)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
            f.flush()
            os.fsync(f.fileno())
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        else:  # mkstemp makes 0600; give a new file the permissions open() would
            os.chmod(tmp, 0o666 & ~_UMASK)
        os.replace(tmp, path)
        tmp = None
        _fsync_dir(folder)
    finally:
        if tmp is not None:
            try:
                os.unlink(tmp)
            except OSError:
                pass


def _remove_stale(folder: Path, name: str) -> None:
    """Remove ``.NAME.XXXXXXXX.tmp`` files (mkstemp's pattern) older than STALE_TMP_S: what a writer killed
    between its write and its rename left. Only our own pattern for this name, so nothing else is touched."""
    pattern = re.compile(re.escape(f".{name}.") + r"[A-Za-z0-9_]{8}\.tmp")
    old = time.time() - STALE_TMP_S
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        try:
            if entry.is_file(follow_symlinks=False) and entry.stat(follow_symlinks=False).st_mtime < old:
                os.unlink(entry.path)
        except OSError:
            pass


def _fsync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX); a no-op where directories cannot be opened."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def read_bounded(
    path: str | Path,
    what: str,
    error: type[EngineError] = EngineError,
    limit: int = MAX_FILE_BYTES,
    decompressed_limit: int = MAX_JSON_BYTES,
) -> bytes:
    """The bytes of ``path`` (gunzipped when it ends in ``.gz`` or starts as gzip does, ``plan.json`` being a
    gzip file someone renamed), refusing more than the limits.

    ``what`` names the file in messages (e.g. "plan 'x.json'"); every failure raises ``error``."""
    if not isinstance(path, (str, os.PathLike)):
        raise error(f"{what} is not a path: give a file's path as a str or pathlib.Path, got {type(path).__name__}")
    path = Path(path)
    try:
        if not path.is_file():
            if path.exists():
                raise error(f"{what} is not a regular file")
            raise error(f"{what} does not exist")
        with open(path, "rb") as f:
            raw = f.read(limit + 1)
    except OSError as err:
        raise error(f"{what} cannot be read: {err.strerror or err}") from None
    if len(raw) > limit:
        raise error(f"{what} is larger than {limit // MiB} MiB, the most this engine reads")
    if path.suffix != ".gz" and not raw.startswith(GZIP_MAGIC):
        return raw
    return gunzip_bounded(raw, what, error, decompressed_limit)


def gunzip_bounded(raw: bytes, what: str, error: type[EngineError] = EngineError, limit: int = MAX_JSON_BYTES) -> bytes:
    """Decompress gzip data, stopping as soon as the output would pass ``limit`` (a gzip bomb)."""
    out, pos = [], 0
    total = 0
    try:
        while pos < len(raw):
            d = zlib.decompressobj(wbits=31)  # one gzip member; concatenated members follow in unused_data
            chunk = d.decompress(raw[pos:], limit - total + 1)
            total += len(chunk)
            out.append(chunk)
            if total > limit:
                raise error(f"{what} decompresses to more than {limit // MiB} MiB, the most this engine reads")
            if not d.eof:
                raise error(f"{what} is not valid gzip: the compressed data ends early")
            rest = d.unused_data
            pos = len(raw) - len(rest)
            if rest and not rest.startswith(GZIP_MAGIC):
                break  # trailing garbage after the last member, as gzip(1) tolerates zeros
    except zlib.error as err:
        raise error(f"{what} is not valid gzip: {err}") from None
    return b"".join(out)


def parse_json(
    raw: bytes | str,
    what: str,
    error: type[EngineError] = EngineError,
    depth: int = MAX_DEPTH,
    skip: tuple[str, ...] = (),
):
    """JSON text to Python, refusing NaN/Infinity literals and nesting deeper than ``depth`` (top-level keys in
    ``skip`` are left to the caller's own checks)."""
    try:
        doc = json.loads(raw, parse_constant=_no_constant)
    except RecursionError:
        raise error(f"{what} is nested deeper than {depth} levels") from None
    except (ValueError, UnicodeDecodeError) as err:
        raise error(f"{what} is not valid JSON: {_one_line(err)}") from None
    check_depth(doc, what, error, depth, skip)
    return doc


def _no_constant(name: str):
    raise ValueError(f"{name} is not a number JSON allows")


def check_depth(
    doc, what: str, error: type[EngineError] = EngineError, depth: int = MAX_DEPTH, skip: tuple[str, ...] = ()
) -> None:
    """Raise ``error`` if containers nest deeper than ``depth``. Top-level keys in ``skip`` are not walked
    (large tables that their own validation checks value by value)."""
    stack = [(v, 2) for k, v in doc.items() if k not in skip] if isinstance(doc, dict) else [(doc, 1)]
    while stack:
        obj, level = stack.pop()
        if isinstance(obj, dict):
            children = obj.values()
        elif isinstance(obj, list):
            children = obj
        else:
            continue
        if level > depth:
            raise error(f"{what} is nested deeper than {depth} levels")
        stack.extend((c, level + 1) for c in children if isinstance(c, (dict, list)))


def load_json_file(path: str | Path, what: str, error: type[EngineError] = EngineError):
    """``read_bounded`` + ``parse_json``: a JSON (or .json.gz) document within every limit."""
    return parse_json(read_bounded(path, what, error), what, error)


def short(v) -> str:
    """``repr`` cut to one readable piece, so a huge value cannot flood (or stall) an error line."""
    text = repr(v) if not isinstance(v, int) or v.bit_length() < 200 else f"an integer of {v.bit_length()} bits"
    return text if len(text) <= 80 else text[:77] + "..."


def _one_line(err: BaseException) -> str:
    return " ".join(str(err).split())
