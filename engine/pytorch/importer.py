"""Import an ``nn.Module`` as a ``Network``: the graph the optimizers and the memory planner walk.

``torch.fx`` traces the module (in eval mode, so train-only Python branches such as GoogLeNet's
auxiliary heads are left out, as in the zoo); shape propagation at batch 2 (on the meta device for a
meta model) gives every tensor's shape. Each traced operation becomes one layer, built through
``NetBuilder`` and checked against the shape torch computed, so the graph cannot silently differ
from the model. Conv layers are named by the module's qualified name (``model.get_submodule(name)``
is the ``nn.Conv2d``), other module layers likewise; functional operations are named
``<enclosing module>.<op>`` (``layer1.0.add``, ``inception3a.concat``). Reshapes to a flat vector
(``flatten``, ``view``/``reshape``, ``nn.Flatten``) and ``nn.Identity`` are aliases, not layers,
because they allocate nothing. A softmax ``prob`` is appended as the loss of the training step
unless the model ends in one (the zoo's graphs end the same way).

Anything the Network cannot express exactly (other ops, asymmetric padding, frozen or shared
weights, several inputs or outputs) is collected and refused in one ``ModelImportError`` naming
every offending node, never imported as a different graph.

The module is over 400 lines because trace, shape check, the per-op handlers and the refusal report are
one mapping from torch's graph to a Network: a supported op and its refusals are read together.
"""

from __future__ import annotations

import functools
import math
import operator
import warnings
from dataclasses import dataclass, field

from ..errors import ModelImportError
from ..network import NetBuilder, Network

PROPAGATION_BATCH = 2  # not 1, so a reshape that mixes the batch into the features shows up
LOSS = "prob"


class _Unsupported(Exception):
    """One node the Network cannot express; its message says why."""


@dataclass
class _Step:
    node: object
    op: str | None  # a NetBuilder method, or None for an alias of the node's first tensor input
    kwargs: dict = field(default_factory=dict)


