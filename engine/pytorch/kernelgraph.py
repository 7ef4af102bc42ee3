"""CUDA graphs of one planned kernel's pieces, captured per set of addresses and replayed in one launch.

Each micro-batch piece is one cuDNN execute, whose host cost (10-35 us a piece, most of it cuDNN's own) is what
keeps an eager planned step host-bound (benchmarks/reports/op-host-cost-h200.md). A graph of the pieces costs
one launch. The frontend's native graph API (``populate_cuda_graph``) needs plans with the behaviour note
SUPPORTS_CUDA_GRAPH_NATIVE_API, which the plans of this project's profiles lack; stream capture of the same
executes needs no note. A captured graph holds the addresses it was captured with, and activations move
between calls; but a training loop allocates the same blocks from the caching allocator step after step, so
the graphs are kept per (x, w, y, workspace) address set: an address set seen ``CAPTURE_AT`` times is
captured, then replayed whenever it comes again. An address set that never repeats costs a dict lookup.

Inside a capture of the caller's own (a whole step in a CUDA graph, ``torch.compile``'s cudagraphs) the pieces
are launched as before, into the caller's graph. A kernel whose capture fails launches its pieces as before
from then on, with one warning: PyTorch's ``capture_end`` raises before it tells its caching allocator that the
capture is over, so the allocator may go on expecting one (``torch.cuda.empty_cache`` would then fail); no run
has seen a capture fail, and ``graphs=False`` avoids captures altogether. Captures are made by one thread at a
time per device (the handle and the side stream are shared), as a training loop makes them.
"""

from __future__ import annotations

import warnings

import torch

# an address set seen this often is captured: a training step's comes again each step. At least 2: the first
# use loads the engine's kernels (NVRTC compiles a runtime-compiled one), which a capture must not do
CAPTURE_AT = 2
MAX_SETS = 4  # address sets counted and graphs kept per kernel (a step's, plus a few of shape changes)

_capturing = torch._C._cuda_isCurrentStreamCapturing


class KernelGraphs:
    """The captured graphs of one kernel's pieces (engine.gpu.pieces.Pieces), by address set."""

    __slots__ = ("pieces", "context", "seen", "graphs", "failed")

    def __init__(self, pieces, context):
        self.pieces, self.context = pieces, context  # context: engine.pytorch.conv.TorchContext
        self.seen: dict[tuple, int] = {}
        self.graphs: dict[tuple, torch.cuda.CUDAGraph] = {}
        self.failed: str | None = None  # why capture failed, once it has

    def launch(self, x: int, w: int, y: int, ws: int) -> None:
        """Enqueue the pieces on the current stream (the handle bound to it): a replay where this address set
        has a graph, else the pieces themselves."""
        key = (x, w, y, ws)
        if not self._replayed(key):
            self._miss(key, lambda: self.pieces.launch(x, w, y, ws))

    def run(self, key: tuple, body) -> None:
        """``body()`` (launches on the current stream, in place on memory ``key`` names), or the replay of its
        graph at ``key``: for a BackwardFilter whose pieces are summed between launches."""
        if not self._replayed(key):
            self._miss(key, body)

    def _replayed(self, key: tuple) -> bool:
        """Replay ``key``'s graph if it has one (never inside the caller's own capture). The graphs are kept least
        recently used first, so an eval loop's sets do not evict a training step's."""
        graph = self.graphs.get(key)
        if graph is None or _capturing():
            return False
        graph.replay()
        if len(self.graphs) > 1 and next(reversed(self.graphs)) != key:
            self.graphs[key] = self.graphs.pop(key)
        return True

    def _miss(self, key: tuple, body) -> None:
        if self.failed is None and key not in self.graphs and not _capturing():
            n = self.seen.get(key, 0) + 1
            if n >= CAPTURE_AT:
                graph = self._capture(key, body)
                if graph is not None:
                    graph.replay()
                    return
            else:
                if len(self.seen) >= MAX_SETS:
                    self.seen.clear()
                self.seen[key] = n
        body()

    def _capture(self, key: tuple, body) -> torch.cuda.CUDAGraph | None:
        """The graph of ``body`` at ``key``'s addresses, captured on a side stream (capture runs nothing, so it
        waits on no stream), or None when the capture fails (then never tried again for this kernel)."""
        ctx, graph = self.context, torch.cuda.CUDAGraph()
        try:
            with torch.cuda.stream(ctx.capture_stream()):
                graph.capture_begin(capture_error_mode="thread_local")
                try:
                    ctx.bind()
                    body()
                finally:
                    graph.capture_end()
        except Exception as err:  # noqa: BLE001 - an engine that does what capture forbids (a sync, an allocation)
            self.failed = str(err).splitlines()[0] if str(err) else type(err).__name__
            warnings.warn(
                f"CUDA graph capture of planned kernel {self.pieces.id} failed ({self.failed}); its pieces are "
                "launched one by one from now on. PyTorch's caching allocator may be left expecting the capture: "
                "apply the plan with graphs=False if torch.cuda.empty_cache() or memory use misbehave",
                RuntimeWarning,
                stacklevel=2,
            )
            return None
        finally:
            ctx.bind()  # back to the caller's stream
        self.seen.pop(key, None)
        if len(self.graphs) >= MAX_SETS:
            self.graphs.pop(next(iter(self.graphs)))
        self.graphs[key] = graph
        return graph
