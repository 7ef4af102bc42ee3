"""Planned convolutions as PyTorch ops: a plan's micro-configurations run on torch tensors.

Three ops, ``ucudnn::conv_forward``, ``ucudnn::conv_backward_data`` and ``ucudnn::conv_backward_filter``,
each run all pieces of one layer's planned configuration (mu-cuDNN's micro-batches) in one call through
engine.gpu.pieces (the frontend's pre-indexed execute over preallocated pointer arrays), on torch's current
stream, with workspace from one arena tensor per applied plan (torch's caching allocator, allocated once),
or, for a plan applied with per-call workspace (a per-step plan), a block of the caching allocator taken for
each call and given back after it, as stock PyTorch does for cuDNN's workspace.

They are registered the cheapest way that keeps autograd, ``torch.compile(fullgraph=True)`` and CUDA-graph
capture working, chosen by measurement (benchmarks/reports/op-host-cost.md): ``torch.library.Library``
``define``/``impl`` on the CUDA key with ``register_fake`` (the ops stay opaque to ``torch.compile``), and one
``torch.autograd.Function``, ``planned_conv``, whose backward calls the two backward ops. ``custom_op`` and
``register_autograd`` wrap the same kernels in more Python per call. Nothing here synchronises with the host.
With ``graphs`` (apply_plan's default) each kernel's launches go through engine.pytorch.kernelgraph: one CUDA graph
per address set, replayed in one launch where every piece would be one cuDNN execute from the host.

BackwardFilter pieces each produce a whole dW; cuDNN frontend conv nodes have no beta, so later pieces
write a scratch tensor that is added on the stream (an fp32 sum for fp16/bf16), by the rule of
engine.gpu.pieces shared with the CuPy executor; ``conv_backward_filter``'s ``dw_dtype`` (an fp32 master
weight's under autocast) returns that sum as it is. Autograd itself adds the returned dW into ``.grad``.

The host path of a planned layer is measured without a GPU by benchmarks/op_host_cpu.py (the frontend's
execute a no-op, engine.testing.fake_frontend) against a bare ``autograd.Function``.
"""

from __future__ import annotations

import torch

from ..gpu.graphs import ALIGN
from ..gpu.pieces import Pieces
from ..precision import PRECISIONS
from .kernelgraph import KernelGraphs

TORCH_DTYPE = {name: getattr(torch, p.torch_dtype) for name, p in PRECISIONS.items()}
MEMORY_FORMAT = {"NCHW": torch.contiguous_format, "NHWC": torch.channels_last}


class TorchContext:
    """One cuDNN handle per device, bound to torch's current stream before every launch."""

    _by_device: dict[int, "TorchContext"] = {}

    def __init__(self, device: int):
        import cudnn
        from cudnn._handle import to_backend_handle

        with torch.cuda.device(device):
            torch.cuda.init()
            self.handle = cudnn.create_handle()
        self.backend_handle = to_backend_handle(self.handle)
        self.device, self._set_stream, self._stream, self._capture = device, cudnn.set_stream, None, None
        self._raw_stream = torch._C._cuda_getCurrentRawStream  # an int, no torch.cuda.Stream built per call

    @classmethod
    def get(cls, device: int) -> "TorchContext":
        if device not in cls._by_device:
            cls._by_device[device] = cls(device)
        return cls._by_device[device]

    def capture_stream(self) -> torch.cuda.Stream:
        """The side stream per-kernel graphs are captured on (engine.pytorch.kernelgraph)."""
        if self._capture is None:
            self._capture = torch.cuda.Stream(self.device)
        return self._capture

    def bind(self) -> None:
        stream = self._raw_stream(self.device)
        if stream != self._stream:
            self._set_stream(handle=self.handle, stream=stream)
            self._stream = stream