def import_model(model, input_shape: tuple[int, int, int], batch: int, name: str, description: str = "") -> Network:
    """The training graph of ``model`` for per-sample ``input_shape`` (C, H, W) at mini-batch ``batch``."""
    shape = tuple(input_shape)
    if len(shape) != 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ModelImportError(f"{name}: the input shape must be 3 positive integers C, H, W, got {input_shape!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ModelImportError(f"{name}: the mini-batch size must be a positive integer, got {batch!r}")
    gm = _trace(model, shape, name)
    steps, problems = [], []
    modules = dict(gm.named_modules())
    calls: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    owners: dict[int, str] = {}
    for target in calls:  # tied weights: one tensor in two layers would be counted twice
        for pname, param in modules[target].named_parameters():
            owner = owners.setdefault(id(param), f"{target}.{pname}")
            if owner != f"{target}.{pname}":
                problems.append((("Parameter", f"{target}.{pname}"), f"the same tensor as {owner}"))
    for node in gm.graph.nodes:
        try:
            step = _classify(node, modules, calls)
        except _Unsupported as err:
            problems.append((_describe(node, modules), str(err)))
            continue
        if step is not None:
            steps.append(step)
    if problems:
        raise ModelImportError(f"cannot import {name}: {_summarize(problems)}")
    return _build(steps, shape, batch, name, description or f"{name}, imported from PyTorch (input {_dims(shape)})",
                  reserved=set(calls))


# ------------------------------------------------------------------------------------------ tracing

def _trace(model, shape, name):
    """Trace in eval mode and record every tensor-valued node's shape in ``meta[SHAPE]``; the
    module's own train/eval flags are restored afterwards."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ModelImportError(f"{name}: expected a torch.nn.Module, got {type(model).__name__}")
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        try:
            gm = torch.fx.symbolic_trace(model)
        except Exception as err:  # noqa: BLE001 - any tracing failure is the user's model, reported in one line
            raise ModelImportError(f"cannot trace {name} with torch.fx ({_line(err)}); models with data-dependent "
                                   f"Python control flow cannot be imported") from None
        placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
        if len(placeholders) != 1:
            raise ModelImportError(f"cannot import {name}: forward takes {len(placeholders)} inputs "
                                   f"({', '.join(n.name for n in placeholders)}); the importer needs one image batch")
        _propagate(gm, model, (PROPAGATION_BATCH, *shape), name)
    finally:
        for module, training in modes.items():
            module.training = training
    return gm


SHAPE, SEVERAL = "ucudnn_shape", "several"  # node.meta key: the output shape, or SEVERAL for a container


def _propagate(gm, model, shape, name) -> None:
    """Run the graph once on zeros (on the model's device: meta for a meta model) to get torch's shapes."""
    import torch
    from torch.utils._pytree import tree_leaves

    class Shapes(torch.fx.Interpreter):
        def run_node(self, node):
            try:
                result = super().run_node(node)
            except Exception as err:  # noqa: BLE001 - e.g. a wrong channel count: the model's own error
                where = node.target if node.op == "call_module" else node.name
                raise ModelImportError(f"cannot run {name} on a {_dims(shape)} input: at {where}: "
                                       f"{_line(err)}") from None
            if isinstance(result, torch.Tensor):
                node.meta[SHAPE] = tuple(result.shape)
            elif any(isinstance(x, torch.Tensor) for x in tree_leaves(result)):
                node.meta[SHAPE] = SEVERAL
            return result

    tensor = next(iter(model.parameters()), None)
    if tensor is None:
        tensor = next(iter(model.buffers()), None)
    device = tensor.device if tensor is not None else torch.device("cpu")
    dtype = tensor.dtype if tensor is not None and tensor.is_floating_point() else torch.float32
    interpreter = Shapes(gm)
    interpreter.extra_traceback = False  # keep the model's error one line
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the model's runtime notices say nothing about shapes
        interpreter.run(torch.zeros(shape, device=device, dtype=dtype))


# ---------------------------------------------------------------------------------- classification

def _classify(node, modules, calls) -> _Step | None:
    """The Network operation of one traced node; None for nodes that compute no tensor (sizes)."""
    if node.op == "output":
        return _output(node)
    shape = node.meta.get(SHAPE)
    if node.op == "placeholder":
        return _Step(node, "data")
    if shape is None:  # shape arithmetic such as x.size(0): no tensor, no memory
        return None
    if shape == SEVERAL:
        raise _Unsupported("returns several tensors")
    if node.op == "get_attr":
        raise _Unsupported("a parameter or buffer used directly")
    if len(shape) == 0 or shape[0] != PROPAGATION_BATCH:
        raise _Unsupported(f"its result {shape} has no batch dimension first")
    if node.op == "call_module":
        module = modules[node.target]
        handler = _module_handlers().get(type(module))
        if handler is None:
            raise _Unsupported("not a supported layer")
        if any(True for _ in module.parameters()):
            if calls[node.target] > 1:
                raise _Unsupported(f"called {calls[node.target]} times: a layer per call would count shared weights "
                                   f"more than once")
            frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
            if frozen:
                raise _Unsupported(f"frozen parameters ({', '.join(frozen)}); the Network trains every parameter")
        return handler(node, module)
    handler = _function_handlers().get(node.target)  # call_function or call_method
    if handler is None:
        raise _Unsupported("not a supported operation")
    return handler(node)


def _output(node) -> _Step:
    value = node.args[0]
    if not _is_tensor(value):
        raise _Unsupported("the model must return one tensor (the logits)")
    return _Step(node, "softmax", {"src": value})


def _conv(node, m) -> _Step:
    if m.padding_mode != "zeros":
        raise _Unsupported(f"padding_mode={m.padding_mode!r}; only zero padding is a cuDNN convolution")
    r, s = m.kernel_size
    dh, dw = m.dilation
    if m.padding == "valid":
        pad = (0, 0)
    elif m.padding == "same":
        totals = (dh * (r - 1), dw * (s - 1))
        if any(t % 2 for t in totals):
            raise _Unsupported(f"padding='same' with kernel {r}x{s} and dilation {dh}x{dw} pads asymmetrically "
                               f"(one more row/column after than before); pad explicitly with symmetric padding")
        pad = (totals[0] // 2, totals[1] // 2)
    else:
        pad = tuple(m.padding)
    return _Step(node, "conv", dict(k=m.out_channels, r=r, s=s, stride=tuple(m.stride), pad=pad,
                                    dilation=(dh, dw), groups=m.groups, bias=m.bias is not None))


def _same(name, value):
    """A square 2-D window parameter as one int (NetBuilder pools take one stride and one pad)."""
    a, b = (value, value) if isinstance(value, int) else tuple(value)
    if a != b:
        raise _Unsupported(f"{name} {a}x{b} differs per dimension; the Network's pooling takes one {name}")
    return a


def _pool(node, mode, kernel, stride, padding, dilation, ceil_mode) -> _Step:
    if _same("dilation", dilation) != 1:
        raise _Unsupported("dilated pooling")
    size = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
    stride = _same("stride", stride if stride else size)  # torch: stride None or [] means the kernel size
    return _Step(node, "pool", dict(size=size, stride=stride, pad=_same("padding", padding), mode=mode,
                                    ceil_mode=bool(ceil_mode)))


def _adaptive(node, mode, output_size) -> _Step:
    """Adaptive pooling is a plain pooling when the windows are even: global, or a divisor kernel."""
    h, w = node.args[0].meta[SHAPE][2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    oh, ow = oh or h, ow or w
    if (oh, ow) == (1, 1):
        return _Step(node, "pool", dict(size=(h, w), stride=1, mode=mode))
    if h % oh or w % ow or h // oh != w // ow:
        raise _Unsupported(f"adaptive pooling of {h}x{w} to {oh}x{ow} has uneven windows")
    return _Step(node, "pool", dict(size=h // oh, stride=h // oh, mode=mode))


def _flat_alias(node) -> _Step:
    """Flatten, view and reshape are free when they only flatten each sample."""
    src = _tensor_args(node)[0]
    before, after = src.meta[SHAPE], node.meta[SHAPE]
    if after not in (before, (before[0], math.prod(before[1:]))):
        raise _Unsupported(f"reshapes {before} to {after}; only flattening each sample is supported")
    return _Step(node, None)


def _is_tensor(value) -> bool:
    return isinstance(getattr(value, "meta", {}).get(SHAPE), tuple)


def _tensor_args(node) -> list:
    return [a for a in node.args if _is_tensor(a)]


def _binary_add(node) -> _Step:
    tensors = _tensor_args(node)
    if len(tensors) != 2 or len(node.args) != 2 or node.kwargs:
        raise _Unsupported("only the sum of two tensors (no scalars, no alpha) is an add layer")
    return _Step(node, "add", {"srcs": tensors})


def _cat(node) -> _Step:
    srcs = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    ndim = len(node.meta[SHAPE])
    if dim % ndim != 1:
        raise _Unsupported(f"concatenates along dim {dim}; only the channel dim 1 is a concat layer")
    return _Step(node, "concat", {"srcs": list(srcs)})


def _softmax(node, dim) -> _Step:
    if dim is None or dim % len(node.meta[SHAPE]) != 1:
        raise _Unsupported(f"softmax over dim {dim}; only the channel dim 1 is a softmax layer")
    return _Step(node, "softmax")


def _arg(node, index, key, default):
    return node.args[index] if len(node.args) > index else node.kwargs.get(key, default)


@functools.cache
def _module_handlers() -> dict:
    import torch.nn as nn

    return {
        nn.Conv2d: _conv,
        nn.ReLU: lambda node, m: _Step(node, "relu"),
        nn.BatchNorm2d: lambda node, m: _Step(node, "bn", dict(eps=m.eps, affine=m.affine)),
        nn.MaxPool2d: lambda node, m: (_pool(node, "max", m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
                                       if not m.return_indices else _raise("return_indices=True")),
        nn.AvgPool2d: lambda node, m: _pool(node, "avg", m.kernel_size, m.stride, m.padding, 1, m.ceil_mode),
        nn.AdaptiveAvgPool2d: lambda node, m: _adaptive(node, "avg", m.output_size),
        nn.AdaptiveMaxPool2d: lambda node, m: (_adaptive(node, "max", m.output_size)
                                               if not m.return_indices else _raise("return_indices=True")),
        nn.Linear: lambda node, m: _Step(node, "fc", dict(out_features=m.out_features, bias=m.bias is not None,
                                                          in_features=m.in_features)),
        nn.Dropout: lambda node, m: _Step(node, "dropout", dict(p=m.p)),
        nn.LocalResponseNorm: lambda node, m: _Step(node, "lrn", dict(size=m.size, alpha=m.alpha, beta=m.beta, k=m.k)),
        nn.Softmax: lambda node, m: _softmax(node, m.dim),
        nn.Flatten: lambda node, m: _flat_alias(node),
        nn.Identity: lambda node, m: _Step(node, None),
    }


@functools.cache
def _function_handlers() -> dict:
    import torch
    import torch.nn.functional as F

    relu = lambda node: _Step(node, "relu")  # noqa: E731
    pool = {
        F.max_pool2d: lambda n: _pool(n, "max", _arg(n, 1, "kernel_size", None), _arg(n, 2, "stride", None),
                                      _arg(n, 3, "padding", 0), _arg(n, 4, "dilation", 1), _arg(n, 5, "ceil_mode", False)),
        F.avg_pool2d: lambda n: _pool(n, "avg", _arg(n, 1, "kernel_size", None), _arg(n, 2, "stride", None),
                                      _arg(n, 3, "padding", 0), 1, _arg(n, 4, "ceil_mode", False)),
        F.adaptive_avg_pool2d: lambda n: _adaptive(n, "avg", _arg(n, 1, "output_size", None)),
    }
    return {
        operator.add: _binary_add, operator.iadd: _binary_add, torch.add: _binary_add,
        "add": _binary_add, "add_": _binary_add,
        torch.cat: _cat, torch.concat: _cat,
        F.relu: relu, torch.relu: relu, torch.relu_: relu, "relu": relu, "relu_": relu,
        F.dropout: lambda n: _Step(n, "dropout", dict(p=_arg(n, 1, "p", 0.5))),
        F.softmax: lambda n: _softmax(n, _arg(n, 1, "dim", None)),
        torch.softmax: lambda n: _softmax(n, _arg(n, 1, "dim", None)),
        "softmax": lambda n: _softmax(n, _arg(n, 1, "dim", None)),
        torch.flatten: _flat_alias, "flatten": _flat_alias, "view": _flat_alias, "reshape": _flat_alias,
        torch.reshape: _flat_alias, "contiguous": _flat_alias,
        **pool,
    }


def _raise(reason: str):
    raise _Unsupported(reason)


# -------------------------------------------------------------------------------------- building

def _build(steps, shape, batch, name, description, reserved: set[str]) -> Network:
    """Replay the steps through NetBuilder, checking each layer's shape against torch's."""
    taken: set[str] = set()

    def unique(base: str, own: bool = False) -> str:
        """``base``, or ``base_1``... once taken; module names are kept for their own module's layer."""
        candidate, i = base, 0
        while candidate in taken or (candidate in reserved and not (own and i == 0)):
            i += 1
            candidate = f"{base}_{i}"
        taken.add(candidate)
        return candidate

    b = NetBuilder(name, batch, shape, description)
    b.layers[0].name = unique("data")
    layer_of: dict[object, str] = {}  # fx node -> the layer holding its tensor
    for step in steps:
        node = step.node
        if step.op == "data":
            layer_of[node] = b.layers[0].name
            continue
        if step.op is None:
            layer_of[node] = layer_of[_tensor_args(node)[0]]
            continue
        if node.op == "output":
            src = layer_of[step.kwargs["src"]]
            if b.layers[-1].op != "softmax" or b.last != src:
                b.softmax(src=src, name=unique(LOSS))
            continue
        kwargs = dict(step.kwargs)
        inputs = kwargs.pop("srcs", None) or [_tensor_args(node)[0]]
        if step.op in ("add", "concat"):
            kwargs["srcs"] = [layer_of[s] for s in inputs]
        else:
            kwargs["src"] = layer_of[inputs[0]]
        in_features = kwargs.pop("in_features", None)
        own = node.op == "call_module"
        label = unique(node.target, own) if own else unique(_scoped(node, step.op))
        try:
            _check_inputs(b, inputs, [layer_of[s] for s in inputs], step.op, in_features)
            layer_of[node] = getattr(b, step.op)(name=label, **kwargs)
        except (ValueError, _Unsupported) as err:
            raise ModelImportError(f"cannot import {name}: layer {label} ({step.op}): {err}") from None
        got, want = b.layers[-1].out_shape, node.meta[SHAPE][1:]
        if got != want and (step.op in _SPATIAL or math.prod(got) != math.prod(want)):
            raise ModelImportError(f"cannot import {name}: layer {label} ({step.op}) gives shape {got} in the "
                                   f"Network but {want} in torch")
    return b.build()


_SPATIAL = ("conv", "pool", "bn", "lrn", "concat", "add")  # layers whose shape, not only size, must match


def _check_inputs(b, nodes, layers, op, in_features) -> None:
    """Spatial layers must read exactly the tensor torch gives them (not a reshaped alias); an fc
    flattens its input, so only the feature count must agree."""
    for node, layer in zip(nodes, layers):
        want = node.meta[SHAPE][1:]
        if op in _SPATIAL and b.shape(layer) != want:
            raise _Unsupported(f"reads {want}, a reshape of layer {layer} {b.shape(layer)}")
    if in_features is not None and math.prod(b.shape(layers[0])) != in_features:
        raise _Unsupported(f"in_features {in_features} but its input has {math.prod(b.shape(layers[0]))} features")


def _scoped(node, op: str) -> str:
    """``<innermost enclosing module>.<op>`` for a functional node, e.g. ``layer1.0.add``."""
    stack = node.meta.get("nn_module_stack") or {}
    scope = next(reversed(stack.values()))[0] if stack else ""
    return f"{scope}.{op}" if scope else op


# ------------------------------------------------------------------------------------------ messages

def _describe(node, modules) -> tuple[str, str]:
    """(what, where) of a node for the refusal message: the operation's name and the node's."""
    if node.op == "call_module":
        return type(modules[node.target]).__name__, node.target
    if node.op == "call_function":
        fn = node.target
        return f"{getattr(fn, '__module__', None) or 'builtin'}.{getattr(fn, '__name__', fn)}", _scoped(node, node.name)
    if node.op == "call_method":
        return f"Tensor.{node.target}", _scoped(node, node.name)
    if node.op == "output":
        return "output", "output"
    return node.op, str(node.target)


def _summarize(problems) -> str:
    """One line: every distinct refusal with up to three of its nodes."""
    groups: dict[tuple[str, str], list[str]] = {}
    for (what, where), why in problems:
        groups.setdefault((what, why), []).append(where)
    parts = []
    for (what, why), wheres in groups.items():
        more = f" and {len(wheres) - 3} more" if len(wheres) > 3 else ""
        parts.append(f"{what} at {', '.join(wheres[:3])}{more} ({why})")
    if any(why.startswith("not a supported") for _, why in problems):
        parts.append(f"supported layers: {', '.join(cls.__name__ for cls in _module_handlers())}; functions: "
                     f"add, cat, relu, dropout, max/avg/adaptive pooling, softmax, flatten and view/reshape to flat")
    return "; ".join(parts)


def _line(err: Exception) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape)
