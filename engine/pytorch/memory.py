"""``apply_memory_policy(model, result)``: run the memory planner's plan in real PyTorch training steps.

``result`` is ``plan_memory(network, policy=...)`` for the network imported from the same model
(engine.pytorch.importer), and the runtime executes its ``MemoryPlan``, never heuristics of its own:

* offload (vDNN ``vdnn-*``, SuperNeurons ``sn-offload``/``sn-recompute``/``superneurons`` LRU, Layrub
  ``layrub-inter``): the plan's copies and residency gaps, through saved-tensor hooks, a side CUDA
  stream, pinned host buffers and events (offload.py; what maps to which tick: memory_step.py);
* recomputation (``sn-recompute``, ``superneurons``): the plan's re-forward ticks (recompute.py), of
  module layers and of functional ones (a function or tensor method in the model's forward: the SE block's
  multiply, ConvNeXt's permutes, ``F.gelu``), which a torch-function mode observes during the forward
  (``_Functions``) so they are named, timed and called again like modules.

Which layers are re-forwarded is the planner's choice (engine/memory/policies.py ``is_checkpoint``: never a
generic operation that draws random numbers or runs a matmul or convolution; dropout is re-forwarded with its
random state replayed). What the runtime cannot execute it
refuses in one line naming the part (static whole-iteration allocation, Layrub's dX-into-X aliasing, a
re-forward of an output another layer writes in place); what PyTorch does anyway it lists in ``notes``
(the convolution algorithms and workspace rule, constant buffer pools).
docs/memory-runtimes.md has the whole map.

Design: the runtime is installed on the model until ``remove()``, as ``apply_plan`` is, not entered per
step. The saved-tensor hooks are pushed by the model's own forward pre-hook and popped by its forward
hook, so every forward with grad enabled is managed and nothing else is: the loss, the optimizer and
other models keep stock behaviour, and a training loop needs no wrapper it could forget. Each forward
starts a new step (its backward follows the same step's schedule), so ``stats`` describe the last step.
``with apply_memory_policy(model, result) as runtime: ...`` scopes it to a block (``remove()`` at exit).
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import MemoryRuntimeError
from ..memory.timeline import MemoryPlan
from ..units import format_size
from .layermap import LayerMap
from .memory_step import Step, unpack
from .offload import Mover
from .schedule import Schedule, build_schedule

# workspace rules whose choices are what PyTorch runs: stock cuDNN without cudnn.benchmark, and a plan applied with
# apply_plan (engine/memory/workspace.py)
PYTORCH_RULES = ("heuristic", "plan", "plan-arena")


def apply_memory_policy(model: nn.Module, result, example_input: torch.Tensor | None = None) -> "MemoryRuntime":
    """Install the runtime of ``result.plan`` (an ``engine.memory.MemoryResult``) on ``model``; returns it.

    ``example_input`` (a batch of the plan's shape) runs one no-grad forward that checks every plan layer
    runs, once each, with the plan's shapes. A plan whose layers are not the model's modules, or that
    has parts the runtime cannot execute, raises ``MemoryRuntimeError``.
    """
    if not isinstance(model, nn.Module):
        raise MemoryRuntimeError(
            f"apply_memory_policy needs a torch.nn.Module, got {type(model).__name__}: build "
            f"the model first and pass it"
        )
    plan = getattr(result, "plan", None)
    if not isinstance(plan, MemoryPlan):
        got = type(result).__name__ if plan is None else f"a result whose plan is a {type(plan).__name__}"
        raise MemoryRuntimeError(
            f"apply_memory_policy needs the MemoryResult of engine.memory.plan_memory (it "
            f"carries the MemoryPlan to execute), got {got}"
        )
    if example_input is not None and not isinstance(example_input, torch.Tensor):
        raise MemoryRuntimeError(
            f"example_input must be a torch.Tensor batch of the plan's shape or None, got "
            f"{type(example_input).__name__}"
        )
    notes = executable(plan, result)
    old = model.__dict__.get("ucudnn_memory")
    if old is not None:
        old.remove()
    layers = LayerMap(model, plan.inventory.net)
    schedule = build_schedule(plan)
    _check_recompute(schedule)
    data = schedule.storage_of(f"Y:{layers.data}")
    if data in schedule.gaps:
        notes.append(
            "the input batch is offloaded as the plan says, but the caller still holds it: its release "
            "frees nothing and its prefetch makes a second copy on the device"
        )
    if schedule.ignored:
        notes.append(f"copies of {', '.join(schedule.ignored)} leave no gap before a prefetch; kept on the device")
    runtime = MemoryRuntime(model, result, schedule, layers, notes)
    if example_input is not None:
        try:
            runtime.check(example_input)
        except Exception:
            runtime.remove()
            raise
    return runtime


def executable(plan, result=None) -> list[str]:
    """Refuse what no PyTorch runtime can execute (the policy's registry entry says, ``PolicyInfo.pytorch``); return
    notes on what PyTorch does itself and on what the prediction ``result`` does not count."""
    from ..memory.policies import PYTORCH, get_policy

    name = plan.policy
    opts = plan.options
    how = get_policy(name).pytorch
    if how == "static":
        raise MemoryRuntimeError(
            f"memory policy {name} cannot run in PyTorch: it is {PYTORCH[how]}"
            f"{' (and vDNN shares two gradient buffers)' if plan.class_override else ''}"
        )
    if how == "aliasing":
        layers = opts.get("aliased", [])
        where = f" ({', '.join(layers[:3])}{', ...' if len(layers) > 3 else ''})" if layers else ""
        static = ", static allocation" if opts.get("buffers") == "static" else ""
        raise MemoryRuntimeError(
            f"memory policy {name} cannot run in PyTorch: its intra-layer reuse (dX written into "
            f"X's buffer on {len(layers)} layers{where}, ReLU kept as a 1-byte sign mask{static}) "
            f"has no PyTorch form: backward writes every input gradient into a new tensor and "
            f"ReLU saves its output; layrub-inter (migration only) runs"
        )
    notes = []
    if plan.workspace_rule and plan.workspace_rule not in PYTORCH_RULES:
        notes.append(
            f"workspace rule {plan.workspace_rule!r} not executed: PyTorch's cuDNN heuristics pick the "
            f"convolution algorithms (planned convolutions: engine.pytorch.apply_plan)"
        )
    if plan.class_override:
        notes.append(
            f"constant buffer pool for {', '.join(plan.class_override)} not executed: in PyTorch reusing "
            f"freed blocks is the caching allocator's job"
        )
    if how == "stock" or (not plan.copies and not plan.recompute_count):
        notes.append("no copies and no re-forwards: autograd already frees each saved tensor after its last use")
    if result is not None and result.convention != "pytorch":
        notes.append(
            f"the prediction counts tensors as {result.convention} allocates them, not PyTorch (predicted() "
            f"gives no peak): plan with convention='pytorch' to predict the step's peak"
        )
    elif result is not None and result.peak_is_lower_bound:
        notes.append(
            f"the predicted peak {format_size(result.peak)} is a lower bound (predicted() gives none): it "
            f"counts no workspace for {result.summary['workspace_unknown']} convolution kernel runs; plan "
            f"with profile= (stock cuDNN) or conv_plan= (a plan applied with apply_plan)"
        )
    return notes


def _check_recompute(schedule: Schedule) -> None:
    inv = schedule.plan.inventory
    shared = [n for n in schedule.recomputed if inv.tensors[f"Y:{n}"].storage != f"Y:{n}"]
    if shared:
        n = shared[0]
        raise MemoryRuntimeError(
            f"the plan re-forwards {n} but its {inv.convention.name} convention puts {n}'s output "
            f"in the storage of {inv.tensors[f'Y:{n}'].storage[2:]} (in place); plan SuperNeurons "
            f"recomputation with the superneurons convention"
        )


class _Functions(TorchFunctionMode):
    """Every torch function and tensor method called in a managed forward goes to the step, which runs the
    plan's functional layers as layers (memory_step.Step.functional); the runtime's own hooks run unobserved."""

    def __init__(self, step: Step):
        super().__init__()
        self.step = step
        self.quiet = 0

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if self.quiet or self.step.cur is not None:
            return func(*args, **(kwargs or {}))
        return self.step.functional(func, args, kwargs or {})


class MemoryRuntime:
    """A memory plan installed on a model (see the module docstring); ``remove()`` restores stock PyTorch."""

    def __init__(self, model: nn.Module, result, schedule: Schedule, layers: LayerMap, notes: list[str]):
        self.model = model
        self.result = result
        self.plan = schedule.plan
        self.schedule = schedule
        self.layers = layers
        self.notes = notes
        self.steps = 0
        self._step: Step | None = None
        self._last: Step | None = None
        self._movers: dict[torch.device, Mover] = {}
        self._context = None
        self._functions: _Functions | None = None
        self._checking = False
        self._warned_batch = False
        self.tracing_memory = False
        self._hooks = [
            model.register_forward_pre_hook(self._begin),
            model.register_forward_hook(self._end, always_call=True),
        ]
        for module in layers.names:
            self._hooks.append(module.register_forward_pre_hook(self._pre))
            self._hooks.append(module.register_forward_hook(self._post, always_call=True))
        model.ucudnn_memory = self

    # --------------------------------------------------------------------------------------- hooks

    def _begin(self, model, args) -> None:
        self._pop()
        x = next((a for a in args if isinstance(a, torch.Tensor)), None)
        active = torch.is_grad_enabled() and x is not None
        if not active and not self._checking:
            self._step = None
            return
        batch = self.plan.inventory.net.batch
        if x is not None and x.shape[0] != batch:
            if self._checking:
                raise MemoryRuntimeError(f"the plan is for mini-batch {batch}, the example input has {x.shape[0]}")
            if not self._warned_batch:
                self._warned_batch = True
                warnings.warn(
                    f"the memory plan is for mini-batch {batch}, this step has {x.shape[0]}: the schedule "
                    f"runs, its byte counts are the plan's only at batch {batch}",
                    stacklevel=2,
                )
        mover = None
        if active:
            mover = self._movers.get(x.device)
            if mover is None:
                mover = self._movers[x.device] = Mover(x.device)
            mover.reset()
        step = Step(self, mover, active)
        step.begin(x)
        self._step = step
        if active:
            self.steps += 1
            self._last = step
            self._context = torch.autograd.graph.saved_tensors_hooks(step.pack, unpack)
            self._context.__enter__()
        if self.layers.functional:
            self._functions = _Functions(step)
            self._functions.__enter__()

    def _end(self, model, args, out) -> None:
        self._pop()
        step = self._step
        if step is not None and out is not None:
            step.end_forward()

    def _pop(self) -> None:
        if self._functions is not None:
            self._functions.__exit__(None, None, None)
            self._functions = None
        if self._context is not None:
            self._context.__exit__(None, None, None)
            self._context = None

    def _pre(self, module, args) -> tuple | None:
        if self._step is not None:
            with self._quiet():
                return self._step.pre(module, args)
        return None

    def _post(self, module, args, out) -> None:
        if self._step is not None:
            with self._quiet():
                self._step.post(module, out)

    @contextlib.contextmanager
    def _quiet(self):
        """The runtime's own tensor calls (storage lookups, copies) are no layer of the model."""
        f = self._functions
        if f is not None:
            f.quiet += 1
        try:
            yield
        finally:
            if f is not None:
                f.quiet -= 1

    # ------------------------------------------------------------------------------------ public

    def check(self, example_input: torch.Tensor) -> None:
        """One no-grad forward checking that every plan layer runs once with the plan's shapes. It runs in
        eval mode, as the importer traced the model, so running statistics are left as they are."""
        modes = {m: m.training for m in self.model.modules()}
        self._checking = True
        try:
            self.model.eval()
            with torch.no_grad():
                self.model(example_input)
        finally:
            self._checking = False
            self._step = None
            for m, training in modes.items():
                m.training = training

    @property
    def stats(self) -> dict:
        """The last step: bytes offloaded and prefetched (on-demand fetches included), prefetches late at
        their use on the GPU's clock (reading this waits for the step's copies), re-forwards."""
        step = self._last
        if step is None or step.mover is None:
            return {
                "offloaded_bytes": 0,
                "prefetched_bytes": 0,
                "prefetch_late": 0,
                "recomputed_layers": 0,
                "host_syncs_expected": 0,
                "offloads": 0,
                "prefetches": 0,
                "on_demand": 0,
                "prefetch_pending_at_unpack": 0,
                "recompute_extra": 0,
                "steps": self.steps,
            }
        m = step.mover
        return {
            "offloaded_bytes": m.offloaded_bytes,
            "prefetched_bytes": m.prefetched_bytes,
            "prefetch_late": m.late(),
            "recomputed_layers": step.recompute.count,
            "host_syncs_expected": 0,
            "offloads": m.offloads,
            "prefetches": m.prefetches,
            "on_demand": m.on_demand,
            "prefetch_pending_at_unpack": m.pending_at_unpack,
            "recompute_extra": step.recompute.extra,
            "steps": self.steps,
        }

    @property
    def trace(self) -> list[tuple[str, str, tuple[int, int], tuple[int, int]]]:
        """The last step's actions: (offload | release | prefetch | recompute | recompute-extra, plan
        storage or layer, the plan's point (tick, 0 start / 1 end), the point a hook observed when it ran)."""
        return list(self._last.trace) if self._last is not None else []

    @property
    def deviations(self) -> list[str]:
        """Where the last step could not follow the plan (a tensor autograd does not save, a re-forward
        the plan did not schedule)."""
        return list(self._last.deviations) if self._last is not None else []

    def trace_memory(self, enabled: bool = True) -> None:
        """Measure the allocator at every point the hooks observe, from the next step on (CUDA only): a
        diagnostic that resets ``torch.cuda.max_memory_allocated`` at each point, so leave it off in steps
        whose peak is read that way."""
        self.tracing_memory = enabled

    @property
    def memory_trace(self) -> list[dict]:
        """The last traced step, one entry per observed point: the plan's tick, ``end`` (0 when the tick
        started, 1 when it ended), bytes allocated there and the peak since the previous point (for an end
        point: the tick's own peak, the measured twin of the plan's per-tick total). A start is measured
        after the plan's releases and prefetches due before the layer runs, as the plan counts them."""
        rows = self._last.memory if self._last is not None else None
        return [{"tick": t, "end": e, "allocated": a, "peak": p} for t, e, a, p in rows or ()]

    def predicted(self) -> dict:
        """The plan's own numbers, to set beside ``stats``. ``peak`` is None where the prediction is not of PyTorch's
        step: tensors counted in another convention than ``pytorch``, or no workspace counted for some convolutions
        (``peak_counted`` holds the plan's number in every case): no peak is promised there."""
        s = self.result.summary
        promised = self.result.convention == "pytorch" and not self.result.peak_is_lower_bound
        return {
            "peak": s["peak"] if promised else None,
            "peak_counted": s["peak"],
            "offload_bytes": s["offload_bytes"],
            "prefetch_bytes": s["prefetch_bytes"],
            "recompute_count": s["recompute_count"],
        }

    def remove(self) -> nn.Module:
        """Uninstall: hooks removed, host buffers freed; the model runs stock PyTorch again."""
        self._pop()
        for h in self._hooks:
            h.remove()
        self._hooks = []
        self._step = None
        self._movers.clear()
        if self.model.__dict__.get("ucudnn_memory") is self:
            del self.model.__dict__["ucudnn_memory"]
        return self.model

    def __enter__(self) -> "MemoryRuntime":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def summary(self) -> str:
        s = self.stats
        lines = [
            f"{self.plan.policy} on {self.plan.inventory.net.name} b{self.plan.inventory.net.batch}: "
            f"offloaded {s['offloaded_bytes']} B, prefetched {s['prefetched_bytes']} B "
            f"({s['prefetch_late']} late), {s['recomputed_layers']} re-forwards"
        ]
        lines += [f"note: {n}" for n in self.notes] + [f"deviation: {d}" for d in self.deviations]
        return "\n".join(lines)
