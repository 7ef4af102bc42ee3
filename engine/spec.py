"""User networks from a JSON/YAML spec (format: docs/network-spec.md).

A spec lists layers in a valid topological order with their op, optional name and inputs, and
op parameters; NetBuilder infers every shape, so a spec cannot disagree with the graph it yields.
Every malformed input raises ``SpecError`` naming the layer (position, name, op) and the field.
``to_spec`` writes any ``Network`` back in the same format, so zoo networks round-trip.
"""

from __future__ import annotations

import json
import math
import os
from pathlib import Path
from typing import Any

import yaml

from .errors import SpecError
from .fileio import MAX_DEPTH, atomic_write, check_depth, read_bounded
from .fileio import short as _short
from .network import NetBuilder, Network
from .policies import MAX_BATCH

FORMAT_FIELDS = ("name", "input", "batch", "description", "layers")
DEFAULT_BATCH = 32
MAX_SPEC_BYTES = 4 * 1024**2  # a spec of MAX_LAYERS layers is about 1 MB
MAX_LAYERS = 10_000  # SuperNeurons' ResNet-2500 has ~8,400 layers (the zoo generates it; a spec need not)
MAX_SPEC_NODES = 16 * MAX_LAYERS  # YAML values: a conv with its name and four fields is 13
MAX_DIM = 1 << 20  # channels, features, image sides and kernel sizes

