"""``python -m engine verify plan.json``: run a plan on this GPU against an undivided reference.

The GPU modules are imported inside ``run``, so that parsing this command's options needs no CuPy.
"""

from __future__ import annotations

import sys

from ..errors import GPUUnavailableError
from ..fileio import shown
from .options import positive_int
from .progress import progress_bar


def add_arguments(p) -> None:
    p.add_argument("plan", help="plan JSON file (python -m engine plan ... -o plan.json)")
    p.add_argument("--repeats", type=positive_int, default=5)
    p.add_argument("-o", "--output", default="verify-report.json", help="JSON report to write")


def run(args) -> int:
    from ..gpu import available
    from ..plan import load_plan

    plan = load_plan(args.plan)  # a malformed plan is named before the GPU is looked for
    ok, why = available()
    if not ok:
        raise GPUUnavailableError(f"cannot verify {args.plan}: {why} (the plan itself is valid)")
    from ..gpu.report import report_table, write_report
    from ..gpu.verify import verify_plan

    report = verify_plan(
        plan, repeats=args.repeats, command="python -m engine " + " ".join(sys.argv[1:]), progress=progress_bar
    )
    write_report(report, args.output)
    print(report_table(report))
    print(f"report: {shown(args.output)}")
    return 0 if report["totals"]["all_passed"] else 1
