"""Optimizer benchmark: how long the set DP, the WD ILP and the exact network front take.

    python benchmarks/optimizer.py [--profile PATH] [--out benchmarks/reports/optimizer.md]

(with the bundled profiles it also rewrites README's generated optimizer block)

For ResNet-50 at batch 32 and AlexNet at batch 256 it reports the number of kernels, the ILP's 0-1
variables, the time of ``wd`` (reduction, build and solve; medians over several budgets and repeats,
cold and warm started), the same ILP handed to HiGHS as written (Eq. 1-4, the baseline ``wd``
improves on), the front's size and time, and the DP time. Plans come from the bundled profiles
(assets/profiles) or the ``--profile`` files that measured all of a network's kernels, preferably the
one recorded for that network, batch and policy; a network no bundled profile covers falls back to
engine/testing/synthetic.py, a made-up model, and the report says SYNTHETIC at the top
(``--synthetic`` forces that for all).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import pulp

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme import README, write_block  # noqa: E402
from engine.errors import EngineError, UnknownNetworkError  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402
from engine.optimize import MicroConfig, desirable_set, network_front, wd, wd_problem  # noqa: E402
from engine.policies import batch_sizes  # noqa: E402
from engine.profile import Profile, bundled_profiles, resolve_profile  # noqa: E402
from engine.units import format_size  # noqa: E402
from engine.zoo import get_network  # noqa: E402

NETWORKS = (("resnet50", 32), ("alexnet", 256))
FRACTIONS = (0.01, 0.05, 0.2, 0.5, 0.9)  # ILP budgets: min + f * (max - min) of the network front
REPEATS = 3
SWEEP = tuple(np.linspace(0, 1, 21))  # a denser sweep, once per budget


def kernel_sets(profile: Profile, net, precision: str, layout: str, policy: str):
    """One desirable set per kernel (repeated kernels share the list), and the DP time per unique signature."""
    sizes = batch_sizes(policy, net.batch)
    by_key, dp_s = {}, {}
    sets = []
    for kernel in net.kernels(precision, layout):
        key = kernel.signature.key
        if key not in by_key:
            cands = profile.candidates(key, sizes)
            if not cands:
                raise EngineError(f"profile has no measurements for {key} ({kernel.id} of {net.name})")
            start = time.perf_counter()
            by_key[key] = desirable_set(cands, net.batch)
            dp_s[key] = time.perf_counter() - start
        sets.append(by_key[key])
    return sets, dp_s


def literal_ilp(sets, budget: int) -> tuple[float, float]:
    """(HiGHS run() seconds, optimum) of Eq. 1-4 as written: a 0-1 x_kc per kernel and configuration,
    one row per kernel, the workspace row in MiB, and the options ``wd`` used before it aggregated
    and reduced the model (gap and tolerances 1e-9, HiGHS's defaults otherwise)."""
    import highspy

    h = highspy.Highs()
    for key, value in dict(
        output_flag=False,
        mip_rel_gap=1e-9,
        mip_abs_gap=1e-9,
        mip_feasibility_tolerance=1e-9,
        primal_feasibility_tolerance=1e-9,
        time_limit=10.0,
    ).items():
        h.setOptionValue(key, value)
    cost = np.array([c.time_ms for s in sets for c in s])
    ws = np.array([c.workspace / 2**20 for s in sets for c in s])
    n, k = len(cost), len(sets)
    h.addCols(n, cost, np.zeros(n), np.ones(n), 0, np.zeros(0, np.int32), np.zeros(0, np.int32), np.zeros(0))
    h.changeColsIntegrality(
        n, np.arange(n, dtype=np.int32), np.full(n, highspy.HighsVarType.kInteger.value, dtype=np.uint8)
    )
    starts = np.append(np.cumsum([0] + [len(s) for s in sets])[:-1], n)
    h.addRows(
        k + 1,
        np.append(np.ones(k), -highspy.kHighsInf),
        np.append(np.ones(k), budget / 2**20),
        2 * n,
        starts.astype(np.int32),
        np.append(np.arange(n), np.arange(n)).astype(np.int32),
        np.append(np.ones(n), ws),
    )
    start = time.perf_counter()
    h.run()
    return time.perf_counter() - start, h.getInfo().objective_function_value


def bench_network(profile: Profile, name: str, batch: int, precision: str, layout: str, policy: str) -> dict:
    net = get_network(name, batch)
    sets, dp_s = kernel_sets(profile, net, precision, layout, policy)
    front_s = []
    for _ in range(5):
        start = time.perf_counter()
        front = network_front(sets)
        front_s.append(time.perf_counter() - start)
    lo, hi = int(front.workspace[0]), int(front.workspace[-1])
    budgets = [lo + int(f * (hi - lo)) for f in FRACTIONS]
    cold, warm, literal, call_s, query_s, statuses = [], [], [], [], [], {}
    worst_gap = worst_literal_gap = 0.0
    incumbent_optimal = 0

    def gap(t: float, i: int) -> float:
        return abs(t - front.time_ms[i]) / front.time_ms[i]

    for budget in budgets:
        start = time.perf_counter()
        i = front.at_budget(budget)
        front.choice(i)
        query_s.append(time.perf_counter() - start)
        for _ in range(REPEATS):
            start = time.perf_counter()
            r = wd(sets, budget)
            call_s.append(time.perf_counter() - start)
            cold.append(r)
            statuses[r.status] = statuses.get(r.status, 0) + 1
            worst_gap = max(worst_gap, gap(r.time_ms, i))
            warm.append(wd(sets, budget, warm_start=front.choice(i)))
            seconds, optimum = literal_ilp(sets, budget)
            literal.append(seconds)
            worst_literal_gap = max(worst_literal_gap, gap(optimum, i))
    sweep, sweep_literal = [], []
    for f in SWEEP:
        budget = lo + int(f * (hi - lo))
        i = front.at_budget(budget)
        r = wd(sets, budget)
        worst_gap = max(worst_gap, gap(r.time_ms, i))
        sweep.append(r.solve_time_s)
        seconds, optimum = literal_ilp(sets, budget)
        worst_literal_gap = max(worst_literal_gap, gap(optimum, i))
        sweep_literal.append(seconds)
        incumbent_optimal += gap(pulp.value(wd_problem(sets, budget).objective), i) < 1e-12
    per_budget = [slice(k * REPEATS, (k + 1) * REPEATS) for k in range(len(budgets))]
    return dict(
        network=name,
        batch=batch,
        kernels=len(sets),
        unique=len(dp_s),
        variables=cold[0].n_variables,
        largest_set=max(len(s) for s in sets),
        dp_total_s=sum(dp_s.values()),
        dp_max_s=max(dp_s.values()),
        front_size=len(front),
        front_median_s=statistics.median(front_s),
        front_min_s=min(front_s),
        query_median_s=statistics.median(query_s),
        budgets=budgets,
        solver_vars=[r.n_solver_variables for r in cold],
        literal_median_s=statistics.median(literal),
        literal_max_s=max(literal),
        literal_per_budget_s=[statistics.median(literal[k]) for k in per_budget],
        reduce_median_s=statistics.median(r.reduce_time_s for r in cold),
        build_median_s=statistics.median(r.build_time_s for r in cold),
        solve_median_s=statistics.median(r.solve_time_s for r in cold),
        solve_max_s=max(r.solve_time_s for r in cold),
        solve_per_budget_s=[statistics.median(r.solve_time_s for r in cold[k]) for k in per_budget],
        call_median_s=statistics.median(call_s),
        call_max_s=max(call_s),
        warm_solve_median_s=statistics.median(r.solve_time_s for r in warm),
        sweep=sweep,
        sweep_literal=sweep_literal,
        incumbent_optimal=incumbent_optimal,
        solver=cold[0].solver,
        statuses=statuses,
        worst_gap=worst_gap,
        worst_literal_gap=worst_literal_gap,
    )


def bench_dp_stress() -> dict:
    """The brief's DP bound: B=256, policy all (sizes 1..256), 40 SYNTHETIC plans per size."""
    rng = np.random.default_rng(0)
    ws_per = np.sort(rng.uniform(0, 1, 40)) ** 3 * 2e6
    speed = 1 + 20 * np.sqrt(ws_per / 2e6)
    overhead = rng.uniform(0.005, 0.05, 40)
    cands = {
        b: [
            MicroConfig(
                b,
                f"p{i}",
                float(overhead[i] + b / speed[i] * rng.uniform(0.8, 1.25)),
                int(ws_per[i] * b * rng.uniform(0.9, 1.1)),
            )
            for i in range(40)
        ]
        for b in range(1, 257)
    }
    times, size = [], 0
    for _ in range(5):
        start = time.perf_counter()
        size = len(desirable_set(cands, 256))
        times.append(time.perf_counter() - start)
    return dict(median_s=statistics.median(times), min_s=min(times), size=size)


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f} ms"


