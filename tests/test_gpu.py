"""GPU tests (marker ``gpu``): skipped unless CuPy sees a GPU and the cuDNN frontend loads.

Run on the GPU host: ``python -m pytest -m gpu tests/test_gpu.py``. Reports of these runs are
committed under benchmarks/reports/.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from engine.gpu import available

ok, why = available()
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not ok, reason=f"no GPU: {why}")]

if ok:
    import cupy as cp

    from engine.gpu import runtime
    from engine.gpu.executor import KernelExecutor, KernelRun
    from engine.gpu.graphs import ExecutionPlans, label_graph, make_graph, sweep
    from engine.gpu.profiler import KernelBuffers, build_graph, profile_graph, profile_network
    from engine.gpu.verify import verify_kernel
from engine.errors import EngineError
from engine.kernels import KINDS, KernelKind, KernelSignature
from engine.profile import RTC_NOT_PROFILED
from engine.testing.networks import tiny_network


def sig(kind, n=256, precision="tf32", layout="NCHW"):
    return KernelSignature(kind, n, 32, 14, 14, 64, 3, 3, 1, 1, precision=precision, layout=layout)


def test_plan_enumeration_lists_named_plans_with_workspace():
    ctx = runtime.context()
    cg = make_graph(sig(KernelKind.FORWARD, 64), 64, ctx)
    assert len(cg.names) >= 5 and all(n.startswith("eng") for n in cg.names)
    built = []
    for i in range(len(cg.names)):
        try:
            built.append(cg.build(i))
        except Exception:
            pass
    assert built and all(isinstance(w, int) and w >= 0 for w in built)


def test_failures_are_recorded_and_profiling_goes_on(monkeypatch):
    ctx = runtime.context()
    s = sig(KernelKind.FORWARD, 16)
    from engine.gpu import graphs

    real = graphs.ConvGraph.executor

    def flaky(self, index, c):
        if index == 0:
            raise RuntimeError("injected execute failure")
        return real(self, index, c)

    monkeypatch.setattr(graphs.ConvGraph, "executor", flaky)
    rows = profile_graph(s, 16, KernelBuffers(s, 16), ctx, max_workspace=0, repeats=3, include_rtc=False)
    by_status = {r["status"] for r in rows}
    first = rows[0]
    assert first["status"] in ("failed", "skipped")
    if first["status"] == "failed":
        assert "injected execute failure" in first["reason"]
    assert "ok" in by_status  # zero-workspace plans were still timed
    assert all(r["reason"] for r in rows if r["status"] != "ok")
    assert all(r["workspace"] == 0 for r in rows if r["status"] == "ok")


def test_cache_resumes_after_a_killed_profile(tmp_path, monkeypatch):
    cache = tmp_path / "cache.sqlite"
    script = textwrap.dedent(f"""
        import os, sys
        sys.path.insert(0, {os.getcwd()!r})
        from engine.testing.networks import tiny_network
        from engine.gpu.profiler import profile_network
        def progress(done, total, msg):
            if done == 3:
                os._exit(3)   # killed mid-run, no cleanup
        profile_network(tiny_network(), cache_path={str(cache)!r}, repeats=2, progress=progress, workers=1)
    """)
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert r.returncode == 3, r.stderr
    from engine.gpu import profiler

    calls = []
    real = profiler.build_graph
    monkeypatch.setattr(profiler, "build_graph", lambda *a, **k: calls.append(a[:2]) or real(*a, **k))
    prof = profile_network(tiny_network(), cache_path=str(cache), repeats=2, workers=1)
    total = len(tiny_network().unique_kernels()) * 4  # sizes 8, 4, 2, 1
    assert len(calls) == total - 3
    assert prof.table.groupby(["signature", "micro_batch"]).ngroups == total


def test_processes_sharing_the_gpu_measure_the_plans_of_the_serial_profiler(tmp_path):
    """The pipeline (3 processes building, one at a time timing) and the serial profiler, from cold caches,
    measure the same (signature, micro-batch, plan) set with the same outcome per plan."""
    piped = profile_network(tiny_network(), cache_path=str(tmp_path / "a.sqlite"), repeats=2, workers=3)
    serial = profile_network(tiny_network(), cache_path=str(tmp_path / "b.sqlite"), repeats=2, workers=1)
    rows = [set(zip(p.table.signature, p.table.micro_batch, p.table.plan, p.table.status)) for p in (piped, serial)]
    assert rows[0] == rows[1] and (piped.table.status == "ok").any()
    assert piped.provenance["workers"] == 3 and serial.provenance["workers"] == 1
    for p in (piped, serial):
        s = p.provenance["time_split"]
        assert s["graphs"] == len({(k, b) for k, b, *_ in rows[0]})
        assert s["build"] > 0 and s["timing"] > 0 and s["bookkeeping"] > 0
    assert serial.provenance["time_split"]["wait"] < 0.1  # nobody else holds its GPU


def _pieces(s, sizes, ctx, swept=False):
    """Distinct buildable plans per piece (first that builds at each size, rotating start); with
    ``swept``, only configurations the engine sweep found outside the heuristic list."""
    micro = []
    for j, b in enumerate(sizes):
        cg = make_graph(s.with_batch(b), b, ctx, include_rtc=not swept)
        pool = sweep(cg, 2) if swept else list(range(len(cg.names)))
        assert pool, "no plan to choose from"
        for i in pool[j % len(pool) :] + pool[: j % len(pool)]:
            try:
                if cg.build(i) <= 256 << 20:
                    micro.append((b, cg.names[i]))
                    break
            except Exception:
                continue
    return micro


def _uneven_run_verified(kind, precision, layout, swept=False):
    """Run 256 = 96 + 96 + 64 through the executor and check it against the undivided reference;
    returns (run, executor, workspace buffer, ctx) for further checks."""
    ctx = runtime.context()
    s = sig(kind, 256, precision, layout)
    run = KernelRun(f"t:{kind.short}", s, _pieces(s, [96, 96, 64], ctx, swept=swept))
    ex = KernelExecutor(run, ExecutionPlans(ctx))
    ws = cp.empty(max(ex.workspace_needed, 1), dtype=cp.uint8)
    res = verify_kernel(run, ex, ws.data.ptr, ctx, repeats=2)
    assert res["unwritten"] == 0
    assert res["passed"], res
    return run, ex, ws, ctx


@pytest.mark.parametrize("precision,layout", [("tf32", "NCHW"), ("fp32", "NCHW"), ("fp16", "NHWC"), ("bf16", "NHWC")])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.short)
def test_uneven_micro_batches_equal_undivided(kind, precision, layout):
    """256 = 96 + 96 + 64 on fresh random data with poisoned outputs, for every kernel kind."""
    run, ex, ws, ctx = _uneven_run_verified(kind, precision, layout)
    if kind is KernelKind.BACKWARD_FILTER:  # beta = 1: accumulate into an existing dW
        res1 = verify_kernel(run, ex, ws.data.ptr, ctx, repeats=2, accumulate=True)
        assert res1["passed"], res1


@pytest.mark.parametrize("precision,layout", [("tf32", "NCHW"), ("fp16", "NHWC")])
@pytest.mark.parametrize("kind", KINDS, ids=lambda k: k.short)
def test_swept_plans_rebuild_by_name_and_equal_undivided(kind, precision, layout):
    """Plans outside the heuristic list are rebuilt from their names in a fresh graph and give the
    undivided result for 256 = 96 + 96 + 64."""
    run, _ex, _ws, _ctx = _uneven_run_verified(kind, precision, layout, swept=True)
    assert len(run.micro) == 3


def test_engine_sweep_rows_and_unknown_plans():
    ctx = runtime.context()
    s = sig(KernelKind.FORWARD, 64)
    rows = profile_graph(
        s, 64, KernelBuffers(s, 64), ctx, max_workspace=1 << 30, repeats=2, include_rtc=False, knob_samples=2
    )
    heur = [r for r in rows if r["heuristic_rank"] >= 0]
    swept = [r for r in rows if r["heuristic_rank"] < 0]
    assert heur and swept and not {r["plan"] for r in heur} & {r["plan"] for r in swept}
    assert any(r["status"] == "ok" for r in swept)
    assert all(r["reason"] for r in rows if r["status"] != "ok")
    with pytest.raises(EngineError, match="neither in this cuDNN's heuristic list"):
        ExecutionPlans(ctx).build(s.with_batch(64), 64, "eng99999")


def test_plans_timed_once_are_dominated_on_the_stored_times():
    """Every plan is timed; those left with one run name a plan at no more workspace, in every engine set
    they are in, that was more than screen.MARGIN faster (a slow plan left at its warm-up, more than twice as
    slow at its warm-up); the rest are timed ``repeats`` times."""
    from engine.gpu import screen

    ctx = runtime.context()
    s = sig(KernelKind.FORWARD, 64)
    rows = profile_graph(
        s, 64, KernelBuffers(s, 64), ctx, max_workspace=1 << 30, repeats=4, include_rtc=False, knob_samples=4
    )
    ok = {r["plan"]: r for r in rows if r["status"] == "ok"}
    once = [r for r in ok.values() if r["repeats"] == 1]
    assert ok and all(r["repeats"] in (1, 4) for r in ok.values()) and len(once) < len(ok)
    for r in once:
        why = r["reason"].split("; ")[0]  # a host-bound note may follow (engine.gpu.timing)
        left = why.endswith("at its warm-up, over 2x slower: not run again")  # screen.left_at_warm_up
        assert why.startswith("dominated by plan ") and (why.endswith(" at first timing") or left)
        q = ok[r["reason"].split()[3]]
        assert q["repeats"] == 4 or left
        assert r["time_ms"] >= screen.SLOW_MS or not left
        tq, tr = screen.timed(q, q["time_ms"], 0), screen.timed(r, r["time_ms"], 0)
        assert tq.usable and tq.workspace <= tr.workspace
        assert (tq.heuristic or not tr.heuristic) and (tq.deterministic or not tr.deterministic)
        assert (1 + screen.MARGIN) * q["time_ms"] < r["time_ms"]
    assert all(r["reason"] == "" for r in ok.values() if r["repeats"] == 4)


def test_wrong_results_fail_verification():
    """A configuration that drops a piece's contribution must fail, not warn."""
    ctx = runtime.context()
    s = sig(KernelKind.BACKWARD_FILTER, 64)
    micro = _pieces(s, [32, 32], ctx)
    run = KernelRun("t:BF", s, micro)
    ex = KernelExecutor(run, ExecutionPlans(ctx))
    launches = ex.pieces._launches  # the second piece's execute does nothing: its contribution is lost
    launches[1] = (lambda *args: None, *launches[1][1:])
    ws = cp.empty(max(ex.workspace_needed, 1), dtype=cp.uint8)
    res = verify_kernel(run, ex, ws.data.ptr, ctx, repeats=1)
    assert not res["passed"] and res["rel_l2"] > 0.1


