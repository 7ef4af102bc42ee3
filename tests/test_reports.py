"""README's measured results and benchmarks/reports/ match the committed data that made them.

The generated README blocks and reports must equal what their scripts make from the committed results
files, and figures quoted by hand must equal their report's, so neither can drift from the data.
"""

import gzip
import json
import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks import memory_training_report, optimizer, profiling, reproduction, side_by_side  # noqa: E402
from benchmarks import profiling_speed, profiling_speed_report  # noqa: E402
from benchmarks import first_plan_cost, kernel_graphs, profile_multigpu, stock_layers, torch_training  # noqa: E402
from benchmarks import user_command_runs  # noqa: E402
from benchmarks import torchvision_optimize  # noqa: E402
from benchmarks.readme import README, markers, read_block, write_block  # noqa: E402
from engine.units import MiB  # noqa: E402

REPORTS = ROOT / "benchmarks" / "reports"


def committed_results() -> dict:
    data = side_by_side.load(side_by_side.DEFAULT_RESULTS)
    assert data.get("version") == 2, "results predate `side_by_side.py measure` (run it on the GPU host)"
    return data


def test_side_by_side_report_and_readme_table_match_the_committed_results():
    data = committed_results()
    assert read_block(README.read_text(), "side_by_side") == side_by_side.readme_block(data)
    source = "benchmarks/reports/side_by_side_results.json.gz"
    assert side_by_side.DEFAULT_REPORT.read_text() == side_by_side.render(data, source)


def test_stock_layers_report_and_readme_block_match_the_committed_results():
    rs = json.loads(stock_layers.JSON.read_text())["rows"]
    assert read_block(README.read_text(), "stock_layers") == stock_layers.readme_block(rs)
    assert stock_layers.MD.read_text() == stock_layers.report(rs)
    assert {(r["profile"], r["budget"]) for r in rs} >= {(p, b) for p, b, _ in stock_layers.README_CASES}


def test_side_by_side_results_hold_every_network_and_row():
    data = committed_results()
    assert {side_by_side.tag(e) for e in data["networks"]} == {f"{n}-b{b}-{p}" for n, b, p, *_ in side_by_side.NETWORKS}
    for e in data["networks"]:
        for row in ("framework", "undivided", "wr"):
            c = side_by_side.find(e, row, side_by_side.README_LIMIT)
            assert c and len(c["measured_ms"]) == data["runs"], (e["network"], row)


def test_torch_training_readme_block_matches_the_committed_results():
    doc = json.loads((Path(torch_training.ROOT) / "benchmarks" / "reports" / "torch_training.json").read_text())
    assert read_block(README.read_text(), "torch_training") == torch_training.readme_block(doc)


def test_torchvision_optimize_report_and_readme_block_match_the_committed_runs():
    """Every run folder's results, the report and the README block; every family of the script was measured."""
    runs = sorted(d for d in torchvision_optimize.RUNS.iterdir() if (d / "results.json").exists())
    rows, prov = torchvision_optimize.load(runs)
    dirs = [str(d.relative_to(ROOT)) for d in runs]
    assert torchvision_optimize.REPORT.read_text() == torchvision_optimize.render(rows, prov, dirs)
    assert read_block(README.read_text(), "torchvision_optimize") == torchvision_optimize.readme_block(rows, prov)
    assert set(rows) == set(torchvision_optimize.MODELS)


def test_memory_training_readme_block_matches_the_committed_results():
    """Empty until `benchmarks/memory_training.py measure` has run on a GPU host and its results are committed."""
    path = REPORTS / "memory_training.json"
    block = read_block(README.read_text(), "memory_training")
    if not path.exists():
        assert block == "", "README has a memory_training block but no committed results"
        return
    assert block == memory_training_report.readme_block(json.loads(path.read_text()))


@pytest.mark.slow
def test_profiling_report_and_readme_block_match_the_committed_results():
    data = profiling.load_results(profiling.DEFAULT_RESULTS)
    assert read_block(README.read_text(), "profiling") == profiling.readme_block(data)
    assert profiling.DEFAULT_REPORT.read_text() == profiling.render(data, "benchmarks/reports/profiling.json")


def test_profiling_speed_report_and_readme_block_match_the_committed_runs():
    rep = profiling_speed_report
    rows = rep.load_speed_runs(rep.SPEED_RUNS)
    assert read_block(README.read_text(), "profiling_speed_report") == rep.speed_readme(rows)
    assert rep.SPEED_REPORT.read_text() == rep.speed_render(rows, "profiling-speed/runs.json")


