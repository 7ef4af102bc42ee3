"""benchmarks/reports/profiling-speed.md and README's block from issue 24's committed runs.

    python benchmarks/profiling_speed_report.py [RUNS] [-o REPORT] [--readme README]   # anywhere

Reads the runs listed in benchmarks/reports/profiling-speed/runs.json (each folder's speed.json, written on a
GPU host by benchmarks/profiling_speed.py, its kept progress lines and D profiles): each target against the last
run that measured it, where the time went, the ETA replayed on every run and as the commands printed it.
"""

from __future__ import annotations

import argparse
import gzip
import itertools
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.profile_multigpu import PROGRESS  # noqa: E402
from benchmarks.profiling_speed import DEPTHWISE, MOBILENET, RESNET, SPEED_NETS, grouped, own_seconds  # noqa: E402
from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

SPEED_RUNS = ROOT / "benchmarks" / "reports" / "profiling-speed" / "runs.json"
SPEED_REPORT = ROOT / "benchmarks" / "reports" / "profiling-speed.md"


def depthwise_graphs(run: dict) -> list[dict]:
    """The depthwise and grouped graphs of a run (signature ending in a group count above 1)."""
    return [g for g in run.get("graphs", []) if grouped(g["signature"])]


def wall_text(run: dict) -> str:
    """A run's wall clock and graphs, or why it has none."""
    if not run:
        return "-"
    if run.get("skipped"):
        return f"not run ({run['skipped']})"
    graphs = f" ({len(run.get('graphs', []))} graphs)" if run.get("graphs") else ""
    if run.get("returncode") != 0:
        return f"{run.get('returncode')} after {run.get('wall_s')} s{graphs}"
    return f"{run['wall_s']} s{graphs}"


def once_text(run: dict) -> str:
    return f"{run['timed_once']:,} / {run['timed']:,}" if "timed" in run else "-"


def retimed_text(run: dict) -> str:
    s = run.get("time_split") or {}
    return str(sum(s["retimed"].values())) if "retimed" in s else "-"


def depthwise_text(run: dict) -> str:
    dw = depthwise_graphs(run)
    if not dw:
        return "-"
    return f"{median_own(run, dw):.2f} s ({len(dw)} graphs, slowest {max(own_seconds(g) for g in dw):.2f} s)"


def split_text(s: dict | None) -> str:
    if not s:
        return "-"
    st = s.get("steps", {})
    return (
        f"build {s['build']:.1f} s (heuristics {st.get('heuristics', 0):.1f}, sweep {st.get('sweep', 0):.1f}, "
        f"plans {st.get('build', 0):.1f}); timing {s['timing']:.1f} s; bookkeeping {s['bookkeeping']:.1f} s "
        f"(notes {st.get('notes', 0):.1f}, cache {st.get('commit', 0):.1f}); waiting for the GPU {s['wait']:.1f} s"
        + (f"; {s['host_bound']['plans']} plans host-bound, timed back to back" if s.get("host_bound") else "")
        + first_runs_text(s.get("first_runs") or {})
    )


def first_runs_text(f: dict) -> str:
    """How each plan's warm-up compared with its timed run, and the slow plans left at their warm-up
    (engine.gpu.profiler.time_graph's counts; the 1.5x count and the plans left since 2026-11-28's 4th session)."""
    if not f.get("plans"):
        return ""
    slow = next((k.removesuffix("plans") for k in f if k.endswith(": plans")), None)  # "over 10 ms: "

    def counts(prefix: str) -> str:
        far = f.get(f"{prefix}warm-up over 1.5x slower")
        return (
            f"{f[prefix + 'warm-up over 5 % slower']:,} over 5 % slower, {f[prefix + 'warm-up over 5 % faster']:,} "
            f"over 5 % faster" + ("" if far is None else f", {far:,} over 1.5x slower")
        )

    long = f" (of the {f[slow + 'plans']:,} plans {slow.removesuffix(': ')} a run: {counts(slow)})" if slow else ""
    left = f.get(f"{slow}left at the warm-up") if slow else None
    return f"; warm-ups against the plan's timed run, of {f['plans']:,} plans: {counts('')}{long}" + (
        "" if left is None else f"; {left:,} slow plans left at their warm-up"
    )


def median_own(run: dict, graphs: list[dict] | None = None) -> float | None:
    gs = run.get("graphs", []) if graphs is None else graphs
    return statistics.median(own_seconds(g) for g in gs) if gs else None


