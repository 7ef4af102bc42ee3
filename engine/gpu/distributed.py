"""Profiling spread over several GPUs with Dask: worker processes on each GPU, one writer.

Profiling is the slow step, and each (unique kernel, micro-batch size) graph is measured on its own,
so the graphs are Dask tasks. ``--scheduler`` runs them on a cluster. ``--gpus`` on one host no longer comes
here (choose_profiler): the host's GPUs run engine.gpu.pipeline's processes instead, fed from one queue.
A worker measures one graph at a time and most of a graph is host time building its plans, so a GPU is best
given several single-threaded workers (``CUDA_VISIBLE_DEVICES=i dask worker ADDRESS --nworkers 4 --nthreads
1``, pipeline.MAX_WORKERS says why four): as in the pipeline, they build at once and take turns timing, under
one lock per GPU (``gpu_lock``: a file named by the GPU's uuid), so no kernel shares the GPU with a timed one.
profile_network(gpus=...) still starts one ``distributed`` Nanny worker per local GPU (the CPU tests' cluster), pinned
by ``CUDA_VISIBLE_DEVICES`` (what dask-cuda's LocalCUDACluster does); dask-cuda itself is not used
because dask-cuda 26.10 pins dask and distributed to 2026.7.1 (rapids-dask-dependency) and needs
cuda-core and NVML to start, so its cluster could not be the one the CPU tests run.

The client checks that every worker has the same GPU model, driver, cuDNN and frontend (plans are per
GPU model), submits the graphs the cache lacks in spread order (work.spread_order; a few at a time, each
with the numerical notes its signature already has), and stores each
graph's rows in the SQLite cache as it finishes: a run killed at any moment keeps every finished graph and
resumes on any number of GPUs. A graph whose worker died (KilledWorker, CommClosedError) or that raised is
submitted once more, alone after the other graphs (a dying worker also takes down the graph queued behind
the culprit), then recorded as failed with its reason (not cached, so the next run tries it again) while
the run goes on. A CUDA error leaves a worker's context unusable, so that worker is restarted.
"""

from __future__ import annotations

import datetime as _dt
import os
import re
import tempfile
import time
import uuid
from collections.abc import Callable
from functools import partial

from ..errors import EngineError, GPUUnavailableError
from ..network import Network
from ..profile import Profile
from . import KNOB_SAMPLES
from .cache import ProfileCache
from .cluster import connect
from .pipeline import GPULock
from .progress import ProfileProgress, sample_seconds
from .work import (
    DEFAULT_CACHE,
    Graph,
    ProfilingCancelled,
    Settings,
    assemble,
    device_key,
    graphs,
    measure_settings,
    spread_order,
    timed_measure,
)

RETRIES = 1  # a graph is submitted at most 1 + RETRIES times


class GPUContextLost(EngineError):
    """A CUDA error on a worker (args: message, worker address): its context is unusable."""

    def __init__(self, message: str, worker: str = ""):
        super().__init__(message, worker)
        self.worker = worker

    def __str__(self) -> str:
        return self.args[0]


# ---------------------------------------------------------------- worker side (module level: importable)

_WORKER: dict = {}  # per worker process: provenance by probe, the GPU measurer


def gpu_provenance() -> dict:
    """This worker's GPU, driver, cuDNN and frontend (runtime.provenance), or why it cannot profile."""
    import platform

    from . import available

    ok, why = available()
    if not ok:
        raise GPUUnavailableError(f"the worker on {platform.node()} cannot profile: {why}")
    from . import runtime

    return runtime.provenance()


def measure_on_gpu(graph: Graph, settings: Settings, notes: dict[str, str], gpu) -> tuple[list[dict], dict]:
    """Rows of one graph on this worker's GPU, and seconds per step: built here, timed while holding ``gpu``
    (the GPU's lock); the worker keeps its own CUDA context and buffers."""
    import cupy as cp

    from .profiler import GraphMeasurer

    measurer = _WORKER.setdefault("measurer", GraphMeasurer(gpu))
    try:
        return measurer.measure(graph, settings, notes), measurer.split
    except cp.cuda.runtime.CUDARuntimeError as err:
        raise GPUContextLost(f"CUDA error: {err}") from None


