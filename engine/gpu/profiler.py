"""Live profiling: every cuDNN execution plan of every kernel at every micro-batch size of a policy.

For each unique kernel signature (identical kernels are profiled once) and each micro-batch size
b (descending, as mu-cuDNN does, so buffers are allocated once): build the graph, enumerate the
heuristic plan list (A then FALLBACK) and, with ``engines="sweep"``, every other engine
configuration cuDNN offers (graphs.sweep), build each plan, record its identity, workspace and
behaviour notes, and time it with CUDA events (engine.gpu.timing). Failures are recorded with
their reason and profiling goes on. Plans above ``max_workspace`` are recorded as skipped with
their workspace. Every plan is timed once behind a warm-up (a slow plan whose warm-up's kernels took over twice
the warm-up of one needing no more workspace keeps its warm-up instead: engine.gpu.screen.left_at_warm_up); only
those that can still be in a desirable set (engine.gpu.screen: no plan needing no more workspace was more than
10 % faster) are timed ``repeats`` times, and the others keep their single run with the plan that dominates it
as their reason, so the profile has every row it had and make_plan's choices are the same within the timing
noise.
Micro-batches are read from rotating offsets of a buffer holding twice the mini-batch, so a repeat does
not find its input hot in L2.
Swept plans are stored with ``heuristic_rank`` -1: a framework would never pick them.

A graph is built on the host first (build_graph: heuristics, sweep, notes, every plan finalized; no GPU
work), then timed (time_graph: a pass of warm-ups, a pass of single runs, then the repeats, each pass one queue on
the GPU with one synchronization), so that processes sharing one GPU (engine.gpu.pipeline, the default) build while
one of them times. Each graph's seconds per step (GraphMeasurer.split) are stored with it in the cache, and
the profile's ``time_split`` sums them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from contextlib import nullcontext
from dataclasses import dataclass, field

import cupy as cp

from ..kernels import KernelSignature
from ..network import Network
from ..precision import PRECISIONS
from ..profile import RTC_NOT_PROFILED, Profile
from . import KNOB_SAMPLES, runtime, screen, timing
from .graphs import ALIGN, ConvGraph, make_graph, numerical_notes, parse_plan_name, per_sample_bytes, sweep
from .progress import ProfileProgress
from .work import Graph, Settings, assemble, graphs, cancelled, measure_settings, open_cache, timed_measure


def sample_alignment(sig: KernelSignature) -> int:
    """Smallest sample count a whose offsets keep every sliced operand 16-byte aligned."""
    per = per_sample_bytes(sig)
    a = 1
    while any((a * per[r]) % ALIGN for r in ("x", "y")):
        a += 1
    return a


class KernelBuffers:
    """Device buffers for one signature: x and y hold 2x the mini-batch for rotation, w the filter."""

    def __init__(self, sig: KernelSignature, batch: int, workspace: cp.ndarray | None = None):
        self.sig, self.batch = sig, batch
        per = per_sample_bytes(sig)
        self.per = per
        self.slots = 2 * batch
        self.x = cp.empty(per["x"] * self.slots, dtype=cp.uint8)
        self.y = cp.empty(per["y"] * self.slots, dtype=cp.uint8)
        self.w = cp.empty(per["w"], dtype=cp.uint8)
        self.align = sample_alignment(sig)
        for buf in (self.x, self.y, self.w):  # random inputs: zeros can take fast paths
            fill_random(buf, sig.precision)
        # the fills run on the current stream; the context's stream is non-blocking and would not wait for them
        cp.cuda.get_current_stream().synchronize()
        self.ws = workspace if workspace is not None else cp.empty(1, dtype=cp.uint8)

    def workspace(self, nbytes: int) -> int:
        if nbytes > self.ws.nbytes:
            self.ws = None
            self.ws = cp.empty(nbytes, dtype=cp.uint8)
        return self.ws.data.ptr

    def pointers(self, b: int, r: int) -> dict[str, int]:
        """Operand pointers for repeat r: a different aligned micro-batch slice each time."""
        span = self.slots - b + 1
        start = ((r * b) % span) // self.align * self.align
        return {
            "x": self.x.data.ptr + start * self.per["x"],
            "y": self.y.data.ptr + start * self.per["y"],
            "w": self.w.data.ptr,
        }


def fill_random(buf: cp.ndarray, precision: str) -> None:
    """Standard-normal values in the operand's dtype, written through a typed view of a byte buffer."""
    v = buf.view(PRECISIONS[precision].array_dtype)
    f = cp.random.standard_normal(v.size, dtype=cp.float32)
    # bf16 is stored as uint16 (NumPy has no bfloat16): the top half of a float32
    v[...] = (f.view(cp.uint32) >> 16).astype(cp.uint16) if v.dtype == cp.uint16 else f.astype(v.dtype, copy=False)


