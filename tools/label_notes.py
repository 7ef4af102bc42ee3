"""Relabel the cuDNN numerical notes of profiles from their own graphs (GPU host).

    python tools/label_notes.py assets/profiles/*.profile.json.gz [--per-graph] [--verify N] [--force]

The profiler once cached notes by plan name for a whole process, but one name (``eng25``) is a
different kernel in a BackwardData and a BackwardFilter graph, so rows disagreed. Here every
(signature, plan name) is labelled on a graph of that signature, by engine.gpu.graphs.numerical_notes,
and its notes are written to every row of that name in that signature.

Shortcut: a name is labelled once, on the graph of the smallest micro-batch that measured it, not on
each micro-batch's graph (2,937 graphs for the bundled profiles instead of 7,778). Notes are
attributes of the engine in the operation graph (CUDNN_ATTR_ENGINE_NUMERICAL_NOTE, which the frontend
reads from each engine configuration's engine), and the graphs of one signature differ only in N.
The shortcut is checked, not assumed: ``--verify N`` graphs spread over the profiles (each at its
signature's largest micro-batch) are labelled again on their own graph by building every plan; on a
disagreement that file is labelled per graph (``--per-graph`` does so for every file).

Only the column ``numerical_notes`` and the provenance of each file's JSON document change, every row is
kept (the file is read raw, not through engine.profile, whose filters may drop rows by their notes). Profiles
of another GPU or cuDNN are skipped; a file this tool already relabelled is skipped unless ``--force``, so
an interrupted run (or one out of ``--budget-s``) resumes. Each file is rewritten atomically, and only if
every one of its graphs was labelled.
"""

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from engine.fileio import atomic_write  # noqa: E402
from engine.gpu import runtime  # noqa: E402
from engine.gpu.graphs import label_graph, note_method, numerical_notes  # noqa: E402
from engine.kernels import KernelSignature  # noqa: E402

TOOL = "tools/label_notes.py"


def work(t, per_graph: bool) -> dict[tuple[str, int], list[str]]:
    """{(signature, micro-batch): plan names to label on that graph}."""
    if per_graph:
        return {(s, int(b)): list(dict.fromkeys(g.plan)) for (s, b), g in t.groupby(["signature", "micro_batch"])}
    first = t.groupby(["signature", "plan"], sort=False).micro_batch.min().reset_index()
    return {(s, int(b)): list(g.plan) for (s, b), g in first.groupby(["signature", "micro_batch"])}


def verify_groups(t, count: int) -> list[tuple[str, int]]:
    """``count`` (signature, largest micro-batch) graphs, signatures evenly spaced in sorted order."""
    sigs = sorted(t.signature.unique())
    step = max(len(sigs) / max(count, 1), 1.0)
    picked = [sigs[int(i * step)] for i in range(min(count, len(sigs)))]
    return [(s, int(t[t.signature == s].micro_batch.max())) for s in picked]


def label(t, ctx, per_graph: bool) -> tuple[list[str | None], int, int]:
    """(notes per row, None where its graph failed; graphs labelled; graphs failed)."""
    jobs = work(t, per_graph)
    labels: dict[tuple[str, int, str], str] = {}
    failed = 0
    for (key, b), names in jobs.items():
        try:
            notes = numerical_notes(KernelSignature.from_key(key, b), b, ctx, names)
        except Exception as err:
            failed += 1
            print(f"  FAILED {key} b={b}: {type(err).__name__}: {str(err)[:200]}", flush=True)
            continue
        labels.update({(key, b, n): "|".join(v) for n, v in notes.items()})
    if per_graph:
        return [labels.get((s, b, n)) for s, b, n in zip(t.signature, t.micro_batch, t.plan)], len(jobs), failed
    by_name = {(s, n): v for (s, _b, n), v in labels.items()}
    return [by_name.get((s, n)) for s, n in zip(t.signature, t.plan)], len(jobs), failed


def verify(t, ctx, new: list[str | None], count: int) -> tuple[int, int]:
    """(graphs verified, disagreements between ``new`` and labels built on each verified graph itself)."""
    bad = done = 0
    for key, b in verify_groups(t, count):
        rows = t[(t.signature == key) & (t.micro_batch == b)]
        names = list(dict.fromkeys(rows.plan))
        sig = KernelSignature.from_key(key, b)
        try:
            built = label_graph(sig, b, ctx, names, probe=False)
            probed = label_graph(sig, b, ctx, names, probe=True) if note_method() == "probe" else None
        except Exception as err:
            print(f"  not verified {key} b={b}: {type(err).__name__}: {str(err)[:200]}", flush=True)
            continue
        done += 1
        for i, name in zip(rows.index, rows.plan):
            want = "|".join(built[name])
            if new[i] != want:
                bad += 1
                print(
                    f"  DISAGREE {key} b={b} {name}: labelled {new[i]!r}, built on its own graph {want!r}"
                    + (f", probed there {'|'.join(probed[name])!r}" if probed else ""),
                    flush=True,
                )
    return done, bad


