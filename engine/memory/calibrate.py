"""Calibrating the time model: ``TimeParams`` from measurements of one GPU host, saved as JSON.

The memory planner's time model (timemodel.py) assumes its copy bandwidth, the effective device-memory
rate of non-conv layers and the FC GEMM rate. ``engine.pytorch.calibrate`` measures them on a GPU host
(pinned host<->device copies in each direction and both at once, elementwise ops, FC-shaped GEMMs, and the
forward and backward time of every non-conv layer of a torch model); this module turns such a measurements
document into ``TimeParams``, with no GPU. The document (``FORMAT``, version 1)::

    {"format": "ucudnn-explorer-time-params", "version": 1,
     "provenance": {"gpu": "...", "date": "...", "command": "...", "synthetic": false, ...},
     "copy": {"h2d": B/s, "d2h": B/s, "duplex_h2d": B/s, "duplex_d2h": B/s, "bytes": n},   # any subset
     "hbm": {"rate": B/s, "ops": {"relu": B/s, ...}},
     "fc": {"flops": flop/s, "shapes": [[m, k, n, flop/s], ...]},
     "layers": {"torchvision:alexnet/b256": {"features.1": {"F": ms, "B": ms, "op": "ReLU"}, ...}},
     "framework": {"bytes": n}}   # what PyTorch keeps allocated itself (cuBLAS/cuBLASLt workspaces)

Every section is optional: what is missing stays at the assumed default and is reported as assumed.
Copies are duplex when both directions at once move at least 1.5x the bytes per second of one direction
alone (two copy engines); otherwise one copy lane serves both. Layer times apply only to the network and
mini-batch they were measured on (``timemodel.layer_key``), by the importer's layer names.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import EngineError
from ..fileio import atomic_write, check_depth, load_json_file
from ..fileio import short as _short
from .timemodel import TimeParams, layer_key

FORMAT = "ucudnn-explorer-time-params"
VERSION = 1
DUPLEX_GAIN = 1.5  # both directions at once must move this much more than one alone to count as duplex
MAX_LAYERS = 100_000


class TimeParamsFormatError(EngineError, ValueError):
    """A measurements document that is not one this engine reads."""


def _fail(path: str, problem: str):
    raise TimeParamsFormatError(f"time params: field {path} {problem}")


def _rate(v, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v <= 0:
        _fail(path, f"must be a positive number, got {_short(v)}")
    return float(v)


def _ms(v, path: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or v < 0:
        _fail(path, f"must be a non-negative number of ms, got {_short(v)}")
    return float(v)


def _section(doc: dict, name: str) -> dict:
    sec = doc.get(name, {})
    if not isinstance(sec, dict):
        _fail(name, f"must be an object, got {_short(sec)}")
    return sec


def check(doc) -> dict:
    """Validate a measurements document (format, version, every number); returns it."""
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise TimeParamsFormatError(f"time params: field format must be {FORMAT!r}, got {_short(got)}")
    if type(doc.get("version")) is not int or doc["version"] != VERSION:
        _fail("version", f"is {_short(doc.get('version'))}; this engine reads version {VERSION}")
    check_depth(doc, "time params", TimeParamsFormatError)
    known = {"format", "version", "provenance", "copy", "hbm", "fc", "layers", "framework"}
    for key in doc:
        if key not in known:
            _fail(_short(key)[1:-1], "is not part of the time-params format")
    _section(doc, "provenance")
    for k, v in _section(doc, "copy").items():
        if k == "bytes":
            continue
        if k not in ("h2d", "d2h", "duplex_h2d", "duplex_d2h"):
            _fail(f"copy.{_short(k)[1:-1]}", "is not a copy measurement (h2d, d2h, duplex_h2d, duplex_d2h, bytes)")
        _rate(v, f"copy.{k}")
    hbm = _section(doc, "hbm")
    if "rate" in hbm:
        _rate(hbm["rate"], "hbm.rate")
    fc = _section(doc, "fc")
    if "flops" in fc:
        _rate(fc["flops"], "fc.flops")
    fw = _section(doc, "framework")
    if "bytes" in fw and (type(fw["bytes"]) is not int or not 0 <= fw["bytes"] < 1 << 40):
        _fail("framework.bytes", f"is {_short(fw['bytes'])}; expected a byte count from 0 to 1 TiB")
    layers = _section(doc, "layers")
    count = 0
    for net, table in layers.items():
        if not isinstance(table, dict):
            _fail(f"layers.{_short(net)[1:-1]}", "must be an object {layer: {F: ms, B: ms}}")
        for layer, times in table.items():
            count += 1
            where = f"layers.{_short(net)[1:-1]}.{_short(layer)[1:-1]}"
            if not isinstance(times, dict):
                _fail(where, "must be an object {F: ms, B: ms}")
            for phase in ("F", "B"):
                if phase in times:
                    _ms(times[phase], f"{where}.{phase}")
    if count > MAX_LAYERS:
        _fail("layers", f"holds {count} layer times, more than {MAX_LAYERS}")
    return doc


def duplex_from(copy: dict) -> bool | None:
    """Whether both directions at once run on two copy engines (None: not measured)."""
    if not all(k in copy for k in ("h2d", "d2h", "duplex_h2d", "duplex_d2h")):
        return None
    alone = (copy["h2d"] + copy["d2h"]) / 2
    return copy["duplex_h2d"] + copy["duplex_d2h"] >= DUPLEX_GAIN * alone


def time_params(doc: dict, base: TimeParams | None = None) -> TimeParams:
    """TimeParams from a measurements document: measured values replace ``base``'s (default: the assumed
    constants); ``measured`` and ``source`` say which and whence."""
    check(doc)
    base = base or TimeParams()
    kw = dict(
        bandwidth=base.bandwidth, hbm=base.hbm, fc_flops=base.fc_flops, duplex=base.duplex, h2d=base.h2d, d2h=base.d2h
    )
    measured = []
    copy = _section(doc, "copy")
    for k in ("h2d", "d2h"):
        if k in copy:
            kw[k] = float(copy[k])
            measured.append(k)
    if "h2d" in copy and "d2h" in copy:
        kw["bandwidth"] = (copy["h2d"] + copy["d2h"]) / 2
        measured.append("bandwidth")
    duplex = duplex_from(copy)
    if duplex is not None:
        kw["duplex"] = duplex
        measured.append("duplex")
    if "rate" in _section(doc, "hbm"):
        kw["hbm"] = float(doc["hbm"]["rate"])
        measured.append("hbm")
    if "flops" in _section(doc, "fc"):
        kw["fc_flops"] = float(doc["fc"]["flops"])
        measured.append("fc_flops")
    rows = []
    for net, table in _section(doc, "layers").items():
        for layer, times in table.items():
            rows += [(net, layer, phase, float(times[phase])) for phase in ("F", "B") if phase in times]
    prov = _section(doc, "provenance")
    source = ", ".join(str(prov[k]) for k in ("gpu", "date") if prov.get(k))
    if prov.get("synthetic"):
        source = f"SYNTHETIC ({source})" if source else "SYNTHETIC"
    return TimeParams(**kw, layer_ms=tuple(rows), measured=tuple(measured), source=source)


def measured_layers(doc: dict, name: str, batch: int) -> dict[str, dict]:
    """The measured layer table of one network at one mini-batch ({} when the document has none)."""
    return _section(doc, "layers").get(layer_key(name, batch), {})


def save(path: str | Path, doc: dict) -> Path:
    """Write a measurements document atomically (validated first)."""
    check(doc)
    return atomic_write(path, json.dumps(doc, indent=1) + "\n", what="time params")


def load(path: str | Path) -> dict:
    """Read and validate a measurements document within engine.fileio's size and nesting limits."""
    what = f"time params {str(path)!r}"
    doc = load_json_file(path, what, TimeParamsFormatError)
    try:
        return check(doc)
    except TimeParamsFormatError as err:
        raise TimeParamsFormatError(f"{what}: {str(err).removeprefix('time params: ')}") from None


