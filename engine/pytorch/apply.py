"""``apply_plan(model, plan)``: swap a model's ``nn.Conv2d`` layers for their planned kernels.

Each convolution the model runs is matched to the plan by its kernel signature (shapes recorded by
one batch-1 forward with hooks, in the order the model calls them; engine.pytorch.checks, which also
checks every argument before the cuDNN frontend is loaded); the matched module becomes a
``PlannedConv2d`` sharing the same ``weight`` and ``bias`` Parameters, so optimizers, state dicts and
checkpoints are unaffected. A plan layer that matches no convolution of the model, or a plan made on
another GPU or cuDNN, is refused; convolutions the plan does not cover stay stock PyTorch and are
listed in ``model.ucudnn.unplanned``. A WR plan's layer whose predicted gain over what stock PyTorch runs
there is less than the planned op's host cost is left to stock PyTorch too (engine.stock: never slower than
stock, judged with ``torch.backends.cudnn.benchmark`` as set when the plan is applied), listed in
``model.ucudnn.stock`` (the reasons in ``why_stock``); ``keep_stock=False`` replaces every layer the plan
covers. The plan's workspace is one arena tensor (WR: the largest planned kernel's workspace, kernels run one
at a time; WD: the plan's arena with its segments), or, per call, a block of the caching allocator for each
kernel while it runs: the default for a plan with per-kernel limits (a per-step plan, engine.memory.steps),
whose limits are what the training step leaves free at each kernel. Plan layers are matched to the model's
convolutions in call order per Forward signature, so layers of one signature keep their own configurations (a
per-step or WD plan may give them different ones).
"""

from __future__ import annotations

import warnings
import weakref
from dataclasses import dataclass, field

import torch
from torch import nn

from ..errors import EngineError
from ..kernels import KernelSignature
from ..plan import Plan
from ..stock import stock_layers
from ..units import format_size
from . import checks

try:  # the cuDNN frontend: without it apply_plan still checks every argument, then says what is missing
    from . import conv as ops
except ImportError as _err:
    ops, _NO_FRONTEND = None, f"{type(_err).__name__}: {_err}"


@dataclass
class AppliedPlan:
    """What ``apply_plan`` did: planned and unplanned layers, the arena, and run-time fallbacks."""

    plan: Plan
    arena: torch.Tensor
    planned: dict[str, str] = field(default_factory=dict)  # module name -> plan layer
    unplanned: list[str] = field(default_factory=list)  # module names left to stock PyTorch
    stock: dict[str, str] = field(default_factory=dict)  # module name -> plan layer left to stock PyTorch
    why_stock: dict[str, str] = field(default_factory=dict)  # plan layer -> why (engine.stock)
    fallbacks: dict[str, int] = field(default_factory=dict)  # module name -> calls run stock (shape changed)
    per_call: bool = False  # workspace per call, not from the arena
    handles: dict[str, int] = field(default_factory=dict)  # module name -> op handle, while detached

    @property
    def workspace(self) -> int:
        """Bytes of the arena held while the plan is applied (0 with per-call workspace)."""
        return 0 if self.per_call else self.arena.numel()

    def summary(self) -> str:
        p = self.plan
        ws = "workspace per call" if self.per_call else f"workspace arena {format_size(self.workspace)}"
        lines = [
            f"{p.mode.upper()} plan for {p.network} b{p.batch} {p.precision} {p.layout}: "
            f"{len(self.planned)} convolutions planned, {ws}"
        ]
        if self.unplanned:
            lines.append(f"stock PyTorch (not in the plan): {', '.join(self.unplanned)}")
        if self.stock:
            lines.append(
                f"stock PyTorch (the plan gains less than its host cost there): {len(self.stock)} convolutions"
            )
        return "\n".join(lines)


