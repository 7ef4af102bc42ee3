"""Import an ``nn.Module`` as a ``Network``: the graph the optimizers and the memory planner walk.

trace.py traces the module with ``torch.fx`` and records what PyTorch does at every traced operation in a
training step (sizes at two batches, saved tensors, views and in-place writes, flops, random draws). Each
operation that computes a tensor from the input becomes one layer:

* the operations the zoo's networks are made of keep their hand-written layer (``conv``, ``bn``, ``relu``,
  ``pool``, ``fc``, ``dropout``, ``lrn``, ``softmax``, ``add``, ``concat``), built through ``NetBuilder``
  and checked against torch's shape, so a zoo network and its torchvision twin give the same kernels and
  the same memory timeline. Their memory rules stay hand-written because meta kernels are not CUDA's
  (dropout's mask, see trace.py), and the PyTorch runtimes execute these ops by name;
* every other operation (or one of those in a form the layer cannot express: a Linear over tokens, a
  softmax over another dim, an add with a parameter) becomes a ``generic`` layer carrying its facts.

Conv layers are named by the module's qualified name (``model.get_submodule(name)`` is the
``nn.Conv2d``), other module layers likewise; functional operations ``<enclosing module>.<op>``
(``layer1.0.add``). Flattening reshapes and identities are aliases, not layers; other views are generic
layers that share their input's storage. Tensors computed from parameters alone (a class token expanded,
a relative position bias) are not layers: their parameters belong to the first layer that reads them. A
softmax ``prob`` is appended as the loss of the training step unless the model ends in one.

Refused, in one line naming the node: what cuDNN's convolution cannot express exactly (non-zero padding
modes, one-sided 'same' padding), frozen or shared weights, several inputs or outputs, recurrent modules
(before anything runs), and models past the size limits.
"""

from __future__ import annotations

import math

from ..errors import ModelImportError
from ..network import NetBuilder, Network
from ..spec import MAX_LAYERS
from . import trace as T
from .ownops import (
    Refused,
    Step,
    Unsupported,
    function_handlers,
    functional_conv,
    is_tensor,
    module_handlers,
    tensor_args,
)

LOSS = "prob"
LAYER = "ucudnn_layer"  # node.meta: the name of the layer the node became


def import_model(model, input_shape: tuple[int, int, int], batch: int, name: str, description: str = "") -> Network:
    """The training graph of ``model`` for per-sample ``input_shape`` (C, H, W) at mini-batch ``batch``."""
    shape = tuple(input_shape)
    if len(shape) != 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise ModelImportError(f"{name}: the input shape must be 3 positive integers C, H, W, got {input_shape!r}")
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise ModelImportError(f"{name}: the mini-batch size must be a positive integer, got {batch!r}")
    return traced_network(model, shape, batch, name, description)[1]


def traced_network(model, shape, batch: int, name: str, description: str = "") -> tuple[object, Network]:
    """(fx graph, Network): ``import_model``'s network and the graph it came from, each node that became a
    layer naming it in ``node.meta[LAYER]`` (calibrate.py replays generic layers from it)."""
    shape = tuple(shape)
    gm, steps = traced_steps(model, shape, name)
    return gm, _build(
        steps,
        shape,
        batch,
        name,
        description or f"{name}, imported from PyTorch (input {_dims(shape)})",
        reserved={n.target for n in gm.graph.nodes if n.op == "call_module"},
    )


def traced_steps(model, shape, name) -> tuple[object, list[Step]]:
    """(fx graph, one step per traced node that is a layer or an alias), or one ModelImportError."""
    import torch

    if not isinstance(model, torch.nn.Module):
        raise ModelImportError(f"{name}: expected a torch.nn.Module, got {type(model).__name__}")
    T.check_modules(model, name)
    gm = T.trace(model, name)
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != 1:
        raise ModelImportError(
            f"cannot import {name}: forward takes {len(placeholders)} inputs "
            f"({', '.join(n.name for n in placeholders)}); the importer needs one image batch"
        )
    if len(gm.graph.nodes) > 4 * MAX_LAYERS:
        raise ModelImportError(
            f"cannot import {name}: {len(gm.graph.nodes)} traced operations, more than the "
            f"{4 * MAX_LAYERS} the importer takes"
        )
    facts = T.record(gm, model, shape, name)
    return gm, _classify_all(gm, facts, name)


# ---------------------------------------------------------------------------------- classification


