"""Which module runs each layer of a memory plan's network, call by call.

The model is traced as engine/pytorch/importer.py traces it (``traced_steps``), and every traced operation
that became a layer (a generic one included) is set beside the plan's layer at the same place: a module call
gives the module (its first call is named after it, later calls ``name_1``, ...), a function a functional
layer; a last softmax the plan has beyond the model's operations is the loss, run outside the model. Names
cannot tell a module's second call from a function named like it (``relu_1``), so the trace decides.
Mismatches are collected into one error naming every offending layer: another op or module at that place, a
module type that does not fit the op, other channels or features, a module with parameters the plan does not have.
"""

from __future__ import annotations

import math
import re

from torch import nn

from ..errors import EngineError, MemoryRuntimeError
from ..network import Network
from .trace import SEVERAL, SHAPE

KINDS = {
    "conv": (nn.Conv2d,),
    "fc": (nn.Linear,),
    "bn": (nn.BatchNorm2d,),
    "relu": (nn.ReLU,),
    "pool": (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d),
    "dropout": (nn.Dropout,),
    "lrn": (nn.LocalResponseNorm,),
    "softmax": (nn.Softmax,),
}


def _traced_layers(model: nn.Module, net: Network) -> tuple[list[tuple[str, str | None, object]], set[str]]:
    """(op, module name or None, fx node) of each operation the importer turns into a layer, in its order; and
    the parameters the traced graph reads directly (a module traced through, e.g. torchvision's LayerNorm2d,
    whose weights a functional generic layer reads)."""
    from . import importer

    try:
        gm, steps = importer.traced_steps(model, net.layers[0].out_shape, net.name)
    except EngineError as err:
        raise MemoryRuntimeError(f"the memory plan of {net.name} does not match this model: {err}") from None
    read = {n.target for n in gm.graph.nodes if n.op == "get_attr"}
    return [
        (s.op, s.node.target if s.node.op == "call_module" else None, s.node)
        for s in steps
        if s.op not in (None, "data") and s.node.op != "output"
    ], read


class LayerMap:
    """``names[module]``: the plan layers of the module's calls in call order; ``functional``: layers that
    are functions in the model's forward (``calls``: the function or tensor method each one calls, as fx
    traced it); ``order``: the model's plan layers in forward order; ``loss``: the appended loss layer,
    run outside the model."""

    def __init__(self, model: nn.Module, net: Network):
        modules = dict(model.named_modules())
        traced, read = _traced_layers(model, net)
        layers = net.layers[1:]
        self.functional: set[str] = set()
        self.loss: str | None = None
        self.data = net.layers[0].name
        self.names: dict[nn.Module, list[str]] = {}
        self.modules: dict[str, nn.Module] = {}
        self.calls: dict[str, str] = {}
        self.pieces: dict[str, list[tuple[int, str]]] = {}  # layer returning a tuple -> (index, getitem layer)
        layer_of = {}
        self.order: list[str] = []
        problems: list[str] = []
        if len(layers) == len(traced) + 1 and layers[-1].op == "softmax":
            self.loss = layers[-1].name
            layers = layers[:-1]
        elif len(layers) != len(traced):
            problems.append(f"the plan has {len(net.layers) - 1} layers, the model {len(traced)} operations")
        for (op, target, node), layer in zip(traced, layers):
            name = layer.name
            self.order.append(name)
            layer_of[node] = name
            if op != layer.op:
                where = f"the model's {target}" if target else "the model's function there"
                problems.append(f"plan layer {name} is a {layer.op} but {where} is a {op}")
            elif target is None:
                self.functional.add(name)
                self.calls[name] = call_name(node)
                piece = _piece(node, layer_of)
                if piece is not None:  # a tuple unpacked in Python: no torch function call to see
                    self.pieces.setdefault(piece[0], []).append((piece[1], name))
            elif name != target and not re.fullmatch(rf"{re.escape(target)}_\d+", name):
                problems.append(f"plan layer {name} ({layer.op}) is not a module of the model (there it has {target})")
            else:
                mod = modules[target]
                problems += _mismatch(layer, target, mod)
                self.names.setdefault(mod, []).append(name)
                self.modules[name] = mod
        self.position = {name: i for i, name in enumerate(self.order)}
        covered = {m for m in self.names}
        inside = tuple(f"{target}." for _, target, _ in traced if target)  # children of a layer's module (MHA's)
        for mname, mod in modules.items():
            if (
                next(mod.children(), None) is None
                and mod not in covered
                and not mname.startswith(inside)
                and any(f"{mname}.{p}" not in read for p, _ in mod.named_parameters(recurse=False))
            ):
                problems.append(f"the model's {mname} ({type(mod).__name__}) is not in the plan")
        if problems:
            more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
            raise MemoryRuntimeError(
                f"the memory plan of {net.name} does not match this model: {'; '.join(problems[:5])}{more}"
            )

    def module_of(self, layer: str) -> nn.Module | None:
        return self.modules.get(layer)

    def next_functional(self, after: str | None) -> str | None:
        """The functional layer that runs right after plan layer ``after`` (None: the first layer), if the
        layer there is a function."""
        i = self.position[after] + 1 if after is not None else 0
        name = self.order[i] if i < len(self.order) else None
        return name if name in self.functional else None


