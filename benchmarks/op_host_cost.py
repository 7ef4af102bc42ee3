"""Host cost of a planned PyTorch convolution: host microseconds per op call and per piece, old path vs new.

    python benchmarks/op_host_cost.py measure -o benchmarks/reports/op-host-cost.json   # GPU host
    python benchmarks/op_host_cost.py report benchmarks/reports/op-host-cost.json       # anywhere

One convolution (64 -> 64 channels, 3x3, 14x14, mini-batch 64) is split into 1, 2, 4 and 8 equal
micro-batches, each direction run with one plan at every split: cuDNN's first heuristic plan at micro-batch 8
that builds at 64, 32, 16 and 8 (common_plan). Paths:

- ``new``: the ops of engine.pytorch.conv (``torch.library.Library`` define/impl, one call runs every piece
  through the frontend's pre-indexed execute) and, with autograd, ``planned_conv`` (a ``torch.autograd.Function``);
- ``old``: the ops as they were at 40e3c99, copied below as the baseline: ``@torch.library.custom_op`` with
  ``register_autograd``, one Python closure per piece calling the frontend's dict-based lowered execute,
  ``torch.cuda.current_stream()`` per call;
- the registrations compared over the same new kernels: ``custom_op`` + ``register_autograd``, ``Library`` +
  ``register_autograd``, ``Library`` + ``autograd.Function`` (the one engine.pytorch.conv uses);
- ``launch``: engine.gpu.pieces' launch alone, no op (the floor of this design), and the old closures alone;
- ``forward/new, no bias`` and ``forward/new impl, no dispatcher`` (the op's Python body called directly): where
  the forward op's time goes.

Host time: ``time.perf_counter`` around each call while a spin kernel keeps the GPU busy (host_and_elapsed_us),
median of 192 calls after 16 warm-up calls; elapsed time per call on a free GPU from CUDA events around 64
back-to-back calls. Per piece: the least-squares slope of host time over the number of pieces. With ``--model``, one
ResNet-50 b64 fp16 channels_last AMP training step (plan from the bundled H100 profile at 256 MiB per kernel,
as benchmarks/torch_training.py) is timed eagerly: stock, the old ops and the new ops, and the built plans
are counted by the behaviour note a per-layer native CUDA graph needs. ``report`` writes
benchmarks/reports/op-host-cost.md from the JSON alone.
"""

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.fileio import atomic_write  # noqa: E402

PIECES = (1, 2, 4, 8)
BATCH = 64
CALLS, REPEATS, WARMUP, DRAIN = 64, 3, 16, 16
SPIN_HZ = 1.98e9  # the H100's SM clock: torch.cuda._sleep spins for cycles
TARGETS = {"per_piece_us": 15.0, "per_call_us": 30.0}
OLD_PLANS = "each piece count its own first heuristic plan"  # the runs before common_plan, which do not say


# --- the old path (engine/pytorch/conv.py at 40e3c99), kept here only as the baseline ----------------------

_REGISTERED: dict = {}  # the ops below are registered once per process; later layers join their registry


