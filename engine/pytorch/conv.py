"""Planned convolutions as PyTorch custom ops: a plan's micro-configurations run on torch tensors.

Three ops, ``ucudnn::conv_forward``, ``ucudnn::conv_backward_data`` and ``ucudnn::conv_backward_filter``,
run the pieces of one layer's planned configuration (mu-cuDNN's micro-batches) through the cuDNN
frontend's lowered execute path (engine.gpu.graphs), on torch's current stream, with workspace from one
arena tensor per applied plan (torch's caching allocator, allocated once), or, for a plan applied with
per-call workspace (a per-step plan), a block of the caching allocator taken for each call and given back
after it, as stock PyTorch does for cuDNN's workspace. They are opaque to
``torch.compile`` (``register_fake`` gives the shapes) and are wired into autograd with
``register_autograd``, so training, ``no_grad``, gradient accumulation and CUDA-graph capture work as
with ``F.conv2d``. Nothing here synchronises with the host.

BackwardFilter pieces each produce a whole dW; cuDNN frontend conv nodes have no beta, so later pieces
write a scratch tensor that is added on the stream (an fp32 sum for fp16/bf16), as engine.gpu.executor
does with CuPy. Autograd itself adds the returned dW into ``.grad``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..errors import EngineError
from ..kernels import KernelSignature
from ..precision import PRECISIONS
from ..gpu.graphs import ALIGN, PlanCache, per_sample_bytes

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
        self._cudnn, self._stream = cudnn, None

    @classmethod
    def get(cls, device: int) -> "TorchContext":
        if device not in cls._by_device:
            cls._by_device[device] = cls(device)
        return cls._by_device[device]

    def bind(self) -> None:
        stream = torch.cuda.current_stream().cuda_stream
        if stream != self._stream:
            self._cudnn.set_stream(handle=self.handle, stream=stream)
            self._stream = stream


@dataclass
class Pieces:
    """One kernel's micro-configuration, built: (first sample, samples, launch, workspace bytes) per piece."""

    id: str
    sig: KernelSignature
    pieces: list[tuple[int, int, object, int]]
    per: dict[str, int]             # bytes per sample of the sliced operands x, y; whole filter w
    offset: int = 0                 # byte offset of this kernel's workspace in the arena (WD segment)

    @property
    def workspace(self) -> int:
        return max((p[3] for p in self.pieces), default=0)

    def launch(self, x: int, w: int, y: int, ws: int, only: slice = slice(None)) -> None:
        for start, _b, run, _ws in self.pieces[only]:
            run({"x": x + start * self.per["x"], "w": w, "y": y + start * self.per["y"]}, ws)


def build_pieces(kernel_id: str, sig: KernelSignature, micro: list[tuple[int, str]], plans: PlanCache,
                 offset: int = 0) -> Pieces:
    """Build (once) every piece of a kernel's configuration; refuse misaligned starts and wrong sums."""
    if sum(b for b, _ in micro) != sig.n:
        raise EngineError(f"{kernel_id}: micro-batches {[b for b, _ in micro]} do not sum to {sig.n}")
    per = per_sample_bytes(sig)
    pieces, start = [], 0
    for b, name in micro:
        for role in ("x", "y"):
            if (start * per[role]) % ALIGN:
                raise EngineError(f"{kernel_id}: the micro-batch starting at sample {start} is not {ALIGN}-byte "
                                  f"aligned ({per[role]} bytes per sample)")
        run, ws = plans.plan(sig, b, name)
        pieces.append((start, b, run, ws))
        start += b
    return Pieces(kernel_id, sig, pieces, per, offset)


@dataclass
class PlannedLayer:
    """What the ops need of one planned ``nn.Conv2d``: its kernels, where the arena is, and its geometry.

    The arena tensor itself belongs to the model (``model.ucudnn``), so deleting the model or removing the
    plan frees it; the registry below keeps only its address."""

    name: str
    forward: Pieces
    backward_data: Pieces | None
    backward_filter: Pieces
    arena: int                      # device address of the plan's workspace arena
    context: TorchContext
    stride: tuple[int, int]
    padding: tuple[int, int]
    dilation: tuple[int, int]
    groups: int
    calls: dict = field(default_factory=lambda: {"forward": 0, "backward_data": 0, "backward_filter": 0})
    per_call: bool = False          # workspace from the caching allocator per call, not the arena

    @property
    def sig(self) -> KernelSignature:
        return self.forward.sig

    @property
    def memory_format(self):
        return MEMORY_FORMAT[self.sig.layout]

    def out_shape(self, x_shape) -> tuple[int, int, int, int]:
        s = self.sig
        return (x_shape[0], s.k, s.out_h, s.out_w)

    def in_shape(self, y_shape) -> tuple[int, int, int, int]:
        s = self.sig
        return (y_shape[0], s.c, s.h, s.w)

    def ws(self, kernel: Pieces) -> int:
        return self.arena + kernel.offset

    def workspace(self, kernel: Pieces, device) -> tuple[int, torch.Tensor | None]:
        """(address of ``kernel``'s workspace, the tensor that holds it when taken per call). A per-call
        block must stay referenced until the kernel's launches are queued; freed after, the caching allocator
        reuses it only for work queued later on the same stream."""
        if not self.per_call:
            return self.ws(kernel), None
        buf = torch.empty(max(kernel.workspace, 1), dtype=torch.uint8, device=device)
        return buf.data_ptr(), buf


