"""Live profiling: every cuDNN execution plan of every kernel at every micro-batch size of a policy.

For each unique kernel signature (identical kernels are profiled once) and each micro-batch size
b (descending, as mu-cuDNN does, so buffers are allocated once): build the graph, enumerate the
heuristic plan list (A then FALLBACK) and, with ``engines="sweep"``, every other engine
configuration cuDNN offers (graphs.sweep), build each plan, record its identity, workspace and
behaviour notes, and time it with CUDA events (runtime.time_repeats). Failures are recorded with
their reason and profiling goes on. Plans above ``max_workspace`` are recorded as skipped with
their workspace; a plan more than ``HOPELESS``x slower than the best so far at that size, or a swept
plan more than ``DOMINATED``x slower than a timed plan needing no more workspace (so it can never be
desirable), keeps a single timed run instead of ``repeats``. Micro-batches are read from rotating
offsets of a buffer holding twice the mini-batch, so a repeat does not find its input hot in L2.
Swept plans are stored with ``heuristic_rank`` -1: a framework would never pick them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import cupy as cp

from ..kernels import KernelSignature
from ..network import Network
from ..precision import PRECISIONS
from ..profile import Profile
from . import KNOB_SAMPLES, runtime
from .cache import ProfileCache
from .graphs import ALIGN, make_graph, numerical_notes, parse_plan_name, per_sample_bytes, sweep
from .work import (DEFAULT_CACHE, DOMINATED, Graph, ProfilingCancelled, Settings, assemble, device_key, graphs,
                   measure_settings, timed_measure)

HOPELESS = 10.0


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
        return {"x": self.x.data.ptr + start * self.per["x"], "y": self.y.data.ptr + start * self.per["y"],
                "w": self.w.data.ptr}


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
    """"|"-joined numerical notes per plan name of ``sig``, labelling names not yet labelled for ``sig``."""
    new = [n for n in names if (sig.key, n) not in _NOTES]
    if new:
        _NOTES.update({(sig.key, n): v for n, v in numerical_notes(sig, b, ctx, new).items()})
    return {n: "|".join(_NOTES[sig.key, n]) for n in names}


def profile_graph(sig: KernelSignature, b: int, bufs: KernelBuffers, ctx, *, max_workspace: int,
                  repeats: int, include_rtc: bool, knob_samples: int | None = None) -> list[dict]:
    """Rows (profile.COLUMNS) for every plan of ``sig`` at micro-batch ``b``: the heuristic list, plus
    the engine sweep with ``knob_samples`` knob settings per engine unless that is None."""
    cg = make_graph(sig, b, ctx, include_rtc=include_rtc)
    indices = list(range(cg.heuristic))
    if knob_samples is not None:
        indices += sweep(cg, knob_samples, include_rtc)
    notes = label_notes(sig, b, ctx, [cg.names[i] for i in indices])
    rows, best, timed = [], float("inf"), []
    for i in indices:
        name = cg.names[i]
        eid, knobs = parse_plan_name(name)
        row = dict(signature=sig.key, micro_batch=b, plan=name, engine_id=eid, knobs=json.dumps(knobs),
                   heuristic_rank=i if i < cg.heuristic else -1, workspace=0, time_ms=float("nan"),
                   time_min_ms=float("nan"),
                   time_max_ms=float("nan"), repeats=0, status="failed", reason="", numerical_notes=notes[name],
                   behavior_notes="")
        rows.append(row)
        try:
            ws = cg.build(i)
        except Exception as err:
            row["reason"] = f"build: {type(err).__name__}: {str(err).strip()[:300]}"
            if "excluded" in str(err) or "Deselecting" in str(err):
                row["status"] = "skipped"
                row["reason"] = ("runtime-compiled engine, not profiled (--include-rtc profiles it)"
                                 if "RUNTIME_COMPILATION" in row["behavior_notes"] or not include_rtc
                                 else "excluded by a numerical-note filter")
            continue
        row["workspace"] = ws
        row["behavior_notes"] = "|".join(cg.behavior_notes(i))
        if ws > max_workspace:
            row["status"], row["reason"] = "skipped", f"workspace {ws} B above the profiling cap {max_workspace} B"
            continue
        ws_ptr = bufs.workspace(ws) if ws else 0
        try:
            run = cg.executor(i, ctx)
            one = runtime.time_repeats(ctx, lambda r: run(bufs.pointers(b, r), ws_ptr), repeats=1, warmup=1)
            times = one
            better = [p for p, w, t in timed if w <= ws and DOMINATED * t < one[0]] if i >= cg.heuristic else []
            if one[0] > HOPELESS * best:
                row["reason"] = f"timed once: more than {HOPELESS:g}x slower than the best plan so far"
            elif better:
                row["reason"] = (f"timed once: more than {DOMINATED:g}x slower than {better[0]}, which needs no "
                                 f"more workspace")
            else:
                times = runtime.time_repeats(ctx, lambda r: run(bufs.pointers(b, r + 1), ws_ptr), repeats, warmup=0)
        except cp.cuda.runtime.CUDARuntimeError:
            raise  # the context is unusable; stop rather than record garbage
        except Exception as err:
            row["reason"] = f"execute: {type(err).__name__}: {str(err).strip()[:300]}"
            continue
        med = runtime.median(times)
        best = min(best, med)
        if len(times) > 1:
            timed.append((name, ws, med))
        row.update(status="ok", time_ms=med, time_min_ms=min(times), time_max_ms=max(times), repeats=len(times))
    return rows


class GraphMeasurer:
    """Measures graphs one after another, keeping the last signature's buffers (a serial run asks for
    one signature's sizes in a row, so they are filled once per signature) and the workspace across
    signatures. A Dask worker gets another signature for nearly every graph: freeing CuPy's pool there
    made each graph cudaMalloc its operands and grow its workspace again, so a switch hands the operands
    back to the pool and keeps the workspace."""

    def __init__(self):
        self.bufs: KernelBuffers | None = None

    def measure(self, graph: Graph, settings: Settings, notes: dict[str, str] | None = None) -> list[dict]:
        """Rows of every plan of ``graph`` (profile_graph). ``notes``: numerical notes of the signature's plans
        labelled elsewhere (another GPU's worker), so they are not labelled again here."""
        _NOTES.update({(graph.key, name): v.split("|") if v else [] for name, v in (notes or {}).items()})
        if self.bufs is None or self.bufs.sig != graph.sig:
            ws = self.bufs.ws if self.bufs is not None else None
            self.bufs = None  # its operands go back to the pool, for the next signature's
            self.bufs = KernelBuffers(graph.sig, graph.sig.n, workspace=ws)
        try:
            return profile_graph(graph.sig, graph.b, self.bufs, runtime.context(),
                                 max_workspace=settings.max_workspace, repeats=settings.repeats,
                                 include_rtc=settings.include_rtc, knob_samples=settings.knob_samples)
        except Exception:
            self.release()  # an out-of-memory graph must not keep its buffers from the next one
            raise

    def release(self) -> None:
        self.bufs = None
        cp.get_default_memory_pool().free_all_blocks()


def profile_network(network: Network, *, policy="powerOfTwo", precision: str = "tf32", layout: str = "NCHW",
                    cache_path: str | None = None, max_workspace: int = 1 << 30, repeats: int = 5,
                    include_rtc: bool = False, engines: str = "sweep", knob_samples: int = KNOB_SAMPLES,
                    command: str = "",
                    progress: Callable[[int, int, str], None] | None = None,
                    should_stop: Callable[[], bool] | None = None) -> Profile:
    """Profile every unique kernel of ``network`` at the policy's micro-batch sizes on this GPU; returns a
    Profile (engine.gpu.distributed spreads the same graphs over several GPUs).

    Runtime-compiled engines are left out by default (``include_rtc``): each costs 0.6-1.1 s of NVRTC
    per graph (measured on the H100), which would dominate profiling time. ``engines`` is "sweep"
    (the heuristic list plus every other engine configuration, see graphs.sweep) or "heuristics".
    """
    import os
    settings = measure_settings(max_workspace=max_workspace, repeats=repeats, include_rtc=include_rtc,
                                engines=engines, knob_samples=knob_samples)
    options = settings.options()
    prov = runtime.provenance(command)
    cache = ProfileCache(os.path.expanduser(cache_path or DEFAULT_CACHE), device_key(prov))
    work = graphs(network, policy, precision, layout)
    measurer, t0 = GraphMeasurer(), time.perf_counter()
    try:
        for done, graph in enumerate(work):
            if should_stop and should_stop():
                raise ProfilingCancelled(f"profiling cancelled after {done} of {len(work)} graphs; "
                                         f"results so far are kept in {cache.path}")
            if not cache.is_done(graph.key, graph.b, options):
                rows, timing = timed_measure(measurer.measure, graph, settings)
                cache.commit(graph.key, graph.b, options, rows, dict(prov, timing=timing))
            if progress:
                progress(done + 1, len(work), graph.label)
        prov["profiling_seconds"] = round(time.perf_counter() - t0, 2)
        prov["options"] = options
        return assemble(cache, work, prov, network, policy, precision, layout)
    finally:  # also when cancelled or failed: the dashboard profiles inside its server process
        measurer.release()
        cache.close()
