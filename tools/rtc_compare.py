"""Does leaving runtime-compiled (RTC) engines out of profiling lose fast plans? (GPU host)

Profiles AlexNet conv2-conv5 (all three kernels, b = 256, 128, 64, 32) with RTC engines included and
compares, per graph, the fastest RTC plan with the fastest other plan, and with the fastest other
plan that needs no more workspace. Prints a markdown table.
"""

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine.gpu import runtime  # noqa: E402
from engine.gpu.profiler import KernelBuffers, profile_graph  # noqa: E402
from engine.zoo import get_network  # noqa: E402

ctx = runtime.context()
print(f"# RTC engines vs the rest: {runtime.provenance()['gpu']}, cuDNN {runtime.provenance()['cudnn_version']}\n")
print(
    "| kernel | b | RTC plans | best RTC ms (ws MiB) | best other ms (ws MiB) | best other within RTC's ws | build s |"
)
print("|---|---|---|---|---|---|---|")
net = get_network("alexnet", 256)
wins = 0
for k in net.kernels():
    if k.layer == "conv1":
        continue
    bufs = KernelBuffers(k.signature, 256)
    for b in (256, 128, 64, 32):
        t0 = time.perf_counter()
        rows = profile_graph(k.signature, b, bufs, ctx, max_workspace=1 << 30, repeats=5, include_rtc=True)
        dt = time.perf_counter() - t0
        ok = [r for r in rows if r["status"] == "ok"]
        rtc = [r for r in ok if "RUNTIME_COMPILATION" in r["behavior_notes"]]
        other = [r for r in ok if "RUNTIME_COMPILATION" not in r["behavior_notes"]]
        if not rtc or not other:
            print(f"| {k.id} | {b} | {len(rtc)} | - | - | - | {dt:.1f} |")
            continue
        br = min(rtc, key=lambda r: r["time_ms"])
        bo = min(other, key=lambda r: r["time_ms"])
        within = [r for r in other if r["workspace"] <= br["workspace"]]
        bw = min(within, key=lambda r: r["time_ms"]) if within else None
        wins += bool(bw is None or br["time_ms"] < bw["time_ms"] * 0.98)
        print(
            f"| {k.id} | {b} | {len(rtc)} | {br['time_ms']:.3f} ({br['workspace'] / 2**20:.1f}) | "
            f"{bo['time_ms']:.3f} ({bo['workspace'] / 2**20:.1f}) | "
            f"{format(bw['time_ms'], '.3f') if bw else 'none'} | {dt:.1f} |",
            flush=True,
        )
print(f"\nGraphs where an RTC plan is >2% faster than every other plan with no more workspace: {wins}")
