"""memory_training's figures: peak and step time predicted beside measured, and per plan tick."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.figures import pyplot, write_png  # noqa: E402
from benchmarks.memory_training_predict import STOCK, GiB, MODELS, POLICIES, _r  # noqa: E402


def plot(doc, nets, path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, max(1, len(nets)), figsize=(4.5 * max(1, len(nets)), 7), squeeze=False)
    for j, net in enumerate(nets):
        rows = [(p, _r(doc, "step", net, p, MODELS[net])) for p in POLICIES]
        rows = [(p, r) for p, r in rows if r and "error" not in r]
        ys = range(len(rows))
        for i, (what, pred, meas, unit) in enumerate(
            (
                ("peak", lambda r: r["predicted"]["peak"] / GiB, lambda r: r["peak"] / GiB, "GiB"),
                ("step", lambda r: r["predicted"]["iteration_ms"], lambda r: r["step_ms"], "ms"),
            )
        ):
            ax = axes[i][j]
            ax.barh([y - 0.2 for y in ys], [pred(r) for _, r in rows], height=0.4, color="#bbb", label="predicted")
            ax.barh([y + 0.2 for y in ys], [meas(r) for _, r in rows], height=0.4, color="#1f77b4", label="measured")
            ax.set_yticks(list(ys), [p for p, _ in rows])
            ax.invert_yaxis()
            ax.set_xlabel(unit)
            ax.set_title(f"{net} b{MODELS[net]}: {what}")
    axes[0][0].legend()
    fig.tight_layout()
    write_png(fig, path, dpi=90)


def plot_ticks(doc, nets, path: Path, variants=(STOCK, "vdnn-all-p", "sn-recompute")) -> None:
    """Per plan tick: the predicted total beside the measured peak of the traced step."""
    plt = pyplot()
    fig, axes = plt.subplots(
        len(variants), max(1, len(nets)), figsize=(5 * max(1, len(nets)), 2.6 * len(variants)), squeeze=False
    )
    for j, net in enumerate(nets):
        for i, variant in enumerate(variants):
            ax = axes[i][j]
            r = _r(doc, "step", net, variant, MODELS[net])
            ax.set_title(f"{net} b{MODELS[net]} {variant}", fontsize=9)
            if not r or "predicted_ticks" not in r or not r.get("memory_trace"):
                ax.text(0.5, 0.5, "not run", ha="center", transform=ax.transAxes)
                continue
            pred = [t[2] / GiB for t in r["predicted_ticks"]]
            meas = {t: pk / GiB for t, end, _a, pk in r["memory_trace"] if end == 1}
            ax.plot(range(len(pred)), pred, color="#999", label="predicted")
            ax.plot(sorted(meas), [meas[t] for t in sorted(meas)], ".", ms=3, color="#1f77b4", label="measured")
            ax.set_xlabel("tick", fontsize=8)
            ax.set_ylabel("GiB", fontsize=8)
    axes[0][0].legend(fontsize=8)
    fig.tight_layout()
    write_png(fig, path, dpi=80)