def relabel(path: str, ctx, here: dict, args, n_verify: int) -> bool:
    """Relabel one file in place; False if it was skipped or could not be labelled and verified."""
    t0 = time.perf_counter()
    raw = Path(path).read_bytes()
    gz = str(path).endswith(".gz")
    doc = json.loads(gzip.decompress(raw) if gz else raw)
    p = doc["provenance"]
    if (p.get("gpu"), p.get("cudnn_version")) != (here["gpu"], here["cudnn_version"]):
        print(f"skip {path}: measured on {p.get('gpu')} cuDNN {p.get('cudnn_version')}", flush=True)
        return False
    done = p.get("numerical_notes_labelled", {})
    if done.get("tool") == TOOL and "granularity" in done and not args.force:
        print(f"skip {path}: already relabelled {done}", flush=True)
        return False
    t = pd.DataFrame(doc["rows"], columns=doc["columns"])
    per_graph = args.per_graph
    new, graphs, failed = label(t, ctx, per_graph)
    t_label = time.perf_counter() - t0
    verified, bad = verify(t, ctx, new, n_verify)
    if bad and not per_graph:
        print(f"  {bad} disagreements: labelling {Path(path).name} per graph", flush=True)
        per_graph = True
        new, graphs, failed = label(t, ctx, per_graph)
        t_label = time.perf_counter() - t0
        verified, bad = verify(t, ctx, new, n_verify)
    if failed or bad or any(v is None for v in new):
        print(f"{Path(path).name}: not written: {failed} of {graphs} graphs failed, {bad} disagreements", flush=True)
        return False
    changed = int((t.numerical_notes != new).sum())
    col = doc["columns"].index("numerical_notes")
    for row, notes in zip(doc["rows"], new):
        row[col] = notes
    t["numerical_notes"] = new
    doc["provenance"] = dict(
        p,
        numerical_notes_labelled={
            "date": here["date"],
            "tool": TOOL,
            "cudnn_version": here["cudnn_version"],
            "frontend_version": here["frontend_version"],
            "method": note_method(),
            "granularity": "per (signature, micro_batch) graph"
            if per_graph
            else "per (signature, plan), on the graph of its smallest measured micro-batch",
            "graphs": graphs,
            "verified_graphs": verified,
        },
    )
    atomic_write(path, json.dumps(doc, separators=(",", ":")), gzip_suffix=True)
    nd = t.numerical_notes.str.contains("NONDETERMINISTIC").mean()
    tc = t.numerical_notes.str.contains("TENSOR_CORE").mean()
    print(
        f"{Path(path).name}: {graphs} graphs labelled in {t_label:.1f} s (method {note_method()}), {verified} "
        f"verified in {time.perf_counter() - t0 - t_label:.1f} s; {changed} of {len(t)} rows changed; rows with "
        f"TENSOR_CORE {tc:.0%}, NONDETERMINISTIC {nd:.0%}",
        flush=True,
    )
    return True


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("profiles", nargs="+")
    ap.add_argument("--per-graph", action="store_true", help="label every (signature, micro-batch) graph")
    ap.add_argument("--verify", type=int, default=24, help="graphs re-labelled by building, over all files")
    ap.add_argument("--force", action="store_true", help="relabel files this tool already relabelled")
    ap.add_argument("--budget-s", type=float, default=420, help="start no new file after this many seconds")
    args = ap.parse_args()
    ctx, here, t0 = runtime.context(), runtime.provenance(), time.perf_counter()
    per_file = -(-args.verify // len(args.profiles))
    written = 0
    for path in args.profiles:
        if time.perf_counter() - t0 > args.budget_s:
            print(f"skip {path}: out of time (--budget-s {args.budget_s:g}); rerun to resume", flush=True)
            continue
        try:
            written += relabel(path, ctx, here, args, per_file)
        except Exception as err:  # one unreadable file does not stop the others
            print(f"{path}: not written: {type(err).__name__}: {str(err)[:300]}", flush=True)
    print(f"{written} of {len(args.profiles)} files written in {time.perf_counter() - t0:.1f} s", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
