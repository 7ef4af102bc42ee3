"""One GPU shared by several profiling processes (engine.gpu.pipeline), on the CPU: spawned workers build on a
fake GPU (engine/testing/fake_gpu.py, SYNTHETIC rows) and time under the GPU lock; the parent is the only
writer. Covers: the same rows as graph-by-graph storing, timing one worker at a time, a killed run resuming
without measuring again, dying and failing workers, the worker count, the ETA maths and the scheduler probe.
"""

from __future__ import annotations

import http.server
import json
import math
import os
import re
import signal
import socket
import sqlite3
import subprocess
import sys
import threading
import time
from functools import partial
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from engine.errors import EngineError
from engine.testing.replay import eta_worst_on_own_clock
from engine.gpu.cache import ProfileCache
from engine.gpu.pipeline import run_pipeline, worker_count
from engine.gpu.progress import ProfileProgress, Sample, features, fit, sample_seconds, warm, warm_left
from engine.gpu.work import assemble, graphs, measure_settings, spread_order
from engine.testing import fake_gpu as fake
from engine.testing.cli import engine, one_error_line
from engine.testing.synthetic import synthetic_rows
from engine.zoo import get_network

NET = get_network("alexnet", 8)  # 14 unique kernels x sizes 8, 4, 2, 1: 56 graphs
WORK = graphs(NET, "powerOfTwo", "tf32", "NCHW")
COST = {(g.key, g.b): g.cost for g in WORK}
SETTINGS = measure_settings()


def pipelined(
    tmp_path, workers=3, cache="cache.sqlite", probe=fake.probe, progress=None, should_stop=None, devices=None, **kw
):
    """run_pipeline on fake GPUs, assembled as profiler.profile_network does; returns (profile, progress)."""
    measure = partial(fake.pipeline_measure, log=str(tmp_path / "log.jsonl"), **kw)
    track = ProfileProgress(WORK, progress)
    prov, c = run_pipeline(
        WORK, SETTINGS, "SYNTHETIC", str(tmp_path / cache), workers, track, should_stop, None, measure, probe, devices
    )
    try:
        prov = dict(prov, time_split=track.split_summary(), graphs=track.graph_counts())
        return assemble(c, WORK, prov, NET, "powerOfTwo", "tf32", "NCHW"), track
    finally:
        c.close()


def expected_table(tmp_path) -> pd.DataFrame:
    """The SYNTHETIC rows of every graph stored one by one, as the serial profiler does."""
    cache = ProfileCache(tmp_path / "serial.sqlite", "SYNTHETIC-GPU|-|-|-")
    for g in WORK:
        cache.commit(g.key, g.b, {}, synthetic_rows(g.sig, [g.b]), {})
    table = assemble(cache, WORK, {}, NET, "powerOfTwo", "tf32", "NCHW").table
    cache.close()
    return table


def stored(cache) -> pd.DataFrame:
    with sqlite3.connect(cache) as db:
        return pd.read_sql("SELECT * FROM measurements ORDER BY signature, micro_batch, plan", db)


def test_workers_measure_each_graph_once_one_at_a_time_on_the_gpu_and_merge_in_the_serial_order(tmp_path):
    prof, track = pipelined(tmp_path, workers=3)
    log = fake.log_lines(tmp_path / "log.jsonl")
    assert sorted((k, b) for _, k, b, *_ in log) == sorted(COST)
    assert len({pid for pid, *_ in log}) > 1  # several processes built
    held = sorted((t0, t1) for *_, t0, t1, _ in log)
    assert all(a[1] <= b[0] for a, b in zip(held, held[1:])), "two workers held the GPU at once"
    pd.testing.assert_frame_equal(prof.table, expected_table(tmp_path))
    split = prof.provenance["time_split"]
    assert split["graphs"] == 56 and split["build"] == pytest.approx(56 * 0.02, rel=0.01)
    assert split["timing"] == pytest.approx(56 * 0.005, rel=0.01) and split["sweep_skips"] == {"SYNTHETIC": 56}
    assert split["bookkeeping"] > 0  # the cache writes
    assert track.status()["per_gpu"] == {"gpu0": 56} and track.eta_s() == 0
    with sqlite3.connect(tmp_path / "cache.sqlite") as db:  # each graph: its worker, when, and its split
        per_graph = [json.loads(p) for (p,) in db.execute("SELECT provenance FROM done")]
    assert {p["worker"] for p in per_graph} <= {"worker0", "worker1", "worker2"}
    assert all(p["timing"]["split"]["timing"] == 0.005 and p["timing"]["seconds"] >= 0.025 for p in per_graph)