def _classify_all(gm, facts, name) -> list[Step]:
    modules = dict(gm.named_modules())
    calls: dict[str, int] = {}
    for node in gm.graph.nodes:
        if node.op == "call_module":
            calls[node.target] = calls.get(node.target, 0) + 1
    problems = []
    owners: dict[int, str] = {}
    for target in calls:  # tied weights: one tensor in two layers would be counted twice
        for pname, param in modules[target].named_parameters():
            owner = owners.setdefault(id(param), f"{target}.{pname}")
            if owner != f"{target}.{pname}":
                problems.append((("Parameter", f"{target}.{pname}"), f"the same tensor as {owner}"))
    depends: dict = {}  # node -> computed from the input batch
    derived: dict = {}  # node computed from parameters alone -> the parameters' names
    owned: set[str] = set()
    steps = []
    for node in gm.graph.nodes:
        ins = node.all_input_nodes
        depends[node] = node.op == "placeholder" or any(depends[n] for n in ins)
        view_of_params = (
            node.op not in ("placeholder", "output")
            and facts[node].alias is not None
            and not any(depends[n] and is_tensor(n) for n in ins)
        )  # a class token expanded
        if node.op not in ("placeholder", "output") and (not depends[node] or view_of_params):
            own = {node.target} if node.op == "get_attr" and _is_parameter(gm, node.target) else set()
            derived[node] = own.union(*(derived.get(n, set()) for n in ins))
            continue
        try:
            step = _classify(node, modules, calls, facts, derived)
        except Unsupported as err:
            problems.append((_describe(node, modules), str(err)))
            continue
        if step is None:
            continue
        if step.op in ("generic", "conv"):  # a parameter read directly counts for its first layer
            params = set().union(*(derived.get(n, set()) for n in ins)) - owned
            owned |= params
            if step.op == "generic":
                step.kwargs["param_count"] += sum(gm.get_parameter(p).numel() for p in params)
        steps.append(step)
    if problems:
        raise ModelImportError(f"cannot import {name}: {_summarize(problems)}")
    return steps


def _is_parameter(gm, target) -> bool:
    try:
        gm.get_parameter(target)
        return True
    except AttributeError:
        return False


def _classify(node, modules, calls, facts, derived) -> Step | None:
    """The layer of one traced node; None for nodes that compute no tensor (sizes)."""
    if node.op == "output":
        return _output(node)
    if node.op == "placeholder":
        return Step(node, "data")
    shape = node.meta.get(T.SHAPE)
    if shape is None:  # shape arithmetic such as x.size(0): no tensor, no memory
        return None
    f = facts[node]
    module = modules[node.target] if node.op == "call_module" else None
    if module is not None and any(True for _ in module.parameters()):
        if calls[node.target] > 1:
            raise Refused(
                f"called {calls[node.target]} times: a layer per call would count shared weights more than once"
            )
        frozen = [n for n, p in module.named_parameters() if not p.requires_grad]
        if frozen:
            raise Refused(f"frozen parameters ({', '.join(frozen)}); the Network trains every parameter")
    if (
        f.alias is not None
        and not f.inplace
        and f.elems[0] == facts[node.all_input_nodes[f.alias]].elems[0]
        and shape == node.all_input_nodes[f.alias].meta.get(T.SHAPE)
        and not f.saves
    ):
        # an identity (nn.Identity, dropout with training=False): the input itself
        return Step(node, None, {"src": node.all_input_nodes[f.alias]})
    batch = shape != T.SEVERAL and len(shape) >= 2 and shape[0] == T.BATCHES[0] and T.linear(f.elems)[1] == 0
    conv = functional_conv(node) if batch and node.args and node.args[0] not in derived else None
    if conv is not None:
        return conv
    try:
        if (
            shape == T.SEVERAL
            or any(n in derived for n in node.all_input_nodes)
            or len(shape) < 2
            or shape[0] != T.BATCHES[0]
            or T.linear(f.elems)[1] != 0
        ):
            raise Unsupported("not a batch of samples")
        if module is not None:
            handler = module_handlers().get(type(module))
        else:
            handler = function_handlers().get(node.target)
        if handler is None:
            raise Unsupported("no own layer")
        return handler(node, module) if module is not None else handler(node)
    except Refused:
        raise
    except Unsupported:
        return _generic(node, f, module, derived)


def _generic(node, f: T.NodeFacts, module, derived) -> Step:
    """A layer carrying what PyTorch did at this node (trace.py's facts)."""
    per, fixed = T.linear(f.elems)
    shape = node.meta[T.SHAPE]
    batched = shape != T.SEVERAL and len(shape) > 1 and shape[0] == T.BATCHES[0] and fixed == 0
    inputs = [n for n in node.all_input_nodes if is_tensor(n) and n not in derived] or [
        next(iter(node.graph.nodes))
    ]  # sized by the batch but read from parameters: ordered after the input
    index = {n: i for i, n in enumerate(inputs)}
    all_in = node.all_input_nodes
    alias = index.get(all_in[f.alias]) if f.alias is not None else None
    flops, extra = T.linear(f.flops), T.linear(f.extras)
    return Step(
        node,
        "generic",
        dict(
            srcs=inputs,
            out_shape=tuple(shape[1:]) if batched else (per,),
            op=_what(node, module),
            param_count=sum(p.numel() for p in module.parameters()) if module is not None else 0,
            fixed_elems=0 if batched else fixed,
            itemsize=None if f.floating else f.itemsize,
            alias=alias,
            inplace=f.inplace and alias is not None,
            saves=sorted((f"X{index[all_in[i]]}" for i in f.saves if i != "Y" and all_in[i] in index))
            + (["Y"] if "Y" in f.saves else []),
            extra_bytes=list(extra),
            flops=list(flops),
            random=f.random,
        ),
    )