def test_wd_arena_segments_never_overlap_and_the_plan_verifies():
    """A WD plan from the bundled H100 AlexNet profile: disjoint segments, each big enough, results right."""
    from engine.gpu.verify import verify_plan
    from engine.planner import make_plan
    from engine.profile import Profile, resolve_profile
    from engine.units import MiB
    from engine.zoo import get_network

    prof = Profile.load(resolve_profile("h100-alexnet-b256-tf32-nchw-powerOfTwo"))
    here = runtime.provenance()
    if (prof.provenance["gpu"], prof.provenance["cudnn_version"]) != (here["gpu"], here["cudnn_version"]):
        pytest.skip("the bundled profile was measured on another GPU or cuDNN version")
    plan = make_plan(prof, get_network("alexnet", 256), mode="wd", budget=120 * MiB, policy="powerOfTwo")
    d = plan.to_dict()
    segs = sorted((k["offset"], k["offset"] + k["workspace"]) for k in d["kernels"])
    assert all(end <= start for (_, end), (start, _) in zip(segs, segs[1:]))
    report = verify_plan(plan, repeats=2)
    assert report["totals"]["all_passed"], report["totals"]
    assert report["arena_bytes"] <= 120 * MiB
    assert all(
        k["workspace"] <= next(p["workspace"] for p in d["kernels"] if p["id"] == k["id"]) for k in report["kernels"]
    )


