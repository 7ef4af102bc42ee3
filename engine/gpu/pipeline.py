"""Profiling on one GPU with several host processes: plans are built in parallel while the GPU times
plans already built.

A graph's time is mostly host time: the heuristic query, the engine sweep's support checks and the
finalizing of ~60 execution plans, with the GPU idle. So ``workers`` processes share the GPU: each takes
the next graph, builds all its plans (profiler.build_graph), then waits for the GPU lock and times them
(profiler.time_graph) while the others build. Timing stays one graph at a time, as in the serial profiler,
so no kernel shares the GPU with a timed one; the parent process is the cache's only writer and commits
after every graph, so a kill loses nothing finished.

Why processes, not threads: the cuDNN frontend's Python binding holds the GIL through every call. Its
only extension module in nvidia-cudnn-frontend 1.32 (``cudnn/_compiled_module...so``, nanobind) does not
even import ``PyEval_SaveThread``, which ``nb::gil_scoped_release`` and ``Py_BEGIN_ALLOW_THREADS`` call
(``nm -D`` lists ``PyGILState_Ensure`` and ``_PyThreadState_UncheckedGet`` but no way to release it), so
``build_operation_graph``, ``create_execution_plans``, ``create_execution_plan`` and
``build_plan_at_index`` all run with the GIL held and threads would build one plan at a time whatever
their handles (so whether the backend is safe per handle on several threads never comes into play).
benchmarks/profiling_speed.py's ``gil`` step built the sweep of 8 ResNet-50 graphs (444 plans) on 4 threads with a
handle each 1.2x faster than on one (0.25 against 0.30 s on the H100: little, and too short to weigh much).

On ResNet-50 b64 (benchmarks/reports/profiling-speed.md) building is 24 s and labelling notes 12 s of host
time against 55-63 s of timing, so the GPU is the bottleneck: 12 processes took the command from 92 s to
60-68 s, with the same (signature, micro-batch, plan) rows and outcomes as the serial profiler and plan times
within 0.5 % (median).

How many: few. Each process's first graphs load cuDNN's kernels (lazily, at their first launch) while it
holds the GPU, so every process adds its start to the GPU's serialized time. ResNet-50 b64 on one H200 of a
32-core host (benchmarks/reports/profile-multigpu, 2026-11-28-run6): time holding the GPU 30.9 s with 4
processes, 32.2 s with 6, 34.7 s with 12, and 38.6 s over two GPUs with 12 each; walls 35.1, 36.8 and
41.3 s; and 3 builders still outpace one GPU (building and labelling are 38 s of host time). So MAX_WORKERS
per GPU is 4, and measuring begins as soon as one process is ready rather than when all are (with 24
processes that wait was 7 s).

The GPU lock is an ``fcntl`` lock on a file: the kernel drops it when its holder dies, so a killed worker
cannot leave the others waiting. Memory is bounded by the number of workers (worker_count): each holds a
CUDA context, its operands and a workspace of at most ``max_workspace``.
"""

from __future__ import annotations

import fcntl
import itertools
import multiprocessing as mp
import os
import queue
import tempfile
import threading
import time
from collections.abc import Callable

from ..errors import EngineError
from .progress import ProfileProgress, sample_seconds
from .work import Graph, Settings, cancelled, device_key, open_cache, spread_order, timed_measure

CONTEXT_BYTES = 1 << 30  # a CUDA context with cuDNN's kernels loaded, per worker (GPU memory)
HOST_BYTES = 3 << 30  # a worker's resident memory: CuPy, cuDNN and its plans (host memory)
MAX_WORKERS = 4  # per GPU: see the module's docstring
START_TIMEOUT = 120  # s for the first worker to import CuPy and cuDNN and report its GPU


class GPULock:
    """An exclusive ``flock`` on ``path``, held while a worker uses the GPU; re-entrant per process."""

    def __init__(self, path: str):
        self.path, self.fd, self.depth = path, None, 0

    def __enter__(self):
        if self.depth == 0:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
            fcntl.flock(self.fd, fcntl.LOCK_EX)
        self.depth += 1
        return self

    def __exit__(self, *exc):
        self.depth -= 1
        if self.depth == 0:
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None