def gpu_lock(prov: dict) -> GPULock:
    """The lock of this worker's GPU, shared by every worker process of this user on it: a file in the host's
    temporary folder named by the user and the GPU's uuid (the kernel drops a dead holder's lock; another
    user's workers could not open this user's file, so they keep a lock of their own)."""
    name = re.sub(r"[^A-Za-z0-9_.-]", "_", str(prov.get("gpu_uuid") or f"pid{os.getpid()}"))
    path = os.path.join(tempfile.gettempdir(), f"ucudnn-gpu-{os.getuid()}-{name}.lock")
    return _WORKER.setdefault(("lock", path), GPULock(path))


def worker_provenance(probe: Callable[[], dict]) -> dict:
    """``probe()`` once per worker process (client.run calls it before the run, tasks reuse it)."""
    key = ("provenance", probe)
    if key not in _WORKER:
        _WORKER[key] = probe()
    return _WORKER[key]


def run_graph(measure: Callable, probe: Callable, graph: Graph, settings: Settings, notes: dict[str, str]) -> dict:
    """A Dask task: one graph's rows, with the provenance of the worker that measured them. ``notes``: the
    numerical notes of the signature's plans already labelled on any worker (plan name -> "|"-joined)."""
    from distributed import get_worker

    worker = get_worker()
    prov = worker_provenance(probe)
    try:
        (rows, split), timing = timed_measure(measure, graph, settings, notes, gpu_lock(prov))
    except GPUContextLost as err:
        raise GPUContextLost(err.args[0], worker.address) from None
    return {
        "rows": rows,
        "provenance": prov,
        "worker": str(worker.name),
        "timing": dict(timing, split=split) if split else timing,
    }


# ---------------------------------------------------------------- client side


def local_devices(gpus: str | None, count: int, visible: str | None) -> list[str]:
    """CUDA_VISIBLE_DEVICES values, one per worker, for ``--gpus`` (ordinals as this process numbers its
    ``count`` GPUs; None: all of them), mapped through this process's own ``visible`` list."""
    ids = [v.strip() for v in visible.split(",")][:count] if visible else [str(i) for i in range(count)]
    if gpus is None:
        return ids
    try:
        ordinals = [int(g) for g in gpus.split(",")]
    except ValueError:
        ordinals = []
    if not ordinals or len(set(ordinals)) != len(ordinals) or not all(0 <= g < count for g in ordinals):
        raise EngineError(
            f"--gpus {gpus!r}: expected distinct GPU numbers separated by commas, such as 0,1, "
            f"each below {count} (this process sees {count} GPU{'s' * (count != 1)})"
        )
    return [ids[g] for g in ordinals]


def choose_profiler(gpus: str | None, scheduler: str | None) -> Callable[..., Profile]:
    """The profile command's profile_network for ``--gpus``/``--scheduler``: this host's GPUs (all visible
    ones, or those ``--gpus`` names) through engine.gpu.profiler's pipeline, no Dask; Dask for a cluster at
    ``--scheduler``."""
    if scheduler:
        if gpus is not None:
            raise EngineError("--gpus and --scheduler exclude each other: the cluster's workers bring their GPUs")
        return partial(profile_network, scheduler=scheduler)
    from . import available

    try:  # only the count here: the Dask workers load cuDNN themselves, so this process need not first
        import cupy

        count = cupy.cuda.runtime.getDeviceCount()
    except Exception:
        count = 0
    ok, why = available()
    if not count or not ok:
        raise GPUUnavailableError(f"cannot profile: {why}")
    from .profiler import profile_network as on_this_host

    if gpus is None and count == 1:
        return on_this_host
    # this host's GPUs: the one-GPU pipeline with its processes spread over them, fed from one queue (a Dask
    # worker measures one graph at a time, so it could not build while its GPU times)
    return partial(on_this_host, devices=local_devices(gpus, count, os.environ.get("CUDA_VISIBLE_DEVICES")))


def gpu_id(prov: dict, worker: str) -> str:
    """One GPU's identity across worker restarts: host and GPU uuid (the worker's name without a uuid)."""
    return f"{prov.get('host', '')}/{prov.get('gpu_uuid') or worker}"