def test_kernel_graphs_report_and_readme_block_match_the_committed_run():
    data = kernel_graphs.load(kernel_graphs.DEFAULT_JSON)
    assert read_block(README.read_text(), "kernel_graphs") == kernel_graphs.readme_block(data)
    assert kernel_graphs.REPORT.read_text() == kernel_graphs.render(data, str(kernel_graphs.DEFAULT_JSON))


def test_user_command_runs_report_and_readme_block_match_the_committed_logs():
    calls = user_command_runs.load()
    assert read_block(README.read_text(), "user_command_runs") == user_command_runs.readme_block(calls)
    assert user_command_runs.REPORT.read_text() == user_command_runs.render(calls)
    # every listed command was found in its log, with its wall and its profile's rows
    listed = sum(len(e["commands"]) for e in json.loads(user_command_runs.LISTING.read_text())["runs"])
    assert sum(len(cmds) for _, cmds, _ in calls) == listed


def test_profile_multigpu_report_and_readme_block_match_the_committed_runs():
    rows = profile_multigpu.load_runs()
    assert read_block(README.read_text(), "profile_multigpu") == profile_multigpu.readme_block(rows)
    assert profile_multigpu.REPORT.read_text() == profile_multigpu.render(rows)


def test_profile_multigpu_splits_the_extra_per_graph_from_each_graph_s_stored_timing(tmp_path):
    """SYNTHETIC timings: graph g takes 0.10 s in A and 0.11 s on a worker in B; each worker starts its next
    graph 2 ms after the last ended."""
    from engine.gpu.cache import ProfileCache

    caches = {name: ProfileCache(tmp_path / f"{name}.sqlite", "SYNTHETIC-GPU|-|-|-") for name in "AB"}
    for i in range(6):
        caches["A"].commit(f"sig{i}", 1, {}, [], {"timing": {"start": 1e9 + 0.1 * i, "seconds": 0.1}})
        worker, k = f"gpu{i % 2}", i // 2
        caches["B"].commit(
            f"sig{i}", 1, {}, [], {"worker": worker, "timing": {"start": 1e9 + 0.112 * k, "seconds": 0.11}}
        )
    for c in caches.values():
        c.close()
    t = profile_multigpu.graph_timing(tmp_path / "A.sqlite", tmp_path / "B.sqlite")
    assert t["graphs"] == 6 and (t["a_graph_ms"], t["b_graph_ms"]) == (100.0, 110.0)
    assert t["in_graph_extra_ms"] == t["in_graph_extra_median_ms"] == 10.0
    assert t["between_graphs_ms"] == t["between_graphs_median_ms"] == 2.0
    assert profile_multigpu.split(t) == "10.0 / 2.0 ms" and profile_multigpu.split({}) == "not stored"


def test_speed_per_graph_sums_the_gpu_seconds_of_its_timed_plans(tmp_path):
    """SYNTHETIC rows: one graph, a plan repeated 5 times (median 2 ms, fastest 1.5 ms), one timed once (10 ms),
    one left at its warm-up (40 ms), one failed. One run each is 51.5 ms; what ran is a warm-up and the runs:
    2 x 6 + 10 x 2 + 40 = 72 ms."""
    from engine.gpu.cache import ProfileCache
    from engine.profile import COLUMNS

    def row(plan, status, t, low, repeats):
        r = {c: (0 if kind is int else 0.0 if kind is float else "") for c, kind in COLUMNS.items()}
        r.update(signature="sig", micro_batch=4, plan=plan, status=status, time_ms=t, time_min_ms=low, repeats=repeats)
        return r

    rows = [row("a", "ok", 2.0, 1.5, 5), row("b", "ok", 10.0, 10.0, 1), row("c", "failed", 0.0, 0.0, 0)]
    rows.append(row("d", "ok", 40.0, 40.0, 1) | {"reason": "dominated by plan a at its warm-up, over 2x slower: ..."})
    first = {"plans": 2, "warm-up over 5 % slower": 1, "warm-up over 5 % faster": 0}
    cache = ProfileCache(tmp_path / "c.sqlite", "SYNTHETIC-GPU|-|-|-")
    cache.commit("sig", 4, {}, rows, {"timing": {"start": 1e9, "seconds": 0.5, "split": {"first_runs": first}}})
    cache.close()
    (g,) = profiling_speed.per_graph(tmp_path / "c.sqlite")
    assert (g["plans"], g["timed"], g["single_runs_s"], g["kernel_s"]) == (4, 3, 0.0515, 0.072)
    assert g["first_runs"] == first and "first_runs" not in g["split"]


