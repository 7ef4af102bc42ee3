"""benchmarks/reports/user-command-runs.md and README's block from the logs of profile commands run as a user runs them.

    python benchmarks/user_command_runs.py          # anywhere; reads only committed files

Some GPU calls ran ``python -m engine profile`` by their own scripts rather than through
benchmarks/profile_multigpu.py or benchmarks/profiling_speed.py (a Dask cluster started by hand, the pipeline
beside it). benchmarks/reports/user-command-runs.json lists them: each call's committed log, script and the
commands it timed. From each log this reads the command's wall clock (``LABEL: rc=N wall=S s``), its profile's
plan measurements (the summary line, in the order of the commands), whether the call's profiles hold the same rows
(its own comparison lines) and, where it kept them, the progress lines: the finish the ETA printed against the real
one, on the progress bar's clock (from its first draw, the first stored graph).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.profile_multigpu import PROGRESS  # noqa: E402
from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write, read_bounded  # noqa: E402

REPORTS = ROOT / "benchmarks" / "reports"
LISTING = REPORTS / "user-command-runs.json"
REPORT = REPORTS / "user-command-runs.md"

# ``LABEL: rc=N wall=S s``, or ``LABEL: rc=N start=T0 end=T1`` (epoch seconds)
WALL = re.compile(
    r"^(?P<label>[^\[\n]+?): rc=(?P<rc>-?\d+) (?:wall=(?P<wall>[\d.]+) s|start=(?P<t0>[\d.]+) end=(?P<t1>[\d.]+))$",
    re.M,
)
ROWS = re.compile(r"(\d+) plan measurements")
SAME = re.compile(r"^\S+ \d+ rows[;,] same (?:set )?as \S+: (True|False)", re.M)


def read_log(entry: dict) -> list[dict]:
    """The commands of one call, in the order they ran: label, exit status, wall, plan rows, progress lines."""
    text = (REPORTS / entry["log"]).read_text(errors="replace").replace("\r", "\n")
    walls = list(WALL.finditer(text))
    rows = [int(n) for n in ROWS.findall(text)]
    if len(rows) != len(walls):
        raise SystemExit(f"{entry['log']}: {len(walls)} commands but {len(rows)} profile summaries")
    out = []
    for i, m in enumerate(walls):
        if m["label"] not in entry["commands"]:
            raise SystemExit(f"{entry['log']}: command {m['label']!r} is not described in {LISTING.name}")
        after = text[m.end() : walls[i + 1].start() if i + 1 < len(walls) else len(text)]
        progress = [
            (int(n), int(t), float(s), int(mm) * 60 + int(ss) if mm else None)  # "ETA ?" before a first sample
            for n, t, s, mm, ss in PROGRESS.findall(after)
        ]
        out.append(
            {
                "label": m["label"],
                "what": entry["commands"][m["label"]],
                "rc": int(m["rc"]),
                "wall_s": float(m["wall"]) if m["wall"] else round(float(m["t1"]) - float(m["t0"]), 2),
                "rows": rows[i],
                "progress": progress,
            }
        )
    return out


def finish_s(entry: dict, label: str, progress: list[tuple]) -> float | None:
    """When the last graph was stored on the progress bar's clock: its own last line, else the command's per-graph
    timings (the last graph stored less the first)."""
    if progress and progress[-1][0] == progress[-1][1]:
        return progress[-1][2]
    if label in entry.get("per_graph", {}):
        path = REPORTS / entry["per_graph"][label]
        doc = json.loads(read_bounded(path, f"per-graph timings {path.name!r}"))
        stored = [g["start"] + g["seconds"] for g in doc["graphs"]]
        return max(stored) - min(stored)
    return None


def eta_errors(entry: dict, cmd: dict) -> dict | None:
    """The printed finish (elapsed + ETA) against the real one: at the first line with a tenth of the graphs
    stored, and the worst from there to the end (ETA lines have whole seconds)."""
    progress = [p for p in cmd["progress"] if p[3] is not None]
    end = finish_s(entry, cmd["label"], progress)
    later = [p for p in progress if p[0] * 10 >= p[1] and p[0] < p[1]]
    if not later or not end:
        return None
    err = [(p[2] + p[3]) / end - 1 for p in later]
    return {"at_tenth": err[0], "worst": max(err, key=abs), "finish_s": round(end, 1), "graphs": later[0][1]}


def load() -> list[tuple[dict, list[dict], bool | None]]:
    """(listing entry, its commands with their ETA errors, whether its profiles hold the same rows) per call."""
    out = []
    for entry in json.loads(LISTING.read_text())["runs"]:
        cmds = read_log(entry)
        for c in cmds:
            c["eta"] = eta_errors(entry, c)
        same = SAME.findall((REPORTS / entry["log"]).read_text(errors="replace"))
        out.append((entry, cmds, all(s == "True" for s in same) if same else None))
    return out


def pct(x: float) -> str:
    return f"{abs(x) * 100:.0f} % {'late' if x > 0 else 'early'}"


def speedups(entry: dict, cmds: list[dict]) -> list[tuple[dict, dict, float]]:
    """(one GPU, two GPUs, wall ratio) per pair the listing names."""
    by = {c["label"]: c for c in cmds}
    return [(by[a], by[b], by[a]["wall_s"] / by[b]["wall_s"]) for a, b in entry.get("speedups", [])]


def table(calls) -> list[str]:
    """One row per command, in the order the calls ran."""
    out = [
        "| call | code | host | command | wall | plan rows | printed finish after a tenth of the graphs | worst from "
        "there |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for entry, cmds, _ in calls:
        for c in cmds:
            e = c["eta"]
            tenth, worst = (
                (f"{pct(e['at_tenth'])} (real: {e['finish_s']} s)", pct(e["worst"])) if e else ("not kept", "-")
            )
            status = "" if c["rc"] == 0 else f" (exit {c['rc']})"
            out.append(
                f"| {entry['call']} | {entry['code']} | {entry['host']} | {c['what']} | "
                f"{c['wall_s']} s{status} | {c['rows']:,} | {tenth} | {worst} |"
            )
    return out


def ratio_text(entry: dict, cmds: list[dict]) -> str:
    return "; ".join(f"{a['what']} against {b['what']}: **{r:.2f}x**" for a, b, r in speedups(entry, cmds))


def render(calls) -> str:
    notes = []
    for entry, cmds, same in calls:
        ratios = ratio_text(entry, cmds)
        notes.append(
            f"- Call {entry['call']} ([script]({entry['script']}), [log]({entry['log']})): {entry['about']}"
            + (f" Speed-up by wall clock: {ratios}." if ratios else "")
            + (
                f" Its profiles hold {'the same' if same else '**not** the same'} (signature, micro-batch, plan, "
                "status) rows (the log's own comparison)."
                if same is not None
                else ""
            )
        )
    return f"""# Profile commands run as a user runs them