def worker_count(
    requested: int | None,
    *,
    max_workspace: int,
    operand_bytes: int,
    gpu_bytes: int,
    cpus: int | None = None,
    host_bytes: int | None = None,
    share: int = 1,
) -> int:
    """How many processes share the GPU: ``requested``, else one per CPU core but one (the parent commits),
    at most MAX_WORKERS, and no more than 80 % of the GPU's memory and the host's available memory hold;
    with ``share`` GPUs profiling at once, this GPU's share of the cores and of the host's memory."""
    if requested is not None:
        if requested < 1:
            raise EngineError(f"--build-workers must be at least 1, got {requested}")
        return requested
    cpus = cpus or os.cpu_count() or 1
    if host_bytes is None:
        try:
            host_bytes = os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
        except (ValueError, OSError):
            host_bytes = HOST_BYTES
    per_gpu = CONTEXT_BYTES + max_workspace + operand_bytes
    cores, host = (cpus - 1) // share, host_bytes // HOST_BYTES // share
    return max(1, min(cores, MAX_WORKERS, int(0.8 * gpu_bytes) // per_gpu, host))


# ---------------------------------------------------------------- worker processes (module level: spawned)


def _watch_parent(parent: int) -> None:
    """Exit when the parent is gone (a SIGKILLed parent cannot stop its workers)."""
    while True:
        if os.getppid() != parent:
            os._exit(3)
        time.sleep(0.5)


def _worker(
    index: int, lock_path: str, tasks, results, started, measure: Callable, probe: Callable, parent: int
) -> None:
    threading.Thread(target=_watch_parent, args=(parent,), daemon=True).start()
    try:
        prov = probe()
    except Exception as err:
        results.put(("dead", index, f"{type(err).__name__}: {err}"))
        return
    started[index] = 1  # shared memory, at once: a queued message is lost if the process dies before it is sent
    results.put(("ready", index, prov))
    lock = GPULock(lock_path)
    while (task := tasks.get()) is not None:
        n, graph, settings, notes = task
        results.put(("start", index, n))
        try:
            (rows, split), timing = timed_measure(measure, graph, settings, notes, lock)
        except Exception as err:
            results.put(("error", index, n, f"{type(err).__name__}: {str(err).strip()[:300]}"))
            if "CUDA" in type(err).__name__:  # the context is unusable
                return
            continue
        results.put(("done", index, n, rows, dict(timing, split=split)))


# ---------------------------------------------------------------- the parent


class Pool:
    """``workers`` spawned processes sharing this process's GPU, or spread evenly over ``devices``
    (CUDA_VISIBLE_DEVICES values, one GPU lock each), fed graphs through one queue: an idle process takes
    the next graph whatever its GPU, so the GPUs share the work by its actual cost."""

    def __init__(self, workers: int, measure: Callable, probe: Callable, devices: list[str] | None = None):
        ctx = mp.get_context("spawn")  # a forked CUDA or cuDNN state is unusable in the child
        self.dir = tempfile.TemporaryDirectory(prefix="ucudnn-gpu-")
        self.tasks, self.results = ctx.Queue(), ctx.Queue()
        self.started = ctx.Array("b", workers, lock=False)  # worker -> loaded CuPy and cuDNN (_worker)
        self.gpu = [i % len(devices) if devices else 0 for i in range(workers)]  # worker -> GPU index
        self.procs = [
            ctx.Process(
                target=_worker,
                name=f"ucudnn-profile-{i}",
                daemon=True,
                args=(
                    i,
                    os.path.join(self.dir.name, f"gpu{self.gpu[i]}.lock"),
                    self.tasks,
                    self.results,
                    self.started,
                    measure,
                    probe,
                    os.getpid(),
                ),
            )
            for i in range(workers)
        ]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        try:
            for i, p in enumerate(self.procs):
                if devices:  # a spawned child takes this process's environment as it starts
                    os.environ["CUDA_VISIBLE_DEVICES"] = devices[self.gpu[i]]
                p.start()
        finally:
            if visible is None:
                os.environ.pop("CUDA_VISIBLE_DEVICES", None)
            else:
                os.environ["CUDA_VISIBLE_DEVICES"] = visible
        self.running: dict[int, int] = {}  # worker -> task number
        self.provs: dict[int, dict] = {}  # worker -> its provenance, once it has started

    def first_ready(self) -> dict:
        """The provenance of the first worker to start (the others go on starting while it measures)."""
        deadline = time.monotonic() + START_TIMEOUT
        while not self.provs:
            msg = self.get(deadline - time.monotonic(), what="to start")
            if msg[0] == "died":
                raise self.died(msg)
        return next(iter(self.provs.values()))

    def provenance(self, graphs: dict[int, int] | None = None) -> dict:
        """The started workers' common provenance, with the GPUs and ``graphs`` measured on each (check_gpus)."""
        ready = sorted(self.provs)
        return check_gpus([self.provs[i] for i in ready], [self.gpu[i] for i in ready], graphs)

    def died(self, msg: tuple) -> EngineError:
        """The error of a "died" message: a worker that never started, or one that died measuring."""
        if not self.started[msg[1]]:
            return EngineError(
                f"a profiling worker exited (code {msg[3]}) while loading CuPy and cuDNN; profile "
                f"graph after graph with --build-workers 1 to see why"
            )
        return EngineError(f"a profiling worker died (exit code {msg[3]})")

    def get(self, timeout: float, what: str = "") -> tuple:
        """The next message; EngineError when a worker died, cannot profile, sees another kind of GPU than the
        others, or none answered within ``timeout`` s. A worker's start is checked as it is reported."""
        deadline = time.monotonic() + timeout
        while True:
            try:
                msg = self.results.get(timeout=0.5)
            except queue.Empty:
                dead = [(i, p.exitcode) for i, p in enumerate(self.procs) if p.exitcode is not None]
                if dead:
                    i, code = dead[0]
                    return ("died", i, self.running.get(i), code)
                if time.monotonic() > deadline:
                    raise EngineError(f"no profiling worker answered within {timeout:.0f} s {what}".rstrip()) from None
                continue
            if msg[0] == "dead":
                raise EngineError(f"a profiling worker cannot profile: {msg[2]}")
            if msg[0] == "ready":
                self.provs[msg[1]] = msg[2]
                self.provenance()  # one kind of GPU, and a GPU of its own per number
            if msg[0] == "start":
                self.running[msg[1]] = msg[2]
                continue
            if msg[0] in ("done", "error"):
                self.running.pop(msg[1], None)
            return msg

    def submit(self, n: int, graph: Graph, settings: Settings, notes: dict) -> None:
        self.tasks.put((n, graph, settings, notes))

    def close(self, finished: bool = True) -> None:
        """Stop the workers: idle ones end when told (``finished``); after an error or a cancel, busy ones
        are killed at once (a graph they measure would not be stored)."""
        if finished:
            for _ in self.procs:
                self.tasks.put(None)
            deadline = time.monotonic() + 10
            for p in self.procs:
                p.join(timeout=max(0.1, deadline - time.monotonic()))
        for p in self.procs:
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.dir.cleanup()


def run_pipeline(
    work: list[Graph],
    settings: Settings,
    command: str,
    cache_path: str | None,
    workers: int,
    track: ProfileProgress,
    should_stop,
    status,
    measure: Callable,
    probe: Callable,
    devices: list[str] | None = None,
):
    """(provenance, open cache) once the graphs the cache lacks are measured on ``workers`` processes sharing
    this GPU (or spread over ``devices``, several GPUs of one model), in spread_order (so the ETA's first
    graphs are like the rest); profiler.profile_network assembles the Profile."""
    pool = Pool(workers, measure, probe, devices)
    cache = None
    try:
        cache = open_cache(cache_path, pool.first_ready())
        options = settings.options()
        todo = [g for g in work if not cache.is_done(g.key, g.b, options)]
        notes: dict[str, dict[str, str]] = {}
        for g in work:
            if g not in todo:
                learn(notes, cache.rows(g.key, g.b))
        track.from_cache([g for g in work if g not in todo])
        # the ETA's clock starts at the first stored graph (ProfileProgress.finished), not here: until then the
        # processes only build, a fill the ETA would count as work done (tests/test_profile_pipeline.py replays
        # the committed runs on their own clocks)
        waiting = spread_order(todo)[::-1]  # popped from the end
        sent: dict[int, Graph] = {}
        numbers = itertools.count()
        window = workers + 2  # a few queued, so that each carries the notes its signature has by then
        per_gpu: dict[int, int] = {}
        while waiting or sent:
            while waiting and len(sent) < window:
                n, g = next(numbers), waiting.pop()
                sent[n] = g
                pool.submit(n, g, settings, dict(notes.get(g.key, {})))
            msg = pool.get(24 * 3600.0)
            if msg[0] == "ready":  # a worker that started while others measure
                continue
            if msg[0] == "died":
                g = sent.get(msg[2])
                raise EngineError(
                    f"{pool.died(msg)}{f' measuring {g.label}' if g else ''}; every finished graph is in "
                    f"{cache.path}: run the same command again to resume"
                )
            graph = sent.pop(msg[2])
            if msg[0] == "error":
                raise EngineError(
                    f"{graph.label}: {msg[3]}; every finished graph is in {cache.path}: run the "
                    f"same command again to resume"
                )
            rows, timing = msg[3], msg[4]
            t = time.perf_counter()
            worker = dict(pool.provs[msg[1]], command=command, worker=f"worker{msg[1]}", timing=timing)
            cache.commit(graph.key, graph.b, options, rows, worker)
            learn(notes, rows)
            own = sample_seconds(timing["seconds"], timing.get("split"), shared=workers > 1)  # the ETA's sample
            gpu = pool.gpu[msg[1]]
            per_gpu[gpu] = per_gpu.get(gpu, 0) + 1
            track.finished(
                graph, f"gpu{gpu}", own, timing.get("split"), commit=time.perf_counter() - t, worker=f"worker{msg[1]}"
            )
            if status:
                status(track.status())
            if should_stop and should_stop() and (waiting or sent):
                raise cancelled(track.done, len(work), cache)
        prov = dict(pool.provenance(per_gpu), command=command)
        pool.close()
        return prov, cache
    except BaseException:
        pool.close(finished=False)
        if cache is not None:
            cache.close()
        raise


def check_gpus(provs: list[dict], gpu: list[int], graphs: dict[int, int] | None = None) -> dict:
    """The workers' common provenance (``gpu``: each worker's GPU index): one GPU model, driver and cuDNN,
    and with several GPUs, a GPU of its own per index (``gpus`` lists them with ``graphs``: measured per index)."""
    keys = {device_key(p) for p in provs}
    if len(keys) > 1:
        raise EngineError(
            f"the profiling workers see different GPUs or software ({'; '.join(sorted(keys))}); "
            f"make one GPU visible (CUDA_VISIBLE_DEVICES) or profile GPUs of one kind at a time (--gpus)"
        )
    first = {g: provs[i] for i, g in reversed(list(enumerate(gpu)))}
    if len(first) < 2:
        return dict(provs[0])
    uuids = [first[g].get("gpu_uuid", "") for g in sorted(first)]
    if len(set(uuids)) < len(uuids):
        raise EngineError(f"the GPUs given share a GPU ({', '.join(uuids)}): give each number its own GPU")
    gpus = [
        dict(
            worker=f"gpu{g}",
            gpu=p["gpu"],
            gpu_uuid=p.get("gpu_uuid", ""),
            host=p.get("host", ""),
            graphs=(graphs or {}).get(g, 0),
        )
        for g, p in sorted(first.items())
    ]
    return dict(provs[0], gpus=gpus, gpu_uuid=",".join(uuids))


def learn(notes: dict[str, dict[str, str]], rows: list[dict]) -> None:
    """Remember the numerical notes of measured plans, per signature, for the graphs still to send."""
    for r in rows:
        notes.setdefault(r["signature"], {})[r["plan"]] = r["numerical_notes"]
