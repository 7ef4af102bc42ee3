"""The Dask cluster the multi-GPU profiler runs on: local GPU workers, or an existing scheduler checked first.

engine.gpu.distributed submits the graphs; this module starts and reaches the workers.
"""

from __future__ import annotations

import socket
import struct
from contextlib import contextmanager

from ..errors import EngineError

START_TIMEOUT = 120  # s for local workers to start (each imports CuPy and the cuDNN frontend)
WORKER_WAIT = 60  # s for a worker to join an existing scheduler


def start_cluster(devices: list[str]):
    """A local Dask cluster of one single-threaded worker per device, each seeing only its GPU.

    Tasks are not retried by the scheduler (our client retries once and knows why). Each worker holds the
    graph it measures and the next one, so it starts the next without a round trip through the scheduler
    (1.4 ms between graphs on two H200s, profile-multigpu.md); a dying worker takes both down, so the client
    retries a failed graph alone.
    A graph's host side (building ~60 plans) is Python and C++ that a serial profile runs undisturbed, so
    the workers do too: without Dask's pre-spawn variables (MALLOC_TRIM_THRESHOLD_, set for dataframe
    workers' memory, turns every large host allocation into an mmap) and without its statistical profiler,
    which takes the GIL every 10 ms to sample the running task's stack. Without Dask's NVML diagnostics, too:
    on a host with NVML, a worker pinned to a GPU number the host lacks (the CPU tests' second fake GPU on a
    one-GPU host) failed to start (``NVMLError_InvalidArgument``).
    """
    import logging

    import dask
    from distributed import Nanny, Scheduler, SpecCluster

    workers = {
        f"gpu{d}": {
            "cls": Nanny,
            "options": {
                "name": f"gpu{d}",
                "nthreads": 1,
                "memory_limit": 0,
                "host": "127.0.0.1",
                "env": {"CUDA_VISIBLE_DEVICES": d},
                "silence_logs": logging.ERROR,
            },
        }
        for d in devices
    }
    with dask.config.set(
        {
            "distributed.scheduler.allowed-failures": 0,
            "distributed.scheduler.worker-saturation": 2.0,
            "distributed.nanny.pre-spawn-environ": {},
            "distributed.worker.profile.enabled": False,
            "distributed.diagnostics.nvml": False,  # NVML failed a worker pinned to a GPU it cannot see
        }
    ):
        return SpecCluster(
            workers=workers,
            scheduler={
                "cls": Scheduler,
                "options": {"host": "127.0.0.1", "dashboard": False, "dashboard_address": ":0"},
            },
            silence_logs=logging.ERROR,
            name="ucudnn-profile",
        )


GREETING_WAIT = 5.0  # s for a Dask scheduler's greeting (it sends its handshake as soon as it accepts)
GREETING_MAX = 1 << 20  # bytes: a handshake is a few hundred; its length prefix read from another protocol is huge


def check_scheduler(address: str, timeout: float = GREETING_WAIT) -> None:
    """One EngineError, within about 2 x ``timeout`` s, when ``address`` (tcp://HOST:PORT) is unreachable or
    does not greet as a Dask scheduler does.

    A Dask listener writes its handshake first: an 8-byte frame length (struct "Q"), then that many bytes.
    Dask's client reads that length and allocates it, so a service that speaks first ("SSH-2.0-...") made it
    allocate exabytes (MemoryError), and one that waits for the client (an HTTP server) left it waiting for
    minutes. Other schemes (tls://, ucx://) are left to Dask."""
    scheme, sep, rest = address.partition("://")
    if sep and scheme != "tcp":
        return
    host, _, port = (rest if sep else address).rpartition(":")
    if not host or not port.isdigit():
        raise EngineError(f"--scheduler {address!r}: expected tcp://HOST:PORT, such as tcp://127.0.0.1:8786")
    hint = "start one with 'dask scheduler' and a worker per GPU with 'dask cuda worker ADDRESS'"
    try:
        sock = socket.create_connection((host.strip("[]"), int(port)), timeout=timeout)
    except OSError as err:
        raise EngineError(f"cannot reach the Dask scheduler at {address} ({err}); {hint}") from None
    head, waited = b"", False
    with sock:
        sock.settimeout(timeout)
        try:
            while len(head) < 8:
                chunk = sock.recv(8 - len(head))
                if not chunk:
                    break
                head += chunk
        except TimeoutError:
            waited = True
        except OSError:
            pass
    if len(head) == 8 and struct.unpack("Q", head)[0] <= GREETING_MAX:
        return
    what = (
        f"sent nothing within {timeout:g} s"
        if waited and not head
        else "closed the connection"
        if not head
        else f"greeted with {head!r}, not a Dask handshake"
    )
    raise EngineError(
        f"{address} is not a Dask scheduler: it {what} (a Dask scheduler greets each client at once); "
        f"is it another service, such as the scheduler's web dashboard? {hint}"
    )


@contextmanager
def connect(devices: list[str] | None, scheduler: str | None):
    """A Dask client on a new local cluster of ``devices``, or on the cluster at ``scheduler``."""
    try:
        import dask
        from distributed import Client
    except ImportError as err:
        raise EngineError(
            f"profiling on several GPUs needs dask and distributed ({err}); install the 'gpu' "
            f"extra: python3 -m pip install -e '.[gpu]'"
        ) from None
    cluster = None
    try:
        if scheduler:
            check_scheduler(scheduler)
            timeout = dask.config.get("distributed.comm.timeouts.connect")
            try:
                client = Client(scheduler, timeout=timeout)
            except (OSError, TimeoutError, ValueError) as err:
                raise EngineError(
                    f"cannot reach the Dask scheduler at {scheduler} ({err}); start one with "
                    f"'dask scheduler' and a worker per GPU with 'dask cuda worker ADDRESS'"
                ) from None
            wanted, wait, hint = 1, WORKER_WAIT, f"start a worker per GPU: dask cuda worker {scheduler}"
        else:
            try:
                cluster = start_cluster(devices)
            except Exception as err:
                raise EngineError(
                    f"cannot start Dask workers on GPUs {','.join(devices)}: {type(err).__name__}: {err}"
                ) from None
            client = Client(cluster)
            wanted, wait, hint = len(devices), START_TIMEOUT, "see the worker messages above"
        try:
            client.wait_for_workers(wanted, timeout=wait)
        except TimeoutError:
            client.close()
            raise EngineError(f"fewer than {wanted} Dask worker(s) started within {wait} s; {hint}") from None
        try:
            yield client
        finally:
            client.close()
    finally:
        if cluster is not None:
            cluster.close()