class PlannedLayer:
    """What the ops need of one planned ``nn.Conv2d``, as plain attributes read once per call: its kernels,
    their workspace addresses (None: taken per call), its geometry, its planned dtype and the dense strides
    of its tensors (outputs are made with ``new_empty_strided``, a third of ``torch.empty(...,
    memory_format=...)``'s host time).

    The arena tensor itself belongs to the model (``model.ucudnn``), so deleting the model or removing the
    plan frees it; the registry below keeps only its address."""

    __slots__ = (
        "name",
        "forward",
        "backward_data",
        "backward_filter",
        "context",
        "sig",
        "fmt",
        "dtype",
        "x_shape",
        "y_shape",
        "w_shape",
        "x_stride",
        "y_stride",
        "w_stride",
        "stride",
        "padding",
        "dilation",
        "groups",
        "ws_f",
        "ws_bd",
        "ws_bf",
        "run_f",
        "run_bd",
        "run_bf",
        "graphs_f",
        "graphs_bd",
        "graphs_bf",
    )

    def __init__(
        self,
        name: str,
        forward: Pieces,
        backward_data: Pieces | None,
        backward_filter: Pieces,
        arena: int | None,
        context: TorchContext,
        stride,
        padding,
        dilation,
        groups: int,
        graphs: bool = False,
    ):
        """``arena``: the device address of the plan's workspace arena, or None for workspace per call;
        ``graphs``: launch each kernel's pieces as a CUDA graph per address set (engine.pytorch.kernelgraph)."""
        self.name, self.context = name, context
        self.forward, self.backward_data, self.backward_filter = forward, backward_data, backward_filter
        s = self.sig = forward.sig
        self.fmt, self.dtype = MEMORY_FORMAT[s.layout], TORCH_DTYPE[s.precision]
        self.x_shape, self.y_shape = (s.n, s.c, s.h, s.w), (s.n, s.k, s.out_h, s.out_w)
        self.w_shape = (s.k, s.c // groups, s.r, s.s)
        self.x_stride, self.y_stride, self.w_stride = (
            torch.empty(shape, device="meta", memory_format=self.fmt).stride()
            for shape in (self.x_shape, self.y_shape, self.w_shape)
        )
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        # workspace addresses per kernel, read without a lookup on the hot path
        self.ws_f, self.ws_bd, self.ws_bf = (
            None if arena is None or k is None else arena + k.offset for k in (forward, backward_data, backward_filter)
        )
        # how each kernel is launched: its pieces, or their CUDA graphs (through graphs_f.run a Forward's with its
        # bias add, through graphs_bf.run a multi-piece BackwardFilter's with the sum of its pieces)
        kernels = (forward, backward_data, backward_filter)
        self.graphs_f, self.graphs_bd, self.graphs_bf = (
            KernelGraphs(k, context) if graphs and k is not None else None for k in kernels
        )
        self.run_f, self.run_bd, self.run_bf = (
            None if k is None else (k if g is None else g).launch
            for k, g in zip(kernels, (self.graphs_f, self.graphs_bd, self.graphs_bf))
        )


_LAYERS: list[PlannedLayer | None] = []


def register(layer: PlannedLayer) -> int:
    """The layer's handle: the integer the ops take (ops accept plain ints, not objects)."""
    _LAYERS.append(layer)
    return len(_LAYERS) - 1


def release(handle: int) -> None:
    """Forget a layer whose plan was removed (its built cuDNN plans go with it)."""
    _LAYERS[handle] = None


def layer(handle: int) -> PlannedLayer:
    return _LAYERS[handle]


def _dense(t: torch.Tensor, fmt) -> torch.Tensor:
    """``t`` laid out as the graphs were built (dense, ``fmt``), starting at an aligned address: a view
    with a storage offset may not, and micro-batch pointers are computed from it."""
    if t.is_contiguous(memory_format=fmt) and t.data_ptr() % ALIGN == 0:
        return t
    t = t.contiguous(memory_format=fmt)
    return t if t.data_ptr() % ALIGN == 0 else t.clone(memory_format=fmt)


def _block(k: Pieces, like: torch.Tensor) -> torch.Tensor:
    """A per-call workspace block for ``k`` (a plan applied without an arena). It must stay referenced
    until the kernel's launches are queued; freed after, the caching allocator reuses it only for work
    queued later on the same stream."""
    return torch.empty(max(k.workspace, 1), dtype=torch.uint8, device=like.device)


def _forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, handle: int) -> torch.Tensor:
    """Y = conv(X, W) (+ bias, added in place: an ``nn.Conv2d`` layer is one autograd node holding one output
    tensor, as stock cuDNN's is; an add after the op would hold a second output-sized tensor for a moment and
    make the layer two nodes, whose backward hooks a memory runtime could not tell apart)."""
    L = _LAYERS[handle]
    fmt = L.fmt
    x, weight = _dense(x, fmt), _dense(weight, fmt)
    y = x.new_empty_strided(L.y_shape, L.y_stride)
    L.context.bind()
    ws = L.ws_f
    if ws is None:
        keep = _block(L.forward, x)
        ws = keep.data_ptr()
    xp, wp, yp = x.data_ptr(), weight.data_ptr(), y.data_ptr()
    if bias is None:
        L.run_f(xp, wp, yp, ws)
        return y
    b = bias.view(1, -1, 1, 1)

    def body():
        L.forward.launch(xp, wp, yp, ws)
        y.add_(b)

    if L.graphs_f is None:
        body()
    else:  # the bias add in the graph too: it cost the host as much as a piece
        L.graphs_f.run((xp, wp, yp, ws, b.data_ptr()), body)
    return y