# (signature key, plan name) -> numerical notes. Engine ids are per operation (eng25 of a Forward graph is
# not eng25 of a BackwardData one), so a name is labelled on a graph of its own signature, never reused
# across kinds or shapes.
_NOTES: dict[tuple[str, str], list[str]] = {}


def label_notes(sig: KernelSignature, b: int, ctx, names: list[str]) -> dict[str, str]:
    """ "|"-joined numerical notes per plan name of ``sig``, labelling names not yet labelled for ``sig``."""
    new = [n for n in names if (sig.key, n) not in _NOTES]
    if new:
        _NOTES.update({(sig.key, n): v for n, v in numerical_notes(sig, b, ctx, new).items()})
    return {n: "|".join(_NOTES[sig.key, n]) for n in names}


@dataclass
class BuiltGraph:
    """A graph's plans built on the host, before any is timed: the rows (profile.COLUMNS) of every plan,
    and (plan index, row) of those to time."""

    cg: ConvGraph
    rows: list[dict]
    todo: list[tuple[int, dict]]
    split: dict = field(default_factory=dict)  # seconds per step, and the sweep's skips by reason


def build_graph(
    sig: KernelSignature, b: int, ctx, *, max_workspace: int, include_rtc: bool, knob_samples: int | None = None
) -> BuiltGraph:
    """Host side of a graph: the heuristic list, the engine sweep with ``knob_samples`` knob settings per
    engine unless that is None, every plan built, its workspace and notes. Nothing runs on the GPU.

    Without ``include_rtc``, runtime-compiled engines are left unbuilt (each costs 0.6-1.1 s of NVRTC), except
    cuDNN's first heuristic plan: it is what stock PyTorch runs (``cudnn.benchmark`` off), so without it no plan
    can be compared with stock (engine.stock) nor choose it. For fp16 NHWC depthwise convolutions it is often one:
    on an H200, in 195 of EfficientNet-B0 b64's 959 graphs and 154 of MobileNetV3-Large's 917; with it their WR
    plans at 64 MiB predict 37 and 43 % less convolution time, and without it EfficientNet-B0's WR plan at 256 MiB
    ran its convolutions 1.46x slower than stock PyTorch's (benchmarks/reports/torch_training-h200.md)."""
    split, t = {}, time.perf_counter()
    cg = make_graph(sig, b, ctx)
    indices = list(range(cg.heuristic))
    split["heuristics"], t = _lap(t)
    if knob_samples is not None:
        skips: dict[str, int] = {}
        indices += sweep(cg, knob_samples, include_rtc, skips)
        split["sweep_skips"] = skips
    split["sweep"], t = _lap(t)
    # runtime-compiled plans not to build (their notes are known before building), but cuDNN's first heuristic
    # plan (swept plans come after the list)
    left = set() if include_rtc else {i for i in indices if i > 0 and "RUNTIME_COMPILATION" in cg.behavior_notes(i)}
    notes = label_notes(sig, b, ctx, [cg.names[i] for i in indices if i not in left])
    split["notes"], t = _lap(t)
    rows, todo = [], []
    for i in indices:
        name = cg.names[i]
        eid, knobs = parse_plan_name(name)
        row = dict(
            signature=sig.key,
            micro_batch=b,
            plan=name,
            engine_id=eid,
            knobs=json.dumps(knobs),
            heuristic_rank=i if i < cg.heuristic else -1,
            workspace=0,
            time_ms=float("nan"),
            time_min_ms=float("nan"),
            time_max_ms=float("nan"),
            repeats=0,
            status="failed",
            reason="",
            numerical_notes=notes.get(name, ""),
            behavior_notes="",
        )
        rows.append(row)
        if i in left:
            row["status"], row["reason"] = "skipped", RTC_NOT_PROFILED
            row["behavior_notes"] = "|".join(cg.behavior_notes(i))
            continue
        try:
            ws = cg.build(i)
        except Exception as err:
            row["reason"] = f"build: {type(err).__name__}: {str(err).strip()[:300]}"
            if "excluded" in str(err) or "Deselecting" in str(err):
                row["status"], row["reason"] = "skipped", "excluded by a numerical-note filter"
            continue
        row["workspace"] = ws
        row["behavior_notes"] = "|".join(cg.behavior_notes(i))
        if ws > max_workspace:
            row["status"], row["reason"] = "skipped", f"workspace {ws} B above the profiling cap {max_workspace} B"
            continue
        todo.append((i, row))
    split["build"], t = _lap(t)
    return BuiltGraph(cg, rows, todo, split)