def test_cudnns_first_plan_is_timed_even_when_runtime_compiled():
    """Without --include-rtc, cuDNN's first heuristic plan (what stock PyTorch runs) is still built, labelled and
    timed where it is runtime-compiled, as it is for fp16 NHWC depthwise convolutions (EfficientNet-B0's
    features.2.0.block.1.0); every other runtime-compiled plan is left unbuilt, with its reason."""
    ctx = runtime.context()
    s = KernelSignature(
        KernelKind.FORWARD, 16, 96, 112, 112, 96, 3, 3, 1, 1, 2, 2, groups=96, precision="fp16", layout="NHWC"
    )
    built = build_graph(s, 16, ctx, max_workspace=1 << 30, include_rtc=False)
    if "RUNTIME_COMPILATION" not in built.cg.behavior_notes(0):
        pytest.skip(f"cuDNN {runtime.provenance('')['cudnn_version']} ranks no runtime-compiled plan first here")
    first = built.rows[0]
    assert first["heuristic_rank"] == 0 and "RUNTIME_COMPILATION" in first["behavior_notes"]
    assert first["status"] != "skipped" and 0 in built.cg.built
    left = [r for r in built.rows[1:] if r["reason"] == RTC_NOT_PROFILED]
    rtc = [i for i in range(1, built.cg.heuristic) if "RUNTIME_COMPILATION" in built.cg.behavior_notes(i)]
    assert len(left) == len(rtc) and not set(rtc) & set(built.cg.built)
    rows = profile_graph(s, 16, KernelBuffers(s, 16), ctx, max_workspace=1 << 30, repeats=2, include_rtc=False)
    assert rows[0]["plan"] == first["plan"] and rows[0]["status"] == "ok" and rows[0]["time_ms"] > 0


