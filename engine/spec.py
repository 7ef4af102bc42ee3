"""User networks from a JSON/YAML spec (format: docs/network-spec.md).

A spec lists layers in a valid topological order with their op, optional name and inputs, and
op parameters; NetBuilder infers every shape, so a spec cannot disagree with the graph it yields.
Every malformed input raises ``SpecError`` naming the layer (position, name, op) and the field.
``to_spec`` writes any ``Network`` back in the same format, so zoo networks round-trip.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError
from .network import NetBuilder, Network

FORMAT_FIELDS = ("name", "input", "batch", "description", "layers")
DEFAULT_BATCH = 32

# op -> {field: (kind, default)}; kind checks the value, default None means "NetBuilder's default".
_INT, _PAIR, _FLOAT, _BOOL = "int", "pair", "float", "bool"
_REQUIRED = object()
OP_FIELDS: dict[str, dict[str, tuple[str, Any]]] = {
    "conv": {"k": (_INT, _REQUIRED), "r": (_INT, _REQUIRED), "s": (_INT, None), "stride": (_PAIR, 1),
             "pad": ("pair0", 0), "dilation": (_PAIR, 1), "groups": (_INT, 1), "bias": (_BOOL, True)},
    "relu": {},
    "lrn": {"size": (_INT, 5), "alpha": (_FLOAT, 1e-4), "beta": (_FLOAT, 0.75), "k": (_FLOAT, 1.0)},
    "pool": {"size": ("pool_size", _REQUIRED), "stride": (_INT, None), "pad": ("int0", 0),
             "mode": ("mode", "max"), "ceil_mode": (_BOOL, False)},
    "bn": {"eps": (_FLOAT, 1e-5)},
    "fc": {"out_features": (_INT, _REQUIRED), "bias": (_BOOL, True)},
    "dropout": {"p": ("prob", 0.5)},
    "concat": {},
    "add": {},
    "softmax": {},
}
MULTI_INPUT = ("concat", "add")
SPATIAL = ("conv", "lrn", "pool")  # ops that need a (C, H, W) feature map, not a flat vector


def load_spec(source: str | Path | dict, batch: int | None = None) -> Network:
    """Build a Network from a spec file (.json, .yaml, .yml) or an already parsed mapping.

    ``batch`` overrides the spec's ``batch`` field (default 32 when neither is given).
    """
    where = "spec"
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        where = f"spec {str(path)!r}"
        source = _read(path, where)
    return build_spec(source, batch, where)


def _read(path: Path, where: str) -> Any:
    if not path.is_file():
        raise SpecError(f"{where}: file not found")
    text = path.read_text(encoding="utf-8")
    suffix = path.suffix.lower()
    try:
        if suffix == ".json":
            return json.loads(text)
        if suffix in (".yaml", ".yml"):
            return yaml.safe_load(text)
    except json.JSONDecodeError as err:
        raise SpecError(f"{where}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except yaml.YAMLError as err:  # its str() spans several lines
        raise SpecError(f"{where}: invalid YAML: {' '.join(str(err).split())}") from None
    raise SpecError(f"{where}: unknown file type {suffix!r}; use .json, .yaml or .yml")


def build_spec(spec: Any, batch: int | None = None, where: str = "spec") -> Network:
    if not isinstance(spec, dict):
        raise SpecError(f"{where}: the top level must be a mapping with {', '.join(FORMAT_FIELDS)}")
    unknown = [k for k in spec if k not in FORMAT_FIELDS]
    if unknown:
        raise SpecError(f"{where}: unknown top-level field {unknown[0]!r}; expected {', '.join(FORMAT_FIELDS)}")
    name = spec.get("name", "custom")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}: field 'name' must be a non-empty string")
    shape = spec.get("input")
    if not (isinstance(shape, list) and len(shape) == 3 and all(_is_int(d) and d >= 1 for d in shape)):
        raise SpecError(f"{where}: field 'input' must be [C, H, W] (positive integers, per sample), got {shape!r}")
    if batch is None:
        batch = spec.get("batch", DEFAULT_BATCH)
        if not (_is_int(batch) and batch >= 1):
            raise SpecError(f"{where}: field 'batch' must be a positive integer, got {batch!r}")
    description = spec.get("description", "")
    if not isinstance(description, str):
        raise SpecError(f"{where}: field 'description' must be a string")
    layers = spec.get("layers")
    if not isinstance(layers, list) or not layers:
        raise SpecError(f"{where}: field 'layers' must be a non-empty list")

    b = NetBuilder(name, batch, tuple(shape), description)
    names, counters = {"data"}, {}
    for index, entry in enumerate(layers, start=1):
        names.add(_add_layer(b, index, entry, where, names, counters))
    return b.build()


def _is_int(v) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _add_layer(b: NetBuilder, index: int, entry: Any, where: str, names: set, counters: dict) -> str:
    """Append one spec entry; returns the layer's name."""
    if not isinstance(entry, dict):
        raise SpecError(f"{where}: layer #{index} must be a mapping with at least 'op', got {entry!r}")
    op = entry.get("op")
    name = entry.get("name")
    label = f"{where}: layer #{index}" + (f" {name!r}" if isinstance(name, str) else "") + (f" ({op})" if isinstance(op, str) else "")
    if op not in OP_FIELDS:
        raise SpecError(f"{label}: field 'op' must be one of {', '.join(OP_FIELDS)}, got {op!r}")
    if name is not None:
        if not isinstance(name, str) or not name:
            raise SpecError(f"{label}: field 'name' must be a non-empty string")
        if name in names:
            raise SpecError(f"{label}: duplicate layer name {name!r}")
    fields = OP_FIELDS[op]
    for key in entry:
        if key not in ("op", "name", "inputs") and key not in fields:
            allowed = ", ".join(["name", "inputs", *fields])
            raise SpecError(f"{label}: unknown field {key!r}; {op} takes {allowed}")

    inputs = _inputs(b, entry, op, label, names)
    params = {}
    for key, (kind, default) in fields.items():
        if key in entry:
            params[key] = _value(entry[key], kind, f"{label}: field {key!r}")
        elif default is _REQUIRED:
            raise SpecError(f"{label}: missing field {key!r}")
        elif default is not None:
            params[key] = default
    if op in SPATIAL and len(b.shape(inputs[0])) != 3:
        raise SpecError(f"{label}: input {inputs[0]!r} is a flat vector {b.shape(inputs[0])}; "
                        f"{op} needs a (C, H, W) feature map")
    if name is None:  # <op><n>, skipping names already taken so unnamed layers never clash
        n = counters.get(op, 0) + 1
        while f"{op}{n}" in names:
            n += 1
        counters[op], name = n, f"{op}{n}"
    try:
        if op in MULTI_INPUT:
            getattr(b, op)(inputs, name=name)
        else:
            getattr(b, op)(src=inputs[0], name=name, **params)
    except ValueError as err:  # NetBuilder's shape checks; drop its "layer 'x' (op): " prefix
        raise SpecError(f"{label}: {str(err).removeprefix(f'layer {name!r} ({op}): ')}") from None
    return name


