"""Micro-batched execution of a configuration with CuPy buffers: pieces back-to-back on one stream, no host sync.

The pieces themselves (checks, pointer offsets, the launch, the BackwardFilter accumulation rule) are
engine.gpu.pieces, shared with the PyTorch ops. Here: dW's scratch and fp32 accumulator as CuPy buffers, the
adds as CuPy kernels (fp16/bf16 sums go through fp32), beta = 1 accumulation for verification, and the
workspace arena.
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy as cp

from ..errors import EngineError
from ..kernels import KernelKind, KernelSignature
from ..precision import PRECISIONS
from .graphs import ExecutionPlans
from .pieces import Pieces

_ADD_F32 = cp.ElementwiseKernel("float32 x", "float32 acc", "acc += x", "ucudnn_add_f32")
_ACC_F16 = cp.ElementwiseKernel("float16 x", "float32 acc", "acc += (float)x", "ucudnn_acc_f16")
_ACC_BF16 = cp.ElementwiseKernel(
    "uint16 x", "float32 acc", "acc += __uint_as_float(((unsigned int)x) << 16)", "ucudnn_acc_bf16"
)
_TO_F16 = cp.ElementwiseKernel("float32 acc", "float16 y", "y = (float16)acc", "ucudnn_to_f16")
_TO_BF16 = cp.ElementwiseKernel(
    "float32 acc",
    "uint16 y",
    "unsigned int u = __float_as_uint(acc); y = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)",
    "ucudnn_to_bf16",
)
_FROM_BF16 = cp.ElementwiseKernel(
    "uint16 x", "float32 y", "y = __uint_as_float(((unsigned int)x) << 16)", "ucudnn_from_bf16"
)


def typed(buf: cp.ndarray, precision: str) -> cp.ndarray:
    """A typed 1-D view of a byte buffer (bf16 as uint16)."""
    return buf.view(PRECISIONS[precision].array_dtype)


def to_float32(buf: cp.ndarray, precision: str) -> cp.ndarray:
    v = typed(buf, precision)
    if precision == "bf16":
        out = cp.empty(v.size, dtype=cp.float32)
        _FROM_BF16(v, out)
        return out
    return v.astype(cp.float32)


@dataclass
class KernelRun:
    """What the executor needs of one plan kernel: signature at the full batch and its pieces."""

    id: str
    sig: KernelSignature
    micro: list[tuple[int, str]]  # (micro-batch size, plan name) in execution order
    workspace: int = 0  # bytes reserved for this kernel (its WD segment size)
    offset: int | None = None  # WD: byte offset of its segment in the arena


class KernelExecutor:
    """Resolves a kernel's pieces to built cuDNN execution plans once, then enqueues them any number of times."""

    def __init__(self, run: KernelRun, plans: ExecutionPlans):
        self.run, self.sig = run, run.sig
        self.pieces = Pieces(run.id, run.sig, run.micro, plans)
        self.per = self.pieces.per
        self.workspace_needed = self.pieces.workspace
        self.is_wgrad = self.sig.kind is KernelKind.BACKWARD_FILTER
        self._scratch = self._acc = None
        if self.is_wgrad and len(self.pieces) > 1:
            self._buffers()

    def _buffers(self) -> None:
        self._scratch = cp.empty(self.per["w"], dtype=cp.uint8)
        if PRECISIONS[self.sig.precision].reduced:
            self._acc = cp.empty(self.per["w"] // self.sig.itemsize, dtype=cp.float32)

    @property
    def scratch_bytes(self) -> int:
        return (self._scratch.nbytes if self._scratch is not None else 0) + (
            self._acc.nbytes if self._acc is not None else 0
        )

    def enqueue(
        self, ptrs: dict[str, int], ws_ptr: int, ctx, *, accumulate: bool = False, w_array: cp.ndarray | None = None
    ) -> None:
        """Enqueue every piece on ctx.stream. ``ptrs`` are full-batch base pointers of x, w, y.

        BackwardFilter with several pieces, or with ``accumulate`` (beta = 1), needs ``w_array``:
        the byte buffer behind ptrs["w"], for the adds.
        """
        if not self.is_wgrad or (len(self.pieces) == 1 and not accumulate):
            self.pieces.launch(ptrs["x"], ptrs["w"], ptrs["y"], ws_ptr)
            return
        if w_array is None:
            raise EngineError(f"{self.run.id}: accumulating dW needs the dW array")
        if self._scratch is None:
            self._buffers()
        prec = self.sig.precision
        dw, sc, acc = typed(w_array, prec), typed(self._scratch, prec), self._acc
        with ctx.stream:
            summed = False
            for _ in self.pieces.filter_pieces(
                ptrs["x"], ptrs["w"], ptrs["y"], ws_ptr, self._scratch.data.ptr, accumulate
            ):
                if prec == "fp16":
                    if not summed:  # dW holds the first piece or its old value: the fp32 sum starts there
                        acc[...] = dw.astype(cp.float32)
                    _ACC_F16(sc, acc)
                elif prec == "bf16":
                    if not summed:
                        _FROM_BF16(dw, acc)
                    _ACC_BF16(sc, acc)
                else:
                    _ADD_F32(sc, dw)
                summed = True
            if summed and acc is not None:
                (_TO_F16 if prec == "fp16" else _TO_BF16)(acc, dw)


class Arena:
    """One workspace allocation shared by a plan's kernels: WD segments at their offsets, or (WR)
    one buffer the kernels reuse in turn, since kernels of a training step run one at a time."""

    def __init__(self, runs: list[KernelRun], executors: list[KernelExecutor], mode: str):
        self.mode = mode
        if mode == "wd":
            size = max(((r.offset or 0) + r.workspace for r in runs), default=0)
        else:
            size = max((e.workspace_needed for e in executors), default=0)
        for r, e in zip(runs, executors):
            if mode == "wd" and e.workspace_needed > r.workspace:
                raise EngineError(
                    f"{r.id}: its plans need {e.workspace_needed} B of workspace but its WD segment "
                    f"holds {r.workspace} B"
                )
        self.buffer = cp.empty(max(size, 1), dtype=cp.uint8)
        self.size = size

    def pointer(self, run: KernelRun) -> int:
        return self.buffer.data.ptr + ((run.offset or 0) if self.mode == "wd" else 0)