def _output(node) -> Step:
    from torch.utils._pytree import tree_leaves

    value = node.args[0]
    tensors = [x for x in tree_leaves(value) if is_tensor(x)]
    if len(tensors) != 1:
        raise Refused(f"the model returns {len(tensors)} tensors; the importer needs one (the logits)")
    return Step(node, "softmax", {"src": tensors[0]})


# -------------------------------------------------------------------------------------- building


def _build(steps, shape, batch, name, description, reserved: set[str]) -> Network:
    """Replay the steps through NetBuilder, checking each own layer's shape against torch's."""
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
            layer_of[node] = layer_of[step.kwargs.get("src") or tensor_args(node)[0]]
            continue
        if node.op == "output":
            src = layer_of[step.kwargs["src"]]
            if b.layers[-1].op != "softmax" or b.last != src:
                b.softmax(src=src, name=unique(LOSS))
            continue
        kwargs = dict(step.kwargs)
        inputs = kwargs.pop("srcs", None) or [tensor_args(node)[0]]
        if step.op in ("add", "concat", "generic"):
            kwargs["srcs"] = [layer_of[s] for s in inputs]
        else:
            kwargs["src"] = layer_of[inputs[0]]
        in_features = kwargs.pop("in_features", None)
        own = node.op == "call_module"
        label = (
            unique(node.target, own)
            if own
            else unique(_scoped(node, _short(node) if step.op == "generic" else step.op))
        )
        try:
            if step.op != "generic":
                _check_inputs(b, inputs, [layer_of[s] for s in inputs], step.op, in_features)
            layer_of[node] = node.meta[LAYER] = getattr(b, step.op)(name=label, **kwargs)
        except (ValueError, Unsupported) as err:
            raise ModelImportError(f"cannot import {name}: layer {label} ({step.op}): {err}") from None
        got, want = b.layers[-1].out_shape, node.meta[T.SHAPE][1:]
        if step.op != "generic" and got != want and (step.op in _SPATIAL or math.prod(got) != math.prod(want)):
            raise ModelImportError(
                f"cannot import {name}: layer {label} ({step.op}) gives shape {got} in the Network but {want} in torch"
            )
    return b.build()


_SPATIAL = ("conv", "pool", "bn", "lrn", "concat", "add")  # layers whose shape, not only size, must match


def _check_inputs(b, nodes, layers, op, in_features) -> None:
    """Spatial layers must read exactly the tensor torch gives them (not a reshaped alias); an fc
    flattens its input, so only the feature count must agree."""
    for node, layer in zip(nodes, layers):
        want = node.meta[T.SHAPE][1:]
        if op in _SPATIAL and b.shape(layer) != want:
            raise Unsupported(f"reads {want}, a reshape of layer {layer} {b.shape(layer)}")
    if in_features is not None and math.prod(b.shape(layers[0])) != in_features:
        raise Unsupported(f"in_features {in_features} but its input has {math.prod(b.shape(layers[0]))} features")


def _scoped(node, op: str) -> str:
    """``<innermost enclosing module>.<op>`` for a functional node, e.g. ``layer1.0.add``."""
    stack = node.meta.get("nn_module_stack") or {}
    scope = next(reversed(stack.values()))[0] if stack else ""
    return f"{scope}.{op}" if scope else op


def _short(node) -> str:
    """A functional node's operation name: ``mul``, ``permute``, ``gelu``."""
    target = node.target
    return target if isinstance(target, str) else getattr(target, "__name__", str(target)).strip("_") or "op"


def _what(node, module) -> str:
    """What a generic layer runs, for tables and messages: ``Hardswish``, ``Tensor.permute``, ``torch.mul``."""
    if module is not None:
        return type(module).__name__
    if node.op == "call_method":
        return f"Tensor.{node.target}"
    fn = node.target
    return f"{getattr(fn, '__module__', None) or 'builtin'}.{getattr(fn, '__name__', fn)}"


# ------------------------------------------------------------------------------------------ messages


def _describe(node, modules) -> tuple[str, str]:
    """(what, where) of a node for the refusal message: the operation's name and the node's."""
    if node.op == "output":
        return "output", "output"
    if node.op in ("call_module", "call_method", "call_function"):
        module = modules[node.target] if node.op == "call_module" else None
        return _what(node, module), node.target if module is not None else _scoped(node, node.name)
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
    return "; ".join(parts)


def _dims(shape) -> str:
    return "x".join(str(d) for d in shape)