class PlannedConv2d(nn.Conv2d):
    """An ``nn.Conv2d`` whose convolutions run a plan's micro-configurations (engine.pytorch.conv).

    Inputs the plan was not made for (another batch size, dtype or device) run stock ``F.conv2d``
    and are counted in ``model.ucudnn.fallbacks``; under autocast the planned precision is used.
    """

    def _setup(self, handle: int, name: str, applied: AppliedPlan) -> None:
        L = ops.layer(handle)
        self._handle, self._name, self._applied = handle, name, applied
        self._shape = torch.Size((L.sig.n, L.sig.c, L.sig.h, L.sig.w))
        self._dtype = ops.TORCH_DTYPE[L.sig.precision]
        self._amp = self._dtype != torch.float32  # autocast casts to the planned precision

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the hot path of every planned layer and step: attributes read once, no tuple or device objects built
        dt, w = self._dtype, self.weight
        if w.dtype != dt or x.dtype != dt:
            if not (self._amp and torch.is_autocast_enabled()):  # (no argument: CUDA's, without parsing one)
                return self._stock(x)
            if x.dtype != dt:  # as autocast casts the input; weight and bias are cast inside planned_conv
                x = x.to(dt)
        if x.shape != self._shape or x.get_device() != w.get_device():
            return self._stock(x)
        return ops.planned_conv(x, w, self.bias, self._handle, dt)

    def _stock(self, x: torch.Tensor) -> torch.Tensor:
        fb = self._applied.fallbacks
        if self._name not in fb:
            warnings.warn(
                f"{self._name}: input {tuple(x.shape)} {x.dtype} on {x.device} is not what the plan was "
                f"made for ({tuple(self._shape)} {self._dtype} on {self.weight.device}); running stock PyTorch",
                stacklevel=3,
            )
        fb[self._name] = fb.get(self._name, 0) + 1
        return super().forward(x)


def _device_check(plan: Plan, device: torch.device) -> None:
    if ops is None:
        raise EngineError(
            f"planned convolutions need the cuDNN frontend, which does not load here ({_NO_FRONTEND}); "
            f"install the 'gpu' extra on a GPU host: python3 -m pip install -e \".[gpu]\""
        )
    import cudnn

    prof = plan.provenance.get("profile") or {}
    gpu, here_gpu = prof.get("gpu"), torch.cuda.get_device_name(device)
    v = cudnn.backend_version()
    here_cudnn = f"{v // 10000}.{v % 10000 // 100}.{v % 100}"
    if gpu != here_gpu or prof.get("cudnn_version") != here_cudnn:
        raise EngineError(
            f"the plan was profiled on {gpu} with cuDNN {prof.get('cudnn_version')}, but this is "
            f"{here_gpu} with cuDNN {here_cudnn}: engine ids are not portable; profile this GPU "
            f"(python -m engine torch-plan ...)"
        )