def render(results: list[dict], missing: list[str], stress: dict, meta: dict) -> str:
    lines = []
    synthetic = [f"{r['network']} b{r['batch']}" for r in results if r["synthetic"]]
    if synthetic:
        lines += [
            f"# Optimizer benchmark — SYNTHETIC PROFILE for {', '.join(synthetic)}",
            "",
            "> **SYNTHETIC.** For the networks named above the plans' times and workspaces come from",
            "> `engine/testing/synthetic.py`, a made-up model (4 fake plans per kernel and size), not from cuDNN.",
            "> Their numbers time the optimizers on plausible shapes only.",
            "",
        ]
    else:
        lines += ["# Optimizer benchmark", ""]
    lines += [
        f"- precision {meta['precision']}, layout {meta['layout']}, batch-size policy `{meta['policy']}`",
        f"- machine: {meta['machine']}; load average before / after the run {meta['load']} / "
        f"{meta['load_after']} (a shared machine: timings vary by about +-30 % between runs, more under load)",
        f"- solver: PuLP {meta['pulp']} + HiGHS {meta['highs']}; ILP budgets = min + f x (max - min) of the "
        f"network front, f in {', '.join(str(f) for f in FRACTIONS)}, {REPEATS} repeats each; the sweep: "
        f"{len(SWEEP)} budgets, f = 0, 0.05, ..., 1, once each",
        f"- command: `{meta['command']}`",
        "",
    ]
    for r in results:
        lines.append(f"- {r['network']} b{r['batch']} profile: {r['profile']}")

    def spread(xs: list[float]) -> str:
        return f"{ms(statistics.median(xs))} / {ms(float(np.percentile(xs, 90)))} / {ms(max(xs))}"

    lines += [
        "",
        "| | " + " | ".join(f"{r['network']} b{r['batch']}" for r in results) + " |",
        "|---|" + "---|" * len(results),
    ]
    rows = [
        ("kernels (unique signatures)", lambda r: f"{r['kernels']} ({r['unique']})"),
        ("ILP 0-1 variables, Eq. 1-4 (largest desirable set)", lambda r: f"{r['variables']} ({r['largest_set']})"),
        ("DP: all unique kernels / slowest kernel", lambda r: f"{ms(r['dp_total_s'])} / {ms(r['dp_max_s'])}"),
        ("network front: points", lambda r: str(r["front_size"])),
        ("network front: time, median (min) of 5", lambda r: f"{ms(r['front_median_s'])} ({ms(r['front_min_s'])})"),
        ("network front: one budget's answer (at_budget + choice), median", lambda r: ms(r["query_median_s"])),
        (
            "Eq. 1-4 as written, HiGHS: solve, median (max)",
            lambda r: f"{ms(r['literal_median_s'])} ({ms(r['literal_max_s'])})",
        ),
        (
            "Eq. 1-4 as written: solve per budget, median of repeats",
            lambda r: ", ".join(f"{format_size(b)}: {ms(s)}" for b, s in zip(r["budgets"], r["literal_per_budget_s"])),
        ),
        (
            "wd: integer variables solved, median (max)",
            lambda r: f"{statistics.median(r['solver_vars']):.0f} ({max(r['solver_vars'])})",
        ),
        ("wd: reduction (groups, bound, incumbent, fixing), median", lambda r: ms(r["reduce_median_s"])),
        ("wd: build (PuLP model + load into HiGHS), median", lambda r: ms(r["build_median_s"])),
        ("**wd: ILP solve, cold, median (max)**", lambda r: f"**{ms(r['solve_median_s'])}** ({ms(r['solve_max_s'])})"),
        (
            "wd: ILP solve per budget, median of repeats",
            lambda r: ", ".join(f"{format_size(b)}: {ms(s)}" for b, s in zip(r["budgets"], r["solve_per_budget_s"])),
        ),
        ("wd: whole call, median (max)", lambda r: f"{ms(r['call_median_s'])} ({ms(r['call_max_s'])})"),
        ("wd: ILP solve, the front's choice as incumbent (warm_start), median", lambda r: ms(r["warm_solve_median_s"])),
        ("sweep, solve median / p90 / max: Eq. 1-4 as written", lambda r: spread(r["sweep_literal"])),
        ("sweep, solve median / p90 / max: wd", lambda r: spread(r["sweep"])),
        (
            "sweep: budgets where wd's incumbent was already optimal",
            lambda r: f"{r['incumbent_optimal']} of {len(SWEEP)}",
        ),
        ("wd status counts", lambda r: ", ".join(f"{k} {v}" for k, v in r["statuses"].items())),
        (
            "largest relative gap to the front: wd / Eq. 1-4 as written",
            lambda r: f"{r['worst_gap']:.1e} / {r['worst_literal_gap']:.1e}",
        ),
    ]
    for label, fn in rows:
        lines.append(f"| {label} | " + " | ".join(fn(r) for r in results) + " |")
    lines.append("")
    lines += [f"- {m}" for m in missing]
    lines += [
        "",
        f"DP stress (SYNTHETIC, independent of any profile): B=256, policy `all`, 40 plans per size: "
        f"desirable set of {stress['size']} configurations in {ms(stress['median_s'])} median "
        f"({ms(stress['min_s'])} min) of 5.",
        "",
        "Solve time is HiGHS's own `run()` (presolve, LP, branch and bound). `wd` first groups kernels with "
        "identical sets, bounds the optimum (Lagrange), builds an incumbent (greedy fill, then a dynamic "
        "program over the kernels left free) and fixes what the bound excludes, then hands HiGHS the rest "
        "(engine/optimize/wd.py, module docstring); its reduction and build times are listed apart, and the "
        "whole call includes them. Where the incumbent is already optimal, HiGHS's part is the proof. The "
        "front is computed once per network and then answers every budget by a binary search; the ILP is "
        "solved once per budget.",
        "",
    ]
    return "\n".join(lines)


