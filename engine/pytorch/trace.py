"""Trace an ``nn.Module`` and record, per traced operation, what PyTorch itself does in a training step.

Why ``torch.fx.symbolic_trace``: it traces all 80 torchvision classification models and the segmentation
ones in well under a second each on the meta device, at module granularity, so a convolution keeps its
module's qualified name (``apply_plan`` finds the ``nn.Conv2d`` by the layer name). ``torch.export`` lowers
to aten operations (a layer per aten op, module names only in metadata) and takes seconds per model; the
facts below come from aten anyway, through a dispatch mode, so fx loses nothing the planner needs.

Facts: the traced graph runs forward twice, at batch 2 and 3, in training mode with autograd on the model's
device (meta for the CLI: no data, no weights), inside ``torch.autograd.graph.saved_tensors_hooks`` and a
``TorchDispatchMode``. Per node they give

* the output's elements and dtype, and whether it shares an input's storage (a view, or an in-place write:
  the input's version counter moved);
* every tensor autograd saves for the backward, told apart by storage identity: one of the node's inputs,
  its output, a parameter or buffer, or a tensor the op allocated and keeps (an *extra*, e.g. batch-norm
  statistics, max-pool indices, attention's internal projections; counted once per storage);
* whether an aten op it ran draws random numbers (``Tag.nondeterministic_seeded``), and its forward flops
  (``torch.utils.flop_counter``'s formulas: matmul, convolution, attention).

Two batches give every size as ``per_sample * batch + fixed``, so windowed reshapes (Swin's ``B*nW``) and
batch-free tensors (relative position biases) are sized right at any batch. Only the forward runs: what the
backward allocates (dX, dW) follows from these facts in engine/memory/tensors.py. Meta kernels are not
CUDA's: dropout on meta keeps a float noise tensor where CUDA's ``native_dropout`` keeps a bool mask, which
is why the importer keeps the hand-written rules for the ops the zoo uses (engine/memory/tensors.py); and
attention on meta would take the math path, so it is run as CUDA's memory-efficient kernel (``_cuda_attention``).
"""

from __future__ import annotations

import contextlib
import sys
import warnings
from dataclasses import dataclass, field

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves
from torch.utils.flop_counter import flop_registry

from ..errors import ModelImportError
from ..spec import MAX_DIM, MAX_LAYERS

BATCHES = (2, 3)  # not 1, so a reshape that mixes the batch into the features shows up
SHAPE, SEVERAL = "ucudnn_shape", "several"  # node.meta: the output shape at BATCHES[0], or SEVERAL tensors
MAX_MODULES = 4 * MAX_LAYERS  # a model's modules, counted before it is traced
MAX_NESTING = 100  # module nesting; fx and ``named_modules`` recurse once per level


@dataclass
class NodeFacts:
    """What one traced node did, per batch in ``BATCHES`` where a size is listed."""

    elems: list[int] = field(default_factory=list)  # output elements (all tensor leaves)
    itemsize: int = 4  # of the (first) output tensor
    floating: bool = True
    alias: int | None = None  # index into node.all_input_nodes sharing its storage
    inplace: bool = False  # that input was written in place (version moved)
    saves: set = field(default_factory=set)  # "Y" and/or input indices autograd keeps
    extras: list[int] = field(default_factory=list)  # bytes of the new storages autograd keeps
    flops: list[int] = field(default_factory=list)
    random: bool = False


class _Watch(TorchDispatchMode):
    """Flops and random draws of the aten operations one node runs."""

    def __init__(self):
        super().__init__()
        self.flops, self.random = 0, False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        out = func(*args, **kwargs)
        if torch.Tag.nondeterministic_seeded in func.tags:
            self.random = True
        counter = flop_registry.get(func._overloadpacket)
        if counter is not None:
            self.flops += int(counter(*args, **kwargs, out_val=out))
        return out


def _storage(t) -> int:
    return t.untyped_storage()._cdata


def _leaves(value) -> list:
    return [x for x in tree_leaves(value) if isinstance(x, torch.Tensor)]


