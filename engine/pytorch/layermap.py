"""Which module runs each layer of a memory plan's network, call by call (the importer's naming, inverted).

engine/pytorch/importer.py names a module layer by the module's qualified name, later calls of the same
parameterless module ``name_1``, ``name_2`` ...; a functional layer ``<enclosing module>.<op>``; and
appends the loss ``prob``. ``LayerMap`` reads those names back and checks, in one error naming every
offending layer, that the plan's layers are the model's modules: the type fits the op, channels and
features agree, and every module with parameters is in the plan.
"""

from __future__ import annotations

import math
import re

from torch import nn

from ..errors import MemoryRuntimeError
from ..network import Network

KINDS = {
    "conv": (nn.Conv2d,), "fc": (nn.Linear,), "bn": (nn.BatchNorm2d,), "relu": (nn.ReLU,),
    "pool": (nn.MaxPool2d, nn.AvgPool2d, nn.AdaptiveAvgPool2d, nn.AdaptiveMaxPool2d),
    "dropout": (nn.Dropout,), "lrn": (nn.LocalResponseNorm,), "softmax": (nn.Softmax,),
}


def _leaf(m: nn.Module) -> bool:
    return next(m.children(), None) is None


class LayerMap:
    """``names[module]``: the plan layers of the module's calls in call order; ``functional``: layers that
    are functions in the model's forward; ``loss``: the appended loss layer, run outside the model."""

    def __init__(self, model: nn.Module, net: Network):
        modules = dict(model.named_modules())
        calls: dict[str, list[tuple[int, str]]] = {}
        self.functional: set[str] = set()
        self.loss: str | None = None
        self.data = net.layers[0].name
        problems: list[str] = []
        for layer in net.layers[1:]:
            name = layer.name
            m = re.fullmatch(r"(.*)_(\d+)", name)
            if name in modules and _leaf(modules[name]):
                calls.setdefault(name, []).append((0, name))
            elif m and m.group(1) in modules and _leaf(modules[m.group(1)]):
                calls.setdefault(m.group(1), []).append((int(m.group(2)), name))
            elif (base := m.group(1) if m else name).rpartition(".")[2] == layer.op and (
                    base.rpartition(".")[0] in modules):
                self.functional.add(name)
            elif layer is net.layers[-1] and layer.op == "softmax":
                self.loss = name
            else:
                problems.append(f"plan layer {name} ({layer.op}) is not a module of the model")
        self.names: dict[nn.Module, list[str]] = {}
        self.modules: dict[str, nn.Module] = {}
        for mname, named in calls.items():
            mod = modules[mname]
            for _, name in named:
                problems += _mismatch(net, net.layer(name), mname, mod)
            self.names[mod] = [name for _, name in sorted(named)]
            for _, name in named:
                self.modules[name] = mod
        for mname, mod in modules.items():
            if _leaf(mod) and mname not in calls and any(True for _ in mod.parameters(recurse=False)):
                problems.append(f"the model's {mname} ({type(mod).__name__}) is not in the plan")
        if problems:
            more = f"; and {len(problems) - 5} more" if len(problems) > 5 else ""
            raise MemoryRuntimeError(f"the memory plan of {net.name} does not match this model: "
                                     f"{'; '.join(problems[:5])}{more}")

    def module_of(self, layer: str) -> nn.Module | None:
        return self.modules.get(layer)


def _mismatch(net: Network, layer, mname: str, mod: nn.Module) -> list[str]:
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
    """A layer's per-sample output against torch's: exact for feature maps, element count for flat ones."""
    if layer.op in ("conv", "pool", "bn", "lrn", "concat", "add") or len(shape) == len(layer.out_shape):
        return tuple(shape) == tuple(layer.out_shape)
    return math.prod(shape) == layer.out_elems