LONG = f"over {screen.SLOW_MS:g} ms: "  # the prefix of the counts of slow plans' warm-ups
FIRST_RUNS = [
    *(
        f"{prefix}{what}"
        for prefix in ("", LONG)
        for what in ("plans", "warm-up over 5 % slower", "warm-up over 5 % faster", "warm-up over 1.5x slower")
    ),
    f"{LONG}left at the warm-up",
]


def time_graph(built: BuiltGraph, bufs: KernelBuffers, ctx, *, repeats: int) -> list[dict]:
    """Time the built plans on the GPU; returns every row of the graph. Every plan runs once as its warm-up
    (timing.time_pass: one queue, one synchronization); a slow plan far behind one that stands for it is left
    at that run (screen.left_at_warm_up), the others run once more, timed; then those that can still be in a
    desirable set (screen.dominators) ``repeats - 1`` times more, the timed run counting as one of ``repeats``
    (on the bundled ResNet-50 b64 profile the repeats were 9.2 of its 33 s of timed kernels); a plan whose
    dominator's repeats made it slower is repeated in a further pass, so each plan left with one run is
    dominated on the times stored."""
    t = time.perf_counter()
    b = built.cg.b
    plans, regions = [], []
    ws_all = bufs.workspace(max((row["workspace"] for _, row in built.todo), default=0))  # grown once
    for i, row in built.todo:
        ws_ptr = ws_all if row["workspace"] else 0
        try:
            run = built.cg.executor(i, ctx)
        except Exception as err:
            row["reason"] = f"execute: {type(err).__name__}: {str(err).strip()[:300]}"
            continue
        plans.append(row)
        regions.append(lambda r, run=run, ws_ptr=ws_ptr: run(bufs.pointers(b, r), ws_ptr))
    host: dict[int, float] = {}
    warm_up = timing.time_pass(ctx, regions, runs=1, host_ms=host)
    ran = []
    for k, w in enumerate(warm_up):
        if isinstance(w, str):
            plans[k]["reason"] = w
        else:
            ran.append(k)
    ranked = [(plans[k]["heuristic_rank"], plans[k]["workspace"]) for k in ran]
    keep = {ran[j] for j in screen.framework_choices(ranked)}
    # the least a warm-up's kernels took: its time less the host's enqueueing it, which the GPU may have waited
    # for (a plan's first launch loads its kernels on the host, up to 43 ms seen: benchmarks/reports/warm-up-check.md)
    view = [screen.timed(plans[k], warm_up[k][0], max(warm_up[k][0] - host[k], 0.0)) for k in ran]
    left = {
        ran[j]: view[q].name
        for j, q in enumerate(screen.left_at_warm_up(view, {j for j, k in enumerate(ran) if k in keep}))
        if q is not None
    }
    timed: dict[int, list[float] | str] = {k: warm_up[k] for k in left}
    # the others once more; host-bound ones with no spin ahead, so each is timed as it runs back to back
    for spin in (True, False):
        again = [k for k in ran if k not in left and (host[k] < timing.HOST_BOUND_MS) == spin]
        second: dict[int, float] = {}
        once = [lambda r, k=k: regions[k](r + 1) for k in again]
        for j, (k, got) in enumerate(zip(again, timing.time_pass(ctx, once, runs=1, host_ms=second, spin=spin))):
            timed[k] = got
            host[k] = min(host[k], second.get(j, host[k]))
    ok, seen, warm = [], {}, dict.fromkeys(FIRST_RUNS, 0)
    for k in ran:
        if isinstance(timed[k], str):
            plans[k]["reason"] = timed[k]
            continue
        first, t1 = warm_up[k][0], timed[k][0]
        plans[k].update(status="ok", time_ms=t1, time_min_ms=t1, time_max_ms=t1, repeats=1)
        ok.append(k)
        seen[k] = min(first, t1)
        if k in left:
            plans[k]["reason"] = (
                f"dominated by plan {left[k]} at its warm-up, over {1 + screen.WARM_UP_MARGIN:g}x slower: not run again"
            )
            warm[f"{LONG}left at the warm-up"] += 1
            continue
        # whether a warm-up stands for the timed run: counted for every plan, and for the slow ones apart
        # (their warm-ups are what screen.left_at_warm_up keeps; benchmarks/reports/warm-up-check.md)
        for prefix in ("", LONG) if t1 >= screen.SLOW_MS else ("",):
            warm[f"{prefix}plans"] += 1
            warm[f"{prefix}warm-up over 5 % slower"] += first > 1.05 * t1
            warm[f"{prefix}warm-up over 5 % faster"] += first < t1 / 1.05
            warm[f"{prefix}warm-up over 1.5x slower"] += first > 1.5 * t1
    built.split["first_runs"] = warm
    repeated: set[int] = set()
    while repeats > 1:
        view = [screen.timed(plans[k], plans[k]["time_ms"], seen[k]) for k in ok]
        dom = screen.dominators(view, {j for j, k in enumerate(ok) if k in keep})
        need = [k for j, k in enumerate(ok) if dom[j] is None and k not in repeated]
        for j, k in enumerate(ok):
            if dom[j] is not None and k not in repeated and k not in left:
                plans[k]["reason"] = f"dominated by plan {view[dom[j]].name} at first timing"
        if not need:
            break
        more_runs = [lambda r, k=k: regions[k](r + 2) for k in need]
        for k, more in zip(need, timing.time_pass(ctx, more_runs, runs=repeats - 1)):
            repeated.add(k)
            if isinstance(more, str):  # ran once, failed now: its single run stands, with the reason
                plans[k]["reason"] = more
                continue
            # the timed run, behind its warm-up as these are, is one of them; a plan left at its warm-up has none
            times = list(more) if k in left else [timed[k][0], *more]
            med = runtime.median(times)
            plans[k].update(time_ms=med, time_min_ms=min(times), time_max_ms=max(times), repeats=len(times), reason="")
            seen[k] = min(seen[k], min(times))
    bound = [k for k in ok if host.get(k, 0.0) >= timing.HOST_BOUND_MS]
    # timed back to back (engine.gpu.timing): its time is the host's, and the row says so after any dominator
    for k in bound:
        why = f"host-bound: {host[k]:.1f} ms of host time per execution, timed back to back"
        plans[k]["reason"] = f"{plans[k]['reason']}; {why}" if plans[k]["reason"] else why
    if bound:
        built.split["host_bound"] = {"plans": len(bound)}
    built.split["timing"], _ = _lap(t)
    return built.rows