Written by `python benchmarks/user_command_runs.py` from the logs listed in
[user-command-runs.json](user-command-runs.json): GPU calls whose scripts ran `python -m engine profile`
themselves (a Dask cluster started by hand beside the pipeline) instead of `benchmarks/profile_multigpu.py`, whose
table ([profile-multigpu.md](profile-multigpu.md)) has only the runs that script made. Every command: ResNet-50
b64 TF32 NCHW, engine sweep, `powerOfTwo`, a cold cache, one run each, wall clock of the command. The printed
finish is the progress bar's elapsed time plus its ETA (whole seconds) against the real finish on the bar's
clock, which starts at its first draw (the first stored graph).

{chr(10).join(table(calls))}

{chr(10).join(notes)}
"""


def readme_block(calls) -> str:
    ratios = "; ".join(f"call {e['call']}: {ratio_text(e, cmds)}" for e, cmds, _ in calls if e.get("speedups"))
    return (
        "Profile commands run as a user runs them, by the GPU calls' own scripts (ResNet-50 b64 TF32 engine sweep, "
        "cold caches, one run each; [benchmarks/reports/user-command-runs.md]"
        "(benchmarks/reports/user-command-runs.md)):\n\n"
        + "\n".join(table(calls))
        + (f"\n\nTwo GPUs against one, {ratios} (issue 24's target: 1.9x)." if ratios else "")
    )


def main() -> int:
    calls = load()
    atomic_write(REPORT, render(calls))
    write_block(README, "user_command_runs", readme_block(calls))
    print(render(calls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