def load_time_params(path: str | Path, base: TimeParams | None = None) -> TimeParams:
    return time_params(load(path), base)


def load_measured(path: str | Path) -> tuple[TimeParams, int]:
    """(TimeParams, framework bytes) of a measurements file, as ``memory --time-params FILE`` and
    ``plan_memory(time_params=FILE)`` take it."""
    doc = load(path)
    try:
        return time_params(doc), framework_bytes(doc)
    except EngineError as err:
        raise EngineError(f"time params {str(path)!r}: {str(err).removeprefix('time params: ')}") from None


def framework_bytes(doc: dict) -> int:
    """Bytes the framework keeps allocated beside the network's tensors, as measured (0 when not measured):
    ``plan_memory(framework_bytes=...)``."""
    return int(doc.get("framework", {}).get("bytes", 0))


def merge(*docs: dict) -> dict:
    """One document from several measurements of one host (later sections and layer tables win)."""
    out = {
        "format": FORMAT,
        "version": VERSION,
        "provenance": {},
        "copy": {},
        "hbm": {},
        "fc": {},
        "layers": {},
        "framework": {},
    }
    for d in docs:
        check(d)
        for sec in ("provenance", "copy", "hbm", "fc", "layers", "framework"):
            out[sec].update(_section(d, sec))
    return {k: v for k, v in out.items() if v or k in ("format", "version")}