def test_speed_run_keeps_every_line_the_profile_wrote_on_stderr(tmp_path):
    """A run's whole stderr (its progress lines: the live ETA to check afterwards) is kept beside its profile;
    an unknown network fails at once on any host (on a CPU host for want of a GPU), with its one line."""
    run = profiling_speed.speed_run("X", ["--network", "no_such_network"], [], tmp_path, tmp_path, timeout=120)
    kept = gzip.decompress((tmp_path / "X.stderr.txt.gz").read_bytes()).decode().splitlines()
    assert run["returncode"] not in (0, "timeout") and kept and kept[-len(run["stderr"]) :] == run["stderr"]
    assert kept[-1].startswith("error: ")


def test_live_eta_reads_the_printed_progress_lines_and_adds_a_resumed_run(tmp_path):
    """SYNTHETIC progress lines of 100 graphs: at graph 10 (20 s) the ETA says 3:00, a finish at 200 s. A whole
    run ending at 160 s is 25 % off; cut at 150 s and resumed for 10 s more it is 25 % off too, from the line
    after a tenth; with the resumed command's log missing, or unfinished, there is no finish to compare."""

    def log(name, lines):
        text = "\n".join(f"[###...] {d}/100  {at}s ETA {eta} | x" for d, at, eta in lines)
        (tmp_path / name).write_bytes(gzip.compress(text.encode()))

    log("B.stderr.txt.gz", [(5, 10.0, "?"), (10, 20.0, "3:00"), (50, 80.0, "1:00"), (100, 160.0, "0:00")])
    e = profiling_speed_report.live_eta(tmp_path, "B", {"returncode": 0})
    assert (e["done"], e["at_s"], e["eta_s"], e["end_s"]) == (10, 20.0, 180, 160.0)
    assert e["error"] == 0.25 and e["worst"] == 0.25  # 80 + 60 = 140 against 160 is 12.5 %
    log("M.stderr.txt.gz", [(10, 20.0, "3:00"), (90, 150.0, "0:15")])
    assert profiling_speed_report.live_eta(tmp_path, "M", {"returncode": "timeout"}) is None
    log("M-resume.stderr.txt.gz", [(95, 5.0, "0:05"), (99, 9.0, "0:01")])
    # the resumed run did not finish
    assert profiling_speed_report.live_eta(tmp_path, "M", {"returncode": "timeout"}) is None
    log("M-resume.stderr.txt.gz", [(95, 5.0, "0:05"), (100, 10.0, "0:00")])
    e = profiling_speed_report.live_eta(tmp_path, "M", {"returncode": "timeout"})
    assert e["end_s"] == 160.0 and e["error"] == 0.25 and round(e["worst"], 4) == 0.25


def test_two_gpus_at_best_halve_the_measuring_and_keep_the_rest_of_the_wall():
    """SYNTHETIC walls: A 40 s measuring for 30 s, B 25 s measuring for 16 s; B measuring in 15 s at best is a
    24 s wall, 40 / 24 = 1.67x."""
    doc = {"runs": {"A": {"wall_s": 40.0}, "B": {"wall_s": 25.0}}}
    assert round(profile_multigpu.ideal_speedup(doc, {"span_a": 30.0, "span_b": 16.0}), 3) == 1.667
    assert profile_multigpu.fixed_for(1.5, 30.0) == 15.0  # (15 + 30) / (15 + 15) = 1.5


