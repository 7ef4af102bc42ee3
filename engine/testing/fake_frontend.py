"""A CPU stand-in for the cuDNN frontend under engine.pytorch.conv, for CPU tests and the host-cost harness.

Everything above the frontend's pre-indexed execute stays real: ``PlannedConv2d`` -> ``PlannedConvFunction``
-> the op bodies -> engine.gpu.pieces' pointer arrays. Below it, each built plan's
``_execute_with_raw_ptrs`` is either a no-op (``compute=False``: what remains is the host path's own cost,
benchmarks/op_host_cpu.py) or a float64 convolution of the micro-batch its three pointers address, read
and written in place in CPU memory (``compute=True``: the pointer arithmetic, the BackwardFilter sum and the
casts are checked against stock PyTorch, tests/test_torch_ops_cpu.py). A bare ``cudnn`` module stands in
where the frontend is missing (engine.gpu.graphs uses it only inside functions on this path); the handle's
stream lookup is a C builtin returning 0.
"""

from __future__ import annotations

import ctypes
import sys
import types

_ORDERS = (("x", "w", "y"), ("y", "x", "w"), ("w", "y", "x"))  # operand orders vary per graph, as cuDNN's


def load_ops():
    """(engine.pytorch.apply, engine.pytorch.conv), the latter importable without the frontend."""
    try:
        import cudnn  # noqa: F401
    except ImportError:
        sys.modules["cudnn"] = types.ModuleType("cudnn")
    from ..pytorch import apply, conv

    return apply, conv


def _noop_execute(address, count, workspace, backend_handle, plan_index):
    """The frontend's ``_execute_with_raw_ptrs`` with nothing behind it."""


class _Graph:
    def __init__(self, sig, b: int, order, compute: bool):
        self.sig, self.b, self.order, self.compute = sig, b, order, compute

    def raw_execute(self, index: int):
        return (self._execute if self.compute else _noop_execute), index, self.order

    def _execute(self, address, count, workspace, backend_handle, plan_index):
        import torch
        import torch.nn.functional as F

        from ..kernels import KernelKind
        from ..precision import PRECISIONS

        s, b = self.sig, self.b
        ptr = dict(zip(self.order, (ctypes.c_uint64 * count).from_address(address)))
        dtype = getattr(torch, PRECISIONS[s.precision].torch_dtype)
        fmt = torch.channels_last if s.layout == "NHWC" else torch.contiguous_format
        xs, ys, ws = (b, s.c, s.h, s.w), (b, s.k, s.out_h, s.out_w), (s.k, s.c // s.groups, s.r, s.s)
        args = ((s.stride_h, s.stride_w), (s.pad_h, s.pad_w), (s.dil_h, s.dil_w), s.groups)
        if s.kind is KernelKind.FORWARD:
            x, w = _at(torch, ptr["x"], xs, dtype, fmt), _at(torch, ptr["w"], ws, dtype, fmt)
            out, out_ptr, out_shape = F.conv2d(x.double(), w.double(), None, *args), ptr["y"], ys
        elif s.kind is KernelKind.BACKWARD_DATA:  # x = dY, y = dX
            dy, w = _at(torch, ptr["x"], ys, dtype, fmt), _at(torch, ptr["w"], ws, dtype, fmt)
            out = torch.nn.grad.conv2d_input(xs, w.double(), dy.double(), *args)
            out_ptr, out_shape = ptr["y"], xs
        else:  # x = X, y = dY, w = dW
            x, dy = _at(torch, ptr["x"], xs, dtype, fmt), _at(torch, ptr["y"], ys, dtype, fmt)
            out = torch.nn.grad.conv2d_weight(x.double(), ws, dy.double(), *args)
            out_ptr, out_shape = ptr["w"], ws
        _at(torch, out_ptr, out_shape, dtype, fmt).copy_(out)


def _at(torch, address: int, shape, dtype, fmt):
    """The dense ``fmt`` tensor of ``shape`` stored at ``address`` (CPU memory), as a view."""
    like = torch.empty(shape, dtype=dtype, device="meta", memory_format=fmt)
    size = like.element_size() * like.numel()
    flat = torch.frombuffer((ctypes.c_char * size).from_address(address), dtype=dtype)
    return flat.as_strided(shape, like.stride())


class Plans:
    """engine.gpu.graphs.ExecutionPlans' interface for Pieces: every plan builds, 4 KiB of workspace."""

    def __init__(self, compute: bool):
        self.ctx, self.compute, self.built = types.SimpleNamespace(backend_handle=7), compute, 0

    def build(self, sig, b, name):
        self.built += 1
        return _Graph(sig, b, _ORDERS[self.built % 3], self.compute), self.built, 4096


def context(conv):
    """A TorchContext without a GPU: the real class, its handle calls replaced."""
    ctx = conv.TorchContext.__new__(conv.TorchContext)
    ctx.handle, ctx.backend_handle, ctx.device, ctx._stream = None, 7, 0, None
    ctx._set_stream = lambda handle, stream: None
    ctx._raw_stream = abs  # torch._C._cuda_getCurrentRawStream(device): a C call returning an int
    return ctx


def plan_module(mod, x_shape, micro: dict, precision: str, layout: str, *, compute: bool, applied=None, name="conv"):
    """Make the CPU ``nn.Conv2d`` ``mod`` a PlannedConv2d for inputs of ``x_shape`` (N, C, H, W); ``micro``:
    kernel short name ("F", "BD", "BF") -> micro-batch sizes, a missing "BD" meaning the plan has no
    BackwardData kernel. Returns the AppliedPlan it joined (a new one unless ``applied`` is given)."""
    import torch

    from ..gpu.pieces import Pieces
    from ..kernels import KernelKind, KernelSignature

    apply, conv = load_ops()
    plans = Plans(compute)
    arena = torch.empty(4096, dtype=torch.uint8)
    if applied is None:
        applied = apply.AppliedPlan(plan=None, arena=arena)
    (n, _, h, w), (r, s) = x_shape, mod.kernel_size
    pieces = {}
    for kind in KernelKind:
        if kind.short not in micro:
            continue
        sig = KernelSignature(
            kind,
            n,
            mod.in_channels,
            h,
            w,
            mod.out_channels,
            r,
            s,
            *mod.padding,
            *mod.stride,
            *mod.dilation,
            groups=mod.groups,
            precision=precision,
            layout=layout,
        )
        sizes = micro[kind.short]
        pieces[kind.short] = Pieces(f"{name}:{kind.short}", sig, [(b, f"eng{i}") for i, b in enumerate(sizes)], plans)
    L = conv.PlannedLayer(
        name,
        pieces["F"],
        pieces.get("BD"),
        pieces["BF"],
        applied.arena.data_ptr(),
        context(conv),
        mod.stride,
        mod.padding,
        mod.dilation,
        mod.groups,
    )
    mod.__class__ = apply.PlannedConv2d
    mod._setup(conv.register(L), name, applied)
    return applied
