"""Why does a 16-piece BackwardFilter sometimes measure 1.5x its prediction? (GPU host)

Takes AlexNet conv2:BF from the bundled profile's WD 120 MiB plan and, in several fresh setups (new
buffers each time), times with CUDA events: the pieces alone (no adds), the adds alone, and the full
executor enqueue, plus the host time to enqueue one repeat (behind a long spin kernel). Host-bound runs show GPU time close to
host time; GPU-side variance shows pieces-only time moving with the total.

Usage: python tools/wgrad_pieces_probe.py [trials]
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import cupy as cp  # noqa: E402

from engine.gpu import runtime  # noqa: E402
from engine.gpu.executor import KernelExecutor, KernelRun, typed  # noqa: E402
from engine.gpu.graphs import ExecutionPlans  # noqa: E402
from engine.gpu.profiler import KernelBuffers  # noqa: E402
from engine.kernels import KernelSignature  # noqa: E402
from engine.planner import make_plan  # noqa: E402
from engine.profile import Profile, resolve_profile  # noqa: E402
from engine.units import MiB  # noqa: E402
from engine.zoo import get_network  # noqa: E402

trials = int(sys.argv[1]) if len(sys.argv) > 1 else 6
prof = Profile.load(resolve_profile("h100-alexnet-b256-tf32-nchw-powerOfTwo"))
plan = make_plan(prof, get_network("alexnet", 256), mode="wd", budget=120 * MiB, policy="powerOfTwo").to_dict()
k = next(k for k in plan["kernels"] if k["id"] == "conv2:BF")
ctx = runtime.context()
sig = KernelSignature.from_key(k["signature"], 256)
run = KernelRun(k["id"], sig, [(m["batch"], m["plan"]) for m in k["micro"]])
print(f"{run.id}: {len(run.micro)} pieces {run.micro[0]}, predicted {k['time_ms']:.3f} ms")
for t in range(trials):
    ex = KernelExecutor(run, ExecutionPlans(ctx))
    bufs = KernelBuffers(sig, 256)
    ws = cp.empty(max(ex.workspace_needed, 1), dtype=cp.uint8)
    ptrs = bufs.pointers(256, 0)
    scratch = cp.empty(ex.per["w"], dtype=cp.uint8)

    def pieces_only(_r):
        ex.pieces.launch(ptrs["x"], scratch.data.ptr, ptrs["y"], ws.data.ptr)

    def adds_only(_r):
        with ctx.stream:
            for _ in range(len(ex.pieces) - 1):
                typed(bufs.w, "tf32")[...] += typed(scratch, "tf32")

    def full(_r):
        ex.enqueue(ptrs, ws.data.ptr, ctx, w_array=bufs.w)

    res = {}
    for name, fn in (("pieces", pieces_only), ("adds", adds_only), ("full", full)):
        times = runtime.time_repeats(ctx, fn, repeats=5, warmup=1)
        runtime.block_stream(ctx, 20_000_000)  # keep the GPU busy so only the host's enqueue time is seen
        h0 = time.perf_counter()
        for r in range(5):
            fn(r)
        host = (time.perf_counter() - h0) * 1e3 / 5
        ctx.stream.synchronize()
        res[name] = (runtime.median(times), host)
    clocks = cp.cuda.runtime.deviceGetAttribute(cp.cuda.runtime.cudaDevAttrClockRate, 0)
    print(
        f"trial {t}: "
        + "  ".join(f"{n} {g:.3f} ms (host {h:.3f} ms/repeat)" for n, (g, h) in res.items())
        + f"  clock attr {clocks}",
        flush=True,
    )
    cp.get_default_memory_pool().free_all_blocks()