def test_speed_floor_sums_one_run_of_every_plan_and_splits_out_grouped_graphs_and_fft_engines(tmp_path):
    """SYNTHETIC cache: a dense graph (a 2 ms plan run 5 times), a depthwise one (an FFT plan of 300 ms, one of
    60 ms and a 1 ms one repeated); speed-floor writes what one run of each plan costs, and where."""
    from engine.gpu.cache import ProfileCache
    from engine.profile import COLUMNS

    def row(sig, plan, t, repeats, notes=""):
        r = {c: (0 if kind is int else 0.0 if kind is float else "") for c, kind in COLUMNS.items()}
        r.update(signature=sig, micro_batch=4, plan=plan, status="ok", time_ms=t, time_min_ms=t, repeats=repeats)
        return dict(r, numerical_notes=notes)

    dense, dw = "Forward/tf32/NCHW/x/g1", "Forward/tf32/NCHW/x/g16"
    cache = ProfileCache(tmp_path / "c.sqlite", "SYNTHETIC-GPU|-|-|-")
    cache.commit(dense, 4, {}, [row(dense, "a", 2.0, 5)], {"timing": {"start": 1e9, "seconds": 0.1}})
    rows = [row(dw, "f", 300.0, 1, "FFT"), row(dw, "g", 60.0, 1, "FFT"), row(dw, "h", 1.0, 5)]
    cache.commit(dw, 4, {}, rows, {"timing": {"start": 1e9, "seconds": 0.9}})
    cache.close()
    (tmp_path / "speed.json").write_text(json.dumps({"runs": {}}))
    argv = ["profiling_speed.py", "floor", str(tmp_path), str(tmp_path / "c.sqlite"), "--about", "SYNTHETIC"]
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(sys, "argv", argv)
        profiling_speed.main()
    f = json.loads((tmp_path / "speed.json").read_text())["M_resumed"]
    assert (f["graphs"], f["single_runs_s"], f["grouped_single_runs_s"], f["fft_single_runs_s"]) == (2, 0.4, 0.4, 0.4)
    assert (f["fft_plans_over_100ms"], f["fft_over_100ms_median_ms"], f["fft_max_ms"]) == (1, 300.0, 300.0)
    assert f["kernel_s"] == 0.7 and f["grouped_graph_kernel_median_s"] == 0.726  # 2 x 300 + 2 x 60 + 6 x 1 ms


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(reproduction.BLOCKS))
def test_reproduction_tables_match_what_the_engine_computes(name):
    assert read_block(reproduction.DOC.read_text(), name) == reproduction.BLOCKS[name]()


def _optimizer_row(label: str) -> str:
    """The ResNet-50 b32 cell of a row of benchmarks/reports/optimizer.md."""
    for line in (REPORTS / "optimizer.md").read_text().splitlines():
        if line.startswith(f"| {label} |"):
            return line.split("|")[2].strip()
    raise AssertionError(f"optimizer.md has no row {label!r}")


def test_readme_quotes_the_optimizer_report():
    variables = _optimizer_row("ILP 0-1 variables, Eq. 1-4 (largest desirable set)").split()[0]
    points = int(_optimizer_row("network front: points"))
    front_ms = _optimizer_row("network front: time, median (min) of 5").split()[0]
    solve_ms = re.match(r"\*\*([0-9.]+) ms\*\*", _optimizer_row("**wd: ILP solve, cold, median (max)**")).group(1)
    readme = " ".join(README.read_text().split())
    assert f"WD ILP solve {solve_ms} ms median ({variables} 0-1 variables" in readme
    assert f"exact network front of {points:,} points in {front_ms} ms" in readme


@pytest.mark.slow
def test_optimizer_report_counts_match_the_bundled_profile():
    """The ILP's variables and the front's points in optimizer.md are what the committed profile gives today."""
    from engine.optimize import network_front
    from engine.profile import Profile, bundled_profiles
    from engine.zoo import get_network

    name, batch = optimizer.NETWORKS[0]
    net = get_network(name, batch)
    prof = optimizer.pick_profile(
        [Profile.load(p) for p in bundled_profiles().values()], net, "tf32", "NCHW", "powerOfTwo"
    )
    sets, _ = optimizer.kernel_sets(prof, net, "tf32", "NCHW", "powerOfTwo")
    assert (
        _optimizer_row("ILP 0-1 variables, Eq. 1-4 (largest desirable set)")
        == f"{sum(len(s) for s in sets)} ({max(len(s) for s in sets)})"
    )
    assert int(_optimizer_row("network front: points")) == len(network_front(sets))


@pytest.fixture(scope="module")
def alexnet():
    return side_by_side.plan_network(*side_by_side.NETWORKS[0])


def _pred(entry, row, limit, engines="all"):
    return next(
        c["predicted_ms"]
        for c in entry["configs"]
        if c["row"] == row and c["limit"] == limit and c["engines"] == (engines if row != "framework" else "heuristics")
    )


@pytest.mark.slow
def test_side_by_side_rows_separate_the_engine_sweep_from_micro_batching(alexnet):
    """On the bundled AlexNet profile: framework >= best undivided >= WR >= optimum, WD <= WR at the same memory."""
    opt = _pred(alexnet, "optimum", None)
    for limit in side_by_side.LIMITS:
        a, b, c, d = (_pred(alexnet, r, limit) for r in ("framework", "undivided", "wr", "wd"))
        assert a >= b >= c >= opt - 1e-9
        assert d <= c + 1e-9
    assert _pred(alexnet, "framework", 64 * MiB) > 1.1 * _pred(alexnet, "undivided", 64 * MiB)  # the sweep's gain
    # without fp16 down-conversion the sweep finds no faster plan than the heuristic list at unlimited workspace
    assert _pred(alexnet, "optimum", None, "heuristics") >= opt - 1e-9