def _inputs(b: NetBuilder, entry: dict, op: str, label: str, names: set) -> list[str]:
    inputs = entry.get("inputs")
    if inputs is None:
        if op in MULTI_INPUT:
            raise SpecError(f"{label}: field 'inputs' must list at least two layers for {op}")
        return [b.last]
    if isinstance(inputs, str):
        inputs = [inputs]
    if not isinstance(inputs, list) or not all(isinstance(s, str) for s in inputs):
        raise SpecError(f"{label}: field 'inputs' must be a list of layer names, got {inputs!r}")
    if op in MULTI_INPUT and len(inputs) < 2:
        raise SpecError(f"{label}: field 'inputs' must list at least two layers for {op}")
    if op not in MULTI_INPUT and len(inputs) != 1:
        raise SpecError(f"{label}: field 'inputs' must name exactly one layer for {op}, got {len(inputs)}")
    for src in inputs:
        if src not in names:
            raise SpecError(f"{label}: input {src!r} is not an earlier layer")
    return inputs


def _value(v, kind: str, label: str):
    if kind == _INT:
        if _is_int(v) and v >= 1:
            return v
        raise SpecError(f"{label} must be a positive integer, got {v!r}")
    if kind == "int0":
        if _is_int(v) and v >= 0:
            return v
        raise SpecError(f"{label} must be a non-negative integer, got {v!r}")
    if kind in (_PAIR, "pair0"):  # stride/pad/dilation: n or [h, w]; pad may be 0
        low = 0 if kind == "pair0" else 1
        if _is_int(v) and v >= low:
            return v
        if isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x >= low for x in v):
            return tuple(v)
        raise SpecError(f"{label} must be an integer >= {low} or a pair [h, w] of them, got {v!r}")
    if kind == _FLOAT:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v > 0:
            return float(v)
        raise SpecError(f"{label} must be a positive number, got {v!r}")
    if kind == "prob":
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1:
            return float(v)
        raise SpecError(f"{label} must be a probability in [0, 1), got {v!r}")
    if kind == _BOOL:
        if isinstance(v, bool):
            return v
        raise SpecError(f"{label} must be true or false, got {v!r}")
    if kind == "mode":
        if v in ("max", "avg"):
            return v
        raise SpecError(f"{label} must be 'max' or 'avg', got {v!r}")
    if kind == "pool_size":
        if v == "global":
            return None
        if _is_int(v) and v >= 1:
            return v
        if isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x >= 1 for x in v):
            return tuple(v)
        raise SpecError(f"{label} must be a positive integer, a pair [h, w] or 'global', got {v!r}")
    raise AssertionError(kind)


