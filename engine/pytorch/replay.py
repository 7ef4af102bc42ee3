"""Generic layers of an imported model replayed alone, for calibrate.py's layer times.

A generic layer that is no leaf module's call (a function such as the SE block's multiply, a tensor method,
a module fx keeps whole such as MultiheadAttention) has no module to time; its traced node
(``importer.traced_network`` names the layer of each node) is wrapped as a module of its tensor inputs and
timed like any other layer.
"""

from __future__ import annotations

import torch
from torch import nn


class _Replay(nn.Module):
    """One traced node as a module of its tensor inputs: its function, method or module called with the other
    arguments as the forward at the measured batch had them, and the parameters it reads directly. An input
    that is a container of tensors (a chunk's pieces, MultiheadAttention's output and weights) takes one
    tensor argument per piece, rebuilt into the container by its ``pytree`` spec."""

    def __init__(self, gm, node, values, containers):
        super().__init__()
        self.node, self.values, self.containers = node, values, containers
        self.inputs = [n for n in node.all_input_nodes if n.op != "get_attr" and n not in values]
        self.direct = nn.ParameterList(
            [gm.get_parameter(n.target) for n in node.all_input_nodes if n.op == "get_attr" and _is_param(gm, n.target)]
        )
        self.attrs = {n: _fetch(gm, n.target) for n in node.all_input_nodes if n.op == "get_attr"}
        self.call = gm.get_submodule(node.target) if node.op == "call_module" else None

    def forward(self, *xs):
        env, i = dict(self.attrs), 0
        for n in self.inputs:
            spec = self.containers.get(n)
            if spec is None:
                env[n], i = xs[i], i + 1
            else:
                pieces, spec = spec
                it = iter(xs[i : i + sum(p is None for p in pieces)])
                env[n] = torch.utils._pytree.tree_unflatten([next(it) if p is None else p[0] for p in pieces], spec)
                i += sum(p is None for p in pieces)
        value = {n: env[n] if n in env else self.values[n] for n in self.node.all_input_nodes}
        args = torch.fx.node.map_arg(self.node.args, value.__getitem__)
        kwargs = torch.fx.node.map_arg(self.node.kwargs, value.__getitem__)
        if self.node.op == "call_module":
            out = self.call(*args, **kwargs)
        elif self.node.op == "call_method":
            out = getattr(args[0], self.node.target)(*args[1:], **kwargs)
        else:
            out = self.node.target(*args, **kwargs)
        return next((t for t in torch.utils._pytree.tree_leaves(out) if isinstance(t, torch.Tensor)), out)


def _is_param(gm, target) -> bool:
    return isinstance(_fetch(gm, target), nn.Parameter)


def _fetch(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


def time_generic(model, network, input_shape, batch: int, names: set[str], device, repeats: int, time_layer) -> dict:
    """Forward and backward ms of layers no leaf module's call gave (functions, tensor methods, modules fx keeps
    whole such as MultiheadAttention), each node replayed alone (``_Replay``) on fresh inputs of the shapes one
    forward at ``batch`` gave it; sizes and other non-tensor arguments are that forward's.
    ``time_layer(module, input specs, device, repeats) -> (forward ms, backward ms)`` times it (calibrate.py's)."""
    from .importer import LAYER, traced_network

    gm, _ = traced_network(model, tuple(input_shape), batch, network.name)
    nodes = {n.meta[LAYER]: n for n in gm.graph.nodes if n.meta.get(LAYER) in names}
    needed = {i for n in nodes.values() for i in n.all_input_nodes}
    values, specs, containers = {}, {}, {}

    class Record(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            if node in needed:
                leaves, spec = torch.utils._pytree.tree_flatten(result)
                tensors = [_spec(t) for t in leaves if isinstance(t, torch.Tensor)]
                if isinstance(result, torch.Tensor):
                    specs[node] = tensors
                elif tensors:  # a container: one argument per tensor, the rest kept as they were
                    specs[node] = tensors
                    containers[node] = ([None if isinstance(t, torch.Tensor) else (t,) for t in leaves], spec)
                else:
                    values[node] = result
            return result

    dtype = next(model.parameters()).dtype
    model.train()
    with torch.no_grad():
        Record(gm).run(torch.zeros((batch, *input_shape), device=device, dtype=dtype))
    out = {}
    for name, node in nodes.items():
        replay = _Replay(gm, node, values, containers)
        fwd, bwd = time_layer(replay, [s for n in replay.inputs for s in specs[n]], device, repeats)
        layer = network.layer(name)
        out[name] = {"F": fwd, "B": bwd, "op": f"{layer.params.get('op', layer.op)} (replayed)"}
    return out


def _spec(t: torch.Tensor) -> tuple:
    """(shape, dtype, memory format) of a tensor, as calibrate.py's layer inputs."""
    channels_last = t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)
    return tuple(t.shape), t.dtype, torch.channels_last if channels_last else torch.contiguous_format