def test_side_by_side_framework_row_is_cuDNNs_heuristic_order(alexnet):
    from engine.profile import Profile, resolve_profile

    prof = Profile.load(resolve_profile(alexnet["profile"]))
    t = prof.table
    cfg = next(c for c in alexnet["configs"] if c["row"] == "framework" and c["limit"] == 8 * MiB)
    for k in cfg["kernels"]:
        (m,) = k["micro"]
        ok = t[(t.signature == k["signature"]) & (t.micro_batch == 256) & (t.status == "ok") & (t.heuristic_rank >= 0)]
        fits = ok[ok.workspace <= 8 * MiB].sort_values("heuristic_rank")
        assert m["plan"] == fits.plan.iloc[0] and m["batch"] == 256


def test_side_by_side_report_renders_medians_and_ranges(alexnet, tmp_path):
    """SYNTHETIC measurements (predictions scaled by 1.0, 1.1 and 0.9) through the report and a README block."""
    e = json.loads(json.dumps(alexnet))
    for c in e["configs"]:
        c["measured_ms"] = [c["predicted_ms"] * f for f in (1.0, 1.1, 0.9)]
    data = {
        "provenance": {
            "gpu": "SYNTHETIC",
            "driver": "-",
            "cuda_runtime": 0,
            "cudnn_version": "-",
            "frontend_version": "-",
            "cupy_version": "-",
            "date": "2000-01-01T00:00:00Z",
            "command": "SYNTHETIC",
        },
        "runs": 3,
        "repeats": 5,
        "networks": [e],
    }
    block = side_by_side.readme_block(data)
    a = _pred(alexnet, "framework", 64 * MiB)
    assert f"| {a:.2f} ({0.9 * a:.2f}-{1.1 * a:.2f}) |" in block
    assert "not run" in block  # no PyTorch measurement in this data
    readme = tmp_path / "README.md"
    begin, end = markers("side_by_side")
    readme.write_text(f"intro\n{begin}\nold\n{end}\nrest\n")
    write_block(readme, "side_by_side", block)
    assert read_block(readme.read_text(), "side_by_side") == block
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("rest\n")
    assert "(d) WD total 120 MiB (the paper's AlexNet budget)" in side_by_side.render(data, "SYNTHETIC.json")


def test_torch_training_summary_names_the_one_line_api_when_measured():
    """SYNTHETIC rows: the README's summary gives the opt-free step against stock-free's when a run measured it."""
    rows = [
        {"model": "resnet50", "precision": "tf32", "case": "stock-free", "step_ms": 10.0, "conv_ms": 4.0},
        {"model": "resnet50", "precision": "tf32", "case": "opt-free", "step_ms": 10.2, "conv_ms": 4.0},
    ]
    assert 'optimize(model, mode="free")' in torch_training.reading(rows)
    assert "resnet50 tf32 1.020x stock's step" in torch_training.reading(rows)
    assert "one-line" not in torch_training.reading(rows[:1])


def test_warm_up_check_judges_each_left_plan_on_the_earlier_runs_times(tmp_path):
    """SYNTHETIC caches: a depthwise graph whose 40 ms plan the later run left at its warm-up (42 ms), naming a
    1 ms plan; the earlier run timed both (38 ms, 1 ms); a dense graph only the earlier run stored."""
    from benchmarks import warm_up_check
    from engine.gpu.cache import ProfileCache
    from engine.profile import COLUMNS

    sig = "Forward/tf32/NCHW/c8h8w8/k8r3s3/p1x1/s1x1/d1x1/g8"

    def row(s, plan, t, repeats, reason=""):
        r = {c: (0 if kind is int else 0.0 if kind is float else "") for c, kind in COLUMNS.items()}
        r.update(signature=s, micro_batch=4, plan=plan, status="ok", time_ms=t, repeats=repeats, reason=reason)
        return r

    def cache(name, graphs):
        c = ProfileCache(tmp_path / name, "SYNTHETIC-GPU|-|-|-")
        for s, rows, seconds in graphs:
            c.commit(s, 4, {}, rows, {"timing": {"seconds": seconds, "split": {"wait": 0.1}}})
        c.close()
        return tmp_path / name

    before = cache("b.sqlite", [(sig, [row(sig, "f", 1.0, 5), row(sig, "s", 38.0, 1, "dominated by plan f")], 0.5)])
    before = cache("b.sqlite", [("Forward/dense/g1", [row("Forward/dense/g1", "f", 1.0, 5)], 0.2)])
    left = "dominated by plan f at its warm-up, over 2x slower: not run again"
    after = cache("a.sqlite", [(sig, [row(sig, "f", 1.0, 5), row(sig, "s", 42.0, 1, left)], 0.3)])
    d = warm_up_check.measure(before, after)
    assert (d["graphs"], d["left"], d["judged"], d["exact"]) == (1, 1, 1, 1)
    assert d["warm_up_over_before"]["max"] == 42.0 / 38.0 and d["before_over_named"]["min"] == 38.0
    assert d["before"]["grouped"] == {"graphs": 1, "gpu_s": 0.082, "own_median_s": 0.4}  # 1 x 6 + 38 x 2 ms
    assert d["after"]["grouped"] == {"graphs": 1, "gpu_s": 0.048, "own_median_s": 0.2}  # 1 x 6 + 42 x 1 ms
    assert "**1**" in warm_up_check.report([("SYNTHETIC", dict(about="SYNTHETIC", **d))])