# op -> {field: (kind, default)}; kind checks the value, default None means "NetBuilder's default".
_INT, _PAIR, _FLOAT, _BOOL = "int", "pair", "float", "bool"
_REQUIRED = object()
OP_FIELDS: dict[str, dict[str, tuple[str, Any]]] = {
    "conv": {
        "k": (_INT, _REQUIRED),
        "r": (_INT, _REQUIRED),
        "s": (_INT, None),
        "stride": (_PAIR, 1),
        "pad": ("pair0", 0),
        "dilation": (_PAIR, 1),
        "groups": (_INT, 1),
        "bias": (_BOOL, True),
    },
    "relu": {},
    "lrn": {"size": (_INT, 5), "alpha": (_FLOAT, 1e-4), "beta": (_FLOAT, 0.75), "k": (_FLOAT, 1.0)},
    "pool": {
        "size": ("pool_size", _REQUIRED),
        "stride": (_INT, None),
        "pad": ("int0", 0),
        "mode": ("mode", "max"),
        "ceil_mode": (_BOOL, False),
    },
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
    where, ref = "spec", ""
    if isinstance(source, (str, os.PathLike)):
        path = Path(source)
        where, ref = f"spec {str(path)!r}", str(path)
        source = _read(path, where)
    net = build_spec(source, batch, where)
    net.source = ref
    return net


def _read(path: Path, where: str) -> Any:
    """The parsed spec, bounded in file size, nesting and (YAML) alias expansion before anything is built."""
    if path.is_dir():
        raise SpecError(f"{where}: is a folder; give the spec file (.json, .yaml or .yml)")
    if not path.is_file():
        raise SpecError(f"{where}: file not found")
    suffix = path.suffix.lower()
    if suffix not in (".json", ".yaml", ".yml"):
        raise SpecError(f"{where}: unknown file type {suffix!r}; use .json, .yaml or .yml")
    raw = read_bounded(path, where, SpecError, limit=MAX_SPEC_BYTES)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        raise SpecError(f"{where}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    if suffix != ".json":
        return _load_yaml(text, where)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as err:
        raise SpecError(f"{where}: invalid JSON at line {err.lineno} column {err.colno}: {err.msg}") from None
    except RecursionError:
        raise SpecError(f"{where}: nested deeper than {MAX_DEPTH} levels") from None
    check_depth(doc, where, SpecError)
    return doc


def _load_yaml(text: str, where: str) -> Any:
    """yaml.safe_load, after one pass over the parser's events has bounded the document: aliases make a
    billion-laughs spec tiny on disk and endless once expanded, and libyaml's composer recurses in C, so a
    document nested a million deep would crash the process rather than raise."""
    loader = _Loader(text)
    try:
        _measure(text, where)
        node = loader.get_single_node()
        return None if node is None else loader.construct_document(node)
    except yaml.YAMLError as err:  # its str() spans several lines
        raise SpecError(f"{where}: invalid YAML: {' '.join(str(err).split())[:300]}") from None
    finally:
        loader.dispose()


_Loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
_OPEN = (yaml.SequenceStartEvent, yaml.MappingStartEvent)
_CLOSE = (yaml.SequenceEndEvent, yaml.MappingEndEvent)


def _measure(text: str, where: str) -> None:
    """Values and nesting depth of the document with every alias expanded, from the parser's events."""
    count, stack, anchors = 0, [], {}  # stack: [anchor, count at start, deepest level below]; anchors: (size, depth)
    for event in yaml.parse(text, Loader=_Loader):
        reach = len(stack)
        if isinstance(event, _OPEN):
            stack.append([event.anchor, count, len(stack) + 1])
            count, reach = count + 1, len(stack)
        elif isinstance(event, _CLOSE):
            anchor, start, deepest = stack.pop()
            if anchor is not None:
                anchors[anchor] = (count - start, deepest - len(stack))
            reach = deepest
        elif isinstance(event, yaml.ScalarEvent):
            count += 1
            if event.anchor is not None:
                anchors[event.anchor] = (1, 0)
        elif isinstance(event, yaml.AliasEvent):
            if event.anchor not in anchors:  # an alias of a node still open refers to itself
                raise SpecError(f"{where}: YAML alias *{_short(event.anchor)[1:-1]} refers to itself or to nothing")
            size, depth = anchors[event.anchor]
            count, reach = count + size, len(stack) + depth
        if stack:
            stack[-1][2] = max(stack[-1][2], reach)
        if reach > MAX_DEPTH:
            raise SpecError(f"{where}: nested deeper than {MAX_DEPTH} levels")
        if count > MAX_SPEC_NODES:
            raise SpecError(
                f"{where}: holds more than {MAX_SPEC_NODES} YAML values (aliases expanded); a spec "
                f"has at most {MAX_LAYERS} layers"
            )


def build_spec(spec: Any, batch: int | None = None, where: str = "spec") -> Network:
    if not isinstance(spec, dict):
        raise SpecError(f"{where}: the top level must be a mapping with {', '.join(FORMAT_FIELDS)}")
    unknown = [k for k in spec if k not in FORMAT_FIELDS]
    if unknown:
        raise SpecError(f"{where}: unknown top-level field {_short(unknown[0])}; expected {', '.join(FORMAT_FIELDS)}")
    name = spec.get("name", "custom")
    if not isinstance(name, str) or not name:
        raise SpecError(f"{where}: field 'name' must be a non-empty string")
    shape = spec.get("input")
    if not (isinstance(shape, list) and len(shape) == 3 and all(_is_int(d) and d >= 1 for d in shape)):
        raise SpecError(
            f"{where}: field 'input' must be [C, H, W] (positive integers, per sample), got {_short(shape)}"
        )
    if max(shape) > MAX_DIM:
        raise SpecError(f"{where}: field 'input' is {shape}; sizes in a spec are at most {MAX_DIM}")
    if batch is None:
        batch = spec.get("batch", DEFAULT_BATCH)
        if not (_is_int(batch) and batch >= 1):
            raise SpecError(f"{where}: field 'batch' must be a positive integer, got {_short(batch)}")
        if batch > MAX_BATCH:
            raise SpecError(f"{where}: field 'batch' is {batch}; mini-batch sizes are at most {MAX_BATCH}")
    description = spec.get("description", "")
    if not isinstance(description, str):
        raise SpecError(f"{where}: field 'description' must be a string")
    layers = spec.get("layers")
    if not isinstance(layers, list) or not layers:
        raise SpecError(f"{where}: field 'layers' must be a non-empty list")
    if len(layers) > MAX_LAYERS:
        raise SpecError(f"{where}: field 'layers' lists {len(layers)} layers; a spec may have at most {MAX_LAYERS}")

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
        raise SpecError(f"{where}: layer #{index} must be a mapping with at least 'op', got {_short(entry)}")
    op = entry.get("op")
    name = entry.get("name")
    label = (
        f"{where}: layer #{index}"
        + (f" {_short(name)}" if isinstance(name, str) else "")
        + (f" ({op})" if isinstance(op, str) else "")
    )
    if op not in OP_FIELDS:
        raise SpecError(f"{label}: field 'op' must be one of {', '.join(OP_FIELDS)}, got {_short(op)}")
    if name is not None:
        if not isinstance(name, str) or not name:
            raise SpecError(f"{label}: field 'name' must be a non-empty string")
        if name in names:
            raise SpecError(f"{label}: duplicate layer name {_short(name)}")
    fields = OP_FIELDS[op]
    for key in entry:
        if key not in ("op", "name", "inputs") and key not in fields:
            allowed = ", ".join(["name", "inputs", *fields])
            raise SpecError(f"{label}: unknown field {_short(key)}; {op} takes {allowed}")

    inputs = _inputs(b, entry, op, label, names)
    params = {}
    for key, (kind, default) in fields.items():
        if key in entry:
            params[key] = _value(entry[key], kind, f"{label}: field {_short(key)}")
        elif default is _REQUIRED:
            raise SpecError(f"{label}: missing field {_short(key)}")
        elif default is not None:
            params[key] = default
    if op == "pool":
        _check_pool_pad(params, label)
    if op in SPATIAL and len(b.shape(inputs[0])) != 3:
        raise SpecError(
            f"{label}: input {_short(inputs[0])} is a flat vector {b.shape(inputs[0])}; "
            f"{op} needs a (C, H, W) feature map"
        )
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
        raise SpecError(f"{label}: field 'inputs' must be a list of layer names, got {_short(inputs)}")
    if op in MULTI_INPUT and len(inputs) < 2:
        raise SpecError(f"{label}: field 'inputs' must list at least two layers for {op}")
    if op not in MULTI_INPUT and len(inputs) != 1:
        raise SpecError(f"{label}: field 'inputs' must name exactly one layer for {op}, got {len(inputs)}")
    for src in inputs:
        if src not in names:
            raise SpecError(f"{label}: input {_short(src)} is not an earlier layer")
    return inputs


def _check_pool_pad(params: dict, label: str) -> None:
    """cuDNN's and PyTorch's rule: a pooling window is padded by at most half its side (none when global)."""
    size, pad = params["size"], params.get("pad", 0)
    if size is None:
        if pad:
            raise SpecError(f"{label}: field 'pad' is {pad}; global pooling takes no padding")
        return
    side = min(size) if isinstance(size, tuple) else size
    if 2 * pad > side:
        raise SpecError(f"{label}: field 'pad' is {pad}, more than half the window ({side}); pad at most {side // 2}")


def _value(v, kind: str, label: str):
    if _is_int(v) and v > MAX_DIM and kind in (_INT, "int0", _PAIR, "pair0", "pool_size"):
        raise SpecError(f"{label} is {_short(v)}; sizes in a spec are at most {MAX_DIM}")
    if isinstance(v, list) and any(_is_int(x) and x > MAX_DIM for x in v) and kind in (_PAIR, "pair0", "pool_size"):
        raise SpecError(f"{label} is {_short(v)}; sizes in a spec are at most {MAX_DIM}")
    if kind == _INT:
        if _is_int(v) and v >= 1:
            return v
        raise SpecError(f"{label} must be a positive integer, got {_short(v)}")
    if kind == "int0":
        if _is_int(v) and v >= 0:
            return v
        raise SpecError(f"{label} must be a non-negative integer, got {_short(v)}")
    if kind in (_PAIR, "pair0"):  # stride/pad/dilation: n or [h, w]; pad may be 0
        low = 0 if kind == "pair0" else 1
        if _is_int(v) and v >= low:
            return v
        if isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x >= low for x in v):
            return tuple(v)
        raise SpecError(f"{label} must be an integer >= {low} or a pair [h, w] of them, got {_short(v)}")
    if kind == _FLOAT:
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 < v < math.inf:
            return float(v)
        raise SpecError(f"{label} must be a positive number, finite, got {_short(v)}")
    if kind == "prob":
        if isinstance(v, (int, float)) and not isinstance(v, bool) and 0 <= v < 1:
            return float(v)
        raise SpecError(f"{label} must be a probability in [0, 1), got {_short(v)}")
    if kind == _BOOL:
        if isinstance(v, bool):
            return v
        raise SpecError(f"{label} must be true or false, got {_short(v)}")
    if kind == "mode":
        if v in ("max", "avg"):
            return v
        raise SpecError(f"{label} must be 'max' or 'avg', got {_short(v)}")
    if kind == "pool_size":
        if v == "global":
            return None
        if _is_int(v) and v >= 1:
            return v
        if isinstance(v, list) and len(v) == 2 and all(_is_int(x) and x >= 1 for x in v):
            return tuple(v)
        raise SpecError(f"{label} must be a positive integer, a pair [h, w] or 'global', got {_short(v)}")
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
            entry.update(
                k=p["k"],
                r=p["r"],
                s=p["s"],
                stride=_pair(p["stride_h"], p["stride_w"]),
                pad=_pair(p["pad_h"], p["pad_w"]),
                dilation=_pair(p["dil_h"], p["dil_w"]),
                groups=p["groups"],
                bias=p["bias"],
            )
        elif layer.op == "pool":
            entry.update(
                size=_pair(p["kh"], p["kw"]), stride=p["stride"], pad=p["pad"], mode=p["mode"], ceil_mode=p["ceil_mode"]
            )
        elif layer.op == "fc":
            entry.update(out_features=p["out_features"], bias=p.get("bias", True))
        elif layer.op in ("lrn", "bn", "dropout"):
            entry.update(p)
        layers.append(entry)
        previous = layer.name
    data = network.layers[0]
    return {
        "name": network.name,
        "input": list(data.out_shape),
        "batch": network.batch,
        "description": network.description,
        "layers": layers,
    }


def _pair(h: int, w: int):
    return h if h == w else [h, w]


def save_spec(network: Network, path: str | Path) -> None:
    """Write ``to_spec(network)`` as JSON or YAML, by the file's suffix."""
    path = Path(path)
    spec = to_spec(network)
    if path.suffix.lower() == ".json":
        atomic_write(path, json.dumps(spec, indent=1) + "\n", what="spec")
    elif path.suffix.lower() in (".yaml", ".yml"):
        atomic_write(path, yaml.safe_dump(spec, sort_keys=False), what="spec")
    else:
        raise SpecError(f"spec {str(path)!r}: unknown file type {path.suffix!r}; use .json, .yaml or .yml")