def legacy_ops(torch, layers: dict):
    """The ops of 40e3c99 under the namespace ``ucudnn_old``; ``layers``: handle -> new PlannedLayer, whose
    pieces are rebuilt as that version's per-piece closures (``ConvGraph.executor``: a dict per launch).
    (The annotations below are evaluated where they stand: the custom ops read them for their schemas.)"""
    if "old" in _REGISTERED:
        forward, backward_filter, old, Layer = _REGISTERED["old"]
        old.update({h: Layer(L) for h, L in layers.items()})
        return forward, backward_filter, old

    class Pieces:
        def __init__(self, k, ctx):
            self.pieces = [
                (start, b, cg.executor(index, ctx), cg.built[index])
                for (start, b, _name), (cg, index) in zip(k.micro, k.graphs)
            ]
            self.per = k.per

        @property
        def workspace(self):
            return max((p[3] for p in self.pieces), default=0)

        def launch(self, x, w, y, ws, only=slice(None)):
            for start, _b, run, _ws in self.pieces[only]:
                run({"x": x + start * self.per["x"], "w": w, "y": y + start * self.per["y"]}, ws)

    class Layer:
        def __init__(self, L):
            self.forward, self.backward_filter = Pieces(L.forward, L.context), Pieces(L.backward_filter, L.context)
            self.backward_data = Pieces(L.backward_data, L.context) if L.backward_data is not None else None
            self.L, self.context, self.arena = L, L.context, L.ws_f
            self.calls = {"forward": 0, "backward_data": 0, "backward_filter": 0}
            self.per_call = False

        @property
        def sig(self):
            return self.L.sig

        @property
        def memory_format(self):
            return self.L.fmt

        def out_shape(self, x_shape):
            s = self.sig
            return (x_shape[0], s.k, s.out_h, s.out_w)

        def in_shape(self, y_shape):
            s = self.sig
            return (y_shape[0], s.c, s.h, s.w)

        def workspace(self, kernel, device):
            return self.arena, None

    state = {}

    def bind(ctx):
        stream = torch.cuda.current_stream().cuda_stream
        if stream != state.get(id(ctx)):
            ctx._set_stream(handle=ctx.handle, stream=stream)
            state[id(ctx)] = stream

    def dense(t, fmt):
        t = t.contiguous(memory_format=fmt)
        return t if t.data_ptr() % 16 == 0 else t.clone(memory_format=fmt)

    old = {h: Layer(L) for h, L in layers.items()}

    @torch.library.custom_op("ucudnn_old::conv_forward", mutates_args=())
    def conv_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, handle: int) -> torch.Tensor:
        L = old[handle]
        fmt = L.memory_format
        x, weight = dense(x, fmt), dense(weight, fmt)
        y = torch.empty(L.out_shape(x.shape), dtype=x.dtype, device=x.device, memory_format=fmt)
        bind(L.context)
        ws, _keep = L.workspace(L.forward, x.device)
        L.forward.launch(x.data_ptr(), weight.data_ptr(), y.data_ptr(), ws)
        if bias is not None:
            y.add_(bias.view(1, -1, 1, 1))
        L.calls["forward"] += 1
        return y

    @conv_forward.register_fake
    def _(x, weight, bias, handle):
        L = old[handle]
        return torch.empty(L.out_shape(x.shape), dtype=x.dtype, device=x.device, memory_format=L.memory_format)

    @torch.library.custom_op("ucudnn_old::conv_backward_data", mutates_args=())
    def conv_backward_data(grad_y: torch.Tensor, weight: torch.Tensor, handle: int) -> torch.Tensor:
        L = old[handle]
        fmt = L.memory_format
        grad_y, weight = dense(grad_y, fmt), dense(weight, fmt)
        dx = torch.empty(L.in_shape(grad_y.shape), dtype=grad_y.dtype, device=grad_y.device, memory_format=fmt)
        bind(L.context)
        ws, _keep = L.workspace(L.backward_data, grad_y.device)
        L.backward_data.launch(grad_y.data_ptr(), weight.data_ptr(), dx.data_ptr(), ws)
        L.calls["backward_data"] += 1
        return dx

    @torch.library.custom_op("ucudnn_old::conv_backward_filter", mutates_args=())
    def conv_backward_filter(x: torch.Tensor, grad_y: torch.Tensor, weight: torch.Tensor, handle: int) -> torch.Tensor:
        L = old[handle]
        fmt, k = L.memory_format, L.backward_filter
        x, grad_y = dense(x, fmt), dense(grad_y, fmt)
        dw = torch.empty_like(weight, memory_format=fmt)
        bind(L.context)
        ws, _keep = L.workspace(k, x.device)
        xp, yp = x.data_ptr(), grad_y.data_ptr()
        k.launch(xp, dw.data_ptr(), yp, ws, slice(0, 1))
        if len(k.pieces) > 1:
            scratch = torch.empty_like(dw)
            acc = dw.float() if dw.dtype != torch.float32 else dw
            for i in range(1, len(k.pieces)):
                k.launch(xp, scratch.data_ptr(), yp, ws, slice(i, i + 1))
                acc.add_(scratch)
            if acc is not dw:
                dw.copy_(acc)
        L.calls["backward_filter"] += 1
        return dw

    def setup_context(ctx, inputs, output):
        x, weight, _bias, handle = inputs
        ctx.save_for_backward(x, weight)
        ctx.handle = handle

    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        grad_x = grad_w = grad_b = None
        L = old[ctx.handle]
        if ctx.needs_input_grad[0]:
            if L.backward_data is not None:
                grad_x = conv_backward_data(grad_y, weight, ctx.handle)
            else:
                grad_x = torch.nn.grad.conv2d_input(
                    x.shape, weight, grad_y, L.L.stride, L.L.padding, L.L.dilation, L.L.groups
                )
        if ctx.needs_input_grad[1]:
            grad_w = conv_backward_filter(x, grad_y, weight, ctx.handle)
        if ctx.needs_input_grad[2]:
            grad_b = grad_y.sum((0, 2, 3), dtype=torch.float32).to(grad_y.dtype)
        return grad_x, grad_w, grad_b, None

    conv_forward.register_autograd(backward, setup_context=setup_context)
    _REGISTERED["old"] = conv_forward, conv_backward_filter, old, Layer
    return conv_forward, conv_backward_filter, old


