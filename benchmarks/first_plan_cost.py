"""What timing cuDNN's first heuristic plan where it is runtime-compiled costs the profiler (engine.gpu.profiler.
build_graph, since 5799ddf): the same graphs' stored timings before and after, from two profile caches.

    python benchmarks/first_plan_cost.py extract OLD.sqlite NEW.sqlite -o benchmarks/reports/first-plan-cost.json
    python benchmarks/first_plan_cost.py report benchmarks/reports/first-plan-cost.json    # anywhere

``extract`` keeps the graphs the newer cache measured again because the older one had left that plan out (its
rank-0 row skipped as runtime-compiled), each with the seconds per step the profiler stored with it in both
caches. ``report`` writes the totals to benchmarks/reports/first-plan-cost.md. Build seconds are host time in the
pipeline's build processes, beside the GPU; timing seconds hold the GPU.
"""

from __future__ import annotations

import argparse
import json
import sqlite3
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.fileio import atomic_write  # noqa: E402
from engine.profile import RTC_NOT_PROFILED  # noqa: E402

STEPS = ("build", "timing", "buffers", "heuristics", "notes")


def _query(path: str, sql: str, *args) -> list[tuple]:
    """Rows of a read-only query on a profile cache."""
    db = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        return db.execute(sql, args).fetchall()
    finally:
        db.close()


def stored(path: str) -> dict[tuple[str, int], dict]:
    """{(signature, micro-batch): the timing stored with the graph} of a profile cache."""
    rows = _query(path, "SELECT signature, micro_batch, provenance FROM done")
    return {(s, b): json.loads(p)["timing"] for s, b, p in rows}


def left_out(path: str) -> set[tuple[str, int]]:
    """The graphs whose first heuristic plan the cache left out as runtime-compiled."""
    q = "SELECT signature, micro_batch FROM measurements WHERE heuristic_rank=0 AND reason=?"
    return set(_query(path, q, RTC_NOT_PROFILED))


def extract(args) -> None:
    old, new = stored(args.old), stored(args.new)
    keys = sorted((left_out(args.old) - left_out(args.new)) & new.keys())
    graphs = [
        {
            "signature": s,
            "micro_batch": b,
            **{w: {k: d[s, b]["split"].get(k, 0.0) for k in STEPS} for w, d in (("old", old), ("new", new))},
        }
        for s, b in keys
    ]
    doc = {
        "command": f"python benchmarks/first_plan_cost.py extract {args.old} {args.new} -o {args.output}",
        "source": args.source,
    }
    doc["graphs"] = graphs
    atomic_write(Path(args.output), json.dumps(doc, indent=1).encode())
    print(f"{len(graphs)} graphs -> {args.output}")


def report(args) -> None:
    doc = json.loads(Path(args.results).read_text())
    gs = doc["graphs"]
    lines = [
        "# Timing cuDNN's first plan where it is runtime-compiled: what it costs the profiler",
        "",
        f"<!-- generated: python benchmarks/first_plan_cost.py report {args.results}; do not edit -->",
        "",
        f"{doc['source']}. {len(gs)} graphs (`{doc['command']}`): those whose first heuristic plan the older cache "
        "had left out as "
        "runtime-compiled, measured again with it. Seconds the profiler stored with each graph, summed; build is "
        "host time in the pipeline's build processes (beside the GPU), timing holds the GPU.",
        "",
        "| step | before (s) | with the first plan (s) | more per graph (s) |",
        "|---|---|---|---|",
    ]
    for k in STEPS:
        old, new = (sum(g[w][k] for g in gs) for w in ("old", "new"))
        lines.append(f"| {k} | {old:.1f} | {new:.1f} | {(new - old) / len(gs):.3f} |")
    md = Path(args.results).with_suffix(".md")
    atomic_write(md, ("\n".join(lines) + "\n").encode())
    print(f"wrote {md}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("extract", help="the graphs measured again, from two caches")
    e.add_argument("old")
    e.add_argument("new")
    e.add_argument("-o", "--output", default="benchmarks/reports/first-plan-cost.json")
    e.add_argument("--source", default="", help="where the two caches come from (GPU, calls), for the report")
    r = sub.add_parser("report", help="the totals, from the JSON alone")
    r.add_argument("results")
    args = ap.parse_args()
    {"extract": extract, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
