"""The plan as text: the per-kernel table and totals ``python -m engine plan`` prints."""

from __future__ import annotations

from .plan import ALIGNMENT, Plan, PlanKernel
from .units import format_size


def _plans(k: PlanKernel) -> str:
    names = []
    for m in k.micro:
        if not names or names[-1] != m.plan:
            names.append(m.plan)
    return "+".join(names)


def plan_summary(plan: Plan) -> str:
    """A readable per-kernel table plus totals and the speed-up over undivided at the same memory."""
    wd_mode = plan.mode == "wd"
    synthetic = " [SYNTHETIC profile]" if plan.provenance.get("profile", {}).get("synthetic") else ""
    rule = (
        f"total workspace budget {format_size(plan.budget)} (WD)"
        if wd_mode
        else f"per-kernel workspace limit {format_size(plan.budget)} (WR)"
    )
    if plan.limits:
        rule += f", its own limit for {len(plan.limits)} of {len(plan.kernels)} kernels"
    limit_col = bool(plan.limits)
    lines = [f"{plan.network} b{plan.batch} {plan.precision} {plan.layout}, policy {plan.policy}, {rule}{synthetic}"]
    head = (
        ["kernel", "division", "plans", "time ms", "workspace"]
        + (["offset"] if wd_mode else [])
        + (["limit"] if limit_col else [])
        + ["undivided ms", "speed-up"]
    )
    rows = []
    for k in plan.kernels:
        row = [k.id, k.division, _plans(k), f"{k.time_ms:.4f}", format_size(k.workspace)]
        if wd_mode:
            row.append(format_size(k.offset) if k.offset else "0")
        if limit_col:
            row.append(format_size(plan.limit(k.id)))
        und = k.undivided_time_ms
        row += ["-" if und is None else f"{und:.4f}", "-" if und is None else f"{und / k.time_ms:.2f}x"]
        rows.append(row)
    t = plan.totals
    total = ["total", "", "", f"{t.time_ms:.4f}", format_size(t.workspace)] + (
        [format_size(plan.arena_size)] if wd_mode else []
    )
    total += [""] if limit_col else []
    total += [
        "-" if t.undivided_time_ms is None else f"{t.undivided_time_ms:.4f}",
        "-" if t.speedup is None else f"{t.speedup:.2f}x",
    ]
    rows.append(total)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    left = {0, 1, 2}
    fmt = lambda r: "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    lines += [fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows[:-1]]
    lines += [fmt(["-" * w for w in widths]), fmt(rows[-1]), ""]
    if wd_mode:
        lines.append(
            f"workspace: one arena of {format_size(plan.arena_size)} ({plan.arena_size} bytes), "
            f"{ALIGNMENT}-byte aligned segments; solver {plan.solver.get('name')} "
            f"({plan.solver.get('status')})"
        )
    else:
        lines.append(
            f"workspace: {format_size(t.workspace)} if every kernel has its own (as Caffe), "
            f"{format_size(t.max_workspace)} if all kernels share one"
        )
    if t.speedup is None:
        lines.append(
            "speed-up over undivided cuDNN at the same memory: none (undivided is infeasible there; see notes)"
        )
    else:
        lines.append(
            f"speed-up over undivided cuDNN at the same memory: {t.speedup:.3f}x "
            f"({t.undivided_time_ms:.4f} ms -> {t.time_ms:.4f} ms)"
        )
    lines.append(
        f"unlimited-workspace optimum: {t.unlimited_time_ms:.4f} ms using {format_size(t.unlimited_workspace)} in total"
    )
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
