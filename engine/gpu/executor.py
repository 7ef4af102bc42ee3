"""Micro-batched execution of a configuration: pieces back-to-back on one stream, no host sync.

Pieces address their micro-batch by pointer offsets into the full mini-batch (N is the outermost
dimension in NCHW and NHWC). Forward and BackwardData pieces write disjoint slices. BackwardFilter
pieces each produce a full dW, and the cuDNN frontend's conv nodes have no alpha or beta,
so dW is accumulated: the first piece writes dW (when overwriting, beta = 0), each later piece
writes a scratch buffer that is added on the same stream; fp16/bf16 sums go through an fp32
accumulator. This fixes mu-cuDNN's BackwardFilter bug: it gave every piece the caller's beta, so
with beta = 0 dW held only the last piece.
"""

from __future__ import annotations

from dataclasses import dataclass

import cupy as cp

from ..errors import EngineError
from ..kernels import KernelKind, KernelSignature
from .graphs import PlanCache, per_sample_bytes
from .profiler import ALIGN

_ADD_F32 = cp.ElementwiseKernel("float32 x", "float32 acc", "acc += x", "ucudnn_add_f32")
_ACC_F16 = cp.ElementwiseKernel("float16 x", "float32 acc", "acc += (float)x", "ucudnn_acc_f16")
_ACC_BF16 = cp.ElementwiseKernel("uint16 x", "float32 acc", "acc += __uint_as_float(((unsigned int)x) << 16)",
                                 "ucudnn_acc_bf16")
_TO_F16 = cp.ElementwiseKernel("float32 acc", "float16 y", "y = (float16)acc", "ucudnn_to_f16")
_TO_BF16 = cp.ElementwiseKernel(
    "float32 acc", "uint16 y",
    "unsigned int u = __float_as_uint(acc); y = (unsigned short)((u + 0x7FFFu + ((u >> 16) & 1u)) >> 16)",
    "ucudnn_to_bf16")
_FROM_BF16 = cp.ElementwiseKernel("uint16 x", "float32 y", "y = __uint_as_float(((unsigned int)x) << 16)",
                                  "ucudnn_from_bf16")


def typed(buf: cp.ndarray, precision: str) -> cp.ndarray:
    """A typed 1-D view of a byte buffer (bf16 as uint16)."""
    return buf.view({"tf32": cp.float32, "fp32": cp.float32, "fp16": cp.float16, "bf16": cp.uint16}[precision])


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
    micro: list[tuple[int, str]]      # (micro-batch size, plan name) in execution order
    workspace: int = 0                # bytes reserved for this kernel (its WD segment size)
    offset: int | None = None         # WD: byte offset of its segment in the arena


class KernelExecutor:
    """Resolves a kernel's pieces to built cuDNN plans once, then enqueues them any number of times."""

    def __init__(self, run: KernelRun, plans: PlanCache):
        self.run, self.sig = run, run.sig
        if sum(b for b, _ in run.micro) != run.sig.n:
            raise EngineError(f"{run.id}: micro-batches {[b for b, _ in run.micro]} do not sum to {run.sig.n}")
        per = per_sample_bytes(self.sig)
        self.per = per
        self.pieces, start = [], 0
        for b, name in run.micro:
            for role in ("x", "y"):
                if (start * per[role]) % ALIGN:
                    raise EngineError(
                        f"{run.id}: the micro-batch starting at sample {start} is not {ALIGN}-byte aligned "
                        f"({per[role]} bytes per sample); reorder the micro-configurations")
            fn, ws = plans.plan(self.sig, b, name)
            self.pieces.append((start, b, name, fn, ws))
            start += b
        self.workspace_needed = max((p[4] for p in self.pieces), default=0)
        self.is_wgrad = self.sig.kind is KernelKind.BACKWARD_FILTER
        self._scratch = self._acc = None
        if self.is_wgrad and (len(self.pieces) > 1):
            nbytes = per["w"]
            self._scratch = cp.empty(nbytes, dtype=cp.uint8)
            if self.sig.precision in ("fp16", "bf16"):
                self._acc = cp.empty(nbytes // self.sig.itemsize, dtype=cp.float32)

    @property
    def scratch_bytes(self) -> int:
        return (self._scratch.nbytes if self._scratch is not None else 0) + \
               (self._acc.nbytes if self._acc is not None else 0)

    def enqueue(self, ptrs: dict[str, int], ws_ptr: int, ctx, *, accumulate: bool = False,
                w_array: cp.ndarray | None = None) -> None:
        """Enqueue every piece on ctx.stream. ``ptrs`` are full-batch base pointers of x, w, y.

        BackwardFilter with several pieces, or with ``accumulate`` (beta = 1), needs ``w_array``:
        the byte buffer behind ptrs["w"], for the adds.
        """
        if not self.is_wgrad:
            for start, _b, _n, fn, _ws in self.pieces:
                fn({"x": ptrs["x"] + start * self.per["x"], "y": ptrs["y"] + start * self.per["y"],
                    "w": ptrs["w"]}, ws_ptr)
            return
        single_overwrite = len(self.pieces) == 1 and not accumulate
        if single_overwrite:
            start, _b, _n, fn, _ws = self.pieces[0]
            fn({"x": ptrs["x"] + start * self.per["x"], "y": ptrs["y"] + start * self.per["y"], "w": ptrs["w"]},
               ws_ptr)
            return
        if w_array is None:
            raise EngineError(f"{self.run.id}: accumulating dW needs the dW array")
        if self._scratch is None:
            self._scratch = cp.empty(self.per["w"], dtype=cp.uint8)
            if self.sig.precision in ("fp16", "bf16"):
                self._acc = cp.empty(self.per["w"] // self.sig.itemsize, dtype=cp.float32)
        prec = self.sig.precision
        half = prec in ("fp16", "bf16")
        dw = typed(w_array, prec)
        with ctx.stream:
            if half:  # fp32 accumulator: start from 0 (overwrite) or from the existing dW (accumulate)
                if accumulate:
                    if prec == "bf16":
                        _FROM_BF16(dw, self._acc)
                    else:
                        self._acc[...] = dw.astype(cp.float32)
                else:
                    self._acc.fill(0)
            for i, (start, _b, _n, fn, _ws) in enumerate(self.pieces):
                direct = i == 0 and not accumulate and not half
                target = ptrs["w"] if direct else self._scratch.data.ptr
                fn({"x": ptrs["x"] + start * self.per["x"], "y": ptrs["y"] + start * self.per["y"], "w": target},
                   ws_ptr)
                if direct:
                    continue
                sc = typed(self._scratch, prec)
                if prec == "fp16":
                    _ACC_F16(sc, self._acc)
                elif prec == "bf16":
                    _ACC_BF16(sc, self._acc)
                else:
                    _ADD_F32(sc, dw)
            if half:
                (_TO_F16 if prec == "fp16" else _TO_BF16)(self._acc, dw)


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
                raise EngineError(f"{r.id}: its plans need {e.workspace_needed} B of workspace but its WD segment "
                                  f"holds {r.workspace} B")
        self.buffer = cp.empty(max(size, 1), dtype=cp.uint8)
        self.size = size

    def pointer(self, run: KernelRun) -> int:
        return self.buffer.data.ptr + ((run.offset or 0) if self.mode == "wd" else 0)