def test_measuring_begins_as_soon_as_one_worker_is_ready(tmp_path):
    """Workers start slowly (CUDA and cuDNN load): the first one ready measures while the others still start."""
    prof, _ = pipelined(tmp_path, workers=3, probe=partial(fake.staggered_probe, str(tmp_path)))
    last_ready = max(float(p.read_text()) for p in tmp_path.glob("ready-*"))
    held = sorted(t0 for *_, t0, _, _ in fake.log_lines(tmp_path / "log.jsonl"))
    assert len(list(tmp_path.glob("ready-*"))) == 3 and held[0] < last_ready - 1.0
    pd.testing.assert_frame_equal(prof.table, expected_table(tmp_path))


def test_notes_labelled_once_go_with_later_graphs_of_the_signature(tmp_path):
    pipelined(tmp_path, workers=2)
    given = {(k, b): n for _, k, b, _, _, n in fake.log_lines(tmp_path / "log.jsonl")}
    # graphs are sent in spread_order, at most workers + 2 ahead of the oldest unfinished one: a graph sent
    # more than that after its signature's first one carries the notes the first one labelled
    pos = {(g.key, g.b): i for i, g in enumerate(spread_order(WORK))}
    first = {k: min(i for (kk, _), i in pos.items() if kk == k) for k, _ in COST}
    later = [(k, b) for (k, b), i in pos.items() if i > first[k] + 4]
    assert len(later) > len(WORK) // 2 and all(given[g] == 4 for g in later)


def test_two_gpus_share_one_queue_each_timing_one_graph_at_a_time_and_merge_in_the_serial_order(tmp_path):
    """--gpus on one host: the processes are spread over the fake GPUs (CUDA_VISIBLE_DEVICES 0 and 1), each
    GPU times one graph at a time while the other GPU times too, and the profile is the serial one."""
    prof, track = pipelined(tmp_path, workers=4, devices=["0", "1"], build=0.005, timing=0.02)
    pd.testing.assert_frame_equal(prof.table, expected_table(tmp_path))
    gpus = prof.provenance["gpus"]
    assert [g["gpu_uuid"] for g in gpus] == ["SYNTHETIC-0", "SYNTHETIC-1"] and all(g["graphs"] > 5 for g in gpus)
    assert sum(g["graphs"] for g in gpus) == len(WORK) == sum(track.per_gpu.values())
    assert set(track.per_gpu) == {"gpu0", "gpu1"}
    with sqlite3.connect(tmp_path / "cache.sqlite") as db:
        on = {
            (k, b): json.loads(p)["gpu_uuid"]
            for k, b, p in db.execute("SELECT signature, micro_batch, provenance FROM done")
        }
    held = {}
    for _, k, b, t0, t1, _ in fake.log_lines(tmp_path / "log.jsonl"):
        held.setdefault(on[k, b], []).append((t0, t1))
    for spans in held.values():
        spans.sort()
        assert all(a1 <= b0 + 1e-3 for (_, a1), (b0, _) in zip(spans, spans[1:]))  # one graph at a time per GPU
    both = [(a0, a1) for a0, a1 in held["SYNTHETIC-0"] if any(b0 < a1 and a0 < b1 for b0, b1 in held["SYNTHETIC-1"])]
    assert both  # the two GPUs timed at the same time


def test_two_numbers_for_one_gpu_are_refused(tmp_path):
    with pytest.raises(EngineError, match="share a GPU"):
        pipelined(tmp_path, workers=2, devices=["0", "0"])