def registrations(torch, ops):
    """The same new kernels registered the two other ways: (custom_op + register_autograd, Library +
    register_autograd), each a callable (x, w, b, handle) -> y."""
    if "registrations" in _REGISTERED:
        return _REGISTERED["registrations"]

    def setup_context(ctx, inputs, output):
        ctx.save_for_backward(inputs[0], inputs[1])
        ctx.handle = inputs[3]

    def backward_with(bd, bf):
        def backward(ctx, grad_y):
            x, weight = ctx.saved_tensors
            gx = bd(grad_y, weight, ctx.handle) if ctx.needs_input_grad[0] else None
            gw = bf(x, grad_y, weight, ctx.handle) if ctx.needs_input_grad[1] else None
            gb = grad_y.sum((0, 2, 3), dtype=torch.float32).to(grad_y.dtype) if ctx.needs_input_grad[2] else None
            return gx, gw, gb, None

        return backward

    out = {}
    f = torch.library.custom_op(
        "ucudnn_co::conv_forward",
        ops._forward,
        mutates_args=(),
        schema="(Tensor x, Tensor weight, Tensor? bias, int handle) -> Tensor",
    )
    bd = torch.library.custom_op(
        "ucudnn_co::conv_backward_data",
        ops._backward_data,
        mutates_args=(),
        schema="(Tensor grad_y, Tensor weight, int handle) -> Tensor",
    )
    bf = torch.library.custom_op(
        "ucudnn_co::conv_backward_filter",
        ops._backward_filter,
        mutates_args=(),
        schema="(Tensor x, Tensor grad_y, Tensor weight, int handle) -> Tensor",
    )
    f.register_autograd(backward_with(bd, bf), setup_context=setup_context)
    out["custom_op + register_autograd"] = f
    lib = torch.library.Library("ucudnn_lib", "DEF")
    lib.define("conv_forward(Tensor x, Tensor weight, Tensor? bias, int handle) -> Tensor")
    lib.impl("conv_forward", ops._forward, "CUDA")
    torch.library.register_autograd(
        "ucudnn_lib::conv_forward",
        backward_with(ops.conv_backward_data, ops.conv_backward_filter),
        setup_context=setup_context,
        lib=lib,
    )
    out["Library + register_autograd"] = torch.ops.ucudnn_lib.conv_forward.default
    out["Library + autograd.Function"] = ops.planned_conv
    out["_keep"] = lib
    _REGISTERED["registrations"] = out
    return out


# --- measuring -------------------------------------------------------------------------------------------


