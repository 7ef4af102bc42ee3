"""Per-thread CUDA stream + cuDNN handle, device provenance, and GPU-side timing.

Timing follows the cuDNN frontend's timing advice and the device METHOD: CUDA events on the handle's
stream, warm-up first, back-to-back repeats whose median is kept. A short spin kernel is queued ahead
of the timed region so the host can enqueue every repeat before the GPU reaches them: the events then
measure GPU time, not Python launch overhead (18.7 us per call on the lowered path, measured on the
H100; a b=1 kernel can be shorter than that).
"""

from __future__ import annotations

import datetime as _dt
import platform
import statistics
import threading
import time
from dataclasses import dataclass

import cupy as cp
import cudnn

from ..errors import GPUUnavailableError

_local = threading.local()
SPIN_SOURCE = r"""extern "C" __global__ void ucudnn_spin(long long cycles) {
    long long t0 = clock64();
    while (clock64() - t0 < cycles) { }
}"""


@dataclass
class Context:
    stream: cp.cuda.Stream
    handle: object  # cudnn.Handle bound to `stream`
    backend_handle: int
    spin: cp.RawKernel
    retimed: int = 0  # time_repeats calls timed again behind a longer spin (the host was slower than it)


def context() -> Context:
    """This thread's stream and cuDNN handle (cuDNN forbids sharing a handle across threads)."""
    ctx = getattr(_local, "ctx", None)
    if ctx is None:
        try:
            stream = cp.cuda.Stream(non_blocking=True)
            handle = cudnn.create_handle()
            cudnn.set_stream(handle=handle, stream=stream.ptr)
        except Exception as err:
            raise GPUUnavailableError(f"cannot create a CUDA stream and cuDNN handle: {err}") from err
        from cudnn._handle import to_backend_handle

        spin = cp.RawKernel(SPIN_SOURCE, "ucudnn_spin")
        ctx = Context(stream, handle, to_backend_handle(handle), spin)
        _local.ctx = ctx
    return ctx


SPIN_BASE = 60_000  # cycles (~30 us at 2 GHz) for the host to record the first event
SPIN_PER_CALL = 80_000  # cycles (~40 us) per fn(r): enqueuing one plan on the lowered path takes ~19 us
SPIN_MAX = 64_000_000  # cycles (~32 ms): past this a slow host is timed as it is


def block_stream(ctx: Context, cycles: int = 1_000_000) -> None:
    """Occupy the stream for ``cycles`` GPU clock cycles (1M: ~0.5 ms at ~2 GHz)."""
    ctx.spin((1,), (1,), (cp.int64(cycles),), stream=ctx.stream)


def time_repeats(ctx: Context, fn, repeats: int, warmup: int = 1) -> list[float]:
    """Per-repeat GPU milliseconds of ``fn(r)`` (r = repeat index), launched back-to-back.

    The spin ahead of the timed region lasts about as long as the host takes to enqueue the repeats
    (SPIN_PER_CALL each), not a fixed 0.5 ms: on ResNet-50 the fixed spin was half of the 58 s of GPU time
    spent timing 30,000 plans (benchmarks/reports/profiling-speed.md). Whether it was long enough is checked,
    not assumed: if the spin had ended before the last repeat was enqueued (its end event already done), the
    GPU may have waited for the host inside the timed region, for at most the host's time from the spin's
    launch to the last event's. Where that bound is over 1 % of the measured total (short kernels: the host
    was slower than the GPU), the repeats are timed again behind a spin four times longer (``ctx.retimed``
    counts these); a long kernel keeps the GPU ahead of the host, and its times stand."""
    for r in range(warmup):
        fn(r)
    cycles = SPIN_BASE + SPIN_PER_CALL * repeats
    while True:
        events = [cp.cuda.Event() for _ in range(repeats + 1)]
        t0 = time.perf_counter()
        block_stream(ctx, cycles)
        events[0].record(ctx.stream)
        for r in range(repeats):
            fn(r)
            events[r + 1].record(ctx.stream)
        ahead = not events[0].done  # the spin still runs: every repeat was queued before the GPU reached it
        host_ms = 1000 * (time.perf_counter() - t0)
        events[-1].synchronize()
        times = [cp.cuda.get_elapsed_time(events[i], events[i + 1]) for i in range(repeats)]
        if ahead or host_ms <= 0.01 * sum(times) or cycles >= SPIN_MAX:
            return times
        ctx.retimed += 1
        cycles *= 4


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


def provenance(command: str = "") -> dict:
    """GPU, driver, CUDA, cuDNN and frontend versions, date and command: stored with every profile."""
    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
    try:  # nvidia-smi numbers GPUs ignoring CUDA_VISIBLE_DEVICES, so find this one by its PCI bus id
        import subprocess

        smi = subprocess.run(
            ["nvidia-smi", "--query-gpu=pci.bus_id,driver_version,uuid", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=20,
        ).stdout
        bus = cp.cuda.runtime.deviceGetPCIBusId(dev.id).lower().split(":", 1)[1]  # nvidia-smi pads the domain
        driver, uuid = next(
            [s.strip() for s in line.split(",")[1:3]]
            for line in smi.splitlines()
            if line.split(",")[0].strip().lower().endswith(bus)
        )
    except Exception:
        driver, uuid = str(cp.cuda.runtime.driverGetVersion()), ""
    v = cudnn.backend_version()
    return {
        "gpu": name,
        "gpu_uuid": uuid,
        "sm": f"{props['major']}{props['minor']}",
        "sm_count": props["multiProcessorCount"],
        "memory_bytes": props["totalGlobalMem"],
        "driver": driver,
        "cuda_runtime": cp.cuda.runtime.runtimeGetVersion(),
        "cudnn_version": f"{v // 10000}.{v % 10000 // 100}.{v % 100}",
        "frontend_version": getattr(cudnn, "__version__", "?"),
        "cupy_version": cp.__version__,
        "python": platform.python_version(),
        "host": platform.node(),
        "date": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": command,
        "synthetic": False,
    }