def check_workers(client, probe: Callable[[], dict]) -> dict[str, tuple[str, dict]]:
    """{worker address: (name, provenance)} once every worker is known to be single-threaded and of the same
    GPU model, driver, cuDNN and frontend; else one EngineError saying what differs. Workers may share a GPU:
    they time one at a time (gpu_lock)."""
    info = client.scheduler_info(n_workers=-1)["workers"]
    busy = [f"{w.get('name', a)} ({w['nthreads']} threads)" for a, w in info.items() if w["nthreads"] != 1]
    if busy:
        raise EngineError(
            f"Dask workers {', '.join(busy)} would time several graphs on one GPU at once; run "
            f"single-threaded workers (dask worker --nthreads 1, up to 4 per GPU with --nworkers 4)"
        )
    try:
        provs = client.run(worker_provenance, probe)
    except EngineError:
        raise
    except Exception as err:
        raise EngineError(f"a Dask worker cannot report its GPU: {type(err).__name__}: {err}") from None
    workers = {a: (str(info.get(a, {}).get("name", a)), p) for a, p in sorted(provs.items())}
    keys = {name: device_key(p) for name, p in workers.values()}
    if len(set(keys.values())) > 1:
        listing = "; ".join(f"{name}: {k}" for name, k in sorted(keys.items()))
        raise EngineError(
            f"the Dask workers' GPUs differ ({listing}); plans are per GPU model, driver and cuDNN, "
            f"so profile on GPUs of one kind at a time (--gpus, e.g. --gpus 0)"
        )
    return workers


