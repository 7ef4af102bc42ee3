"""What ``apply_plan`` checks before it builds anything: its arguments, the model's device, and the plan
against the model in hand.

Every check here runs before the cuDNN frontend is imported, so a host without a GPU or without the
frontend still learns which argument is wrong, in one ``EngineError`` line that says what to do. The plan
is checked against the model it is applied to, never against a network rebuilt from the name stored in
the plan: that name may be user code a fresh process must not import (engine.pytorch.loader.trust), and
rebuilding a zoo or torchvision network would only repeat work. One batch-1 forward with hooks records
every convolution call (``conv_calls``); each plan layer must match one call with all its kernels'
signatures (Forward, BackwardData, BackwardFilter).
"""

from __future__ import annotations

import copy
import os

import torch
from torch import nn
from torch.nn.modules.lazy import LazyModuleMixin
from torch._subclasses.fake_tensor import FakeTensorMode, is_fake

from ..errors import EngineError, PlanFormatError
from ..fileio import load_json_file, short
from ..kernels import KernelKind, KernelSignature
from ..plan import Plan
from .trace import no_autotune

WORKSPACE = ("arena", "per-call")


def checked_model(model, what: str = "apply_plan") -> nn.Module:
    if not isinstance(model, nn.Module):
        raise EngineError(
            f"{what} needs a torch.nn.Module, got {type(model).__name__} {short(model)}: build the "
            f"model first (e.g. torchvision.models.resnet50().cuda()) and pass it"
        )
    return model


def checked_workspace(workspace) -> None:
    if workspace is not None and workspace not in WORKSPACE:
        raise EngineError(
            f"workspace must be 'arena', 'per-call' or None (per-call for a plan with per-kernel "
            f"limits, else arena), got {short(workspace)}"
        )


def checked_switches(**switches) -> None:
    """``keep_stock``, ``graphs``: True or False, nothing else that Python would read as one."""
    for name, value in switches.items():
        if not isinstance(value, bool):
            raise EngineError(f"{name} must be True or False, got {short(value)}")


def checked_input_shape(input_shape) -> tuple[int, int, int] | None:
    """(C, H, W) of one sample, or None."""
    if input_shape is None:
        return None
    try:
        shape = tuple(input_shape)
    except TypeError:
        shape = ()
    if len(shape) != 3 or any(isinstance(d, bool) or not isinstance(d, int) or d < 1 for d in shape):
        raise EngineError(
            f"input_shape must be the per-sample input (C, H, W) as 3 positive integers, e.g. "
            f"(3, 224, 224), got {short(input_shape)}"
        )
    return shape


def loaded_plan(plan) -> Plan:
    """``plan`` as a validated Plan, not yet checked against any network (that is ``match_plan``'s job)."""
    if isinstance(plan, Plan):
        return plan
    if not isinstance(plan, (str, os.PathLike)):
        raise EngineError(
            f"plan must be an engine.plan.Plan or the path of a plan file (python -m engine "
            f"torch-plan ... -o plan.json), got {type(plan).__name__} {short(plan)}"
        )
    what = f"plan {short(str(plan))}"
    doc = load_json_file(plan, what, PlanFormatError)
    try:
        return Plan.from_dict(doc)
    except PlanFormatError as err:
        raise PlanFormatError(f"{what}: {err}") from None


def model_device(model: nn.Module, what: str = "apply_plan") -> torch.device:
    """The one CUDA device all of the model's parameters and buffers are on."""
    devices = {t.device for t in (*model.parameters(), *model.buffers())}
    if not devices:
        raise EngineError(f"{what}: the model has no parameters, so it has no convolutions to plan")
    if len(devices) > 1:
        names = ", ".join(sorted(str(d) for d in devices))
        raise EngineError(
            f"{what}: the model's parameters and buffers are on several devices ({names}); move it "
            f"whole to one GPU first (model.cuda())"
        )
    if any(d.type == "meta" for d in devices):
        raise EngineError(
            f"{what}: the model is on the meta device (shapes only, no weights); build it on the GPU "
            f"or materialise it first (model.to_empty(device='cuda'), then initialise its weights)"
        )
    device = devices.pop()
    if device.type != "cuda":
        if not torch.cuda.is_available():
            raise EngineError(
                f"{what} runs planned convolutions on a CUDA GPU, and this host has none "
                f"(torch.cuda.is_available() is False); run it on a GPU host"
            )
        raise EngineError(f"{what} needs the model on the GPU first (model.cuda()); it is on {device}")
    return device


def default_input_shape(plan: Plan) -> tuple[int, int, int]:
    """The per-sample input of the plan's network: its torch name says it, a zoo or spec network's data
    layer gives it (built without torch); otherwise the caller must say."""
    from ..netnames import is_torch_name, split_name

    if is_torch_name(plan.network):
        return split_name(plan.network)[1]
    from ..zoo import get_network

    try:
        return tuple(get_network(plan.network, 1).layers[0].out_shape)
    except (EngineError, ValueError, OSError) as err:
        raise EngineError(
            f"the plan's network {short(plan.network)} does not say the model's input shape "
            f"({' '.join(str(err).split())[:200]}); pass input_shape=(C, H, W)"
        ) from None