def test_a_killed_run_resumes_without_measuring_again_and_its_workers_exit(tmp_path):
    cache = tmp_path / "cache.sqlite"
    script = (
        f"import pathlib, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import test_profile_pipeline as t; "
        f"t.pipelined(pathlib.Path({str(tmp_path)!r}), workers=3, build=0.1, timing=0.02)"
    )
    proc = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=Path(__file__).parent.parent,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    deadline, n = time.monotonic() + 90, 0
    while n < 15 and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.02)
        try:
            with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as db:
                n = db.execute("SELECT count(*) FROM done").fetchone()[0]
        except sqlite3.OperationalError:  # not created yet
            pass
    proc.send_signal(signal.SIGKILL)  # the parent alone, as the OOM killer would
    _, err = proc.communicate(timeout=30)
    assert 15 <= n < 56, f"killed after {n} of 56 graphs; {err.decode()[-500:]}"
    pids = {pid for pid, *_ in fake.log_lines(tmp_path / "log.jsonl")}
    deadline = time.monotonic() + 10
    while any(_alive(p) for p in pids) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not any(_alive(p) for p in pids), "orphaned workers kept running"
    before = stored(cache)
    kept = set(zip(before.signature, before.micro_batch))
    (tmp_path / "log.jsonl").unlink()
    prof, track = pipelined(tmp_path, workers=2)
    again = [(k, b) for _, k, b, *_ in fake.log_lines(tmp_path / "log.jsonl")]
    assert not set(again) & kept and set(again) | kept == set(COST) and len(again) == len(set(again))
    after = stored(cache)
    pd.testing.assert_frame_equal(
        after[after.set_index(["signature", "micro_batch"]).index.isin(kept)].reset_index(drop=True), before
    )
    pd.testing.assert_frame_equal(prof.table, expected_table(tmp_path))
    assert track.status()["from_cache"] == len(kept)
    assert prof.provenance["graphs"] == {"total": 56, "from_cache": len(kept), "measured": 56 - len(kept), "failed": 0}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie (exited, not yet reaped by init in a container) counts as gone
        return Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def in_child(tmp_path, call: str) -> tuple[subprocess.CompletedProcess, float]:
    """``t.<call>`` in a child Python (t: this module, p: tmp_path), and its seconds. Runs that kill busy workers
    go there: a spawned worker killed in this process left a later test's Dask worker restart hanging."""
    script = (
        f"import pathlib, sys; sys.path.insert(0, {str(Path(__file__).parent)!r}); "
        f"import test_profile_pipeline as t; p = pathlib.Path({str(tmp_path)!r}); {call}"
    )
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", script], cwd=Path(__file__).parent.parent, capture_output=True, text=True, timeout=120
    )
    return proc, time.monotonic() - t0


def test_a_dying_worker_or_a_probe_failure_ends_the_run_with_one_error(tmp_path):
    proc, _ = in_child(tmp_path, "t.pipelined(p, workers=2, die_at=10)")
    assert proc.returncode != 0
    assert re.search(
        r"EngineError: a profiling worker died \(exit code 5\).*run the same command again", proc.stderr
    ), proc.stderr[-800:]
    # graphs before the death were stored, less what the other worker still had in flight (2 workers)
    assert 10 - 2 <= len(stored(tmp_path / "cache.sqlite")) // 4 < 56
    with pytest.raises(EngineError, match="a profiling worker cannot profile: RuntimeError: SYNTHETIC: no GPU"):
        pipelined(tmp_path, workers=2, cache="other.sqlite", probe=fake.failing_probe)
    with pytest.raises(EngineError, match=r"a profiling worker exited \(code 7\) while loading"):
        pipelined(tmp_path, workers=2, cache="third.sqlite", probe=fake.exiting_probe)


def test_cancel_keeps_finished_graphs_and_does_not_wait_for_busy_workers(tmp_path):
    proc, seconds = in_child(
        tmp_path,
        "done = []; t.pipelined(p, workers=3, build=1.0, progress=lambda d, n, m: "
        "done.append(d), should_stop=lambda: len(done) >= 3)",
    )
    assert "ProfilingCancelled: profiling cancelled after 3 of 56" in proc.stderr, proc.stderr[-800:]
    assert seconds < 25  # three busy workers killed, not waited for (1 s each graph)
    assert len(stored(tmp_path / "cache.sqlite")) == 3 * 4


def test_worker_count_is_bounded_by_cores_and_memory():
    gib = 1 << 30
    big = dict(max_workspace=gib, operand_bytes=gib, gpu_bytes=80 * gib, host_bytes=128 * gib)
    assert worker_count(None, cpus=16, **big) == 4  # MAX_WORKERS
    assert worker_count(None, cpus=3, **big) == 2  # one core for the parent
    assert worker_count(None, cpus=16, **dict(big, gpu_bytes=8 * gib)) == 2  # 6.4 GiB / 3 GiB
    assert worker_count(None, cpus=16, **dict(big, host_bytes=7 * gib)) == 2  # 3 GiB each
    assert worker_count(None, cpus=16, share=2, **dict(big, host_bytes=15 * gib)) == 2  # half the host each
    assert worker_count(None, cpus=1, **big) == 1
    assert worker_count(5, cpus=1, **big) == 5
    with pytest.raises(EngineError, match="at least 1"):
        worker_count(0, **big)