def profile_graph(
    sig: KernelSignature,
    b: int,
    bufs: KernelBuffers,
    ctx,
    *,
    max_workspace: int,
    repeats: int,
    include_rtc: bool,
    knob_samples: int | None = None,
) -> list[dict]:
    """Rows (profile.COLUMNS) for every plan of ``sig`` at micro-batch ``b``: the heuristic list, plus
    the engine sweep with ``knob_samples`` knob settings per engine unless that is None."""
    built = build_graph(sig, b, ctx, max_workspace=max_workspace, include_rtc=include_rtc, knob_samples=knob_samples)
    return time_graph(built, bufs, ctx, repeats=repeats)


def _lap(t0: float) -> tuple[float, float]:
    """(seconds since t0, now), rounded for storage."""
    now = time.perf_counter()
    return round(now - t0, 4), now


class GraphMeasurer:
    """Measures graphs one after another, keeping the last signature's buffers (a serial run asks for
    one signature's sizes in a row, so they are filled once per signature) and the workspace across
    signatures. A Dask worker gets another signature for nearly every graph: freeing CuPy's pool there
    made each graph cudaMalloc its operands and grow its workspace again, so a switch hands the operands
    back to the pool and keeps the workspace.

    ``gpu``: a context manager held while the GPU is used (operand fills and timing), so that processes
    sharing one GPU (engine.gpu.pipeline) time one at a time while the others build; ``split`` holds the
    last graph's seconds per step (build_graph's, "buffers", "timing", and "wait" for ``gpu``)."""

    def __init__(self, gpu=None):
        self.bufs: KernelBuffers | None = None
        self.gpu = gpu if gpu is not None else nullcontext()
        self.split: dict = {}

    def measure(self, graph: Graph, settings: Settings, notes: dict[str, str] | None = None) -> list[dict]:
        """Rows of every plan of ``graph`` (profile_graph). ``notes``: numerical notes of the signature's plans
        labelled elsewhere (another GPU's worker), so they are not labelled again here."""
        _NOTES.update({(graph.key, name): v.split("|") if v else [] for name, v in (notes or {}).items()})
        ctx = runtime.context()
        try:
            built = build_graph(
                graph.sig,
                graph.b,
                ctx,
                max_workspace=settings.max_workspace,
                include_rtc=settings.include_rtc,
                knob_samples=settings.knob_samples,
            )
            t = time.perf_counter()
            with self.gpu:
                built.split["wait"], t = _lap(t)
                if self.bufs is None or self.bufs.sig != graph.sig:
                    ws = self.bufs.ws if self.bufs is not None else None
                    self.bufs = None  # its operands go back to the pool, for the next signature's
                    self.bufs = KernelBuffers(graph.sig, graph.sig.n, workspace=ws)
                self.bufs.workspace(max((row["workspace"] for _, row in built.todo), default=0))  # grown once
                built.split["buffers"], t = _lap(t)
                retimed = ctx.retimed
                rows = time_graph(built, self.bufs, ctx, repeats=settings.repeats)
                if ctx.retimed > retimed:
                    built.split["retimed"] = {"spin shorter than the host's enqueue": ctx.retimed - retimed}
            self.split = built.split
            return rows
        except Exception:
            self.release()  # an out-of-memory graph must not keep its buffers from the next one
            raise

    def release(self) -> None:
        self.bufs = None
        cp.get_default_memory_pool().free_all_blocks()