def test_profile_prints_where_the_time_went_and_the_plans_left_at_their_warm_up():
    """SYNTHETIC provenance: the split line `python -m engine profile` prints at the end (issue 24, step 1)."""
    from engine.commands.profile import split_line

    prov = {
        "profiling_seconds": 12.5,
        "workers": 4,
        "time_split": {
            "graphs": 3,
            "build": 4.0,
            "timing": 6.0,
            "bookkeeping": 1.0,
            "wait": 2.0,
            "steps": {"heuristics": 1.0, "sweep": 2.5, "build": 0.5, "notes": 0.8, "commit": 0.2},
            "host_bound": {"plans": 7},
            "first_runs": {"plans": 40, "over 10 ms: left at the warm-up": 5},
        },
    }
    line = split_line(prov)
    assert line.startswith("time split over 3 measured graphs on 4 processes sharing the GPU: building 4.0 s")
    assert line.endswith(
        "; 7 plans host-bound (engine/gpu/timing.py), timed back to back; 5 slow plans left at "
        "their warm-up (engine/gpu/screen.py)"
    )
    del prov["time_split"]["first_runs"]
    assert "warm-up" not in split_line(prov)


def test_kernel_seconds_counts_what_ran_as_per_graph_does():
    """SYNTHETIC profile rows: repeated 5 times (2 ms: its warm-up and 5 runs), timed once (10 ms: a warm-up and a
    run), left at its warm-up (40 ms: that alone): 12 + 20 + 40 = 72 ms, as in the per-graph test above."""
    import types

    import pandas as pd

    table = pd.DataFrame(
        dict(
            status=["ok", "ok", "ok", "failed"],
            time_ms=[2.0, 10.0, 40.0, 0.0],
            repeats=[5, 1, 1, 0],
            reason=["", "dominated by plan a at first timing", "dominated by plan a at its warm-up, ...", "x"],
        )
    )
    assert profiling_speed.kernel_seconds(types.SimpleNamespace(table=table)) == 0.07  # 72 ms, rounded to 10 ms


def test_first_plan_cost_report_matches_its_json_and_the_readme(tmp_path):
    """The report regenerates from the committed JSON, and the README quotes its build and timing totals."""
    import argparse

    committed = REPORTS / "first-plan-cost.md"
    copy = tmp_path / "first-plan-cost.json"
    copy.write_bytes((REPORTS / "first-plan-cost.json").read_bytes())
    first_plan_cost.report(argparse.Namespace(results=str(copy)))
    made = copy.with_suffix(".md").read_text().replace(str(copy), "benchmarks/reports/first-plan-cost.json")
    assert made == committed.read_text()
    gs = json.loads(copy.read_text())["graphs"]
    more = {k: sum(g["new"][k] - g["old"][k] for g in gs) for k in ("build", "timing")}
    timing = [sum(g[w]["timing"] for g in gs) for w in ("new", "old")]
    text = " ".join(README.read_text().split())
    assert f"over the {len(gs)} fp16 graphs" in text
    assert f"building took {more['build']:.0f} s more host time ({more['build'] / len(gs):.2f} s a graph" in text
    assert f"timing {more['timing']:.0f} s more GPU time ({timing[0]:.0f} against {timing[1]:.0f} s)" in text


