"""``optimize(model, budget="64MiB")``: mu-cuDNN for any model in one line, planned at its first forward.

Like ``torch.backends.cudnn.benchmark``, nothing is measured until the model runs: the first forward at
an input shape (with its precision and layout) imports the model as a Network
(engine.pytorch.importer.import_model), profiles the kernels this GPU's resumable cache lacks and plans
them (engine.gpu.planning, the path ``python -m engine torch-plan`` takes: the same cache, the same
``make_plan``), then applies the plan (``apply_plan``, checked against the model itself) before that
forward's convolutions run. Each shape keeps its applied plan, built once, in a bounded
least-recently-used cache, so alternating shapes (training and evaluation batches) switch plans without
rebuilding; a plan evicted from it is released (a backward still pending on it would fail). A shape that
cannot be planned (an input the Network cannot describe, a budget no configuration meets, a layer the
import refuses) stays stock PyTorch and is reported once, with the reason kept in ``stock``. Nothing is
written but the profile cache, and no ``trust`` is needed: the model is the one in hand, never rebuilt
from a name. A second process with the same cache measures nothing (``history[i]["measured"] == 0``).

``optimize`` returns the ``AutoPlan`` installed on the model (``model.ucudnn_auto``); ``remove()`` puts
stock convolutions back, and ``with optimize(model, ...):`` scopes it to a block.
"""

from __future__ import annotations

import sys
import time
import warnings
from collections import OrderedDict

import torch
from torch import nn

from ..errors import EngineError
from ..fileio import short
from . import checks

MODES = ("wr", "wd", "free")
DEFAULT_BUDGET = "64MiB"  # per kernel: the limit mu-cuDNN's evaluation and issue 22 compare stock PyTorch at
SMALLEST_INT_BUDGET = 1024  # budget=64 means 64 MiB to whoever types it, not 64 bytes: a smaller int is refused
PRECISION = {torch.float16: "fp16", torch.bfloat16: "bf16"}


def optimize(
    model,
    budget=None,
    mode="wr",
    *,
    policy="powerOfTwo",
    engines="sweep",
    max_workspace="1GiB",
    cache=None,
    workspace="per-call",
    max_shapes=8,
    progress=True,
    keep_stock=True,
    graphs=True,
) -> "AutoPlan":
    """Plan ``model``'s convolutions per input shape at its first forward there; returns the ``AutoPlan``.

    ``budget`` is WR's per-kernel workspace limit (``mode="wr"``, mu-cuDNN §III-B; default 64 MiB) or WD's
    total (``mode="wd"``, §III-C; required); ``mode="free"`` is WR at the device memory free when planning.
    ``policy``, ``engines``, ``max_workspace`` and ``cache`` are the profiler's (``python -m engine
    torch-plan``); ``workspace`` is apply_plan's (per-call: from the caching allocator while a kernel
    runs, as stock cuDNN takes it); ``max_shapes`` bounds the shapes kept applied; ``progress`` is True
    (lines on stderr with a time estimate), False, or a callable ``(done, total, message)``; ``keep_stock``
    is apply_plan's (layers where the plan gains less than its host cost stay stock PyTorch: engine.stock), and
    so is ``graphs`` (each kernel's pieces replayed as one CUDA graph per address set).
    The model must already be on its GPU (``model.cuda()``). Every argument is checked here.
    """
    from ..gpu import ENGINES
    from ..policies import batch_sizes
    from ..units import parse_size

    checks.checked_model(model, "optimize")
    if mode not in MODES:
        raise EngineError(
            f"mode must be 'wr' (budget per kernel), 'wd' (budget in total) or 'free' (WR at the "
            f"memory free when planning), got {short(mode)}"
        )
    if mode == "free" and budget is not None:
        raise EngineError("mode='free' takes no budget: the limit is the device memory free when planning")
    if mode == "wd" and budget is None:
        raise EngineError("mode='wd' needs budget=, the total workspace of all kernels (e.g. '256MiB')")
    if isinstance(budget, int) and not isinstance(budget, bool) and 0 < budget < SMALLEST_INT_BUDGET:
        raise EngineError(
            f"budget={budget} is {budget} bytes (a Python int counts bytes): write budget='{budget}MiB', or "
            f"'{budget}B' if bytes are meant"
        )
    if mode == "wr":
        budget = parse_size(DEFAULT_BUDGET if budget is None else budget)
    elif mode == "wd":
        budget = parse_size(budget)
    try:
        batch_sizes(policy, 1)
    except (TypeError, ValueError) as err:
        raise EngineError(f"policy: {' '.join(str(err).split())}") from None
    if engines not in ENGINES:
        raise EngineError(f"engines must be one of {', '.join(map(repr, ENGINES))}, got {short(engines)}")
    parse_size(max_workspace)
    if cache is not None and not isinstance(cache, str):
        raise EngineError(f"cache must be the path of the profile cache (a string) or None, got {short(cache)}")
    checks.checked_workspace(workspace)
    if isinstance(max_shapes, bool) or not isinstance(max_shapes, int) or max_shapes < 1:
        raise EngineError(f"max_shapes must be a positive integer, got {short(max_shapes)}")
    checks.checked_switches(keep_stock=keep_stock, graphs=graphs)
    if not (isinstance(progress, bool) or callable(progress)):
        raise EngineError(f"progress must be True, False or a callable (done, total, message), got {short(progress)}")
    device = _check_host(model)
    old = model.__dict__.get("ucudnn_auto")
    if old is not None:
        old.remove()
    if "ucudnn" in model.__dict__:
        _remove(model)
    settings = dict(mode=mode, budget=budget, policy=policy, engines=engines, max_workspace=max_workspace, cache=cache)
    auto = AutoPlan(model, device, settings, workspace, max_shapes, progress, keep_stock, graphs)
    model.ucudnn_auto = auto
    return auto