def _piece(node, layer_of: dict) -> tuple[str, int] | None:
    """(layer, index) when ``node`` takes one tensor out of the tuple a layer returned (``x, _ = attention(...)``,
    a chunk unpacked)."""
    import operator

    if node.op != "call_function" or node.target is not operator.getitem or len(node.args) != 2:
        return None
    src, index = node.args
    if src not in layer_of or not isinstance(index, int) or src.meta.get(SHAPE) != SEVERAL:
        return None
    return layer_of[src], index


def call_name(node) -> str:
    """What a traced call is named at ``__torch_function__``, both made ``canonical``: ``operator.iadd`` runs
    as ``Tensor.add_``, ``operator.truediv`` as ``div`` or ``__rdiv__``, ``torch.flatten`` as ``flatten``."""
    return canonical(node.target if node.op == "call_method" else getattr(node.target, "__name__", ""))


def canonical(name: str) -> str:
    """One name for an operation's spellings: dunder, reflected (``__rmul__``), augmented (``iadd``), in-place
    (``add_``) and operator-module (``truediv``, ``and_``) forms of it."""
    if name.startswith("__") and name.endswith("__"):
        name = name[2:-2]
    name = name.rstrip("_")
    if name[:1] in ("r", "i") and name[1:] in _BINARY:
        name = name[1:]
    return _SAME.get(name, name)


_BINARY = {
    "add", "sub", "mul", "div", "truediv", "floordiv", "matmul", "pow", "mod", "and", "or", "xor", "lshift", "rshift"
}  # fmt: skip
_SAME = {
    "truediv": "div",
    "true_divide": "div",
    "mod": "remainder",
    "and": "bitwise_and",
    "or": "bitwise_or",
    "xor": "bitwise_xor",
    "pos": "positive",
    "multiply": "mul",
    "subtract": "sub",
    "floor_divide": "floordiv",
    "concat": "cat",
    "concatenate": "cat",
}


def _mismatch(layer, mname: str, mod: nn.Module) -> list[str]:
    if layer.op == "generic":
        kind = type(mod).__name__
        return (
            []
            if kind == layer.params["op"]
            else [f"plan layer {layer.name} runs a {layer.params['op']} but the model's {mname} is a {kind}"]
        )
    kinds = KINDS.get(layer.op, ())
    if not isinstance(mod, kinds):
        return [f"plan layer {layer.name} is a {layer.op} but the model's {mname} is a {type(mod).__name__}"]
    p = layer.params
    got = want = None
    if layer.op == "conv":
        what = "channels in, out, kernel, stride"
        want = (p["c"], p["k"], (p["r"], p["s"]), (p["stride_h"], p["stride_w"]))
        got = (mod.in_channels, mod.out_channels, tuple(mod.kernel_size), tuple(mod.stride))
    elif layer.op == "fc":
        what, want, got = "features in, out", (p["in_features"], p["out_features"]), (mod.in_features, mod.out_features)
    elif layer.op == "bn":
        what, want, got = "channels", layer.out_shape[0], mod.num_features
    if got != want:
        return [f"plan layer {layer.name} has {what} {want} but the model's {mname} has {got}"]
    return []


def same_shape(layer, shape: tuple[int, ...]) -> bool:
    """A layer's per-sample output against torch's: exact for feature maps, element count for flat ones. A
    generic layer whose output is not a batch of samples (Swin's windows, ``B*nW`` first) is recorded flat,
    per sample of the mini-batch: torch's shape after its first dim cannot be compared with it."""
    if layer.op == "generic" and len(layer.out_shape) == 1 and len(shape) > 1:
        return True
    if layer.op in ("conv", "pool", "bn", "lrn", "concat", "add") or len(shape) == len(layer.out_shape):
        return tuple(shape) == tuple(layer.out_shape)
    return math.prod(shape) == layer.out_elems