def test_first_plan_cost_extracts_the_graphs_measured_again_with_the_first_plan(tmp_path):
    """SYNTHETIC caches: a graph whose rank-0 row the old cache left out and the new one timed is kept, with both
    caches' stored seconds; a graph left out in both, or in neither, is not."""
    import argparse

    from engine.gpu.cache import ProfileCache
    from engine.kernels import KernelKind, KernelSignature
    from engine.profile import RTC_NOT_PROFILED
    from engine.testing.synthetic import synthetic_rows

    sig = KernelSignature(KernelKind.FORWARD, 8, 16, 8, 8, 16, 3, 3, 1, 1, groups=16)
    first, *rest = sorted(synthetic_rows(sig, [4]), key=lambda r: r["heuristic_rank"])
    left = {**first, "status": "skipped", "reason": RTC_NOT_PROFILED}
    caches = {}
    for name, rows_at in (
        ("old", {4: [left, *rest], 2: [first, *rest], 1: [left, *rest]}),
        ("new", {4: [first, *rest], 2: [first, *rest], 1: [left, *rest]}),
    ):
        cache = ProfileCache(tmp_path / f"{name}.sqlite", "SYNTHETIC-GPU")
        for b, rows in rows_at.items():
            split = {"build": 0.1 if name == "old" else 0.4, "timing": 1.0 + b}
            cache.commit(sig.key, b, {}, [dict(r, micro_batch=b) for r in rows], {"timing": {"split": split}})
        cache.close()
        caches[name] = str(tmp_path / f"{name}.sqlite")
    out = tmp_path / "cost.json"
    first_plan_cost.extract(
        argparse.Namespace(old=caches["old"], new=caches["new"], output=str(out), source="SYNTHETIC")
    )
    gs = json.loads(out.read_text())["graphs"]
    assert [(g["signature"], g["micro_batch"]) for g in gs] == [(sig.key, 4)]
    assert gs[0]["old"]["build"] == 0.1 and gs[0]["new"]["build"] == 0.4 and gs[0]["new"]["timing"] == 5.0


def test_readme_quotes_the_modern_cnns_fp16_steps_and_the_superseded_plan_from_their_json():
    """The README's sentence on EfficientNet-B0 and MobileNetV3-Large in fp16 (before and after cuDNN's first plan
    was profiled) quotes torch_training-h200.json: the superseded and current cases, the rounds and the profiles."""
    import statistics

    doc = json.loads((REPORTS / "torch_training-h200.json").read_text())

    def case(model, precision, name, rows):
        return next(r for r in rows if (r["model"], r["precision"], r["case"]) == (model, precision, name))

    old = {c: case("efficientnet_b0", "fp16", c, doc["superseded"]) for c in ("stock-free", "wr-256-free")}
    new = {c: case("efficientnet_b0", "fp16", c, doc["results"]) for c in ("stock-free", "wr-256-free")}
    ratios = torch_training.paired(new["wr-256-free"], new["stock-free"])
    tf32 = {c: case("efficientnet_b0", "tf32", c, doc["results"]) for c in ("stock-free", "wr-256-free")}
    busy = [
        x["gpu_busy"]
        for m in ("efficientnet_b0", "mobilenet_v3_large")
        for r in doc["results"]
        if (r["model"], r["precision"]) == (m, "fp16")
        for x in r.get("rounds", [r])
        if "gpu_busy" in x
    ]

    def drop(model):
        first, last = (
            r["predicted_conv_ms"] for r in (doc["profiles"][f"{model}:fp16"][0], doc["profiles"][f"{model}:fp16"][-1])
        )
        return f"{100 * (1 - last / first):.0f} %"

    text = " ".join(README.read_text().split())
    assert f"(GPU {100 * min(busy):.0f}-{100 * max(busy):.0f} % busy;" in text
    assert f"{statistics.median(ratios):.3f}x stock's step, the median of {len(ratios)} rounds" in text
    assert f"ratios spread {min(ratios):.2f}-{max(ratios):.2f}x" in text
    mob = torch_training.paired(
        *(case("mobilenet_v3_large", "fp16", c, doc["results"]) for c in ("wr-256-free", "stock-free"))
    )
    assert f"MobileNetV3-Large's {statistics.median(mob):.3f}x with {min(mob):.2f}-{max(mob):.2f}x" in text
    assert f"on TF32 EfficientNet-B0 {tf32['wr-256-free']['step_ms'] / tf32['stock-free']['step_ms']:.3f}x" in text
    mob = torch_training.paired(
        *(case("mobilenet_v3_large", "tf32", c, doc["results"]) for c in ("wr-256-free", "stock-free"))
    )
    assert (
        f"MobileNetV3-Large {statistics.median(mob):.3f}x in {len(mob)} rounds, {min(mob):.2f}-{max(mob):.2f}x)" in text
    )
    took = [x for x in case("efficientnet_b0", "fp16", "wr-256-free", doc["results"])["rounds"] if x.get("apply_s")]
    commits = [torch_training.applied_lines([{"case": "c", "rounds": [x]}], doc["runs"])[0] for x in took]
    assert [c.rsplit(" at ", 1)[1] for c in commits] == ["4246d89", "cb4cacb"]
    assert (
        f"fp16 WR plan at 256 MiB took {took[0]['apply_s']:.1f} s at 4246d89 and {took[-1]['apply_s']:.1f} s at cb4cacb"
        in text
    )
    assert (
        f"ran its convolutions in {old['wr-256-free']['conv_ms']:.2f} ms against stock's "
        f"{old['stock-free']['conv_ms']:.2f} "
        f"(a {old['wr-256-free']['step_ms'] / old['stock-free']['step_ms']:.2f}x slower step, "
        f"{old['wr-256-free']['step_ms']:.2f} against {old['stock-free']['step_ms']:.2f} ms)"
    ) in text
    assert f"in {new['wr-256-free']['conv_ms']:.2f} ms against {new['stock-free']['conv_ms']:.2f}" in text
    assert (
        f"predict {drop('efficientnet_b0')} less convolution time (MobileNetV3-Large {drop('mobilenet_v3_large')})"
        in text
    )