@contextlib.contextmanager
def _cuda_attention():
    """``F.scaled_dot_product_attention`` on meta as CUDA runs it in training: on meta it would take the math
    path, which keeps the attention probabilities (sequence² per head); CUDA dispatches to its memory-efficient
    (fp32, tf32) or flash (fp16, bf16) kernel, which keeps the output and the log-sum-exp. Masked calls stay as
    they are. Patched in ``torch.nn.functional`` (where ``MultiheadAttention`` looks it up) for the run only."""
    F = torch.nn.functional
    math_path = F.scaled_dot_product_attention

    def efficient(query, key, value, attn_mask=None, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        if attn_mask is not None or enable_gqa or query.dim() != 4:
            return math_path(query, key, value, attn_mask, dropout_p, is_causal, scale=scale, enable_gqa=enable_gqa)
        return torch.ops.aten._scaled_dot_product_efficient_attention(
            query, key, value, None, True, dropout_p, bool(is_causal), scale=scale
        )[0]

    F.scaled_dot_product_attention = efficient
    try:
        yield
    finally:
        F.scaled_dot_product_attention = math_path


class _Tracer(torch.fx.Tracer):
    """fx's leaf rule, plus torchvision's ``StochasticDepth``: traced through, its ``training`` flag would be
    frozen at the eval trace and the training step would lose its random drop."""

    def is_leaf_module(self, m, qualname):
        ops = sys.modules.get("torchvision.ops")
        sd = getattr(ops, "StochasticDepth", None)
        return (sd is not None and isinstance(m, sd)) or super().is_leaf_module(m, qualname)


def check_modules(model, name) -> None:
    """Bounded checks before anything runs: module count and nesting, recurrent modules, layer sizes."""
    nn = torch.nn
    sized = (nn.modules.conv._ConvNd, nn.Linear)
    stack, count = [(None, model, 0)], 0
    while stack:
        path, module, depth = stack.pop()
        count += 1
        if count > MAX_MODULES:
            raise ModelImportError(f"cannot import {name}: more than {MAX_MODULES} modules")
        if depth > MAX_NESTING:
            raise ModelImportError(f"cannot import {name}: modules nested more than {MAX_NESTING} deep")
        if isinstance(module, (nn.RNNBase, *sized)):
            where = _dotted(path) or "the model"
            if isinstance(module, nn.RNNBase):
                raise ModelImportError(
                    f"cannot import {name}: {type(module).__name__} at {where}: recurrent "
                    f"layers are not imported (their time steps are not one layer each)"
                )
            conv = isinstance(module, sized[0])
            dims = (module.in_channels, module.out_channels) if conv else (module.in_features, module.out_features)
            if max(dims) > MAX_DIM:
                raise ModelImportError(
                    f"cannot import {name}: {type(module).__name__} at {where} has {dims[0]} -> "
                    f"{dims[1]} {'channels' if conv else 'features'}, more than {MAX_DIM}"
                )
        stack.extend(((path, k), m, depth + 1) for k, m in module._modules.items() if m is not None)


def _dotted(path) -> str:
    """A module's qualified name from the walk's (parent, key) links: built only for a message."""
    parts = []
    while path:
        path, key = path
        parts.append(key)
    return ".".join(reversed(parts))


def trace(model, name: str):
    """The module's fx graph, traced in eval mode (train-only Python branches such as GoogLeNet's auxiliary
    heads are left out, as in the zoo); the module's own train/eval flags are restored."""
    modes = {m: m.training for m in model.modules()}
    model.eval()
    try:
        graph = _Tracer().trace(model)
        return torch.fx.GraphModule(model, graph, type(model).__name__)
    except RecursionError:
        raise ModelImportError(
            f"cannot trace {name}: its modules nest too deeply for Python's recursion limit"
        ) from None
    except Exception as err:  # noqa: BLE001 - any tracing failure is the user's model, reported in one line
        raise ModelImportError(
            f"cannot trace {name} with torch.fx{_construct(err)} ({line(err)}); models with "
            f"data-dependent Python control flow cannot be imported"
        ) from None
    finally:
        for module, training in modes.items():
            module.training = training


def _construct(err: BaseException) -> str:
    """Where the model's own code stopped the trace: the innermost frame outside torch, with its line."""
    import os
    import traceback

    inside = (os.path.dirname(torch.__file__), os.path.abspath(__file__))
    frames = [f for f in traceback.extract_tb(err.__traceback__) if not os.path.abspath(f.filename).startswith(inside)]
    if not frames:
        return ""
    f = frames[-1]
    code = f" `{f.line.strip()}`" if f.line else ""
    return f" at {os.path.basename(f.filename)}:{f.lineno} in {f.name}{code}"


@contextlib.contextmanager
def no_autotune():
    """cuDNN's heuristics, not its autotuning, for a forward that only records shapes: with ``cudnn.benchmark``
    on, every new convolution shape is first timed over cuDNN's algorithms, for shapes no training step runs
    (EfficientNet-B0: 10.4 s of apply_plan's 13.2 s on the H200)."""
    old = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = False
    try:
        yield
    finally:
        torch.backends.cudnn.benchmark = old


def record(gm, model, shape, name) -> dict:
    """``NodeFacts`` per node from one forward at each of ``BATCHES``; ``node.meta[SHAPE]`` at the first."""
    facts: dict = {node: NodeFacts() for node in gm.graph.nodes}
    tensor = next(iter(model.parameters()), None)
    if tensor is None:
        tensor = next(iter(model.buffers()), None)
    device = tensor.device if tensor is not None else torch.device("cpu")
    dtype = tensor.dtype if tensor is not None and tensor.is_floating_point() else torch.float32
    params = {_storage(t) for t in list(model.parameters()) + list(model.buffers())}
    modes = {m: m.training for m in model.modules()}
    kept = {k: b.detach().clone() for k, b in model.named_buffers()} if device.type != "meta" else {}
    gm.train()
    try:
        meta = device.type == "meta"
        with (
            torch.device(device) if meta else contextlib.nullcontext(),
            _cuda_attention() if meta else contextlib.nullcontext(),
            no_autotune(),
        ):  # forward's own tensors; CUDA's attention
            for i, batch in enumerate(BATCHES):
                where = f"{name} on a {'x'.join(map(str, (batch, *shape)))} input"
                _Run(gm, facts, params, i == 0, where).run(torch.zeros((batch, *shape), device=device, dtype=dtype))
    finally:
        for module, training in modes.items():
            module.training = training
        with torch.no_grad():
            for k, b in model.named_buffers():
                if k in kept:
                    b.copy_(kept[k])
    return facts


class _Run(torch.fx.Interpreter):
    def __init__(self, gm, facts, params, first, where):
        super().__init__(gm)
        self.facts, self.params, self.first, self.where = facts, params, first, where
        self.extra_traceback = False
        self.saved: list = []

    def run(self, *args):
        def pack(t):  # autograd keeps nothing: a tensor handed back would hold its graph in a cycle (a leak)
            self.saved.append(t)

        def unpack(_):
            raise ModelImportError("the import's forward is never run backwards")

        with torch.autograd.graph.saved_tensors_hooks(pack, unpack), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the model's runtime notices say nothing about memory
            try:
                return super().run(*args)
            finally:  # the output's graph would hold this run (through ``pack``) and the run its output
                self.env.clear()

    def _hint(self, node) -> str:
        """Why a convolution of another dimension fails here: the import feeds an N x C x H x W input."""
        mod = self.fetch_attr(node.target) if node.op == "call_module" else None
        if isinstance(mod, (torch.nn.Conv3d, torch.nn.ConvTranspose3d, torch.nn.Conv1d, torch.nn.ConvTranspose1d)):
            return (
                f" ({type(mod).__name__}: only models of 2-D convolutions on an N x C x H x W input are imported; "
                f"--input gives C x H x W)"
            )
        return ""

    def run_node(self, node):
        inputs = [_leaves(self.env[n]) for n in node.all_input_nodes]
        versions = [[t._version for t in ts] for ts in inputs]
        self.saved = []
        try:
            with _Watch() as watch:
                result = super().run_node(node)
        except Exception as err:  # noqa: BLE001 - e.g. a wrong channel count: the model's own error
            where = node.target if node.op == "call_module" else node.name
            raise ModelImportError(f"cannot run {self.where}: at {where}: {line(err)}{self._hint(node)}") from None
        out = _leaves(result)
        f = self.facts[node]
        if self.first:
            if isinstance(result, torch.Tensor):
                node.meta[SHAPE] = tuple(result.shape)
            elif out:
                node.meta[SHAPE] = SEVERAL
        if not out:
            return result
        f.elems.append(sum(t.numel() for t in out))
        f.itemsize, f.floating = out[0].element_size(), out[0].is_floating_point()
        f.flops.append(watch.flops)
        f.random |= watch.random
        outs = {_storage(t) for t in out}
        ins = [{_storage(t) for t in ts} for ts in inputs]
        for i, (st, ts, vs) in enumerate(zip(ins, inputs, versions)):
            if outs & st and f.alias is None:
                f.alias = i
                f.inplace = any(t._version != v for t, v in zip(ts, vs))
        extras: dict[int, int] = {}
        for t in self.saved:
            st = _storage(t)
            if st in outs:
                f.saves.add("Y")
            elif any(st in s for s in ins):
                f.saves.add(next(i for i, s in enumerate(ins) if st in s))
            elif st not in self.params:
                extras[st] = t.untyped_storage().nbytes()
        f.extras.append(sum(extras.values()))
        return result


def linear(values: list[int]) -> tuple[int, int]:
    """(per sample, fixed) of a size measured at ``BATCHES``."""
    (b0, b1), (v0, v1) = BATCHES, values
    per = (v1 - v0) // (b1 - b0)
    return per, v0 - per * b0


def line(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 300 else text[:297] + "..."