def to_spec(network: Network) -> dict:
    """The spec of a network: ``load_spec(to_spec(net), net.batch)`` rebuilds identical layers."""
    layers = []
    previous = None
    for layer in network.layers[1:]:
        p = layer.params
        entry: dict[str, Any] = {"op": layer.op, "name": layer.name}
        if list(layer.inputs) != [previous] or layer.op in MULTI_INPUT:
            entry["inputs"] = list(layer.inputs)
        if layer.op == "conv":
            entry.update(k=p["k"], r=p["r"], s=p["s"], stride=_pair(p["stride_h"], p["stride_w"]),
                         pad=_pair(p["pad_h"], p["pad_w"]), dilation=_pair(p["dil_h"], p["dil_w"]),
                         groups=p["groups"], bias=p["bias"])
        elif layer.op == "pool":
            entry.update(size=_pair(p["kh"], p["kw"]), stride=p["stride"], pad=p["pad"], mode=p["mode"],
                         ceil_mode=p["ceil_mode"])
        elif layer.op == "fc":
            entry.update(out_features=p["out_features"], bias=p.get("bias", True))
        elif layer.op in ("lrn", "bn", "dropout"):
            entry.update(p)
        layers.append(entry)
        previous = layer.name
    data = network.layers[0]
    return {"name": network.name, "input": list(data.out_shape), "batch": network.batch,
            "description": network.description, "layers": layers}


def _pair(h: int, w: int):
    return h if h == w else [h, w]


def save_spec(network: Network, path: str | Path) -> None:
    """Write ``to_spec(network)`` as JSON or YAML, by the file's suffix."""
    path = Path(path)
    spec = to_spec(network)
    if path.suffix.lower() == ".json":
        path.write_text(json.dumps(spec, indent=1) + "\n", encoding="utf-8")
    elif path.suffix.lower() in (".yaml", ".yml"):
        path.write_text(yaml.safe_dump(spec, sort_keys=False), encoding="utf-8")
    else:
        raise SpecError(f"spec {str(path)!r}: unknown file type {path.suffix!r}; use .json, .yaml or .yml")
