"""Is leaving a slow plan at its warm-up exact? Two runs of one model compared graph by graph.

    python benchmarks/warm_up_check.py measure BEFORE.sqlite AFTER.sqlite --out DIR --about TEXT   # anywhere
    python benchmarks/warm_up_check.py report                                                   # anywhere

BEFORE is a profile cache written by a profiler that times every plan behind its warm-up; AFTER one written by
the profiler with engine.gpu.screen.left_at_warm_up, on the same GPU, the same model and options (a run cut off
at a time limit is fine: only the graphs both stored are compared). For every plan AFTER left at its warm-up,
``measure`` looks up BEFORE's time of that plan and of the plan it names: the rule was exact there if the left
plan is slower than the named one on BEFORE's times (so on no (workspace, time) front, as the named plan needs
no more workspace), and the ratio of AFTER's warm-up to BEFORE's timed run says how far the warm-up stood from
the plan's time (the rule assumes under 1.9x). It also sums the GPU milliseconds each run spent on the common
graphs' plans (per plan: its runs times its time) and each graph's own seconds (building and timing, not waiting
for the GPU), for the depthwise and grouped graphs apart. The JSON keeps every left plan's numbers;
``report`` writes benchmarks/reports/warm-up-check.md from the committed checks (CHECKS), one section each.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.profiling_speed import LEFT, grouped, own_seconds, plan_runs  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

CHECKS = ROOT / "benchmarks" / "reports" / "warm-up-check"  # one folder per check: warm-up-check.json, the script
REPORT = ROOT / "benchmarks" / "reports" / "warm-up-check.md"


def load(cache: Path) -> tuple[dict, dict]:
    """(rows by (signature, b) then plan, each graph's stored timing) of one profile cache."""
    with sqlite3.connect(f"file:{cache}?mode=ro", uri=True) as db:
        rows: dict = {}
        for sig, b, plan, ws, t, status, reason, repeats in db.execute(
            "SELECT signature, micro_batch, plan, workspace, time_ms, status, reason, repeats FROM measurements"
        ):
            rows.setdefault((sig, b), {})[plan] = dict(ws=ws, t=t, status=status, reason=reason, repeats=repeats)
        timing = {
            (sig, b): json.loads(prov or "{}").get("timing", {})
            for sig, b, prov in db.execute("SELECT signature, micro_batch, provenance FROM done")
        }
    return rows, timing


def gpu_ms(graph: dict) -> float:
    return sum(r["t"] * plan_runs(r["repeats"], r["reason"]) for r in graph.values() if r["status"] == "ok")


def measure(before: Path, after: Path) -> dict:
    rb, tb = load(before)
    ra, ta = load(after)
    common = sorted(set(tb) & set(ta))
    left = []
    for key in common:
        for plan, r in ra[key].items():
            if r["status"] != "ok" or LEFT not in r["reason"]:
                continue
            named = r["reason"].split()[3]
            old, old_named = rb[key].get(plan), rb[key].get(named)
            left.append(
                dict(
                    signature=key[0],
                    micro_batch=key[1],
                    plan=plan,
                    named=named,
                    warm_up_ms=r["t"],
                    before_ms=old["t"] if old and old["status"] == "ok" else None,
                    before_named_ms=old_named["t"] if old_named and old_named["status"] == "ok" else None,
                )
            )
    judged = [e for e in left if e["before_ms"] is not None and e["before_named_ms"] is not None]
    ratios = sorted(e["warm_up_ms"] / e["before_ms"] for e in judged)
    margins = sorted(e["before_ms"] / e["before_named_ms"] for e in judged)
    groups = [k for k in common if grouped(k[0])]

    def side(rows, timing, keys):
        own = [own_seconds(timing[k]) for k in keys]
        return dict(
            graphs=len(keys),
            gpu_s=round(sum(gpu_ms(rows[k]) for k in keys) / 1000, 3),
            own_median_s=round(statistics.median(own), 3) if own else None,
        )

    return dict(
        graphs=len(common),
        left=len(left),
        judged=len(judged),
        exact=sum(m > 1.0 for m in margins),
        before_over_named=dict(min=margins[0], median=statistics.median(margins)) if margins else None,
        warm_up_over_before=dict(min=ratios[0], median=statistics.median(ratios), max=ratios[-1]) if ratios else None,
        before=dict(all=side(rb, tb, common), grouped=side(rb, tb, groups)),
        after=dict(all=side(ra, ta, common), grouped=side(ra, ta, groups)),
        plans=left,
    )


def section(name: str, data: dict) -> list[str]:
    b = data["before"]
    lines = [
        f"## {name}",
        "",
        data["about"],
        "",
        *([f"What ran: {data['change']}", ""] if data.get("change") else []),
        f"- graphs both runs stored: {data['graphs']} ({b['grouped']['graphs']} depthwise or grouped)",
        f"- plans the later run left at their warm-up: {data['left']:,}; with both plans timed in the earlier run: "
        f"{data['judged']:,}, of which slower than the plan they name on the earlier run's times (the rule exact): "
        f"**{data['exact']:,}**",
    ]
    if data["before_over_named"]:
        m, r = data["before_over_named"], data["warm_up_over_before"]
        lines += [
            f"- on the earlier run's times, a left plan over the plan it names: least {m['min']:.2f}x, median "
            f"{m['median']:.1f}x",
            f"- a left plan's warm-up over its timed run in the earlier run: {r['min']:.3f}x to {r['max']:.3f}x "
            f"(median {r['median']:.3f}x; the rule assumes under 1.9x)",
        ]
    a = data["after"]
    return [
        *lines,
        "",
        "| graphs | GPU s of plan runs, before | after | own s per graph (median), before | after |",
        "|---|---|---|---|---|",
        *(
            f"| {name} ({b[k]['graphs']}) | {b[k]['gpu_s']} | {a[k]['gpu_s']} | {b[k]['own_median_s']} | "
            f"{a[k]['own_median_s']} |"
            for k, name in (("all", "all"), ("grouped", "depthwise and grouped"))
        ),
        "",
    ]


def report(checks: list[tuple[str, dict]]) -> str:
    head = [
        "# Leaving slow plans at their warm-up: one model profiled before and after",
        "",
        "<!-- generated: python benchmarks/warm_up_check.py report; do not edit -->",
        "",
        "Method: benchmarks/warm_up_check.py's docstring; the rule: engine.gpu.screen.left_at_warm_up. GPU s: per "
        "timed plan, its runs (warm-up, timed run, repeats; a left plan its warm-up alone) times its stored time, "
        "over the graphs both runs stored. Own s: a graph's building and timing, without waiting for the GPU. Each "
        "check's JSON (every left plan's numbers) and the script that ran it are in its folder of "
        "[warm-up-check/](warm-up-check/).",
        "",
    ]
    return "\n".join(head + [ln for name, data in checks for ln in section(name, data)])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("before")
    m.add_argument("after")
    m.add_argument("--out", required=True)
    m.add_argument("--about", required=True, help="GPU, versions, code of each run, the command")
    sub.add_parser("report")
    args = ap.parse_args()
    if args.cmd == "measure":
        data = dict(about=args.about, **measure(Path(args.before), Path(args.after)))
        out = Path(args.out)
        out.mkdir(parents=True, exist_ok=True)
        atomic_write(out / "warm-up-check.json", json.dumps(data, indent=1))
        atomic_write(out / "warm-up-check.md", report([(out.name, data)]))
    else:
        checks = [(d.name, json.loads((d / "warm-up-check.json").read_text())) for d in sorted(CHECKS.iterdir())]
        atomic_write(REPORT, report(checks))
        print(f"wrote {REPORT}")


if __name__ == "__main__":
    main()
