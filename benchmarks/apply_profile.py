"""The table of benchmarks/reports/torch_training-h200/apply-profile.md, from the cProfile logs beside it.

    python benchmarks/apply_profile.py    # rewrites the table's block from call*-applyprof-*.log

Each log is one run of apply-profile.py.txt on a GPU host: ``apply_plan`` twice in one process under cProfile.
The table gives, per log, both apply_plan times and the cumulative seconds of the parts of the first one.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme import write_block  # noqa: E402

FOLDER = ROOT / "benchmarks" / "reports" / "torch_training-h200"
REPORT = FOLDER / "apply-profile.md"
RUNS = (  # (call, code, what it ran): the code each call ran is in its call*-env.txt
    ("28b", "eae207e, before", "28"),
    ("29", "cb4cacb, forward without autotuning", "29"),
    ("30", "6b06932, forward on fake tensors", "30"),
)
PARTS = ("(conv_calls)", "(_build_plan_at)", "library.py:1080(register)")  # forward, cuDNN builds, op registration


def cumulative(log: str, where: str) -> str | None:
    """cProfile's cumulative seconds of the entry ending in ``where`` (ncalls tottime percall cumtime percall)."""
    line = next((x for x in log.splitlines() if x.endswith(where)), None)
    return line.split()[3] if line else None


def rows() -> list[str]:
    out = []
    for call, code, stem in RUNS:
        for log_path in sorted(FOLDER.glob(f"call{stem}-applyprof-*.log")):
            model = log_path.stem.split("-applyprof-")[1]
            log = log_path.read_text()
            first, second = re.findall(r"apply_plan round \d \(same process\): ([\d.]+) s", log)
            forward, builds, register = (cumulative(log.split("apply_plan round 2")[0], p) for p in PARTS)
            forward = forward or "below 0.75 (not among the 30 largest)"
            out.append(f"| {call} | {code} | {model} | {first} | {forward} | {builds} | {register} | {second} |")
    return out


def table() -> str:
    return "\n".join(
        [
            "| call | code | model | first | shape-check forward | cuDNN plan builds | op registration | second |",
            "|---|---|---|---|---|---|---|---|",
            *rows(),
        ]
    )


if __name__ == "__main__":
    write_block(REPORT, "apply_profile", table())
    print(f"wrote the table of {REPORT}")