class AutoPlan:
    """The plans ``optimize`` made for one model, per input key (shape, precision, layout)."""

    def __init__(
        self,
        model: nn.Module,
        device,
        settings: dict,
        workspace: str | None,
        max_shapes: int,
        progress,
        keep_stock: bool,
        graphs: bool,
    ):
        self.model, self.device, self.settings = model, device, settings
        self.workspace, self.max_shapes, self.progress = workspace, max_shapes, progress
        self.keep_stock, self.graphs = keep_stock, graphs
        self.plans: OrderedDict[tuple, object] = OrderedDict()  # key -> AppliedPlan, least recent first
        self.stock: dict[tuple, str] = {}  # key -> why it runs stock PyTorch
        self.history: list[dict] = []  # one entry per shape planned
        self.current: tuple | None = None
        self._busy = False
        self._hook = model.register_forward_pre_hook(self._before)

    def __enter__(self) -> "AutoPlan":
        return self

    def __exit__(self, *exc) -> None:
        self.remove()

    def remove(self) -> None:
        """Stock convolutions again; every plan built here is released."""
        self._hook.remove()
        if self.current is not None:
            _detach(self.model)
        self.plans.clear()
        self.current = None
        self.model.__dict__.pop("ucudnn_auto", None)

    def key(self, x) -> tuple | str:
        """(shape, precision, layout) of an input, or why no plan can run it."""
        if not isinstance(x, torch.Tensor):
            return f"the model's first argument is a {type(x).__name__}, not a tensor"
        if x.dim() != 4:
            return f"input of {x.dim()} dimensions, not N, C, H, W"
        if x.device != self.device:
            return f"input on {x.device}, the model on {self.device}"
        if torch.is_autocast_enabled("cuda"):
            precision = PRECISION.get(torch.get_autocast_dtype("cuda"))
        elif x.dtype == torch.float32:
            precision = "tf32" if torch.backends.cudnn.allow_tf32 else "fp32"
        else:
            precision = PRECISION.get(x.dtype)
        if precision is None:
            return f"input of dtype {x.dtype}, which no plan covers"
        nhwc = x.is_contiguous(memory_format=torch.channels_last) and not x.is_contiguous()
        return tuple(x.shape), precision, "NHWC" if nhwc else "NCHW"

    def _before(self, module, args) -> None:
        if self._busy:  # the forwards of import and apply_plan themselves
            return
        key = self.key(args[0] if args else None)
        if isinstance(key, str):
            self._run_stock(("input", key), key)
            return
        if key == self.current:
            self.plans.move_to_end(key)
            return
        if key in self.stock:
            self._run_stock(key, self.stock[key])
            return
        if key in self.plans:
            self._switch(key)
            return
        if self.device.type == "cuda" and torch.cuda.is_current_stream_capturing():
            self._run_stock(
                key,
                "first seen while a CUDA graph is captured, where nothing can be profiled; run "
                "one eager forward at this shape first",
            )
            return
        self._busy = True
        try:
            applied = self._plan(key)
        except EngineError as err:
            self._run_stock(key, str(err))
            return
        finally:
            self._busy = False
        self.plans[key] = applied
        self.current = key
        while len(self.plans) > self.max_shapes:
            self.plans.popitem(last=False)

    def _plan(self, key):
        """Import, profile what is missing, plan and apply for ``key``; the model ends with that plan."""
        from .importer import import_model

        (n, *chw), precision, layout = key
        chw = tuple(chw)
        if self.current is not None:
            self.plans[self.current] = _detach(self.model)
            self.current = None
        name = f"{type(self.model).__name__}@{'x'.join(map(str, chw))}"
        net = import_model(
            self.model,
            chw,
            n,
            name,
            f"{type(self.model).__name__} as optimize() saw it, input {'x'.join(map(str, chw))}",
        )
        t0 = time.perf_counter()
        done = _profile_and_plan(
            net,
            precision=precision,
            layout=layout,
            progress=self._progress(name),
            status=self._status(name),
            **self.settings,
        )
        applied = _apply(self.model, done.plan, chw, self.workspace, self.keep_stock, self.graphs)
        self.history.append(
            dict(
                shape=key[0],
                precision=precision,
                layout=layout,
                graphs=done.graphs,
                measured=done.measured,
                profile_s=round(done.seconds, 2),
                seconds=round(time.perf_counter() - t0, 2),
                budget=done.budget,
                predicted_ms=done.plan.totals.time_ms,
            )
        )
        return applied

    def _switch(self, key) -> None:
        if self.current is not None:
            self.plans[self.current] = _detach(self.model)
        _attach(self.model, self.plans[key])
        self.plans.move_to_end(key)
        self.current = key

    def _run_stock(self, key, why: str) -> None:
        if self.current is not None:
            self.plans[self.current] = _detach(self.model)
            self.current = None
        if key not in self.stock:
            self.stock[key] = why
            if len(self.stock) > 64:  # bounded like the plans: the oldest reason goes first
                self.stock.pop(next(iter(self.stock)))
            shape = key[0] if isinstance(key[0], tuple) else "this input"
            warnings.warn(f"optimize: {shape} runs stock PyTorch convolutions: {why}", stacklevel=3)

    def _status(self, name: str):
        """With the printed progress (progress=True), one line when an engine sweep will take long."""
        if self.progress is not True:
            return None
        from ..gpu.progress import sweep_hint

        def say(line: str) -> None:
            print(f"optimize {name}: {line}", file=sys.stderr, flush=True)

        return sweep_hint(self.settings["engines"], say, option='engines="heuristics"')

    def _progress(self, name: str):
        if callable(self.progress):
            return self.progress
        if not self.progress:
            return None
        last = [0.0]

        def show(done: int, total: int, msg: str) -> None:
            now = time.perf_counter()
            if done == total or now - last[0] >= 2.0:
                last[0] = now
                print(f"optimize {name}: {done}/{total} graphs; {msg}", file=sys.stderr, flush=True)

        return show


# --- the GPU side (CPU tests replace these) --------------------------------------------------------


def _check_host(model: nn.Module):
    """The model's CUDA device, once this host can profile and run plans there."""
    device = checks.model_device(model, "optimize")
    from ..gpu import available

    ok, why = available()
    if not ok:
        raise EngineError(f"optimize profiles this GPU and runs plans through the cuDNN frontend: {why}")
    return device


def _profile_and_plan(net, **kwargs):
    from ..gpu.planning import profile_and_plan

    return profile_and_plan(net, command="engine.pytorch.optimize", **kwargs)


def _apply(model: nn.Module, plan, input_shape, workspace, keep_stock: bool, graphs: bool):
    from .apply import apply_plan

    with warnings.catch_warnings():  # convolutions left stock are listed in model.ucudnn.unplanned
        warnings.simplefilter("ignore")
        return apply_plan(model, plan, input_shape, workspace, keep_stock, graphs).ucudnn


def _detach(model: nn.Module):
    from .apply import detach_plan

    return detach_plan(model)


def _attach(model: nn.Module, applied) -> None:
    from .apply import attach_plan

    attach_plan(model, applied)


def _remove(model: nn.Module) -> None:
    from .apply import remove_plan

    remove_plan(model)