def test_fit_is_non_negative_least_squares():
    exact = [Sample((1.0, 0.0, x), 2.0 + 3.0 * x) for x in (1.0, 2.0, 5.0)] + [Sample((0.0, 1.0, 2.0), 7.5)]
    assert fit(exact) == pytest.approx([2.0, 1.5, 3.0])  # a[kind 0], a[kind 1], c
    falling = [Sample((1.0, 1.0), 4.0), Sample((1.0, 3.0), 2.0)]  # cheaper when bigger: the mean
    assert fit(falling) == pytest.approx([3.0, 0.0])
    origin = [Sample((1.0, 1.0), 0.0), Sample((1.0, 2.0), 3.0)]  # a negative intercept: through 0
    assert fit(origin) == pytest.approx([0.0, 1.2])


def test_fit_meets_the_non_negative_least_squares_optimality_conditions():
    """Karush-Kuhn-Tucker on random problems (some with a negative unconstrained solution, some with columns that
    no sample has or two alike): with r = x c - y, every coefficient is >= 0, x_i . r = 0 where c_i > 0 and
    x_i . r >= 0 where c_i = 0, so no feasible step lowers the squared error."""
    rng = np.random.default_rng(1)
    for trial in range(200):
        n, m = int(rng.integers(1, 30)), int(rng.integers(1, 6))
        x = rng.uniform(0, 3, (n, m)) * (rng.uniform(size=(n, m)) < 0.8)
        if trial % 5 == 0:
            x[:, 0] = 0.0  # a kind not measured yet
        if trial % 7 == 0 and m > 1:
            x[:, -1] = 2 * x[:, 0]  # two features alike
        y = x @ rng.uniform(-1, 2, m) + rng.normal(0, 0.3, n)
        c = fit([Sample(tuple(r), float(v)) for r, v in zip(x, y)])
        grad = x.T @ (x @ c - y)
        scale = 1e-6 * (1 + np.abs(x).sum() * (1 + np.abs(y).sum()))
        assert (c >= 0).all()
        assert (np.abs(grad[c > 0]) <= scale).all() and (grad[c == 0] >= -scale).all(), (trial, c, grad)


def test_features_are_a_direction_flops_bytes_and_groups():
    g = WORK[0]
    f = features(g)
    s = g.sig.with_batch(g.b)
    assert f[:3] == (1.0, 0.0, 0.0) and f[3] == s.flops / 1e9
    assert f[4] == (s.x_elems + s.y_elems + s.w_elems) * 4 / 1e9 and f[5] == 0.0
    dw = next(
        w for w in graphs(get_network("torchvision:mobilenet_v3_large", 8), [8], "tf32", "NCHW") if w.sig.groups > 1
    )
    assert features(dw)[5] == 1.0


@pytest.mark.parametrize("order", ["biggest first", "network order"])
@pytest.mark.parametrize("workers", [1, 4])
def test_eta_is_within_15_percent_after_a_tenth_of_the_graphs(order, workers):
    """SYNTHETIC schedule: each graph takes 0.2 s of host work plus time in proportion to its FLOPs, on
    ``workers`` greedy workers; the ETA after every graph from the 10th percentile on is within 15 %."""
    work = (
        sorted(graphs(get_network("resnet50", 64), "powerOfTwo", "tf32", "NCHW"), key=lambda g: -g.cost)
        if order == "biggest first"
        else graphs(get_network("resnet50", 64), "powerOfTwo", "tf32", "NCHW")
    )
    top = max(g.cost for g in work)
    seconds = [0.2 + 0.8 * g.cost / top for g in work]
    free, ends = [0.0] * workers, []
    for s in seconds:  # each graph to the first free worker
        i = min(range(workers), key=free.__getitem__)
        free[i] += s
        ends.append(free[i])
    order_done = sorted(range(len(work)), key=ends.__getitem__)
    now = [0.0]
    track = ProfileProgress(work, clock=lambda: now[0])
    track.start()
    finish = max(ends)
    for n, i in enumerate(order_done, 1):
        now[0] = ends[i]
        track.finished(work[i], "gpu0", seconds[i])
        if n >= 0.1 * len(work) and n < len(work):
            true_left = finish - now[0]
            assert abs(track.eta_s() - true_left) <= 0.15 * true_left + 0.5, (n, track.eta_s(), true_left)
    assert track.eta_s() == 0 and track.status()["done"] == len(work)