def apply_plan(
    model: nn.Module,
    plan,
    input_shape: tuple[int, int, int] | None = None,
    workspace: str | None = None,
    keep_stock: bool = True,
    graphs: bool = True,
) -> nn.Module:
    """Swap every convolution the plan covers for its planned kernels; returns ``model`` (changed in place).

    ``plan`` is an engine.plan.Plan or a plan file, checked against ``model`` itself (engine.pytorch.checks);
    ``input_shape`` the per-sample input (C, H, W), by default the one the plan's network name records
    (``pkg.mod:build@3x64x64``) or the zoo network's. The model must already be on the GPU, in the plan's
    dtype/layout for parameters (``model.cuda()``, ``.to(memory_format=torch.channels_last)`` for NHWC plans).
    ``workspace``: ``"arena"`` (one tensor, allocated here) or ``"per-call"`` (each kernel's from the
    caching allocator while it runs); default per-call for a plan with per-kernel limits, else arena.
    ``keep_stock``: leave to stock PyTorch the layers where the plan gains less than its host cost (engine.stock).
    ``graphs``: launch each kernel's micro-batch pieces as one CUDA graph, captured per address set at its second
    use (engine.pytorch.kernelgraph); False launches every piece from the host on each call.
    Every argument is checked before the cuDNN frontend is loaded; a mistake is one ``EngineError``.
    """
    checks.checked_model(model)
    checks.checked_workspace(workspace)
    checks.checked_switches(keep_stock=keep_stock, graphs=graphs)
    input_shape = checks.checked_input_shape(input_shape)
    plan = checks.loaded_plan(plan)
    if plan.provenance.get("profile", {}).get("synthetic"):
        raise EngineError("the plan was made from a SYNTHETIC profile; its engines do not exist on a GPU")
    if workspace is None:
        workspace = "per-call" if plan.limits else "arena"
    per_call = workspace == "per-call"
    device = checks.model_device(model)
    if input_shape is None:
        input_shape = checks.default_input_shape(plan)
    _device_check(plan, device)
    if hasattr(model, "ucudnn"):
        remove_plan(model)
    dtype = next(model.parameters()).dtype
    calls = checks.conv_calls(model, torch.zeros((1, *input_shape), device=device, dtype=dtype))
    layers, matched, unplanned = checks.match_plan(plan, calls)
    stays = stock_layers(plan, torch.backends.cudnn.benchmark, graphs) if keep_stock else {}
    stock = {name: layer for name, _, layer in matched if layer in stays}
    matched = [m for m in matched if m[0] not in stock]

    from ..gpu.graphs import ExecutionPlans
    from ..gpu.pieces import Pieces

    context = ops.TorchContext.get(device.index or 0)
    plans = ExecutionPlans(context, include_rtc=True)
    arena_size = plan.arena_size if plan.mode == "wd" else 0
    built = []
    for name, mod, plan_layer in matched:
        ks = layers[plan_layer]
        pieces = {}
        for kind, k in ks.items():
            sig = KernelSignature.from_key(k.signature, plan.batch)
            pieces[kind] = Pieces(k.id, sig, [(m.batch, m.plan) for m in k.micro], plans, k.offset or 0)
            if plan.mode == "wd" and pieces[kind].workspace > k.workspace:
                raise EngineError(
                    f"{k.id}: its plans need {pieces[kind].workspace} B of workspace but its WD "
                    f"segment holds {k.workspace} B"
                )
            if plan.mode == "wr":
                arena_size = max(arena_size, pieces[kind].workspace)
        built.append((name, mod, plan_layer, pieces))
    arena = torch.empty(1 if per_call else max(arena_size, 1), dtype=torch.uint8, device=device)
    applied = AppliedPlan(plan, arena, unplanned=unplanned, stock=stock, why_stock=stays, per_call=per_call)
    arena_ptr = arena.data_ptr()
    for name, mod, plan_layer, pieces in built:
        L = ops.PlannedLayer(
            name,
            pieces["F"],
            pieces.get("BD"),
            pieces["BF"],
            None if per_call else arena_ptr,
            context,
            mod.stride,
            mod.padding,
            mod.dilation,
            mod.groups,
            graphs,
        )
        mod.__class__ = PlannedConv2d  # same Parameters, buffers, hooks and state-dict keys
        mod._setup(ops.register(L), name, applied)
        applied.planned[name] = plan_layer
    # a model dropped without remove_plan must not leave its built plans in the op registry
    weakref.finalize(applied, _release, [m._handle for m in model.modules() if isinstance(m, PlannedConv2d)])
    model.ucudnn = applied
    if applied.unplanned:
        warnings.warn(
            f"{len(applied.unplanned)} convolution(s) are not in the plan and stay stock PyTorch: "
            f"{', '.join(applied.unplanned)}",
            stacklevel=2,
        )
    return model


def _release(handles: list[int]) -> None:
    for h in handles:
        ops.release(h)


def remove_plan(model: nn.Module) -> nn.Module:
    """Turn planned convolutions back into stock ``nn.Conv2d`` (the arena is freed with the last reference)."""
    checks.checked_model(model, "remove_plan")
    if not isinstance(model.__dict__.get("ucudnn"), AppliedPlan):
        raise EngineError("remove_plan: this model has no plan applied (engine.pytorch.apply_plan applies one)")
    _release(list(detach_plan(model).handles.values()))
    return model


def detach_plan(model: nn.Module) -> AppliedPlan:
    """Stock ``nn.Conv2d`` again, but the built kernels stay registered for as long as the returned
    ``AppliedPlan`` lives: ``attach_plan`` puts them back without building anything (engine.pytorch.autoplan
    keeps one applied plan per input shape)."""
    applied = model.__dict__.pop("ucudnn")
    applied.handles = {}
    for name, mod in model.named_modules():
        if isinstance(mod, PlannedConv2d):
            applied.handles[name] = mod._handle
            mod.__class__ = nn.Conv2d
            for attr in ("_handle", "_name", "_applied", "_shape", "_dtype", "_amp"):
                mod.__dict__.pop(attr, None)
    return applied


def attach_plan(model: nn.Module, applied: AppliedPlan) -> None:
    """Put back the planned convolutions ``detach_plan`` took off ``model``."""
    for name, handle in applied.handles.items():
        mod = model.get_submodule(name)
        mod.__class__ = PlannedConv2d
        mod._setup(handle, name, applied)
    model.ucudnn = applied
