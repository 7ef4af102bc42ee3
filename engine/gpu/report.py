"""Verification reports: the printed table and the JSON file (no GPU imports, so reports can be re-read anywhere)."""

from __future__ import annotations

import json

from ..fileio import atomic_write


def division(sizes: list[int]) -> str:
    """``8x32`` for equal micro-batches, ``96+96+64`` otherwise."""
    return f"{len(sizes)}x{sizes[0]}" if len(set(sizes)) == 1 else "+".join(str(s) for s in sizes)


def report_table(report: dict) -> str:
    lines = [f"{'kernel':<16} {'division':<14} {'pred ms':>9} {'meas ms':>9} {'ratio':>6} {'rel L2':>9} {'tol':>7}  ok"]
    for r in report["kernels"]:
        lines.append(
            f"{r['id']:<16} {r['division']:<14} {r['predicted_ms']:9.3f} {r['measured_ms']:9.3f} "
            f"{r['ratio']:6.2f} {r['rel_l2']:9.2e} {r['tolerance']:7.0e}  {'yes' if r['passed'] else 'NO'}"
        )
    t = report["totals"]
    lines.append(
        f"{'total':<16} {'':<14} {t['predicted_ms']:9.3f} {t['measured_ms']:9.3f} {t['ratio']:6.2f}"
        f"   {'all passed' if t['all_passed'] else 'FAILED: ' + ', '.join(t['failed'])}"
    )
    return "\n".join(lines)


def write_report(report: dict, path) -> None:
    atomic_write(path, json.dumps(report, indent=1, default=float), what="verify report")