START = (0.09, 0.05, 0.04, 0.01, 0.01)  # SYNTHETIC, as measured: what 2026-11-26-run4 B's processes spent on top


HIDDEN_START = "a start under costs no feature explains (late layers 4x): BIC keeps the start term out until ~96 graphs"


@pytest.mark.parametrize(
    "start,late",
    [(START, 1), ((), 1), ((), 4), pytest.param(START, 4, marks=pytest.mark.xfail(strict=True, reason=HIDDEN_START))],
    ids=["dear start", "no start", "late layers dearest", "dear start, late layers dearest"],
)
def test_eta_counts_a_dear_start_once_and_follows_dear_late_layers(start, late):
    """SYNTHETIC runs of ResNet-50's graphs in spread order on 12 processes sharing a GPU, dealt in turn: a graph
    holds the GPU 0.02 s plus 0.01 s per GFLOP, ``late`` times that for the last third of the network's kernels
    (dear in a way no feature says), plus START on each process's first graphs. From a tenth of the graphs on
    the ETA is within 15 % of the real finish, and the start term is used only where there is a start. The
    estimator before the start term was 75 % off with the dear start; with the start and 4x late layers both
    are 39 % off (the start term is not admitted while the late layers' spread hides it)."""
    work = graphs(get_network("resnet50", 64), "powerOfTwo", "tf32", "NCHW")
    keys = list(dict.fromkeys(g.key for g in work))
    late_keys = set(keys[2 * len(keys) // 3 :])
    order = spread_order(work)
    seconds = [
        (0.02 + 0.01 * g.cost / 1e9) * (late if g.key in late_keys else 1) + (start[n // 12 :][:1] or [0])[0]
        for n, g in enumerate(order)
    ]
    finish, now = sum(seconds), [0.0]
    track = ProfileProgress(work, clock=lambda: now[0])
    track.start()
    worst = 0.0
    for n, (g, s) in enumerate(zip(order, seconds), 1):
        now[0] += s
        track.finished(g, "gpu0", s, worker=f"worker{(n - 1) % 12}")
        if 0.1 * len(order) <= n < len(order):
            worst = max(worst, abs(now[0] + track.eta_s() - finish) / finish)
    assert worst <= 0.15
    assert (track.coefficients()[-1] > 0) == bool(start)


def test_warm_left_sums_the_start_left_to_a_process():
    assert warm(0) == 1.0 and warm(2) == pytest.approx(math.exp(-1))
    for k, m in [(0, 1), (0, 7), (3, 40), (10, 0)]:
        assert warm_left(k, m) == pytest.approx(sum(warm(j) for j in range(k, k + m)))


def test_fit_admits_a_penalized_column_only_when_it_pays_its_price():
    """Brute force: the penalized fit is the better, by n ln(RSS/n) + ln n per penalized column used, of the plain
    fit without the column and the plain fit with it."""
    rng = np.random.default_rng(0)
    for trial in range(20):
        n = int(rng.integers(4, 40))
        x = np.column_stack([np.ones(n), rng.uniform(0, 2, n), np.exp(-np.arange(n) / 2)])
        y = 0.3 + 0.5 * x[:, 1] + (trial % 2) * 0.4 * x[:, 2] + rng.normal(0, 0.05, n)
        samples = [Sample(tuple(r), float(v)) for r, v in zip(x, y)]

        def score(c, priced):
            return n * math.log(float(((x @ c - y) ** 2).sum()) / n + 1e-18) + math.log(n) * priced

        without = np.append(fit([Sample(sm.features[:2], sm.seconds) for sm in samples]), 0.0)
        plain = fit(samples)
        best = min([(score(without, 0), 0, without), (score(plain, plain[2] > 0), 1, plain)], key=lambda t: t[:2])[2]
        assert fit(samples, penalized=(2,)) == pytest.approx(best)


SPEED = Path(__file__).resolve().parent.parent / "benchmarks" / "reports" / "profiling-speed"
ETA_MISSES = {  # committed runs the ETA does not yet meet, and why (strict: a fix must remove the entry)
    ("2026-11-28-run5", "B"): "H200: the first tenth held the GPU 1.8x longer per graph than the rest and the fit "
    "with its start term swings 8-76 % over graphs 20-48; 17.1 % off at graph 49 (21.6 % before noise_weights)"
}
NETS = {"resnet50": (("resnet50", 64), 476), "mobilenet_v3_large": (("torchvision:mobilenet_v3_large", 128), 1048)}


def committed_runs(misses: dict, keep=lambda run, r: True) -> list:
    """pytest params (run folder, run name) of the committed whole-network runs that ``keep`` admits, each one in
    ``misses`` a strict xfail with its reason."""
    params = []
    for run in json.loads((SPEED / "runs.json").read_text())["runs"]:
        for name, r in json.loads((SPEED / run["dir"] / "speed.json").read_text())["runs"].items():
            whole = any(net in r["command"] and len(r.get("graphs", [])) == n for net, (_, n) in NETS.items())
            if whole and keep(run, r):
                why = misses.get((run["dir"], name))
                params.append(
                    pytest.param(run["dir"], name, marks=[pytest.mark.xfail(strict=True, reason=why)] if why else [])
                )
    return params


MEASURED = committed_runs(ETA_MISSES)


def replay_worst(work: list, measured: list[dict], workers: int, order: list) -> float:
    """Measured graphs (speed.json's per-graph seconds, split and process) replayed in ``order``: the run's wall
    grows by each graph's sample_seconds, the ETA is handed the same seconds and the graph's real process, as
    engine.gpu.pipeline hands them (the serial profiler names no process); the worst error of the predicted
    finish from a tenth of the graphs on."""
    by = {(g["signature"], g["micro_batch"]): g for g in measured}
    wall = {k: sample_seconds(g["seconds"], g["split"], shared=workers > 1) for k, g in by.items()}
    finish, now = sum(wall.values()), [0.0]
    track = ProfileProgress(work, clock=lambda: now[0])
    track.start()
    worst = 0.0
    for n, g in enumerate(order, 1):
        now[0] += wall[g.key, g.b]
        track.finished(g, "gpu0", wall[g.key, g.b], worker=by[g.key, g.b]["worker"] if workers > 1 else None)
        if 0.1 * len(order) <= n < len(order):
            worst = max(worst, abs(now[0] + track.eta_s() - finish) / finish)
    return worst


@pytest.mark.parametrize("run,name", MEASURED)
def test_eta_on_measured_graphs_in_spread_order_is_within_15_percent_after_a_tenth(run, name):
    """Real per-graph seconds of the committed runs that measured a whole network (benchmarks/reports/profiling-speed:
    ResNet-50 b64, MobileNetV3-Large b128), replayed in the order the pipeline now measures (work.spread_order).
    2026-11-26-run4 measured in that order: its first tenth held the GPU 1.7x longer per graph than the rest (each
    process's start), which put the ETA of a model without the start 49 % off."""
    r = json.loads((SPEED / run / "speed.json").read_text())["runs"][name]
    net = next(spec for key, (spec, _) in NETS.items() if key in r["command"])
    work = graphs(get_network(*net), "powerOfTwo", "tf32", "NCHW")
    assert replay_worst(work, r["graphs"], r["workers"], spread_order(work)) <= 0.15


CLOCK_MISSES = {  # committed runs whose ETA on their own clock is not yet within 15 %, and why (strict)
    ("2026-11-26-run4", "B"): "12 processes (before 4 became the default): from the first stored graph 18 % off at "
    "worst (10 % with the clock from the start; every run with 4 processes is closer from the first stored graph)"
}
ON_CLOCK = committed_runs(
    CLOCK_MISSES,
    lambda run, r: (
        r.get("workers", 1) > 1  # processes sharing the GPU
        and r["graphs"][0].get("start") is not None  # per-graph start times
        and run["dir"] >= "2026-11-26-run4"
    ),  # measured in spread order
)


@pytest.mark.parametrize("run,name", ON_CLOCK)
def test_eta_on_each_runs_own_clock_is_within_15_percent_after_a_tenth(run, name):
    """The committed whole-network runs measured in spread order, replayed as they ran: each graph handed to the
    ETA when its process stored it (its start plus its seconds), the clock from the first stored graph as the
    pipeline now starts it. From a tenth of the graphs on the predicted finish is within 15 % of the real one.
    With the clock from the pipeline's start, the processes' first builds (a fill, no work done) counted: runs
    with 4 processes were 7-15 % off at worst, from the first stored graph 4-11 %."""
    r = json.loads((SPEED / run / "speed.json").read_text())["runs"][name]
    net = next(spec for key, (spec, _) in NETS.items() if key in r["command"])
    work = graphs(get_network(*net), "powerOfTwo", "tf32", "NCHW")
    assert eta_worst_on_own_clock(work, r["graphs"]) <= 0.15


def test_spread_order_samples_every_cost_in_each_prefix():
    order = spread_order(WORK)
    assert sorted(order, key=lambda g: (g.key, g.b)) == sorted(WORK, key=lambda g: (g.key, g.b))
    ranks = {id(g): i for i, g in enumerate(sorted(WORK, key=lambda g: -g.cost))}
    assert sorted(ranks[id(g)] for g in order[:8]) == [0, 4, 8, 16, 24, 32, 40, 48]  # 56 graphs: 6 bits reversed


def test_progress_messages_lead_with_the_eta_and_count_graphs_per_gpu():
    now, seen = [0.0], []
    work = WORK[:4]
    track = ProfileProgress(work, lambda d, t, m: seen.append((d, t, m)), clock=lambda: now[0])
    track.from_cache(work[:1])
    track.start()
    now[0] = 1.0
    track.finished(work[1], "gpu0", 1.0)
    now[0] = 2.0
    track.finished(work[2], "gpu1", 1.0, note="on gpu1")
    assert seen[0] == (1, 4, "ETA ? | 1 graphs from the cache")
    assert seen[2][2].startswith("ETA 0:01 gpu0 1, gpu1 1 | ") and seen[2][2].endswith("on gpu1")
    assert track.status() == {
        "done": 3,
        "total": 4,
        "from_cache": 1,
        "per_gpu": {"gpu0": 1, "gpu1": 1},
        "eta_s": pytest.approx(1.0, abs=0.6),
        "elapsed_s": 2.0,
    }


class _Speaker(threading.Thread):
    """A local TCP service that speaks first, as SSH does; or silent, waiting for the client."""

    def __init__(self, greeting: bytes):
        super().__init__(daemon=True)
        self.greeting, self.sock = greeting, socket.create_server(("127.0.0.1", 0))
        self.address = f"tcp://127.0.0.1:{self.sock.getsockname()[1]}"

    def run(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed: the test is over
                return
            conn.sendall(self.greeting)
            threading.Timer(30, conn.close).start()


def test_an_address_that_is_no_dask_scheduler_gets_one_line_within_seconds():
    pytest.importorskip("distributed")
    ssh = _Speaker(b"SSH-2.0-OpenSSH_9.6\r\n")
    ssh.start()
    web = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.SimpleHTTPRequestHandler)
    threading.Thread(target=web.serve_forever, daemon=True).start()
    try:
        for address, says in (
            (ssh.address, "greeted with b'SSH-2.0-'"),
            (f"tcp://127.0.0.1:{web.server_address[1]}", "sent nothing within 5 s"),
        ):
            t0 = time.monotonic()
            one_error_line(
                engine("profile", "--network", "alexnet", "--scheduler", address),
                f"{address} is not a Dask scheduler: it {says}",
            )
            assert time.monotonic() - t0 < 15
        one_error_line(
            engine("profile", "--network", "alexnet", "--scheduler", "tcp://127.0.0.1:http"), "expected tcp://HOST:PORT"
        )
    finally:
        web.shutdown()
        web.server_close()
        ssh.sock.close()


def test_weighting_leaves_an_exact_fit_exact_and_weighs_a_dear_graph_less():
    """SYNTHETIC samples on a line: noise_weights changes no exact fit; an outlier 7x the median moves the weighted
    fit less than the plain one."""
    from engine.gpu.progress import Sample, fit, noise_weights

    xs = [0.5, 1.0, 1.5, 2.0, 2.5, 3.0]
    line = [Sample((1.0, x), 0.02 + 0.01 * x) for x in xs]
    weighted = fit(line, weights=noise_weights(line))
    assert list(weighted) == pytest.approx([0.02, 0.01]) and list(fit(line)) == pytest.approx([0.02, 0.01])
    dear = [*line, Sample((1.0, 1.0), 0.2)]
    off = [float(np.linalg.norm(f - [0.02, 0.01])) for f in (fit(dear), fit(dear, weights=noise_weights(dear)))]
    assert off[1] < 0.6 * off[0]  # 0.023 against 0.041