def compare_lines(c: dict, a_name: str, b_name: str) -> list[str]:
    """Profile a against profile b: rows, times, and make_plan's plans (each also timed on the other's times)."""
    t = c["time_ratio_b_over_a"]
    same_rows = (
        "the same set"
        if c["same_rows"]
        else f"**not the same**: {c['only_a']} only in {a_name}, {c['only_b']} only in {b_name}"
    )
    same_status = "the same" if c["same_status"] else f"differs for {c['status_differ']} rows"
    lines = [
        f"- (signature, micro-batch, plan) rows: {c['rows_a']} in {a_name}, {c['rows_b']} in {b_name}, {same_rows}; "
        f"status per row {same_status}",
        f"- plan times, {b_name} / {a_name} over the {t['plans']} plans both timed with repeats: median "
        f"{t['median']}, quartiles {t['q1']} to {t['q3']}",
        "",
        f"| make_plan | budget | kernels with the same choice | on {a_name}'s times: its plan / {b_name}'s plan "
        f"(ms) | on {b_name}'s times: its plan / {a_name}'s plan (ms) | the other's plan costs at most |",
        "|---|---|---|---|---|---|",
    ]
    for p in c["plans"]:
        worst = max(p["b_plan_on_a_ms"] / p["time_ms_a"], p["a_plan_on_b_ms"] / p["time_ms_b"]) - 1
        lines.append(
            f"| {p['mode'].upper()} | {p['budget_mib']} MiB | {p['same_kernels']} of {p['kernels']} | "
            f"{p['time_ms_a']} / {p['b_plan_on_a_ms']} | {p['time_ms_b']} / {p['a_plan_on_b_ms']} | "
            f"{100 * worst:.2f} % more |"
        )
    return lines


SPREAD_SINCE = "2026-11-26-run4"  # the first run measured in spread order


def eta_replay(name: str, run: dict, spread_measured: bool = True) -> dict:
    """engine.gpu.progress's ETA replayed on a run's graphs, handed what engine.gpu.pipeline hands it (each
    graph's sample_seconds and, with processes sharing the GPU, the process that measured it): the error of the
    predicted finish (elapsed + ETA) against the real one, as a fraction of the measuring time, worst and
    median after 10, 25 and 50 % of the graphs, in the order measured (the stored ends) and in spread order (the
    wall grown by each graph's sample), and, for a run of processes sharing the GPU in spread order, on its own
    clock. A run cut at its time limit is replayed on the graphs it measured."""
    from engine.gpu.progress import sample_seconds
    from engine.gpu.work import graphs, spread_order
    from engine.testing.replay import eta_worst_on_own_clock
    from engine.zoo import get_network

    if name == "D":
        work = graphs(get_network(str(ROOT / DEPTHWISE[1]), 128), [128, 16, 1], "tf32", "NCHW")
    elif name in ("M", "H"):
        work = graphs(get_network(MOBILENET[1], 128), "powerOfTwo", "tf32", "NCHW")
    else:
        work = graphs(get_network("resnet50", 64), "powerOfTwo", "tf32", "NCHW")
    measured = {(g["signature"], g["micro_batch"]): g for g in run["graphs"]}
    work = [g for g in work if (g.key, g.b) in measured]
    shared = len({g["worker"] for g in run["graphs"]}) > 1
    sample = {k: sample_seconds(g["seconds"], g["split"], shared) for k, g in measured.items()}
    t0 = min(g["start"] for g in run["graphs"])
    live = sorted(work, key=lambda g: measured[g.key, g.b]["start"] + measured[g.key, g.b]["seconds"])
    ends = [measured[g.key, g.b]["start"] + measured[g.key, g.b]["seconds"] - t0 for g in live]
    spread = spread_order(work)
    return {
        # as the pipeline's and the Dask path's ETA now runs: its clock from the first stored graph
        "own_clock": eta_worst_on_own_clock(work, run["graphs"]) if shared and spread_measured else None,
        "measured": eta_errors(work, live, ends, sample, measured, shared),
        "spread": eta_errors(
            work, spread, list(itertools.accumulate(sample[g.key, g.b] for g in spread)), sample, measured, shared
        ),
    }


def live_eta(folder: Path, name: str, run: dict) -> dict | None:
    """The ETA as the command printed it (step ``name``'s kept progress lines, since 2026-11-28-run11): the
    predicted finish (elapsed + ETA) against the real one, as a share of the measuring time, at the first line
    after a tenth of the graphs and the worst from there. A run cut at its limit and resumed to its end
    (``NAME-resume.stderr.txt.gz``) finished, nearly, when its cut plus the resumed command's measuring did."""

    def lines(path: Path) -> list[tuple[int, int, float, float | None]]:
        text = gzip.decompress(path.read_bytes()).decode(errors="replace") if path.is_file() else ""
        return [
            (int(d), int(t), float(at), 60 * int(m) + int(s) if m else None)
            for d, t, at, m, s in PROGRESS.findall(text)
        ]

    seen = lines(folder / f"{name}.stderr.txt.gz")
    if not seen:
        return None
    end = seen[-1][2]
    if run.get("returncode") != 0:
        rest = lines(folder / f"{name}-resume.stderr.txt.gz")
        if not rest or rest[-1][0] != rest[-1][1]:
            return None
        end += rest[-1][2]
    after = [(d, at, eta) for d, total, at, eta in seen if d >= total / 10 and eta is not None]
    if not after or end <= 0:
        return None
    errors = [abs(at + eta - end) / end for _, at, eta in after]
    d, at, eta = after[0]
    return dict(
        graphs=seen[0][1],
        done=d,
        at_s=at,
        eta_s=eta,
        end_s=round(end, 1),
        resumed=run.get("returncode") != 0,
        error=errors[0],
        worst=max(errors),
    )