def profile_network(
    network: Network,
    *,
    gpus: list[str] | None = None,
    scheduler: str | None = None,
    policy="powerOfTwo",
    precision: str = "tf32",
    layout: str = "NCHW",
    cache_path: str | None = None,
    max_workspace: int = 1 << 30,
    repeats: int = 5,
    include_rtc: bool = False,
    engines: str = "sweep",
    knob_samples: int = KNOB_SAMPLES,
    command: str = "",
    progress: Callable[[int, int, str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    status: Callable[[dict], None] | None = None,
    measure: Callable[..., tuple[list[dict], dict]] = measure_on_gpu,
    probe: Callable[[], dict] = gpu_provenance,
) -> Profile:
    """engine.gpu.profiler.profile_network spread over Dask workers: one per local GPU of ``gpus``
    (CUDA_VISIBLE_DEVICES values, see local_devices), or those of the cluster at ``scheduler``.

    ``measure`` and ``probe`` run on the workers; the CPU tests pass fakes returning SYNTHETIC rows.
    The provenance is the workers' common one plus ``gpus`` (every GPU used and the graphs it measured),
    ``graphs`` (counts) and ``failed_graphs`` (each failure's reason) when any failed; its
    ``profiling_seconds`` include starting the workers (``worker_start_seconds``: until they joined, and
    until their GPUs were checked); ``time_split`` sums the graphs' seconds per step. ``progress`` and
    ``status`` as in engine.gpu.profiler.profile_network (the ETA, graphs per GPU).
    """
    if not gpus and not scheduler:
        raise EngineError("profiling with Dask needs local GPUs or the address of a Dask scheduler")
    settings = measure_settings(
        max_workspace=max_workspace,
        repeats=repeats,
        include_rtc=include_rtc,
        engines=engines,
        knob_samples=knob_samples,
    )
    work = graphs(network, policy, precision, layout)
    t0 = time.perf_counter()
    with connect(gpus, scheduler) as client:
        joined = time.perf_counter() - t0
        workers = check_workers(client, probe)
        started = dict(joined=round(joined, 2), checked=round(time.perf_counter() - t0, 2))
        ref = next(iter(workers.values()))[1]
        cache = ProfileCache(os.path.expanduser(cache_path or DEFAULT_CACHE), device_key(ref))
        try:
            run = Run(client, cache, settings, measure, probe, workers)
            track = ProfileProgress(work, progress)
            run.profile(work, track, should_stop, status)
            prov = run.provenance(ref, command, scheduler or "local", len(work))
            prov["time_split"] = track.split_summary()
            prov["profiling_seconds"] = round(time.perf_counter() - t0, 2)
            prov["worker_start_seconds"] = started
            return assemble(cache, work, prov, network, policy, precision, layout)
        finally:
            cache.close()


class Run:
    """One profile's submissions and their outcomes; the only writer of the cache."""

    def __init__(
        self, client, cache: ProfileCache, settings: Settings, measure, probe, workers: dict[str, tuple[str, dict]]
    ):
        self.client, self.cache, self.settings = client, cache, settings
        self.options, self.measure, self.probe = settings.options(), measure, probe
        self.tag = uuid.uuid4().hex[:8]
        self.pending: dict = {}  # future -> (graph, attempt)
        self.gpus: dict[str, dict] = {}  # gpu_id -> the GPU and the graphs it measured
        for name, prov in workers.values():
            self.used(name, prov)
        self.failed: list[dict] = []
        self.cached = 0
        self.notes: dict[str, dict[str, str]] = {}  # signature -> plan -> numerical notes measured so far
        self.rank: dict = {}  # (signature, micro-batch) -> its place in the submission order

    def submit(self, graph: Graph, attempt: int):
        notes = dict(self.notes.get(graph.key, {}))
        fut = self.client.submit(
            run_graph,
            self.measure,
            self.probe,
            graph,
            self.settings,
            notes,
            priority=-self.rank.get((graph.key, graph.b), 0),  # the scheduler runs them in submission order too
            pure=False,
            key=f"graph-{self.tag}-{attempt}-{graph.key}-b{graph.b}",
        )
        self.pending[fut] = (graph, attempt)
        return fut

    def profile(self, work: list[Graph], track: ProfileProgress, should_stop, status=None) -> None:
        """Submit the graphs the cache lacks in spread order (work.spread_order, as the pipeline takes them), and
        handle each as it finishes. Biggest first, the ETA extrapolated from the biggest graphs to the smallest:
        with four workers sharing an H200 the command put ResNet-50's finish 52-62 % late after a tenth of the
        graphs (benchmarks/reports/gpu-tests.md, calls 43, 45 and 46); in spread order, with each worker's start
        told apart and the clock from the first stored graph, 9 % early there and 11 % early at worst later (call 48;
        benchmarks/reports/user-command-runs.md).

        Graphs are submitted four per worker at a time (one running, one queued on it, two at the scheduler),
        so that each carries the numerical notes its signature got on any worker so far: a signature's plans
        are labelled once, as in a single-GPU run. A failed graph is submitted again after the others, one
        at a time, so that only its own fault can fail it again."""
        from distributed import as_completed

        todo = [g for g in work if not self.cache.is_done(g.key, g.b, self.options)]
        self.cached = len(work) - len(todo)
        for g in set(work) - set(todo):
            self.learn(self.cache.rows(g.key, g.b))
        track.from_cache([g for g in work if g not in set(todo)])
        # the ETA's clock starts at the first stored graph (ProfileProgress.finished), as in the pipeline: until then
        # the workers only build, and that fill, counted as work done, put call 47's finish 21 % late at a tenth
        order = spread_order(todo)
        self.rank = {(g.key, g.b): i for i, g in enumerate(order)}
        waiting = order[::-1]  # popped from the end
        window = 4 * max(1, len(self.client.scheduler_info(n_workers=-1)["workers"]))
        queue = as_completed(with_results=True, raise_errors=False)  # results fetched in the background
        again: list[tuple[Graph, int]] = []  # failed graphs, to be submitted alone
        try:
            while waiting or again or self.pending:
                while waiting and len(self.pending) < window:
                    queue.add(self.submit(waiting.pop(), 0))
                if not waiting and not self.pending:
                    queue.add(self.submit(*again.pop(0)))
                fut, result = next(queue)
                graph, attempt = self.pending.pop(fut)
                t = time.perf_counter()
                # read once: a finished future whose worker then dies turns "lost" (its result already here and
                # stored), and a second read had it neither measured nor failed (CI, the fault test: 53 + 2 of 56)
                ok = fut.status == "finished"
                note = self.finish(fut, ok, result, graph, attempt)
                if note is None:
                    again.append((graph, attempt + 1))
                    continue
                if ok:
                    gpu = self.used(result["worker"], result["provenance"])
                    gpu["graphs"] += 1
                    shared = len(gpu["workers"]) > 1  # its workers build at once: the GPU's wall is its held time
                    timing = result["timing"]
                    track.finished(
                        graph,
                        gpu["worker"],
                        sample_seconds(timing["seconds"], timing.get("split"), shared=shared),
                        timing.get("split"),
                        commit=time.perf_counter() - t,
                        note=note,
                        worker=result["worker"],  # graphs come in spread order, so each worker's start shows
                    )
                else:
                    track.failed(graph, note)
                if status:
                    status(track.status())
                if should_stop and should_stop() and track.done < len(work):
                    raise ProfilingCancelled(
                        f"profiling cancelled after {track.done} of {len(work)} graphs; results "
                        f"so far are kept in {self.cache.path}"
                    )
        finally:
            if self.pending:
                self.client.cancel(list(self.pending))

    def learn(self, rows: list[dict]) -> None:
        """Remember the numerical notes of measured plans, per signature, for the graphs still to submit."""
        for r in rows:
            self.notes.setdefault(r["signature"], {})[r["plan"]] = r["numerical_notes"]

    def finish(self, fut, ok: bool, res, graph: Graph, attempt: int) -> str | None:
        """Store a finished graph (``ok``: its future's status as read once), or record a failed one; None: submit
        it again. Else a progress note."""
        if not ok:  # KilledWorker, CommClosedError, GPUContextLost, the graph's own error
            err = fut.exception() if fut.status == "error" else RuntimeError(f"task {fut.status}")
            if self.client.status != "running":
                raise EngineError(
                    f"lost the Dask scheduler ({type(err).__name__}: {err}); every finished graph "
                    f"is in {self.cache.path}: run the same command again to resume"
                ) from None
            if isinstance(err, GPUContextLost) and err.worker:
                self.client.restart_workers([err.worker], raise_for_error=False)
            if attempt < RETRIES:
                return None
            text = str(err).strip()
            reason = f"{type(err).__name__}: {text.splitlines()[0][:300] if text else ''}"
            self.failed.append(dict(signature=graph.key, micro_batch=graph.b, reason=reason, attempts=attempt + 1))
            return f"FAILED: {reason}"
        prov = res["provenance"]
        if device_key(prov) != self.cache.device_key:
            raise EngineError(
                f"worker {res['worker']} has another GPU or software ({device_key(prov)}, not "
                f"{self.cache.device_key}); every finished graph is in {self.cache.path}"
            )
        self.cache.commit(
            graph.key, graph.b, self.options, res["rows"], dict(prov, worker=res["worker"], timing=res["timing"])
        )
        self.learn(res["rows"])
        return f"on {res['worker']}"

    def used(self, worker: str, prov: dict) -> dict:
        """The entry of the GPU behind ``worker`` (added when a worker joins or restarts): named by its first
        worker, with every worker on it (several single-threaded workers may share a GPU: gpu_lock)."""
        entry = self.gpus.setdefault(
            gpu_id(prov, worker),
            dict(
                worker=worker,
                workers=[],
                gpu=prov["gpu"],
                gpu_uuid=prov.get("gpu_uuid", ""),
                host=prov.get("host", ""),
                graphs=0,
            ),
        )
        if worker not in entry["workers"]:
            entry["workers"].append(worker)
        return entry

    def provenance(self, ref: dict, command: str, scheduler: str, total: int) -> dict:
        """The workers' common provenance, every GPU used (with the graphs it measured) and the counts."""
        gpus = [self.gpus[k] for k in sorted(self.gpus)]
        prov = dict(
            ref,
            command=command,
            scheduler=scheduler,
            options=self.options,
            gpus=gpus,
            gpu_uuid=",".join(g["gpu_uuid"] for g in gpus),
            host=",".join(sorted({g["host"] for g in gpus})),
            date=_dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
            graphs=dict(
                total=total, from_cache=self.cached, measured=sum(g["graphs"] for g in gpus), failed=len(self.failed)
            ),
        )
        if self.failed:
            prov["failed_graphs"] = self.failed
        return prov