def _backward_data(grad_y: torch.Tensor, weight: torch.Tensor, handle: int) -> torch.Tensor:
    L = _LAYERS[handle]
    fmt = L.fmt
    L.context.bind()
    return _data(L, _dense(grad_y, fmt), _dense(weight, fmt))


def _backward_filter(x, grad_y, weight, handle: int, dw_dtype=None) -> torch.Tensor:
    """dW of the whole mini-batch in ``dw_dtype`` (default: the weight's, i.e. the planned dtype)."""
    L = _LAYERS[handle]
    fmt = L.fmt
    L.context.bind()
    return _filter(L, _dense(x, fmt), _dense(grad_y, fmt), weight, dw_dtype or weight.dtype)


def _backward(x, grad_y, weight, handle: int, need_x: bool, need_w: bool, dw_dtype) -> tuple:
    """(dX or None, dW or None) in one call: the eager backward's shared setup (the layout check of dY, the
    stream binding) done once for both kernels; dW in ``dw_dtype``."""
    L = _LAYERS[handle]
    fmt = L.fmt
    L.context.bind()
    grad_y = _dense(grad_y, fmt)
    if need_x:
        weight = _dense(weight, fmt)
    return (
        _data(L, grad_y, weight) if need_x else None,
        _filter(L, _dense(x, fmt), grad_y, weight, dw_dtype) if need_w else None,
    )