def test_a_runs_commit_is_the_one_its_call_script_names(monkeypatch):
    """The GPU call scripts export COMMIT: the device's copy of the tree carried an older .git, so runs of
    4246d89 and cb4cacb were recorded as 3ac8bfd-dirty."""
    from benchmarks import common

    monkeypatch.setenv("COMMIT", " cb4cacbd\n")
    assert common.git_commit() == "cb4cacbd"
    monkeypatch.delenv("COMMIT")
    assert common.git_commit() not in ("", "cb4cacbd")


def test_the_apply_profile_table_quotes_its_logs():
    """apply-profile.md's rows: each number is the cProfile line of its call's log (first and second apply_plan,
    the shape-check forward, cuDNN's plan builds, the ops' registration)."""
    folder = REPORTS / "torch_training-h200"
    text = (folder / "apply-profile.md").read_text()
    rows = [r.split(" | ") for r in text.splitlines() if r.startswith("| 2") or r.startswith("| 3")]
    assert len(rows) == 5
    for row in rows:
        call, model = row[0].strip("| ").rstrip("ab"), row[2]
        log = (folder / f"call{call}-applyprof-{model}.log").read_text()
        first, second = re.findall(r"apply_plan round \d \(same process\): ([\d.]+) s", log)
        assert (row[3], row[7].strip(" |")) == (first, second)
        part = log.split("apply_plan round 2")[0]

        def cum(fn):  # ncalls tottime percall cumtime percall where
            line = next((x for x in part.splitlines() if x.endswith(fn)), None)
            return line.split()[3] if line else None

        forward = cum("(conv_calls)")
        assert row[4] == forward if forward else row[4].startswith("below")
        assert (row[5], row[6]) == (cum("(_build_plan_at)"), cum("library.py:1080(register)"))


def test_the_readme_quotes_the_apply_profile_before_and_after():
    """The README's apply_plan sentence: the first apply_plan and its shape-check forward before the fix, and the
    first apply_plan on fake tensors, its cuDNN builds and its op registration, from the cProfile logs."""
    folder = REPORTS / "torch_training-h200"

    def numbers(call):
        log = (folder / f"call{call}-applyprof-efficientnet_b0.log").read_text().split("apply_plan round 2")[0]
        first = float(re.search(r"apply_plan round 1 \(same process\): ([\d.]+) s", log).group(1))

        def cum(fn):
            line = next((x for x in log.splitlines() if x.endswith(fn)), None)
            return float(line.split()[3]) if line else None

        return first, cum("(conv_calls)"), cum("(_build_plan_at)"), cum("library.py:1080(register)")

    text = " ".join(README.read_text().split())
    first, forward, _, _ = numbers(28)
    assert f"of {first:.1f} s in a profiled run, {forward:.1f} s were its shape-check forward" in text
    first, forward, build, register = numbers(30)
    assert forward is None  # not among the 30 largest entries
    assert (
        f"runs on fake tensors: {first:.1f} s, of which {build:.1f} s build 15 cuDNN plans and {register:.1f} s" in text
    )


def test_the_apply_profile_table_is_what_its_script_makes_from_the_logs():
    from benchmarks import apply_profile

    text = apply_profile.REPORT.read_text()
    assert read_block(text, "apply_profile") == apply_profile.table()
    assert len(apply_profile.rows()) == 5