def test_numerical_notes_are_labelled():
    """TF32 graphs offer tensor-core plans; strict fp32 graphs must not (they are filtered out)."""
    ctx = runtime.context()
    rows = {}
    for precision in ("tf32", "fp32"):
        s = sig(KernelKind.FORWARD, 32, precision)
        rows[precision] = profile_graph(
            s, 32, KernelBuffers(s, 32), ctx, max_workspace=1 << 30, repeats=2, include_rtc=False
        )
    tf32_ok = [r for r in rows["tf32"] if r["status"] == "ok"]
    fp32_ok = [r for r in rows["fp32"] if r["status"] == "ok"]
    assert any("TENSOR_CORE" in r["numerical_notes"] for r in tf32_ok)
    assert fp32_ok and not any("TENSOR_CORE" in r["numerical_notes"] for r in fp32_ok)


def test_notes_are_labelled_on_each_graph_and_the_probe_agrees_with_building():
    """Notes come from each plan's own graph; the capped probe (nothing compiled) gives what building every
    plan gives, for all three kernel kinds, swept plans included."""
    ctx = runtime.context()
    for kind in KINDS:
        s = sig(kind, 16)
        cg = make_graph(s, 16, ctx, include_rtc=False)
        names = cg.names[: cg.heuristic] + [cg.names[i] for i in sweep(cg, 2)]
        built = label_graph(s, 16, ctx, names, probe=False)
        assert any(built.values()), kind
        assert label_graph(s, 16, ctx, names, probe=True) == built, kind