def host_and_elapsed_us(torch, fn) -> tuple[float, float]:
    """(median host us per call with the GPU held busy, elapsed us per call on a free GPU) of ``fn()``.

    Elapsed: CUDA events around CALLS back-to-back calls. Host: ``time.perf_counter`` around each call, in
    blocks of DRAIN calls queued behind a spin kernel lasting about twice the block's elapsed time, so a call
    only enqueues work and never waits for the GPU (a launch that blocked would show the spin)."""
    for _ in range(WARMUP):
        fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(CALLS):
        fn()
    end.record()
    torch.cuda.synchronize()
    elapsed = start.elapsed_time(end) * 1e3 / CALLS
    spin = int(2 * DRAIN * elapsed * 1e-6 * SPIN_HZ)
    host = []
    for _ in range(REPEATS * CALLS // DRAIN):
        torch.cuda._sleep(spin)
        for _ in range(DRAIN):
            t0 = time.perf_counter()
            fn()
            host.append(time.perf_counter() - t0)
        torch.cuda.synchronize()
    return statistics.median(host) * 1e6, elapsed


def kernels_per_call(torch, fn, calls: int = 8) -> float:
    """GPU kernels one call of ``fn`` launches (torch.profiler's CUDA activity): each is a launch on the host,
    so host time per piece grows with the kernels an engine runs per execute."""
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    cuda = torch.autograd.DeviceType.CUDA
    return sum(e.device_type == cuda for e in prof.events()) / calls


def common_plan(plans, sig, sizes, cap: int = 64 << 20) -> str:
    """Name of cuDNN's first heuristic plan at the smallest of ``sizes`` that builds within ``cap`` bytes of
    workspace at every one of them: each piece count then runs the same engine, so the slope over the piece
    counts is the cost of a piece, not a difference between engines (until 2026-11-28 each size took its own
    first plan, and the committed H100 run's TF32 forward ran 4 GPU kernels a piece at 1 and 2 pieces, 3 at 4
    and 8: other engines)."""
    small = min(sizes)
    cg = plans.graph(sig, small)
    for name in cg.names[: cg.heuristic]:
        try:
            if all(plans.build(sig, b, name)[2] <= cap for b in sizes):
                return name
        except Exception:
            continue
    raise RuntimeError(f"no heuristic plan of {sig.key} at b={small} builds at every size {sorted(sizes)}")


def rel(path: str) -> str:
    """``path`` as from the repository root where it lies below it (the report's header names its inputs)."""
    p = Path(path).resolve()
    return str(p.relative_to(ROOT)) if p.is_relative_to(ROOT) else path


def slope(xs, ys) -> float:
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def measure_layer(torch, precision: str, layout: str) -> dict:
    from engine.gpu.graphs import ExecutionPlans
    from engine.gpu.pieces import Pieces
    from engine.kernels import KernelKind, KernelSignature
    from engine.pytorch import conv as ops

    ctx = ops.TorchContext.get(0)
    plans = ExecutionPlans(ctx)
    dtype, fmt = ops.TORCH_DTYPE[precision], ops.MEMORY_FORMAT[layout]
    kinds = (KernelKind.FORWARD, KernelKind.BACKWARD_DATA, KernelKind.BACKWARD_FILTER)
    layers, arena = {}, torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    sigs = [KernelSignature(k, BATCH, 64, 14, 14, 64, 3, 3, 1, 1, precision=precision, layout=layout) for k in kinds]
    names = {sig.kind: common_plan(plans, sig, [BATCH // p for p in PIECES]) for sig in sigs}
    for p in PIECES:
        b = BATCH // p
        built = [Pieces(f"bench:{sig.kind.short}", sig, [(b, names[sig.kind])] * p, plans) for sig in sigs]
        L = ops.PlannedLayer(f"p{p}", *built, arena.data_ptr(), ctx, (1, 1), (1, 1), (1, 1), 1)
        layers[ops.register(L)] = L
    old_forward, old_filter, old_layers = legacy_ops(torch, layers)
    regs = registrations(torch, ops)

    x = torch.randn(BATCH, 64, 14, 14, device="cuda", dtype=dtype).to(memory_format=fmt)
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=dtype).to(memory_format=fmt)
    bias = torch.randn(64, device="cuda", dtype=dtype)
    gy = torch.randn(BATCH, 64, 14, 14, device="cuda", dtype=dtype).to(memory_format=fmt)
    xg, wg, bg = (t.detach().clone().requires_grad_() for t in (x, w, bias))
    rows, kernels = [], {}
    for h, L in layers.items():
        p = len(L.forward)
        y = torch.empty_like(gy)
        ws = L.ws_f
        ptrs = (x.data_ptr(), w.data_ptr(), y.data_ptr())
        old_k = old_layers[h].forward

        def new_launch():
            L.context.bind()
            L.forward.launch(*ptrs, ws)

        def old_launch():
            old_k.launch(*ptrs, ws)

        cases = {
            "launch/new": new_launch,
            "launch/old": old_launch,
            "forward/new": lambda: ops.conv_forward(x, w, bias, h),
            "forward/new, no bias": lambda: ops.conv_forward(x, w, None, h),
            "forward/new impl, no dispatcher": lambda: ops._forward(x, w, bias, h),
            "forward/old": lambda: old_forward(x, w, bias, h),
            "backward_filter/new": lambda: ops.conv_backward_filter(x, gy, w, h),
            "backward_filter/old": lambda: old_filter(x, gy, w, h),
        }
        for name, f in regs.items():
            if not name.startswith("_"):
                cases[f"forward+backward/{name}"] = lambda f=f: f(xg, wg, bg, h).backward(gy)
        cases["forward+backward/old"] = lambda: old_forward(xg, wg, bg, h).backward(gy)
        if p == 1:  # stock PyTorch on the same tensors: what this host takes for cuDNN's own C++ path
            F = torch.nn.functional
            cases |= {
                "forward/stock": lambda: F.conv2d(x, w, bias, 1, 1),
                "forward/stock, no bias": lambda: F.conv2d(x, w, None, 1, 1),
                "backward_filter/stock": lambda: torch.ops.aten.convolution_backward(
                    gy, x, w, None, (1, 1), (1, 1), (1, 1), False, (0, 0), 1, (False, True, False)
                ),
                "forward+backward/stock": lambda: F.conv2d(xg, wg, bg, 1, 1).backward(gy),
            }
        kernels[p] = kernels_per_call(torch, new_launch)
        for case, fn in cases.items():
            host, elapsed = host_and_elapsed_us(torch, fn)
            rows.append({"case": case, "pieces": p, "host_us": round(host, 2), "elapsed_us": round(elapsed, 2)})
            print(f"{precision} {case:48s} pieces {p}: host {host:7.2f} us  elapsed {elapsed:8.2f} us", flush=True)
    agree = 0.0  # the old and new ops run the same plans: their results must be identical
    for h in layers:
        for new, old in (
            (ops.conv_forward(x, w, bias, h), old_forward(x, w, bias, h)),
            (ops.conv_backward_filter(x, gy, w, h), old_filter(x, gy, w, h)),
        ):
            agree = max(agree, float((new.float() - old.float()).abs().max()))
    return {
        "precision": precision,
        "layout": layout,
        "rows": rows,
        "kernels_per_launch": kernels,
        "max_abs_diff_new_vs_old": agree,
    }


def measure_model(torch, steps: int) -> dict:
    """ResNet-50 b64 fp16 channels_last AMP, eager training steps: stock, the old ops, the new ops."""
    import torchvision

    from engine.gpu.runtime import provenance
    from engine.planner import make_plan
    from engine.profile import Profile, resolve_profile
    from engine.pytorch import apply_plan
    from engine.pytorch import conv as ops
    from engine.zoo import get_network

    profile = Profile.load(resolve_profile("h100-resnet50-b64-fp16-nhwc-powerOfTwo"))
    here = provenance()
    if (profile.provenance["gpu"], profile.provenance["cudnn_version"]) != (here["gpu"], here["cudnn_version"]):
        return {
            "skipped": f"the bundled profile is of {profile.provenance['gpu']} cuDNN "
            f"{profile.provenance['cudnn_version']}, this is {here['gpu']} cuDNN "
            f"{here['cudnn_version']}"
        }
    torch.backends.cudnn.benchmark = True
    torch.manual_seed(0)
    fmt = torch.channels_last
    x = torch.randn(64, 3, 224, 224, device="cuda").to(memory_format=fmt)
    target = torch.randint(0, 1000, (64,), device="cuda")

    def timed(model) -> float:
        opt = torch.optim.SGD(model.parameters(), lr=1e-3)

        def step():
            with torch.autocast("cuda", dtype=torch.float16):
                loss = torch.nn.functional.cross_entropy(model(x), target)
            loss.backward()
            opt.step()
            opt.zero_grad(set_to_none=False)

        for _ in range(5):
            step()
        times = []
        for _ in range(steps):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step()
            b.record()
            torch.cuda.synchronize()
            times.append(a.elapsed_time(b))
        return round(statistics.median(times), 3)

    out = {"model": "resnet50", "batch": 64, "precision": "fp16 channels_last AMP", "steps": steps}
    model = torchvision.models.resnet50().cuda().to(memory_format=fmt)
    out["stock_ms"] = timed(model)
    plan = make_plan(
        profile,
        get_network("resnet50", 64),
        mode="wr",
        budget=256 << 20,
        policy="powerOfTwo",
        command="benchmarks/op_host_cost.py --model",
    )
    t0 = time.perf_counter()
    apply_plan(model, plan)
    out["apply_s"] = round(time.perf_counter() - t0, 1)
    layers = {m._handle: ops.layer(m._handle) for m in model.modules() if hasattr(m, "_handle")}
    kernels = [k for L in layers.values() for k in (L.forward, L.backward_data, L.backward_filter) if k is not None]
    notes = [cg.behavior_notes(i) for k in kernels for cg, i in k.graphs]
    out.update(
        kernels=len(kernels),
        pieces=sum(len(k) for k in kernels),
        plans=len(notes),
        native_cuda_graph=sum("SUPPORTS_CUDA_GRAPH_NATIVE_API" in n for n in notes),
    )
    out["new_ms"] = timed(model)
    old_forward, _f, _old = legacy_ops(torch, layers)
    new_op = ops.planned_conv

    def old_module_path(x, w, b, handle, dtype):  # 40e3c99's PlannedConv2d cast weight and bias under autocast
        return old_forward(x, w.to(dtype), None if b is None else b.to(dtype), handle)

    ops.planned_conv = old_module_path  # PlannedConv2d.forward looks it up per call
    try:
        out["old_ms"] = timed(model)
    finally:
        ops.planned_conv = new_op
    print(json.dumps(out), flush=True)
    return out


def measure(args) -> None:
    import torch

    from engine.gpu.runtime import provenance

    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = True
    data = {
        "format": "ucudnn-explorer-op-host-cost",
        "version": 1,
        "provenance": provenance("python benchmarks/op_host_cost.py " + " ".join(sys.argv[1:])),
        "torch": torch.__version__,
        "method": {
            "calls": CALLS,
            "repeats": REPEATS,
            "warmup": WARMUP,
            "drain_every": DRAIN,
            "batch": BATCH,
            "pieces": PIECES,
            "plans": "one per direction at every piece count (common_plan)",
        },
        "layers": [measure_layer(torch, "tf32", "NCHW"), measure_layer(torch, "fp16", "NHWC")],
    }
    if args.model:
        data["model"] = measure_model(torch, args.steps)
    atomic_write(Path(args.output), json.dumps(data, indent=1))
    print(f"wrote {args.output}")


# --- the report ------------------------------------------------------------------------------------------


def summary(layer: dict) -> dict:
    """Per case: host us per call at each piece count, and the slope per piece."""
    by = {}
    for r in layer["rows"]:
        by.setdefault(r["case"], {})[r["pieces"]] = r
    return {
        case: {
            "host": {p: r["host_us"] for p, r in ps.items()},
            "elapsed": {p: r.get("elapsed_us") for p, r in ps.items()},  # runs before 2026-11-26: none
            "per_piece": slope(list(ps), [r["host_us"] for r in ps.values()]) if len(ps) > 1 else None,
        }
        for case, ps in by.items()
    }


def _registrations(data: dict) -> str:
    """Which registration had the lowest forward+backward host time, in how many (precision, pieces) cells."""
    wins, cells = {}, 0
    for layer in data["layers"]:
        s = summary(layer)
        regs = {c: v for c, v in s.items() if c.startswith("forward+backward/") and not c.endswith(("/old", "/stock"))}
        for p in next(iter(regs.values()))["host"]:
            best = min(regs, key=lambda c: regs[c]["host"][p])
            wins[best] = wins.get(best, 0) + 1
            cells += 1
    return ", ".join(f"{c.split('/', 1)[1]} {n} of {cells}" for c, n in sorted(wins.items(), key=lambda kv: -kv[1]))


RUN_CASES = (
    "forward/new",
    "forward/stock",
    "forward/new, no bias",
    "forward/stock, no bias",
    "backward_filter/new",
    "backward_filter/stock",
    "forward+backward/Library + autograd.Function",
    "forward+backward/stock",
)


def _run_to_run(runs: dict[str, dict]) -> list[str]:
    """The single-piece host times of every run given (file name -> its JSON), one row per run and precision:
    how far the numbers move between runs of this script ("-": a case that run did not time)."""
    if len(runs) < 2:  # one run: its tables say it all
        return []
    rows = []
    for name, data in runs.items():
        for layer in data["layers"]:
            s = summary(layer)
            cells = [f"{s[c]['host'][1]:.1f}" if c in s else "-" for c in RUN_CASES]
            rows.append(
                f"| `{name}` ({data['provenance']['date']}) | {layer['precision']} {layer['layout']} | "
                + " | ".join([*cells, f"{s['forward/new']['per_piece']:.1f}"])
                + " |"
            )
    return [
        "## Run to run",
        "",
        "Host us per call, median, one piece: " + ", ".join(RUN_CASES) + "; and the planned forward's us per piece.",
        "",
        "| run | precision | " + " | ".join(RUN_CASES) + " | forward/new per piece |",
        "|---|---|" + "---|" * (len(RUN_CASES) + 1),
        *rows,
        "",
    ]


def report(args) -> None:
    data = json.loads(Path(args.input).read_text())
    prov, method = data["provenance"], data["method"]
    per_piece, per_call = TARGETS["per_piece_us"], TARGETS["per_call_us"]
    lines = [
        "# Host cost of the planned PyTorch convolution",
        "",
        f"<!-- generated: python benchmarks/op_host_cost.py report {rel(args.input)}"
        f"{' --earlier ' + ' '.join(map(rel, args.earlier)) if args.earlier else ''}; do not edit -->",
        "",
        f"{prov['gpu']}, driver {prov.get('driver', '?')}, cuDNN {prov['cudnn_version']}, "
        f"cudnn-frontend {prov.get('frontend_version', '?')}, PyTorch {data['torch']}, {prov['date']}. "
        f"Method: benchmarks/op_host_cost.py's docstring ({method['calls']} calls x {method['repeats']} "
        f"repeats, median host time per call; mini-batch {method['batch']} in 1, 2, 4 or 8 equal pieces, one "
        f"convolution 64->64 3x3 at 14x14; plans: {method.get('plans', OLD_PLANS)}). Targets (issue 22): "
        f"<= {per_piece:g} us per piece, <= {per_call:g} us per planned op call.",
        "",
        "## Against the targets",
        "",
        "| precision | path | launch per piece | forward per piece | forward call, 1 piece (with bias) | "
        "BackwardFilter call, 1 piece |",
        "|---|---|---|---|---|---|",
    ]

    def mark(v, limit):
        return "-" if v is None else f"{v:.1f}" + ("" if v <= limit else " (above)")

    def cell(s, case, what, limit):
        c = s.get(case)
        return "-" if c is None else mark(c["per_piece"] if what == "per_piece" else c["host"][1], limit)

    for layer in data["layers"]:
        s = summary(layer)
        for path in ("new", "old", "stock"):
            if f"forward/{path}" not in s:  # runs before 2026-11-29 did not time stock PyTorch
                continue
            lines.append(
                f"| {layer['precision']} {layer['layout']} | {path} | "
                f"{cell(s, f'launch/{path}', 'per_piece', per_piece)} | "
                f"{cell(s, f'forward/{path}', 'per_piece', per_piece)} | "
                f"{cell(s, f'forward/{path}', 'host', per_call)} | "
                f"{cell(s, f'backward_filter/{path}', 'host', per_call)} |"
            )
    lines += [
        "",
        "Host us, median. *launch*: the pieces' launches alone (new: engine.gpu.pieces over pointer arrays; "
        "old: a dict-based execute per piece), no op around them; *per piece*: the least-squares slope of host "
        "time over 1, 2, 4 and 8 pieces. Host time is measured with the GPU held busy by a spin kernel, so "
        "each call only enqueues work. *stock*: stock PyTorch on the same tensors (`F.conv2d`, and "
        "`aten.convolution_backward` for dW alone; `cudnn.benchmark` off), the whole mini-batch in one call: "
        "what this host takes for cuDNN's own C++ path, against which the targets can be read.",
        "",
        "## Registration",
        "",
        f"Lowest forward+backward host time per (precision, pieces): {_registrations(data)}. Each of those "
        "numbers holds one `Tensor.backward()` call, whose own fixed cost is most of it (see the tables).",
        "",
    ]
    for layer in data["layers"]:
        s = summary(layer)
        ps = sorted({p for c in s.values() for p in c["host"]})
        lines += [
            f"## {layer['precision']} {layer['layout']}: host us per call",
            "",
            "| case | " + " | ".join(f"{p} piece{'s' if p > 1 else ''}" for p in ps) + " | per piece |",
            "|---|" + "---|" * (len(ps) + 1),
        ]
        for case, c in s.items():
            cells = [f"{c['host'][p]:.1f}" if p in c["host"] else "-" for p in ps]
            slope_cell = "-" if c["per_piece"] is None else f"{c['per_piece']:.1f}"
            lines.append(f"| {case} | " + " | ".join(cells) + f" | {slope_cell} |")
        lines += [
            "",
            "Elapsed us per call with the GPU free (CUDA events over back-to-back calls; 1 to 8 pieces): "
            + ", ".join(
                f"{case} " + "-".join(f"{c['elapsed'][p]:.0f}" for p in sorted({min(c["elapsed"]), max(c["elapsed"])}))
                for case, c in s.items()
                if case.startswith(("forward/", "backward_filter/"))
            )
            + ". "
            f"New and old ops' results differ by at most {layer['max_abs_diff_new_vs_old']:g} (they run the "
            f"same plans).",
            "",
        ]
        if "kernels_per_launch" in layer:  # runs before 2026-11-26 did not count them
            lines += [
                "GPU kernels per launch/new call (torch.profiler): "
                + ", ".join(f"{p} piece(s) {n:g}" for p, n in layer["kernels_per_launch"].items())
                + ".",
                "",
            ]
    m = data.get("model")
    if m and "skipped" not in m:
        lines += [
            "## A training step",
            "",
            f"{m['model']} b{m['batch']} {m['precision']}, eager, median of {m['steps']} steps (CUDA events), "
            f"WR plan at 256 MiB per kernel from the bundled H100 profile: stock PyTorch "
            f"(`cudnn.benchmark=True`) **{m['stock_ms']:.2f} ms**, old ops **{m['old_ms']:.2f} ms** "
            f"({m['old_ms'] / m['stock_ms']:.2f}x stock), new ops **{m['new_ms']:.2f} ms** "
            f"({m['new_ms'] / m['stock_ms']:.2f}x stock). The plan has {m['kernels']} kernels in {m['pieces']} "
            f"pieces; {m['native_cuda_graph']} of its {m['plans']} built execution plans carry "
            f"SUPPORTS_CUDA_GRAPH_NATIVE_API (needed for a per-layer native CUDA graph, populate_cuda_graph). "
            f"apply_plan took {m['apply_s']:.1f} s.",
            "",
        ]
    elif m:
        lines += ["## A training step", "", f"Not run: {m['skipped']}.", ""]
    earlier_runs = {Path(path).name: json.loads(Path(path).read_text()) for path in args.earlier}
    lines += _run_to_run({Path(args.input).name: data, **earlier_runs})
    for name, earlier in earlier_runs.items():  # the same step in earlier runs of this script
        e, ep = earlier.get("model"), earlier["provenance"]
        if e and "skipped" not in e:
            lines += [
                f"An earlier run ({ep['date']}, {ep['gpu']} {ep.get('gpu_uuid', '')}, `{name}`): "
                f"stock {e['stock_ms']:.2f} ms, old ops {e['old_ms']:.2f} ms "
                f"({e['old_ms'] / e['stock_ms']:.2f}x), new ops {e['new_ms']:.2f} ms "
                f"({e['new_ms'] / e['stock_ms']:.2f}x).",
                "",
            ]
    out = Path(args.input).with_suffix(".md")
    atomic_write(out, "\n".join(lines))
    print(f"wrote {out}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default=str(ROOT / "benchmarks/reports/op-host-cost.json"))
    m.add_argument("--model", action="store_true", help="also time ResNet-50 training steps (stock, old, new)")
    m.add_argument("--steps", type=int, default=15)
    r = sub.add_parser("report")
    r.add_argument("input", nargs="?", default=str(ROOT / "benchmarks/reports/op-host-cost.json"))
    r.add_argument("--earlier", nargs="*", default=[], help="earlier runs' JSON: their training-step times too")
    args = ap.parse_args()
    (measure if args.cmd == "measure" else report)(args)


if __name__ == "__main__":
    main()