_LAYERS: list[PlannedLayer | None] = []


def register(layer: PlannedLayer) -> int:
    """The layer's handle: the integer the ops take (custom ops accept plain ints, not objects)."""
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
    t = t.contiguous(memory_format=fmt)
    return t if t.data_ptr() % ALIGN == 0 else t.clone(memory_format=fmt)


@torch.library.custom_op("ucudnn::conv_forward", mutates_args=())
def conv_forward(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, handle: int) -> torch.Tensor:
    """Y = conv(X, W) (+ bias, added in place: an ``nn.Conv2d`` layer is one autograd node holding one output
    tensor, as stock cuDNN's is; an add after the op would hold a second output-sized tensor for a moment and
    make the layer two nodes, whose backward hooks a memory runtime could not tell apart)."""
    L = _LAYERS[handle]
    fmt = L.memory_format
    x, weight = _dense(x, fmt), _dense(weight, fmt)
    y = torch.empty(L.out_shape(x.shape), dtype=x.dtype, device=x.device, memory_format=fmt)
    L.context.bind()
    ws, _keep = L.workspace(L.forward, x.device)
    L.forward.launch(x.data_ptr(), weight.data_ptr(), y.data_ptr(), ws)
    if bias is not None:
        y.add_(bias.view(1, -1, 1, 1))
    L.calls["forward"] += 1
    return y


@conv_forward.register_fake
def _(x, weight, bias, handle):
    L = _LAYERS[handle]
    return torch.empty(L.out_shape(x.shape), dtype=x.dtype, device=x.device, memory_format=L.memory_format)


@torch.library.custom_op("ucudnn::conv_backward_data", mutates_args=())
def conv_backward_data(grad_y: torch.Tensor, weight: torch.Tensor, handle: int) -> torch.Tensor:
    L = _LAYERS[handle]
    fmt = L.memory_format
    grad_y, weight = _dense(grad_y, fmt), _dense(weight, fmt)
    dx = torch.empty(L.in_shape(grad_y.shape), dtype=grad_y.dtype, device=grad_y.device, memory_format=fmt)
    L.context.bind()
    # roles of BackwardData (engine.gpu.graphs.make_graph): x = dY, w = W, y = dX
    ws, _keep = L.workspace(L.backward_data, grad_y.device)
    L.backward_data.launch(grad_y.data_ptr(), weight.data_ptr(), dx.data_ptr(), ws)
    L.calls["backward_data"] += 1
    return dx


@conv_backward_data.register_fake
def _(grad_y, weight, handle):
    L = _LAYERS[handle]
    return torch.empty(L.in_shape(grad_y.shape), dtype=grad_y.dtype, device=grad_y.device, memory_format=L.memory_format)


@torch.library.custom_op("ucudnn::conv_backward_filter", mutates_args=())
def conv_backward_filter(x: torch.Tensor, grad_y: torch.Tensor, weight: torch.Tensor, handle: int) -> torch.Tensor:
    """dW of the whole mini-batch; ``weight`` gives dW's shape, dtype and layout only."""
    L = _LAYERS[handle]
    fmt, k = L.memory_format, L.backward_filter
    x, grad_y = _dense(x, fmt), _dense(grad_y, fmt)
    dw = torch.empty_like(weight, memory_format=fmt)
    L.context.bind()
    ws, _keep = L.workspace(k, x.device)
    xp, yp = x.data_ptr(), grad_y.data_ptr()
    k.launch(xp, dw.data_ptr(), yp, ws, slice(0, 1))  # roles of BackwardFilter: x = X, y = dY, w = dW
    if len(k.pieces) > 1:
        scratch = torch.empty_like(dw)
        acc = dw.float() if dw.dtype != torch.float32 else dw
        for i in range(1, len(k.pieces)):
            k.launch(xp, scratch.data_ptr(), yp, ws, slice(i, i + 1))
            acc.add_(scratch)  # mixed-dtype add_ sums fp16/bf16 pieces in fp32
        if acc is not dw:
            dw.copy_(acc)
    L.calls["backward_filter"] += 1
    return dw


@conv_backward_filter.register_fake
def _(x, grad_y, weight, handle):
    return torch.empty_like(weight, memory_format=_LAYERS[handle].memory_format)


def _setup_context(ctx, inputs, output):
    x, weight, _bias, handle = inputs
    ctx.save_for_backward(x, weight)
    ctx.handle = handle


def _backward(ctx, grad_y):
    x, weight = ctx.saved_tensors
    L = _LAYERS[ctx.handle]
    grad_x = grad_w = grad_b = None
    if ctx.needs_input_grad[0]:
        if L.backward_data is not None:
            grad_x = conv_backward_data(grad_y, weight, ctx.handle)
        else:  # the plan has no BackwardData kernel (its input needed no gradient when planned): stock cuDNN
            grad_x = torch.nn.grad.conv2d_input(x.shape, weight, grad_y, L.stride, L.padding, L.dilation, L.groups)
    if ctx.needs_input_grad[1]:
        grad_w = conv_backward_filter(x, grad_y, weight, ctx.handle)
    if ctx.needs_input_grad[2]:   # summed in fp32 for fp16/bf16, as dW's pieces are
        grad_b = grad_y.sum((0, 2, 3), dtype=torch.float32).to(grad_y.dtype)
    return grad_x, grad_w, grad_b, None


conv_forward.register_autograd(_backward, setup_context=_setup_context)