_SHARED: dict = {}  # per pipeline worker process: its GraphMeasurer


def measure_shared(graph: Graph, settings: Settings, notes: dict[str, str], gpu) -> tuple[list[dict], dict]:
    """A pipeline worker's measurement (engine.gpu.pipeline): rows and seconds per step of one graph, built
    on this process's own CUDA context and timed while it holds ``gpu``, the lock of the shared GPU."""
    measurer = _SHARED.setdefault("measurer", GraphMeasurer(gpu))
    return measurer.measure(graph, settings, notes), measurer.split


def probe() -> dict:
    """A pipeline worker's GPU, driver, cuDNN and frontend (its CUDA context is made here, before any graph)."""
    runtime.context()
    return runtime.provenance()


def profile_network(
    network: Network,
    *,
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
    workers: int | None = None,
    progress: Callable[[int, int, str], None] | None = None,
    should_stop: Callable[[], bool] | None = None,
    status: Callable[[dict], None] | None = None,
    measure: Callable = measure_shared,
    probe: Callable[[], dict] = probe,
    devices: list[str] | None = None,
) -> Profile:
    """Profile every unique kernel of ``network`` at the policy's micro-batch sizes on this GPU; returns a
    Profile (engine.gpu.distributed spreads the same graphs over several GPUs).

    ``workers`` processes build plans while one at a time times them on the GPU (engine.gpu.pipeline;
    None: pipeline.worker_count per GPU); 1 measures in this process, graph after graph. ``devices``: several
    GPUs of this host (CUDA_VISIBLE_DEVICES values, as ``--gpus`` gives them), each with its share of the
    processes, all fed from one queue. ``measure`` and ``probe``
    run in the workers; the CPU tests pass fakes. ``status`` is called with ProfileProgress.status() after
    every graph (per-GPU counts and the ETA), ``progress`` as before with the ETA in its message.

    Runtime-compiled engines are left out by default (``include_rtc``), but for cuDNN's first heuristic plan
    (build_graph): each costs 0.6-1.1 s of NVRTC per graph (measured on the H100), which would dominate
    profiling time. ``engines`` is "sweep"
    (the heuristic list plus every other engine configuration, see graphs.sweep) or "heuristics".
    The provenance's ``time_split`` sums the graphs' seconds per step (ProfileProgress.split_summary).
    """
    from .pipeline import worker_count

    settings = measure_settings(
        max_workspace=max_workspace,
        repeats=repeats,
        include_rtc=include_rtc,
        engines=engines,
        knob_samples=knob_samples,
    )
    work = graphs(network, policy, precision, layout)
    track = ProfileProgress(work, progress)
    t0 = time.perf_counter()
    gpus = len(devices or ()) or 1
    if workers is None:
        operands = max((sum(per_sample_bytes(g.sig).values()) * 2 * g.sig.n for g in work), default=0)
        gpu = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)["totalGlobalMem"]
        per_gpu = worker_count(None, max_workspace=max_workspace, operand_bytes=operands, gpu_bytes=gpu, share=gpus)
        workers = per_gpu * gpus
    else:
        workers = worker_count(workers, max_workspace=max_workspace, operand_bytes=0, gpu_bytes=0)
    if workers == 1 and gpus == 1:
        prov, cache = _serial(work, settings, command, cache_path, track, should_stop, status)
    else:
        from .pipeline import run_pipeline

        prov, cache = run_pipeline(
            work, settings, command, cache_path, max(workers, gpus), track, should_stop, status, measure, probe, devices
        )
    try:
        prov["profiling_seconds"] = round(time.perf_counter() - t0, 2)
        prov["options"] = settings.options()
        prov["workers"] = workers
        prov["time_split"] = track.split_summary()
        prov["graphs"] = track.graph_counts()
        return assemble(cache, work, prov, network, policy, precision, layout)
    finally:
        cache.close()


def _serial(work, settings, command, cache_path, track, should_stop, status):
    """Every graph in this process, in network order (a signature's sizes in a row share its buffers)."""
    prov = runtime.provenance(command)
    cache = open_cache(cache_path, prov)
    options = settings.options()
    measurer = GraphMeasurer()
    try:
        track.from_cache([g for g in work if cache.is_done(g.key, g.b, options)])
        track.start()
        for graph in work:
            if should_stop and should_stop():
                raise cancelled(track.done, len(work), cache)
            if cache.is_done(graph.key, graph.b, options):
                continue
            rows, timing = timed_measure(measurer.measure, graph, settings)
            t = time.perf_counter()
            cache.commit(graph.key, graph.b, options, rows, dict(prov, timing=dict(timing, split=measurer.split)))
            track.finished(graph, "gpu0", timing["seconds"], measurer.split, commit=time.perf_counter() - t)
            if status:
                status(track.status())
        return prov, cache
    except BaseException:
        cache.close()
        raise
    finally:  # also when cancelled or failed: the dashboard profiles inside its server process
        measurer.release()
