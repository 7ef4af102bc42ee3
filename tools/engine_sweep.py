"""Do engines or knob settings outside cuDNN's heuristic list trade workspace for time better? (GPU host)

The profiler enumerates heuristics A + FALLBACK. This sweep asks cuDNN for every engine that supports
each AlexNet conv2-conv5 graph (``get_engine_count`` / ``get_knobs_for_engine``), builds each with its
default knobs and with a sample of knob combinations (``create_execution_plan``), adds heuristic mode
B's list, times every plan not already in the A + FALLBACK list the same way the profiler does, and
writes one JSON line per plan to ``OUT`` so a cut-off run keeps what it measured.

Usage: python tools/engine_sweep.py OUT.jsonl [--deadline S] [--sizes 256,32] [--layers conv2,conv3]
       [--combos N] [--values N]
"""

import argparse
import itertools
import json
import random
import sys
import time
from pathlib import Path

import cupy as cp

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine.gpu import graphs, runtime  # noqa: E402
from engine.gpu.profiler import KernelBuffers  # noqa: E402
from engine.zoo import get_network  # noqa: E402

ap = argparse.ArgumentParser()
ap.add_argument("out")
ap.add_argument("--deadline", type=float, default=480)
ap.add_argument("--sizes", default="256,32,64,16,128")
ap.add_argument("--layers", default="conv2,conv3,conv4,conv5")
ap.add_argument("--combos", type=int, default=24, help="knob combinations per engine, besides its defaults")
ap.add_argument("--values", type=int, default=6, help="values per knob, spread over its range")
args = ap.parse_args()
OUT = Path(args.out)
DEADLINE = time.perf_counter() + args.deadline
SIZES = [int(b) for b in args.sizes.split(",")]
MAX_COMBOS = args.combos
MAX_VALUES = args.values
CAP = 1 << 30
ctx = runtime.context()
prov = runtime.provenance("tools/engine_sweep.py")
out = OUT.open("w")
out.write(json.dumps({"provenance": prov}) + "\n")


def knob_values(k) -> list[int]:
    lo, hi, st = int(k.min_value), int(k.max_value), max(int(getattr(k, "stride", 1) or 1), 1)
    vals = list(range(lo, hi + 1, st))
    if len(vals) > MAX_VALUES:
        idx = sorted({round(i * (len(vals) - 1) / (MAX_VALUES - 1)) for i in range(MAX_VALUES)})
        vals = [vals[i] for i in idx]
    return vals


def time_plan(cg, index, bufs, b, ws):
    ws_ptr = bufs.workspace(ws) if ws else 0
    run = cg.executor(index, ctx)
    times = runtime.time_repeats(ctx, lambda r: run(bufs.pointers(b, r), ws_ptr), repeats=3, warmup=1)
    return runtime.median(times)


def emit(**row):
    out.write(json.dumps(row) + "\n")
    out.flush()


def time_listed(cg, kernel, b, bufs, source, seen) -> int:
    """Time every plan of cg's list not in ``seen`` (name -> (workspace, ms)); returns how many."""
    n = 0
    for i, name in enumerate(cg.names):
        if name in seen:
            continue
        try:
            ws = cg.build(i)
            if ws > CAP:
                continue
            t = time_plan(cg, i, bufs, b, ws)
        except Exception:
            continue
        seen[name] = (ws, t)
        n += 1
        emit(kernel=kernel, b=b, source=source, plan=name, workspace=ws, time_ms=t)
    return n


net = get_network("alexnet", 256)
kernels = [k for k in net.kernels() if k.layer in args.layers.split(",")]
described = set()
for b in SIZES:
    for k in kernels:
        if time.perf_counter() > DEADLINE:
            print("deadline reached", flush=True)
            sys.exit(0)
        t0 = time.perf_counter()
        sig = k.signature
        bufs = KernelBuffers(sig, 256)
        cg = graphs.make_graph(sig, b, ctx, include_rtc=False)
        seen = {}
        time_listed(cg, k.id, b, bufs, "A+FALLBACK", seen)  # the profiler's own list, timed the same way
        g = cg.graph
        n_eng = g.get_engine_count()
        supported, tried, built, new = [], 0, 0, 0
        t_build = t_time = 0.0
        for eid in range(n_eng):
            try:
                knobs = g.get_knobs_for_engine(eid)
            except Exception:
                continue
            supported.append(eid)
            specs = []
            for kn in knobs:
                tname = str(kn.type).split(".")[-1]
                specs.append((kn.type, tname, knob_values(kn)))
            if eid not in described:
                described.add(eid)
                print(
                    f"  engine {eid}: " + ", ".join(f"{t}={v[0]}..{v[-1]}({len(v)})" for _, t, v in specs), flush=True
                )
            settable = [(t, v) for t, tn, v in specs if tn != "NOT_SET"]
            combos = [
                dict(zip([t for t, _ in settable], vals)) for vals in itertools.product(*[v for _, v in settable])
            ]
            random.Random(eid * 1000 + b).shuffle(combos)
            for kd in [{}] + combos[:MAX_COMBOS]:
                tried += 1
                tb = time.perf_counter()
                try:
                    g.create_execution_plan(eid, kd)
                    idx = g.get_execution_plan_count() - 1
                    cg.names.append(g.get_plan_name_at_index(idx))
                    ws = cg.build(idx)
                except Exception:
                    continue
                finally:
                    t_build += time.perf_counter() - tb
                built += 1
                name = cg.names[idx]
                if name in seen or ws > CAP:
                    continue
                try:
                    if "RUNTIME_COMPILATION" in "|".join(cg.behavior_notes(idx)):
                        continue
                    tt = time.perf_counter()
                    t = time_plan(cg, idx, bufs, b, ws)
                    t_time += time.perf_counter() - tt
                except Exception as err:
                    emit(kernel=k.id, b=b, source="sweep", plan=name, workspace=ws, error=str(err)[:200])
                    continue
                seen[name] = (ws, t)
                new += 1
                emit(kernel=k.id, b=b, source="sweep", plan=name, engine=eid, workspace=ws, time_ms=t)
        # heuristic mode B
        nb = 0
        try:
            graphs.HEURISTICS = ("B",)
            nb = time_listed(graphs.make_graph(sig, b, ctx, include_rtc=False), k.id, b, bufs, "B", seen)
        except Exception as err:
            print(f"  mode B failed: {err}", flush=True)
        finally:
            graphs.HEURISTICS = ("A", "FALLBACK")
        print(
            f"{k.id} b={b}: engines {n_eng}, supported {supported}, configs tried {tried}, built {built}, "
            f"new plans {new} + B {nb}, {time.perf_counter() - t0:.1f}s (sweep build {t_build:.2f}s, timing {t_time:.2f}s)",
            flush=True,
        )
        del bufs, cg
        cp.get_default_memory_pool().free_all_blocks()