def start_text(rows: list[tuple[dict, dict]]) -> str:
    """How much more the first tenth of the last pipelined ResNet-50 run's graphs held the GPU than the rest."""
    from engine.gpu.progress import sample_seconds

    for entry, d in reversed(rows):
        b = d["runs"].get("B") or {}
        if len({g["worker"] for g in b.get("graphs", [])}) > 1:
            done = sorted(b["graphs"], key=lambda g: g["start"] + g["seconds"])
            gpu = [sample_seconds(g["seconds"], g["split"], shared=True) for g in done]
            ratio = statistics.mean(gpu[: len(gpu) // 10]) / statistics.mean(gpu[len(gpu) // 10 :])
            return (
                f": in {entry['dir']} B the first tenth of the graphs held the GPU "
                f"{ratio:.1f}x longer each than the rest"
            )
    return ""


def eta_errors(work: list, order: list, ends: list[float], sample: dict, measured: dict, shared: bool) -> dict:
    """The ETA's error at each graph of ``order`` finishing at ``ends``, worst and median after 10, 25, 50 %."""
    from engine.gpu.progress import ProfileProgress

    now = [0.0]
    track = ProfileProgress(work, clock=lambda: now[0])
    track.start()
    errors = []
    for n, (g, end) in enumerate(zip(order, ends), 1):
        now[0] = end
        track.finished(g, "gpu0", sample[g.key, g.b], worker=measured[g.key, g.b]["worker"] if shared else None)
        eta = track.eta_s()
        if n < len(order) and eta is not None:
            errors.append((n / len(order), abs(end + eta - ends[-1]) / ends[-1]))
    out = {}
    for frac in (0.1, 0.25, 0.5):
        e = [x for f, x in errors if f >= frac]
        out[f"after {frac:.0%}"] = {"worst": round(max(e), 3), "median": round(statistics.median(e), 3)}
    return out


def load_speed_runs(listing: Path) -> list[tuple[dict, dict]]:
    """(listing entry with its ``folder``, its speed.json) per committed run, in the order they ran."""
    doc = json.loads(listing.read_text())
    return [
        (dict(r, folder=listing.parent / r["dir"]), json.loads((listing.parent / r["dir"] / "speed.json").read_text()))
        for r in doc["runs"]
    ]


def host_bound_lines(entry: dict, data: dict) -> list[str]:
    """A run's host-bound plans (engine.gpu.timing): in M's depthwise and grouped graphs from its per-graph counts,
    and in D from its profile where committed: how many cuDNN's heuristic list holds, how many are in their
    graph's desirable set (engine.optimize.desirable, one plan per configuration)."""
    from engine.configuration import Configuration, MicroConfig
    from engine.optimize.desirable import desirable
    from engine.profile import Profile

    out = []
    m = depthwise_graphs(data["runs"].get("M") or {})
    if m and "host_bound" in m[0]:
        timing = sum(g["split"].get("timing", 0.0) for g in data["runs"]["M"]["graphs"])
        out.append(
            f"- M: {len(m)} depthwise and grouped graphs measured held the GPU "
            f"{sum(g['split'].get('timing', 0.0) for g in m):.0f} s of the run's {timing:.0f} s of timing; "
            f"{sum(g['host_bound'] for g in m):,} of their {sum(g['plans'] for g in m):,} plans host-bound"
        )
    path = entry["folder"] / "D.profile.json.gz"
    if path.exists():
        t = Profile.load(path).table
        ok = t[t.status == "ok"]
        bound = ok[ok.reason.str.contains("host-bound:", regex=False)]
        front = {
            (sig, b, c.micro[0].plan)
            for (sig, b), g in ok.groupby(["signature", "micro_batch"])
            for c in desirable(
                Configuration((MicroConfig(int(b), p, tm, int(w)),)) for p, tm, w in zip(g.plan, g.time_ms, g.workspace)
            )
        }
        inside = sum(k in front for k in zip(bound.signature, bound.micro_batch, bound.plan))
        dearest = bound.reason.str.extract(r"host-bound: ([\d.]+) ms", expand=False).astype(float).max()
        out.append(
            f"- D: {len(bound)} of its {len(ok):,} timed plans host-bound (the dearest {dearest:,.0f} ms of host time "
            f"per execution), {int((bound.heuristic_rank >= 0).sum())} of them on cuDNN's heuristic list, {inside} in "
            "their graph's desirable set"
        )
    return out


def cut_text(run: dict) -> str:
    """Where a run cut at its limit stood, from its last progress line: graphs done of all, and its ETA then."""
    last = (run.get("stderr") or [""])[-1] if run.get("returncode") == "timeout" else ""
    m = PROGRESS.search(last)
    if not m or m[4] is None:
        return ""
    done, total, at, eta = int(m[1]), int(m[2]), float(m[3]), 60 * int(m[4]) + int(m[5])
    return f"cut at {done} of {total} graphs after {at:.0f} s of profiling; its ETA then: {eta} s more"


def run_gpu(d: dict) -> str:
    """The GPU a run measured on (from any of its runs' provenance)."""
    return run_provenance(d).get("gpu") or "?"


def run_provenance(d: dict) -> dict:
    """A speed.json's provenance: any of its runs' profiles, else the profile of its cut run resumed to its end."""
    return next(
        (r["provenance"] for r in d["runs"].values() if r.get("provenance")),
        (d.get("M_resumed") or {}).get("provenance") or {},
    )


def target_lines(rows: list[tuple[dict, dict]], goals: dict) -> list[str]:
    """Each target against the last run that measured it, with where B's time went."""
    out = []
    entry, doc, b = latest(rows, "B")
    if b.get("returncode") == 0:
        c = doc.get("compare") or {}
        met = "met" if b["wall_s"] <= goals["resnet50_one_gpu_s"] else "not met"
        split = b.get("time_split") or {}
        kernels = f", of which its timed kernels themselves ran {c['kernel_s_b']:.1f} s" if "kernel_s_b" in c else ""
        out.append(
            f"- ResNet-50 b64 on one GPU: {b['wall_s']} s in {entry['dir']}, target "
            f"{goals['resnet50_one_gpu_s']:g} s: **{met}**. B held the GPU for {split.get('timing', 0):.1f} s"
            f"{kernels} (a warm-up and a single run per plan or its warm-up alone, and the repeats of the "
            f"{b.get('timed', 0) - b.get('timed_once', 0):,} plans not dominated at their first timing); building "
            f"(plus labelling notes) is {split.get('build', 0) + split.get('bookkeeping', 0):.1f} s of host time, "
            f"spread over {b.get('workers')} processes."
        )
    entry, doc, m = latest(rows, "M")
    if m:
        goal = goals.get("mobilenet_v3_large_s", 120.0)
        met = "met" if m.get("returncode") == 0 and m["wall_s"] <= goal else "not met"
        cut = "; ".join(t for t in (cut_text(m), resumed_text(m, doc.get("M_resumed"))) if t)
        floor = floor_text(doc)
        out.append(
            f"- MobileNetV3-Large b128 on one GPU: {wall_text(m)} in {entry['dir']}, target {goal:g} s: **{met}**"
            + (f" ({cut})" if cut else "")
            + (f"; {floor}, more than the target alone; {floor_split_text(doc['M_resumed'])}" if floor else "")
            + "."
        )
    entry, _, h = latest(rows, "H")
    if h:
        goal = goals.get("mobilenet_v3_large_s", 120.0)
        met = "met" if h.get("returncode") == 0 and h["wall_s"] <= goal else "not met"
        cov = coverage_cost(rows)
        worse = (
            f"; its plans cost at most {cov[1]:.1f} % more than the sweep's on the sweep's times ({cov[0]})"
            if cov
            else ""
        )
        out.append(
            f"- MobileNetV3-Large b128 with `--engines heuristics` (the user asks for less): {wall_text(h)} in "
            f"{entry['dir']}, target {goal:g} s: **{met}**{worse}."
        )
    for name, entry, med, which in depthwise_medians(rows):
        met = "met" if med <= goals["depthwise_graph_median_s"] else "not met"
        out.append(
            f"- depthwise and grouped graphs ({name}, {entry['dir']}, {which} graphs): median {med:.2f} s of a "
            f"graph's own building and timing, target {goals['depthwise_graph_median_s']:g} s: **{met}**."
        )
    return out


def floor_text(d: dict) -> str:
    """The GPU seconds every plan of a whole MobileNetV3-Large sweep takes run once (M resumed to its end)."""
    f = d.get("M_resumed")
    if not f:
        return ""
    return (
        f"its {f['graphs']:,} graphs' plans run once each take {f['single_runs_s']:.0f} s of GPU time (what ran: a "
        f"warm-up, a timed run and the repeats, {f['kernel_s']:.0f} s)"
    )


def floor_split_text(f: dict) -> str:
    """Where that floor lies: the grouped graphs and the plans of cuDNN's FFT engines (profiling_speed.py floor)."""
    return (
        f"grouped and depthwise graphs {f['grouped_single_runs_s']:.0f} s of it (a median graph "
        f"{f['grouped_graph_single_runs_median_s']:.2f} s, {f['grouped_graph_kernel_median_s']:.2f} s with each "
        f"plan's warm-up and repeats), plans of cuDNN's FFT engines {f['fft_single_runs_s']:.0f} s "
        f"({f['fft_plans_over_100ms']} of them over 0.1 s a run, median {f['fft_over_100ms_median_ms'] / 1000:.2f} "
        f"s, up to {f['fft_max_ms'] / 1000:.1f} s)"
    )


def extra_percent(p: dict) -> float:
    """How much more profile b's plan costs than a's, both timed on a's measurements (a compare_profiles row)."""
    return 100 * (p["b_plan_on_a_ms"] / p["time_ms_a"] - 1)


def coverage_cost(rows: list[tuple[dict, dict]]) -> tuple[str, float] | None:
    """(run, percent): the last run comparing H's plans with M's, and the most H's plans cost on M's times."""
    for entry, d in reversed(rows):
        if d.get("coverage"):
            return entry["dir"], max(extra_percent(p) for p in d["coverage"]["plans"])
    return None


def coverage_lines(d: dict) -> list[str]:
    """M (the engine sweep) against H (cuDNN's heuristic list), make_plan on each, H's plan timed on M's times."""
    c, m, h = d["coverage"], d["runs"]["M"], d["runs"]["H"]
    lines = [
        f"- M, the sweep, was cut at {m['wall_s']} s ({len(m.get('graphs', []))} of {d['M_resumed']['graphs']:,} "
        f"graphs; {cut_text(m) or 'no progress line'}); {d['M_resumed']['about']}.",
        f"- The floor of an exact sweep: {floor_text(d)}; {floor_split_text(d['M_resumed'])} "
        f"(`profiling_speed.py floor`). No profiler that runs every plan at least once can "
        f"finish this sweep in {d['goals'].get('mobilenet_v3_large_s', 120):g} s on this GPU; {c['only_a']:,} of "
        f"its {c['rows_a']:,} rows are engine configurations outside cuDNN's heuristic list.",
        f"- H, the same command with `--engines heuristics` (on the host's other GPU, at the same time as M): "
        f"{wall_text(h)}, {c['rows_b']:,} rows; the plans both timed with repeats differ by a median ratio of "
        f"{c['time_ratio_b_over_a']['median']} (H / M, quartiles {c['time_ratio_b_over_a']['q1']} to "
        f"{c['time_ratio_b_over_a']['q3']}).",
        "",
        "| make_plan | budget | kernels with the same choice | M's plan (ms, on M's times) | H's plan on M's times "
        "(ms) | H's plan costs |",
        "|---|---|---|---|---|---|",
    ]
    for p in c["plans"]:
        lines.append(
            f"| {p['mode'].upper()} | {p['budget_mib']} MiB | {p['same_kernels']} of {p['kernels']} | "
            f"{p['time_ms_a']} | {p['b_plan_on_a_ms']} | {extra_percent(p):.2f} % more |"
        )
    return lines


def each_run(rows: list[tuple[dict, dict]], key: str):
    """(listing entry, step, run) for every step of every committed run that holds ``key``, in report order."""
    for r, d in rows:
        for name in ("A", "B", "M", "H", "D"):
            x = d["runs"].get(name)
            if x and x.get(key):
                yield r, name, x


def speed_render(rows: list[tuple[dict, dict]], source: str) -> str:
    entry, last = rows[-1]
    prov = run_provenance(last)
    v = last.get("versions", {})
    goals = last["goals"]
    gpus = list(dict.fromkeys(run_gpu(d) for _, d in rows))
    lines = [
        "# Profiling a new model in a minute or two (issue 24)",
        "",
        f"Written by `python benchmarks/profiling_speed_report.py` from the runs listed in [{source}]({source}) "
        "(each measured by `python benchmarks/profiling_speed.py run --out DIR` on a lent host with one GPU and "
        "compared by `profiling_speed.py compare`, which were `benchmarks/profiling.py speed` and `speed-compare` "
        "until 2026-11-28-run11; each run's `speed.json` holds every graph's seconds and time split).",
        "",
        "- GPU: "
        + "; ".join(f"{g} ({', '.join(r['dir'] for r, d in rows if run_gpu(d) == g)})" for g in gpus)
        + f"; the last run's: driver {prov.get('driver')}, CUDA runtime {prov.get('cuda_runtime')}, cuDNN "
        f"{prov.get('cudnn_version')}, cudnn-frontend {prov.get('frontend_version')}, CuPy "
        f"{prov.get('cupy_version')}, torch {v.get('torch') or 'not installed'} (not used), dask "
        f"{v.get('dask')}, Python {prov.get('python')}; {prov.get('date')}",
        "- every run is the user's command from a cold cache, timed by wall clock (imports, CUDA start, worker "
        "start, profiling, writing the file), after the packages' bytecode was compiled and the GPU libraries "
        "loaded once: A `python -m engine profile " + " ".join(RESNET) + " --build-workers 1` (graph after "
        "graph), B the same without `--build-workers` (processes sharing the GPU), D `python -m engine profile "
        + " ".join(DEPTHWISE)
        + "` (depthwise and grouped convolutions, processes sharing the GPU), M `python -m engine profile "
        + " ".join(MOBILENET)
        + "` (the engine sweep of a depthwise-heavy torchvision model) and H the same with `"
        + " ".join(SPEED_NETS["H"][1])
        + "` (cuDNN's heuristic list only: the user asks for less)",
        f"- targets: ResNet-50 on one GPU <= {goals['resnet50_one_gpu_s']:g} s; depthwise and grouped graphs <= "
        f"{goals['depthwise_graph_median_s']:g} s each (median); MobileNetV3-Large b128 on one GPU <= "
        f"{goals.get('mobilenet_v3_large_s', 120.0):g} s",
        "",
        "| run | code | A: ResNet-50 serial | B: ResNet-50 pipelined | B against A | processes | B's GPU time "
        "(timing) / host time (building, bookkeeping) | B's plans timed once / timed | M: MobileNetV3-Large | "
        "D: depthwise run | depthwise graph, median own s (of M, else D) | timings repeated behind a longer "
        "spin, B / M / D | H: MobileNetV3-Large, heuristic list only |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    serials: dict[str, dict] = {}  # per GPU: the last serial run A
    for r, d in rows:
        ru = d["runs"]
        a, b, m, dd = (ru.get(k) or {} for k in ("A", "B", "M", "D"))
        if a.get("returncode") == 0:
            serials[run_gpu(d)] = {"wall": a["wall_s"], "run": r["dir"]}
        serial = serials.get(run_gpu(d), {})
        a_text = f"{a['wall_s']} s" if a.get("wall_s") else (f"(run {serial['run']})" if serial else "-")
        vs = f"{serial['wall'] / b['wall_s']:.2f}x" if b.get("wall_s") and serial else "-"
        bs = b.get("time_split") or {}
        b_split = f"{bs['timing']:.1f} / {bs['build'] + bs['bookkeeping']:.1f} s" if bs else "-"
        lines.append(
            f"| {r['dir']} ({run_gpu(d).removeprefix('NVIDIA ')}) | {r['code']} | {a_text} | **{wall_text(b)}** | "
            f"{vs} | {b.get('workers', '-')} | "
            f"{b_split} | "
            f"{once_text(b)} | **{wall_text(m)}** | {wall_text(dd)} | {depthwise_text(m or dd)} | "
            + " / ".join(retimed_text(x) for x in (b, m, dd))
            + f" | {wall_text(ru.get('H') or {})} |"
        )
    lines += [
        "",
        "What changed between the runs:",
        "",
        *(f"- {r['dir']} ({r['code']}): {r['change']}" for r, _ in rows),
    ]
    lines += [
        "",
        "## Where the time goes",
        "",
        "Summed over the graphs of each run, from the split each graph stores with its rows in the cache "
        "(`python -m engine profile` prints it at the end): building is the heuristic query, the engine "
        "sweep (support checks, knob settings, finalizing its plans) and finalizing the heuristic plans; "
        "timing is holding the GPU (operands, the timed runs, the host's work between them); bookkeeping is "
        "labelling numerical notes and writing the cache. On processes sharing the GPU, building overlaps "
        "timing and only timing is serialized, so B's wall clock is its timing plus the start.",
        "",
    ]
    for r, name, x in each_run(rows, "time_split"):
        lines.append(f"- {r['dir']} {name}: {split_text(x['time_split'])}")
    for r, d in rows:
        if d.get("compare"):
            c = d["compare"]
            a_run = r["dir"] if c.get("serial_from", "this run") == "this run" else c["serial_from"]
            lines += [
                "",
                f"## Serial against pipelined: A of {a_run} against B of {r['dir']}",
                "",
                *compare_lines(c, "A", "B"),
            ]
        if d.get("noise"):
            lines += [
                "",
                f"## Two pipelined runs: B of {d['noise'].get('other_from')} against B of {r['dir']}",
                "",
                "The same comparison between two profiles measured the same way: how far two profiles of one "
                "GPU differ by noise alone.",
                "",
                *compare_lines(d["noise"], "earlier B", "B"),
            ]
    lines += [
        "",
        "make_plan's plans from two profiles differ where configurations are within the timing noise of "
        "each other; the last column times each plan with the other profile's measurements of its choices. "
        "The serial and the pipelined profiles differ about as much as two pipelined ones.",
    ]
    gl = next((d["gil"] for _, d in rows if "speedup" in d.get("gil", {})), None)
    if gl:
        lines += [
            "",
            "## Threads or processes",
            "",
            f"Building the engine sweep of {gl['graphs']} ResNet-50 graphs ({gl['plans']} plans): "
            f"{gl['serial_s']} s on one thread, {gl['threads_s']} s on {gl['threads']} threads with a cuDNN "
            f"handle each ({gl['speedup']}x; too short a sample to weigh much). The frontend's only extension "
            "module never releases the GIL (engine/gpu/pipeline.py), so the profiler builds on processes.",
        ]
    for r, d in rows:
        if d.get("coverage"):
            lines += ["", f"## MobileNetV3-Large: the sweep's floor and the heuristic list ({r['dir']})", ""]
            lines += coverage_lines(d)
    lines += ["", "## Targets (the last run of each step)", "", *target_lines(rows, goals)]
    bound = [(r, host_bound_lines(r, d)) for r, d in rows]
    if any(lines_ for _, lines_ in bound):
        lines += [
            "",
            "## Host-bound plans",
            "",
            "Plans whose every execution kept the host over engine.gpu.timing's HOST_BOUND_MS enqueueing work, "
            "each run twice (a warm-up and one timed run), per run that counted them:",
        ]
        for r, lines_ in bound:
            lines += ["", f"{r['dir']}:", "", *lines_] if lines_ else []
    lines += [
        "",
        "## ETA",
        "",
        "`engine.gpu.progress`'s ETA replayed on each run's graphs as engine.gpu.pipeline hands them (each graph's "
        "seconds holding the GPU, or its own seconds graph after graph, and the process that measured it): how far "
        "the predicted finish (elapsed + ETA) was from the real one, as a share of the run's measuring time, in the "
        "order the graphs were measured (network order before 2026-11-26-run4, spread order from it) and in spread "
        "order (each run's wall grown graph by graph: the order the pipeline now measures in); M runs were cut at "
        "their time limit and are replayed on the graphs they measured. Issue 24 asks for +-15 % after the first "
        "10 % of graphs. Every row replays today's ETA, whatever code measured the run. Since 2026-11-26 it fits "
        f"each process's start apart from its graphs' own cost (engine.gpu.progress){start_text(rows)}; since "
        "2026-11-28 it fits grouped graphs (depthwise included) apart too, whose host-bound plans cost about the "
        "same whatever their FLOPs: without that, MobileNetV3-Large's H runs were 33 % off in spread order. The "
        "last column replays a run as it ran, where processes shared the GPU: each graph handed to the ETA when it "
        "was stored, the clock from the first stored graph (engine.testing.replay), as the pipeline's and the Dask "
        "path's ETA run since 2026-11-29, for the runs measured in spread order; the error is a share of the time from "
        "the first stored graph to the last.",
        "",
        "| run | graphs | in the order measured, after 10 % of the graphs: worst / median | after 25 % | after 50 % "
        "| in spread order, after 10 %: worst / median | after 25 % | on its own clock, after 10 %: worst |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r, name, x in each_run(rows, "graphs"):
        e = eta_replay(name, x, r["dir"] >= SPREAD_SINCE)
        cells = [*e["measured"].values(), *list(e["spread"].values())[:2]]
        own = "-" if e["own_clock"] is None else f"{100 * e['own_clock']:.1f} %"
        lines.append(
            f"| {r['dir']} {name} | {len(x['graphs'])} | "
            + " | ".join(f"{100 * v['worst']:.0f} / {100 * v['median']:.0f} %" for v in cells)
            + f" | {own} |"
        )
    live = [(r, name, e) for r, name, x in each_run(rows, "command") if (e := live_eta(r["folder"], name, x))]
    if live:
        lines += ["", "As the command printed it (every progress line kept since 2026-11-28-run11):", ""]
        lines += [
            f"- {r['dir']} {name}: at graph {e['done']} of {e['graphs']} ({e['at_s']:.1f} s) the ETA said "
            f"{e['eta_s']} s more, a finish at {e['at_s'] + e['eta_s']:.0f} s against the real {e['end_s']:g} s"
            + (" (its cut plus the resumed command's measuring)" if e["resumed"] else "")
            + f": {100 * e['error']:.1f} % off; the worst from there {100 * e['worst']:.1f} %."
            for r, name, e in live
        ]
    lines += [
        "",
        "## Not measured",
        "",
        "- the code after the last run: " + last.get("after", "nothing changed the measured path") + ".",
        "- two GPUs (issue 24's >= 1.9x): not measured here; benchmarks/profile_multigpu.py measures one GPU "
        "against two on a host with two (since 2026-11-26 `--gpus` spreads the pipeline's processes over the "
        "GPUs instead of one Dask worker per GPU measuring graph after graph).",
    ]
    if not any(d["runs"].get("M") for _, d in rows):
        lines.append("- MobileNetV3-Large: not run; D stands for its depthwise and grouped kernels.")
    b_entry, _, b = latest(rows, "B")
    skips = (b.get("time_split") or {}).get("sweep_skips") or {}
    if skips:
        lines += [
            "",
            f"## What the engine sweep did not time ({b_entry['dir']}, B)",
            "",
            "Every engine configuration the sweep tried that did not become a plan, by reason; plans the "
            "profile records as skipped (above the workspace cap, filtered by a note) are rows of the profile:",
            "",
            *(f"- {r}: {n:,}" for r, n in sorted(skips.items(), key=lambda x: -x[1])),
        ]
    return "\n".join(lines) + "\n"


def latest(rows: list[tuple[dict, dict]], name: str) -> tuple[dict, dict, dict]:
    """(listing entry, its speed.json, step ``name``'s run) of the last run that ran that step, else ({}, {}, {})."""
    return next(((r, d, d["runs"][name]) for r, d in reversed(rows) if d["runs"].get(name)), ({}, {}, {}))


def depthwise_medians(rows: list[tuple[dict, dict]]) -> list[tuple[str, dict, float, str]]:
    """(step, listing entry, median own seconds of its depthwise and grouped graphs, which graphs) for the last
    M and D; for an M cut at its limit and resumed to its end (profiling_speed.py floor), over the whole sweep."""
    out = []
    for name in ("M", "D"):
        entry, doc, run = latest(rows, name)
        f = (doc.get("M_resumed") or {}) if name == "M" else {}
        dw = depthwise_graphs(run)
        if "grouped_graph_own_median_s" in f:
            out.append((name, entry, f["grouped_graph_own_median_s"], f"the whole sweep's {f['grouped_graphs']}"))
        elif dw:
            out.append((name, entry, median_own(run, dw), f"{len(dw)}"))
    return out


def resumed_text(run: dict, f: dict | None) -> str:
    """A run cut at its limit and resumed to its end: the two commands' wall clocks summed."""
    if not f or run.get("returncode") != "timeout" or not f.get("wall_s"):
        return ""
    return (
        f"resumed to its end in {f['wall_s']:g} s more: the whole sweep {run['wall_s'] + f['wall_s']:.0f} s over "
        "the two commands"
    )


def speed_readme(rows: list[tuple[dict, dict]]) -> str:
    """README's lines: per GPU the last pipelined ResNet-50 and the serial one, then the last depthwise and
    MobileNetV3-Large results, with the targets."""
    goals, parts = rows[-1][1]["goals"], []
    for gpu in dict.fromkeys(run_gpu(d) for _, d in rows):
        mine = [(r, d) for r, d in rows if run_gpu(d) == gpu]
        b = [(r, d["runs"]["B"]) for r, d in mine if (d["runs"].get("B") or {}).get("returncode") == 0]
        a = [(r, d["runs"]["A"]) for r, d in mine if (d["runs"].get("A") or {}).get("returncode") == 0]
        if not b:  # a GPU whose runs had no ResNet-50 (M or H alone)
            continue
        text = f"on one {gpu}: {b[-1][1]['wall_s']} s in {b[-1][0]['dir']} (code {b[-1][0]['code']})"
        if a:
            text += f", {a[-1][1]['wall_s']} s graph after graph ({a[-1][0]['dir']})"
        parts.append(text)
    tail = ""
    what = {"M": "MobileNetV3-Large b128", "D": "benchmarks/depthwise.yaml"}
    for name, entry, med, which in depthwise_medians(rows):
        tail += (
            f" Depthwise and grouped graphs ({what[name]}, {entry['dir']}, {which} graphs): {med:.2f} s median of a "
            f"graph's own building and timing (target {goals['depthwise_graph_median_s']:g} s)."
        )
    entry, doc, m = latest(rows, "M")
    if m:
        floor, resumed = floor_text(doc), resumed_text(m, doc.get("M_resumed"))
        tail += (
            f" MobileNetV3-Large b128 with the sweep ({entry['dir']}): {cut_text(m) or wall_text(m)}"
            + (f"; {resumed}" if resumed else "")
            + f" (target {goals.get('mobilenet_v3_large_s', 120.0):g} s)"
            + (f"; {floor}, more than the target alone." if floor else ".")
        )
    entry, _, h = latest(rows, "H")
    cov = coverage_cost(rows)
    if h.get("returncode") == 0 and cov:
        tail += (
            f" With `--engines heuristics` ({entry['dir']}): {h['wall_s']} s, its WR and WD plans at 8, 64 and "
            f"256 MiB at most {cov[1]:.1f} % slower than the sweep's on the sweep's own times ({cov[0]})."
        )
    return (
        "- Profiling speed (`python -m engine profile`, ResNet-50 b64 TF32 `powerOfTwo` with the engine sweep, cold "
        "cache, wall clock of the command, plans built on host processes while one at a time times on the GPU, the "
        f"default; target {goals['resnet50_one_gpu_s']:g} s): "
        + "; ".join(parts)
        + "."
        + tail
        + " ([benchmarks/reports/profiling-speed.md](benchmarks/reports/profiling-speed.md))"
    )


def speed_report(args) -> None:
    listing = Path(args.runs)
    rows = load_speed_runs(listing)
    atomic_write(args.output, speed_render(rows, os.path.relpath(listing, Path(args.output).parent)))
    if args.readme:
        write_block(Path(args.readme), "profiling_speed_report", speed_readme(rows))
    print(f"wrote {args.output}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("runs", nargs="?", default=str(SPEED_RUNS), help="the listing of committed runs")
    ap.add_argument("-o", "--output", default=str(SPEED_REPORT))
    ap.add_argument("--readme", default=str(README), help="README whose block to rewrite ('' for none)")
    speed_report(ap.parse_args())


if __name__ == "__main__":
    main()
