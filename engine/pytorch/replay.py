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
    arguments as the forward at the measured batch had them, and the parameters it reads directly."""

    def __init__(self, gm, node, values):
        super().__init__()
        self.node, self.values = node, values
        self.inputs = [n for n in node.all_input_nodes if n.op != "get_attr"]
        self.direct = nn.ParameterList(
            [gm.get_parameter(n.target) for n in node.all_input_nodes if n.op == "get_attr" and _is_param(gm, n.target)]
        )
        self.attrs = {n: _fetch(gm, n.target) for n in node.all_input_nodes if n.op == "get_attr"}
        self.call = gm.get_submodule(node.target) if node.op == "call_module" else None

    def forward(self, *xs):
        env = {**dict(zip(self.inputs, xs)), **self.attrs}
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
    """Forward and backward ms of generic layers no leaf module's call gave (functions, tensor methods, modules
    fx keeps whole such as MultiheadAttention), each node replayed alone (``_Replay``) on fresh inputs of the
    shapes one forward at ``batch`` gave it; sizes and other non-tensor arguments are that forward's.
    ``time_layer(module, input specs, device, repeats) -> (forward ms, backward ms)`` times it (calibrate.py's)."""
    from .importer import LAYER, traced_network

    gm, _ = traced_network(model, tuple(input_shape), batch, network.name)
    nodes = {n.meta[LAYER]: n for n in gm.graph.nodes if n.meta.get(LAYER) in names}
    needed = {i for n in nodes.values() for i in n.all_input_nodes}
    values, specs = {}, {}

    class Record(torch.fx.Interpreter):
        def run_node(self, node):
            result = super().run_node(node)
            if node in needed:
                if isinstance(result, torch.Tensor):
                    fmt = (
                        torch.channels_last
                        if result.dim() == 4
                        and not result.is_contiguous()
                        and result.is_contiguous(memory_format=torch.channels_last)
                        else torch.contiguous_format
                    )
                    specs[node] = (tuple(result.shape), result.dtype, fmt)
                elif not any(isinstance(t, torch.Tensor) for t in torch.utils._pytree.tree_leaves(result)):
                    values[node] = result
            return result

    dtype = next(model.parameters()).dtype
    model.train()
    with torch.no_grad():
        Record(gm).run(torch.zeros((batch, *input_shape), device=device, dtype=dtype))
    out = {}
    for name, node in nodes.items():
        replay = _Replay(gm, node, values)
        if any(n not in specs for n in replay.inputs):
            continue  # reads several tensors of one container (a chunk's getitem): a view, left modelled
        fwd, bwd = time_layer(replay, [specs[n] for n in replay.inputs], device, repeats)
        out[name] = {"F": fwd, "B": bwd, "op": f"{network.layer(name).params['op']} (replayed)"}
    return out
