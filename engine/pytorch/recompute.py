"""SuperNeurons' recomputation: re-forward the layers the plan marks (its R ticks) in backward.

In forward the runtime drops every tensor autograd saves for a re-forwarded layer (its output, its
inputs when they are other re-forwarded outputs, and its extras: max-pool indices, batch-norm
statistics, dropout masks) and keeps the checkpoints (convolution, fully-connected and data outputs)
that re-forwards read. At an R tick the layer runs again on its inputs (re-forwarded outputs from the
cache, checkpoints from the runtime's hold) with grad enabled under a saved-tensor hook that captures
what autograd saves, so backward gets the same tensors, in the same order, as the original forward
saved. A module layer is called again; a functional layer's recorded call (its function or tensor method
and every other argument: sizes, parameters) is made again on its inputs' values. It runs out of place
(a module's ``inplace`` switch off, ``add_``/``__iadd__``/``inplace=True`` as their plain forms; the
original forward does the same where the layer writes into a checkpoint, so the checkpoint keeps its
value); batch-norm running statistics are restored after the re-forward, and dropout (or any random layer
the plan re-forwards) replays the random state of its original call. A random layer that writes in place
runs in place on a copy of its input instead (``on_a_copy``): PyTorch's out-of-place form of a random op may
draw differently (on CUDA ``dropout`` is a fused kernel, ``dropout_`` is bernoulli_ then mul_), and the mask
must be stock PyTorch's. The re-forwarded output and extras stay in the
cache until the plan's residency span of that output ends (the ``drop`` actions of schedule.py).
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import weakref

import torch
from torch import nn
from torch.utils._pytree import tree_unflatten

from ..errors import MemoryRuntimeError
from .offload import View


class Recomputer:
    """Re-forwards for one step; ``cache`` maps ("Y", layer) to an output and ("X", layer, j) to the
    j-th tensor the layer's call saved."""

    def __init__(self, step):
        self._step = weakref.ref(step)  # the step owns this; a strong reference back would be a cycle for the GC
        self.cache: dict[tuple, torch.Tensor] = {}
        self.inputs: dict[str, list[tuple[View, bool]]] = {}  # layer -> its call's input views and grad flags
        self.wanted: dict[str, set[int]] = {}  # layer -> indices of the extras it dropped
        self.rng: dict[str, tuple] = {}  # dropout layer -> random state at its call
        self.functions: dict[str, tuple] = {}  # functional layer -> (function, arguments, pytree spec)
        self.count = 0  # re-forwards of the plan's R ticks
        self.extra = 0  # re-forwards the plan did not schedule (a tensor needed where it had none)

    @property
    def step(self):
        return self._step()

    # ---------------------------------------------------------------------------- original forward

    def record_call(self, layer: str, module: nn.Module, args: list[torch.Tensor]) -> None:
        self.inputs[layer] = [(View.of(x), x.requires_grad) for x in args]
        if (isinstance(module, nn.modules.dropout._DropoutNd) and module.training and module.p > 0) or draws_random(
            self.step.net.layer(layer)
        ):
            self._keep_rng(layer, args[0].device)

    def record_function(self, layer: str, func, leaves: list, spec, reads: dict[int, str]) -> None:
        """A functional layer's call, to call again: each tensor argument that is a plan input's value as
        (input, its view, grad flag), any other argument (parameters, sizes, tensors made from parameters) as
        it was."""
        args = [(reads[id(x)], View.of(x), x.requires_grad) if id(x) in reads else x for x in leaves]
        self.functions[layer] = (func, args, spec)
        if draws_random(self.step.net.layer(layer)):
            dev = next((x.device for x in leaves if isinstance(x, torch.Tensor)), torch.device("cpu"))
            self._keep_rng(layer, dev)

    def _keep_rng(self, layer: str, dev: torch.device) -> None:
        self.rng[layer] = (torch.get_rng_state(), torch.cuda.get_rng_state(dev) if dev.type == "cuda" else None)

    def dropped_extra(self, layer: str, j: int) -> None:
        self.wanted.setdefault(layer, set()).add(j)

    # ------------------------------------------------------------------------------------ backward

    def value(self, key: tuple) -> torch.Tensor:
        """A dropped tensor: from the cache, or re-forwarded now if the plan left none there."""
        got = self.cache.get(key)
        if got is None:
            self.run(key[1], planned=False)
            got = self.cache.get(key)
            if got is None:
                raise MemoryRuntimeError(
                    f"re-forwarding {key[1]} did not give back the tensor its backward "
                    f"needs ({key}); the layer must run the same way twice"
                )
        return got

    def drop(self, target: str) -> None:
        kind, layer = target.split(":", 1)
        if kind == "Y":
            self.cache.pop(("Y", layer), None)
        else:
            for key in [k for k in self.cache if k[0] == "X" and k[1] == layer]:
                del self.cache[key]

    def _input(self, layer: str, src: str, view: View | None, grad: bool) -> torch.Tensor:
        step = self.step
        if step.schedule.dropped(src):
            out = self.cache.get(("Y", src))
            if out is None:  # the plan thinks it is still resident; re-forward it outside the plan
                self.run(src, planned=False)
                out = self.cache[("Y", src)]
            storage, device = out.untyped_storage(), out.device
            view = view or View.of(out)
        else:
            held = step.held.get(f"Y:{src}")
            if held is None:
                raise MemoryRuntimeError(
                    f"cannot re-forward {layer}: its input {src} is a checkpoint the runtime "
                    f"no longer holds (the plan's residency of it ended)"
                )
            record, out_view = held
            record.mover.ready(record)
            storage, device = record.storage, record.device
            view = view or out_view
        return view.on(storage, device).detach().requires_grad_(grad)

    def run(self, layer: str, planned: bool = True) -> None:
        """One re-forward of ``layer``: its output and the extras its backward needs into the cache."""
        step = self.step
        spec = step.net.layer(layer)
        module = step.layers.module_of(layer)
        if module is None:
            call = self._function_call(layer)
        else:
            recorded = self.inputs.get(layer)
            args = []
            for i, src in enumerate(spec.inputs):
                view, grad = recorded[i] if recorded and i < len(recorded) else (None, True)
                args.append(self._input(layer, src, view, grad))
            copy = getattr(module, "inplace", False) and draws_random(spec)
            call = functools.partial(on_a_copy(module) if copy else module, *args)
        device = step.mover.device
        captured: dict[int, torch.Tensor] = {}
        wanted = self.wanted.get(layer, set())
        count = [0]

        def pack(t):
            j = count[0]
            count[0] += 1
            if j in wanted:
                captured[j] = t.detach()
            return j

        def unpack(_):  # the re-forward's own graph is never run backwards
            raise MemoryRuntimeError(f"the re-forward graph of {layer} was used in backward")

        step.recomputing = True
        try:
            with torch.enable_grad(), torch.autograd.graph.saved_tensors_hooks(pack, unpack):
                with _as_original(module, self.rng.get(layer), device, draws_random(spec)):
                    out = call()
        finally:
            step.recomputing = False
        if not isinstance(out, torch.Tensor):
            raise MemoryRuntimeError(
                f"cannot re-forward {layer}: it returns {type(out).__name__}, not one tensor (plan it as a checkpoint)"
            )
        self.cache[("Y", layer)] = out.detach()
        for j, t in captured.items():
            self.cache[("X", layer, j)] = t
        if planned:
            self.count += 1
        else:
            self.extra += 1
            step.deviation(
                f"re-forwarded {layer} outside the plan (a backward needed it where the plan had no re-forward)"
            )
        step.log("recompute" if planned else "recompute-extra", layer, step.clock)

    def _function_call(self, layer: str):
        """The recorded call of a functional layer on its inputs' current values, out of place."""
        recorded = self.functions.get(layer)
        if recorded is None:
            raise MemoryRuntimeError(f"cannot re-forward {layer}: the runtime saw no call of it in this forward")
        func, args, spec = recorded
        leaves = [self._input(layer, *a) if isinstance(a, tuple) else a for a in args]
        a, kw = tree_unflatten(leaves, spec)
        func, kw = out_of_place(func, a, kw, draws_random(self.step.net.layer(layer)))
        return functools.partial(func, *a, **kw)