def readme_block(results: list[dict]) -> str:
    """README's optimizer figures: the first network's (ResNet-50 b32) ILP and front."""
    r = results[0]
    return (
        f"- Optimizers (CPU, {r['network']} b{r['batch']} on its bundled profile): WD ILP solve "
        f"{ms(r['solve_median_s'])} median ({r['variables']} 0-1 variables in the paper's formulation; identical "
        f"kernels are aggregated and variables fixed by reduced cost, exactly), the exact network front of "
        f"{r['front_size']:,} points in {ms(r['front_median_s'])} (over the desirable sets as measured; `python -m "
        f"engine front` and the dashboard align each workspace to 256 bytes, as a WD arena does, which merges some "
        f"points) ([benchmarks/reports/optimizer.md](benchmarks/reports/optimizer.md))."
    )


def pick_profile(profiles: list[Profile], net, precision: str, layout: str, policy: str) -> Profile | None:
    """A profile that measured every kernel of ``net`` (in this precision and layout): preferably one
    recorded for this network, batch and policy, else the first."""
    keys = {k.signature.key for k in net.kernels(precision, layout)}
    covering = [p for p in profiles if all(p.has(key) for key in keys)]
    wanted = dict(name=net.name, batch=net.batch, precision=precision, layout=layout, policy=policy)
    recorded = [p for p in covering if any(all(n.get(k) == v for k, v in wanted.items()) for n in p.networks)]
    return (recorded or covering or [None])[0]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        help="profile file or bundled profile name; repeat for several networks "
        "(default: the bundled profiles, SYNTHETIC where none covers a network)",
    )
    parser.add_argument("--synthetic", action="store_true", help="use engine/testing/synthetic.py for every network")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "reports" / "optimizer.md"))
    parser.add_argument("--precision", default="tf32")
    parser.add_argument("--layout", default="NCHW")
    parser.add_argument("--policy", default="powerOfTwo")
    args = parser.parse_args(argv)
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    if args.synthetic:
        profiles = []
    elif args.profile:
        profiles = [Profile.load(resolve_profile(p)) for p in args.profile]
    else:
        profiles = [Profile.load(p) for p in bundled_profiles().values()]
    results, missing = [], []
    for name, batch in NETWORKS:
        try:
            net = get_network(name, batch)
        except UnknownNetworkError:
            missing.append(f"{name} b{batch}: not in the network zoo of this checkout")
            continue
        prof = pick_profile(profiles, net, args.precision, args.layout, args.policy)
        if prof is None:
            if args.profile:
                missing.append(f"{name} b{batch}: no given profile measured all its kernels")
                continue
            from engine.testing.synthetic import synthetic_profile

            prof = synthetic_profile(name, batch, args.policy, args.precision, args.layout)
        result = bench_network(prof, name, batch, args.precision, args.layout, args.policy)
        result["profile"] = (
            "SYNTHETIC (engine/testing/synthetic.py)"
            if prof.synthetic and not prof.source
            else f"{'SYNTHETIC ' if prof.synthetic else ''}{Path(prof.source).name}: {prof.describe()}"
        )
        result["synthetic"] = prof.synthetic
        results.append(result)
        print(f"{name} b{batch}: done", file=sys.stderr)
    import highspy

    meta = dict(
        precision=args.precision,
        layout=args.layout,
        policy=args.policy,
        machine=f"{platform.processor() or platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}",
        load=load,
        load_after=", ".join(f"{x:.2f}" for x in os.getloadavg()),
        pulp=pulp.__version__,
        highs=highspy.Highs().version(),
        command="python benchmarks/optimizer.py"
        + "".join(f" --profile {p}" for p in args.profile)
        + (" --synthetic" if args.synthetic else ""),
    )
    text = render(results, missing, bench_dp_stress(), meta)
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    atomic_write(out, text)
    if not (args.profile or args.synthetic or any(r["synthetic"] for r in results)):  # the committed configuration
        write_block(README, "optimizer", readme_block(results))
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