def conv_calls(model: nn.Module, example: torch.Tensor) -> list[tuple[str, nn.Conv2d, tuple[int, int, int]]]:
    """(module name, module, per-sample input shape) of every Conv2d call of one forward, in call order."""
    names = {m: n for n, m in model.named_modules()}
    calls, hooks = [], []
    for m in names:
        if type(m) is nn.Conv2d:  # apply_plan removed any earlier plan first
            hooks.append(
                m.register_forward_pre_hook(lambda mod, args: calls.append((names[mod], mod, tuple(args[0].shape[1:]))))
            )
    was_training = model.training
    try:
        model.eval()
        with torch.no_grad():
            if not _on_fake_tensors(model, example):
                calls.clear()
                with no_autotune():
                    model(example)
    except Exception as err:  # noqa: BLE001 - the user's model on our example input: say which input
        raise EngineError(
            f"the model does not run on an input of shape {tuple(example.shape)} "
            f"({type(err).__name__}: {' '.join(str(err).split())[:200]}); pass the per-sample "
            f"input_shape=(C, H, W) the plan was made for"
        ) from None
    finally:
        model.train(was_training)
        for h in hooks:
            h.remove()
    return calls


def _on_fake_tensors(model: nn.Module, example: torch.Tensor) -> bool:
    """One forward on fake tensors: shapes only, no kernel runs (a real forward built a cuDNN plan per batch-1
    shape no training step runs, 4 s for EfficientNet-B0 on the H200). False, with every module's attributes,
    parameters, buffers, submodules and hooks as they were, where fake tensors cannot follow the forward
    (data-dependent Python, unmaterialised lazy modules) or it kept one (a tensor cached on a module): the
    caller runs it for real."""
    if any(isinstance(m, LazyModuleMixin) and m.has_uninitialized_params() for m in model.modules()):
        return False  # materialising changes the parameter objects themselves: only a real forward may
    state = []
    for m in model.modules():
        attrs = dict(vars(m))  # the same objects, among them the dicts of parameters, buffers, submodules, hooks
        state.append((m, attrs, {k: copy.copy(v) for k, v in attrs.items() if isinstance(v, dict | list)}))
    try:
        with FakeTensorMode(allow_non_fake_inputs=True):
            model(example)
        if not any(_holds_fake(m) for m, *_ in state):
            return True
    except Exception:  # noqa: BLE001 - the real forward says what is wrong, if anything is
        pass
    for m, attrs, contents in state:
        vars(m).clear()
        vars(m).update(attrs)
        for k, v in contents.items():  # refilled in place: hook handles hold these very dicts
            if isinstance(v, dict):
                attrs[k].clear()
                attrs[k].update(v)
            else:
                attrs[k][:] = v
    return False


def _holds_fake(m: nn.Module) -> bool:
    """A fake tensor among the module's attributes, or in a dict or list one of them is (parameters, buffers)."""
    values = list(vars(m).values())
    for v in list(values):
        values += v.values() if isinstance(v, dict) else v if isinstance(v, list) else ()
    return any(isinstance(v, torch.Tensor) and is_fake(v) for v in values)


def signature(mod: nn.Conv2d, chw, kind: KernelKind, batch: int, precision: str, layout: str) -> KernelSignature | None:
    """The module's kernel signature, or None if it has no cuDNN-plannable form here (padding modes, 'same')."""
    if mod.padding_mode != "zeros" or isinstance(mod.padding, str) or len(mod.kernel_size) != 2:
        return None
    c, h, w = chw
    return KernelSignature(
        kind,
        batch,
        c,
        h,
        w,
        mod.out_channels,
        *mod.kernel_size,
        *mod.padding,
        *mod.stride,
        *mod.dilation,
        mod.groups,
        precision,
        layout,
    )


def match_plan(plan: Plan, calls) -> tuple[dict[str, dict], list[tuple[str, nn.Conv2d, str]], list[str]]:
    """(plan layers by name -> {F/BD/BF: PlanKernel}, matched (module name, module, plan layer), unplanned
    module names). Plan layers are matched to the model's convolution calls in call order per Forward
    signature, so layers of one signature keep their own configurations (a per-step or WD plan may give them
    different ones); every plan layer must match a call, with the signatures of all its kernels."""
    layers: dict[str, dict] = {}
    for k in plan.kernels:
        layers.setdefault(k.layer, {})[k.kind.short] = k
    free: dict[str, list[str]] = {}
    for name, kernels in layers.items():
        if "F" not in kernels or "BF" not in kernels:
            raise EngineError(f"plan layer {name} lacks its Forward or BackwardFilter kernel")
        free.setdefault(kernels["F"].signature, []).append(name)
    matched, unplanned, seen = [], [], set()
    for name, mod, chw in calls:
        if mod in seen:
            raise EngineError(
                f"{name} is called more than once per forward; apply_plan plans each convolution "
                f"call separately and cannot share one module between them"
            )
        seen.add(mod)
        sig = signature(mod, chw, KernelKind.FORWARD, plan.batch, plan.precision, plan.layout)
        queue = free.get(sig.key) if sig else None
        if not queue:
            unplanned.append(name)
            continue
        plan_layer = queue.pop(0)
        for k in layers[plan_layer].values():
            own = signature(mod, chw, k.kind, plan.batch, plan.precision, plan.layout).key
            if k.signature != own:
                raise EngineError(
                    f"the plan does not match this model: plan kernel {k.id} has signature "
                    f"{k.signature} but {name}'s is {own}"
                )
        matched.append((name, mod, plan_layer))
    left = [n for q in free.values() for n in q]
    if left:
        raise EngineError(
            f"the plan does not match this model: {len(left)} planned layer(s) have no convolution "
            f"of that signature in the model ({', '.join(left[:5])}{', ...' if len(left) > 5 else ''});"
            f" was the plan made for {plan.network} b{plan.batch} with another input shape?"
        )
    return layers, matched, unplanned