def draws_random(layer) -> bool:
    return layer.op == "dropout" or (layer.op == "generic" and layer.params["random"])


def on_a_copy(func):
    """``func`` writing into a copy of its first argument, the form a random in-place layer runs in where it must
    leave its input as it is: the same kernels, so the same random draws, as stock PyTorch's call."""

    @functools.wraps(func)
    def call(x, *args, **kwargs):
        return func(x.clone(), *args, **kwargs)

    return call


def writes_in_place(func, args: tuple, kwargs: dict) -> bool:
    name = getattr(func, "__name__", "")
    if (name.startswith("__i") and name.endswith("__")) or (name.endswith("_") and not name.endswith("__")):
        return True
    try:
        return bool(inspect.signature(func).bind(*args, **kwargs).arguments.get("inplace", False))
    except (TypeError, ValueError):  # a builtin without a signature, or a call it does not bind
        return bool(kwargs.get("inplace"))


def out_of_place(func, args: tuple, kwargs: dict, random: bool = False):
    """``func`` and ``kwargs`` computing a new tensor (a re-forward must leave the checkpoint it reads as it is):
    a random layer's in-place call on a copy (``on_a_copy``), else ``Tensor.__iadd__`` as ``__add__``, ``relu_``
    as ``relu``, ``inplace=True`` as False."""
    if random:
        return (on_a_copy(func), kwargs) if writes_in_place(func, args, kwargs) else (func, kwargs)
    name = getattr(func, "__name__", "")
    if kwargs.get("inplace"):
        kwargs = {**kwargs, "inplace": False}
    if name.startswith("__i") and name.endswith("__") and hasattr(torch.Tensor, f"__{name[3:]}"):
        return getattr(torch.Tensor, f"__{name[3:]}"), kwargs
    if name.endswith("_") and not name.endswith("__"):
        owner = torch.Tensor if getattr(torch.Tensor, name, None) is func else torch
        plain = getattr(owner, name[:-1], None)
        if plain is not None:
            return plain, kwargs
    return func, kwargs


@contextlib.contextmanager
def _as_original(module: nn.Module | None, rng, device, random: bool):
    """Run ``module`` (None: a function) as in its original call: out of place (a random one on a copy, with
    its ``inplace`` left on), with batch-norm running statistics left as they are and a random op's state
    replayed."""
    inplace = getattr(module, "inplace", None) and not random
    if inplace:
        module.inplace = False
    saved = []
    if isinstance(module, nn.modules.batchnorm._BatchNorm) and module.training and module.track_running_stats:
        saved = [
            (b, b.clone())
            for b in (module.running_mean, module.running_var, module.num_batches_tracked)
            if b is not None
        ]
    fork = torch.random.fork_rng(devices=[device] if device.type == "cuda" else [], enabled=rng is not None)
    try:
        with fork:
            if rng is not None:
                torch.set_rng_state(rng[0])
                if rng[1] is not None:
                    torch.cuda.set_rng_state(rng[1], device)
            yield
    finally:
        if inplace:
            module.inplace = True
        for b, value in saved:
            b.copy_(value)
