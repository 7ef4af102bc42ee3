"""One kernel's micro-batch pieces: the core the CuPy executor and the PyTorch ops share.

A configuration (mu-cuDNN's micro-configuration: micro-batch sizes with one execution plan each) is built
once: each piece's execution plan and the byte offsets of its slices of x and y, checked (the micro-batches
sum to the mini-batch, every slice starts 16-byte aligned). N is the outermost dimension in NCHW and NHWC, so
a piece addresses its micro-batch by pointer offsets into the full mini-batch; the filter w is never sliced.

A launch enqueues every piece in one call through the frontend's pre-indexed execute
(``ConvGraph.raw_execute``: a ``void*[3]`` in the lowered graph's operand order and the backend plan index),
writing each piece's three pointers into its own preallocated array: no per-piece dict, closure or tensor
description. Arrays are reused across calls, so one Pieces must not launch from two threads at once (the
workspace it is given would be shared between them anyway). Nothing here synchronises with the host; the
pointers are read at launch, so the launches can be captured in a CUDA graph (a whole training step, by the
caller, or one kernel's pieces per address set, by engine.pytorch.kernelgraph: stream capture, since the
frontend's ``populate_cuda_graph`` needs plans with the behaviour note SUPPORTS_CUDA_GRAPH_NATIVE_API, which none
of the 186 built plans of a ResNet-50 fp16 plan carry on the H100 with cuDNN 9.19,
benchmarks/reports/op-host-cost.md).

BackwardFilter pieces each produce a whole dW and frontend conv nodes hard-code beta = 0 (its conv_wgrad node):
``filter_pieces`` writes the first piece into dW (unless accumulating into it) and every other piece into a
scratch buffer, yielding after each so the caller (CuPy or torch) adds the scratch into its sum on the same
stream: what beta = 1 on later pieces does in mu-cuDNN's design (Oyama et al., arXiv:1804.04806), whose
released code passed the caller's beta to every piece, so with beta = 0 dW kept only the last one.
"""

from __future__ import annotations

import ctypes
from collections.abc import Iterator

from ..errors import EngineError
from ..kernels import KernelSignature
from .graphs import ALIGN, ExecutionPlans, per_sample_bytes

_ROLES = ("x", "w", "y")


class Pieces:
    """One kernel's configuration, built: ``micro`` is ((first sample, micro-batch, plan name), ...)."""

    def __init__(
        self, kernel_id: str, sig: KernelSignature, micro: list[tuple[int, str]], plans: ExecutionPlans, offset: int = 0
    ):
        if sum(b for b, _ in micro) != sig.n:
            raise EngineError(f"{kernel_id}: micro-batches {[b for b, _ in micro]} do not sum to {sig.n}")
        self.id, self.sig, self.offset = kernel_id, sig, offset  # offset: of its WD segment in the arena
        self.per = per = per_sample_bytes(sig)  # bytes per sample of the sliced x, y; of the whole filter w
        self.backend_handle = plans.ctx.backend_handle
        self.micro, self.graphs, self._launches, workspace, start = [], [], [], 0, 0
        for b, name in micro:
            for role in ("x", "y"):
                if (start * per[role]) % ALIGN:
                    raise EngineError(
                        f"{kernel_id}: the micro-batch starting at sample {start} is not {ALIGN}-byte "
                        f"aligned ({per[role]} bytes per sample); reorder the micro-configurations"
                    )
            cg, index, ws = plans.build(sig, b, name)
            execute, cpp_index, order = cg.raw_execute(index)
            ptrs = (ctypes.c_uint64 * 3)()
            slot = [order.index(r) for r in _ROLES]
            self._launches.append(
                (execute, cpp_index, ptrs, ctypes.addressof(ptrs), *slot, start * per["x"], start * per["y"])
            )
            self.micro.append((start, b, name))
            self.graphs.append((cg, index))
            workspace = max(workspace, ws)
            start += b
        self.workspace = workspace  # bytes: the largest piece's

    def __len__(self) -> int:
        return len(self._launches)

    def launch(self, x: int, w: int, y: int, ws: int) -> None:
        """Enqueue every piece on the handle's stream; x, w, y are full-batch device addresses (roles as in
        engine.gpu.graphs.make_graph), ws the workspace address."""
        bh = self.backend_handle
        for execute, index, ptrs, addr, sx, sw, sy, ox, oy in self._launches:
            ptrs[sx], ptrs[sw], ptrs[sy] = x + ox, w, y + oy
            execute(addr, 3, ws, bh, index)

    def filter_pieces(self, x: int, dw: int, dy: int, ws: int, scratch: int, accumulate: bool = False) -> Iterator[int]:
        """BackwardFilter (x = X, y = dY, w = dW): enqueue every piece, yielding the index of each one written
        into ``scratch`` (dW's size) once it is enqueued, for the caller to add scratch into its sum. The first
        piece writes dW itself unless ``accumulate``; at the first yield dW holds either that piece or its old
        value, untouched by any other piece, so an fp32 sum of fp16/bf16 pieces may start from it there."""
        bh = self.backend_handle
        for i, (execute, index, ptrs, addr, sx, sw, sy, ox, oy) in enumerate(self._launches):
            direct = i == 0 and not accumulate
            ptrs[sx], ptrs[sw], ptrs[sy] = x + ox, dw if direct else scratch, dy + oy
            execute(addr, 3, ws, bh, index)
            if not direct:
                yield i