def _data(L: PlannedLayer, grad_y: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    """dX; stock cuDNN where the plan has no BackwardData kernel (its input needed no gradient when planned).
    The caller has bound the handle to the current stream (as for ``_filter``)."""
    k = L.backward_data
    if k is None:
        return torch.nn.grad.conv2d_input(L.x_shape, weight, grad_y, L.stride, L.padding, L.dilation, L.groups)
    dx = grad_y.new_empty_strided(L.x_shape, L.x_stride)
    ws = L.ws_bd
    if ws is None:
        keep = _block(k, grad_y)
        ws = keep.data_ptr()
    L.run_bd(grad_y.data_ptr(), weight.data_ptr(), dx.data_ptr(), ws)  # roles of BackwardData: x = dY, y = dX
    return dx


def _filter(L: PlannedLayer, x: torch.Tensor, grad_y: torch.Tensor, weight: torch.Tensor, dw_dtype) -> torch.Tensor:
    """dW in ``dw_dtype`` (an fp32 master weight's under autocast); several fp16/bf16 pieces are summed in fp32,
    and that sum is dW itself when ``dw_dtype`` is fp32 (no round trip through the planned dtype)."""
    k = L.backward_filter
    dw = weight.new_empty_strided(L.w_shape, L.w_stride)
    ws = L.ws_bf
    if ws is None:
        keep = _block(k, x)
        ws = keep.data_ptr()
    xp, dwp, yp = x.data_ptr(), dw.data_ptr(), grad_y.data_ptr()  # roles of BackwardFilter: x = X, y = dY, w = dW
    if len(k) == 1:
        L.run_bf(xp, dwp, yp, ws)
        return dw if dw.dtype == dw_dtype else dw.to(dw_dtype)
    scratch = torch.empty_like(dw)
    # fp16/bf16 pieces are summed in fp32, from the first piece on (in dW at the first yield)
    acc = dw if dw.dtype == torch.float32 else dw.new_empty_strided(L.w_shape, L.w_stride, dtype=torch.float32)
    sp = scratch.data_ptr()

    def body():
        for i in k.filter_pieces(xp, dwp, yp, ws, sp):
            if i == 1 and acc is not dw:
                acc.copy_(dw)
            acc.add_(scratch)

    if L.graphs_bf is None:
        body()
    else:  # every address the launches and the sums touch
        L.graphs_bf.run((xp, dwp, yp, ws, sp, acc.data_ptr()), body)
    return acc if acc.dtype == dw_dtype else acc.to(dw_dtype)


_lib = torch.library.Library("ucudnn", "DEF")
_lib.define("conv_forward(Tensor x, Tensor weight, Tensor? bias, int handle) -> Tensor")
_lib.define("conv_backward_data(Tensor grad_y, Tensor weight, int handle) -> Tensor")
_lib.define(
    "conv_backward_filter(Tensor x, Tensor grad_y, Tensor weight, int handle, ScalarType? dw_dtype=None) -> Tensor"
)
_lib.impl("conv_forward", _forward, "CUDA")
_lib.impl("conv_backward_data", _backward_data, "CUDA")
_lib.impl("conv_backward_filter", _backward_filter, "CUDA")


@torch.library.register_fake("ucudnn::conv_forward", lib=_lib)
def _(x, weight, bias, handle):
    L = _LAYERS[handle]
    return torch.empty(L.y_shape, dtype=x.dtype, device=x.device, memory_format=L.fmt)


@torch.library.register_fake("ucudnn::conv_backward_data", lib=_lib)
def _(grad_y, weight, handle):
    L = _LAYERS[handle]
    return torch.empty(L.x_shape, dtype=grad_y.dtype, device=grad_y.device, memory_format=L.fmt)


@torch.library.register_fake("ucudnn::conv_backward_filter", lib=_lib)
def _(x, grad_y, weight, handle, dw_dtype=None):
    return torch.empty_like(weight, dtype=dw_dtype or weight.dtype, memory_format=_LAYERS[handle].fmt)


conv_forward = torch.ops.ucudnn.conv_forward.default
conv_backward_data = torch.ops.ucudnn.conv_backward_data.default
conv_backward_filter = torch.ops.ucudnn.conv_backward_filter.default


_compiling = torch.compiler.is_compiling
_profiling = torch._C._autograd._profiler_enabled


class PlannedConvFunction(torch.autograd.Function):
    """One autograd node per planned layer, with x, weight and bias as its inputs (as stock cuDNN's).

    Under autocast the fp32 master weight (and bias) are cast to the planned dtype here, inside the node, so
    no cast node joins the graph and dW leaves the backward in the master's dtype: where BackwardFilter has
    several pieces, their fp32 sum is that dW (no round trip through fp16). In eager mode the op
    implementations are called directly, the backward's two kernels in one call sharing their setup: the
    dispatcher's round trip into a Python kernel costs a few microseconds per call (issue 22: ResNet-50 fp16
    AMP is host-bound). Under ``torch.compile`` (and export) the registered ops are called, so the graph
    holds them opaque; under torch.profiler too, so their device time is attributed to ``ucudnn::*`` events.
    The launches are the same either way. Tensors are saved with ``save_for_backward`` (not as attributes)
    so saved-tensor hooks (the memory runtimes' offload and recompute) see them."""

    @staticmethod
    def forward(ctx, x, weight, bias, handle, dtype=None):
        """``dtype``: the layer's planned dtype, where weight and bias are to be cast to it (autocast)."""
        ctx.dtypes = weight.dtype, None if bias is None else bias.dtype
        if dtype is not None:
            if weight.dtype != dtype:
                weight = weight.to(dtype)
            if bias is not None and bias.dtype != dtype:
                bias = bias.to(dtype)
        ctx.save_for_backward(x, weight)
        ctx.handle = handle
        if _compiling() or _profiling():
            return conv_forward(x, weight, bias, handle)
        return _forward(x, weight, bias, handle)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight = ctx.saved_tensors
        h, (need_x, need_w, need_b, *_), (w_dtype, b_dtype) = ctx.handle, ctx.needs_input_grad, ctx.dtypes
        if _compiling() or _profiling():
            grad_x = conv_backward_data(grad_y, weight, h) if need_x else None
            grad_w = conv_backward_filter(x, grad_y, weight, h, w_dtype) if need_w else None
        else:
            grad_x, grad_w = _backward(x, grad_y, weight, h, need_x, need_w, w_dtype)
        grad_b = None
        if need_b:  # summed in fp32 for fp16/bf16, as dW's pieces are
            grad_b = grad_y.sum((0, 2, 3), dtype=torch.float32)
            if b_dtype != torch.float32:
                grad_b = grad_b.to(b_dtype)
        return grad_x, grad_w, grad_b, None, None


planned_conv = PlannedConvFunction.apply
