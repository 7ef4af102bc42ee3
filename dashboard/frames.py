"""Tidy frames of one plan for the views: the plan table, the timeline (Fig. 3), the workspace division
(Fig. 14) and a kernel's desirable set (Fig. 8). Imports no Panel."""

from __future__ import annotations

import numpy as np
import pandas as pd

from engine.kernels import KernelKind
from engine.units import MiB

from .analysis import PolicySets
from .plans import Choice, configurations

KIND_ORDER = ("F", "BD", "BF")
KIND_NAMES = {k.short: k.value for k in KernelKind}

PLAN_COLUMNS = ["kernel", "layer", "kind", "division", "engines", "time_ms", "baseline_ms", "workspace_mib", "plans"]


def plan_frame_columns() -> pd.DataFrame:
    return pd.DataFrame(columns=PLAN_COLUMNS)


def plan_frame(ps: PolicySets, choice: Choice) -> pd.DataFrame:
    """One row per kernel (network order): division, plans, engines, time, workspace, and the undivided
    baseline's time at the same memory (the plan's own, NaN where it has none)."""
    if not choice.feasible:
        return plan_frame_columns()
    infos = [ps.info(k, j) for k, j in enumerate(choice.index)]
    return pd.DataFrame(
        {
            "kernel": [k.id for k in ps.kernels],
            "layer": [k.layer for k in ps.kernels],
            "kind": [k.kind.short for k in ps.kernels],
            "division": [i.division for i in infos],
            "plans": [i.plans for i in infos],
            "engines": [i.engines for i in infos],
            "time_ms": np.array([t[j] for t, j in zip(ps.t, choice.index)], dtype=float),
            "workspace_mib": np.array([w[j] for w, j in zip(ps.ws, choice.index)], dtype=float) / MiB,
            "baseline_ms": np.array(
                [np.nan if k.undivided_time_ms is None else k.undivided_time_ms for k in choice.plan.kernels],
                dtype=float,
            ),
        },
        columns=PLAN_COLUMNS,
    )


TIMELINE_COLUMNS = [
    "lane",
    "layer",
    "row",
    "kernel",
    "kind",
    "piece",
    "batch",
    "plan",
    "engine",
    "start_ms",
    "end_ms",
    "duration_ms",
]


def timeline_frame(ps: PolicySets, choice: Choice, measured: dict[str, float] | None = None) -> pd.DataFrame:
    """Micro-batch pieces in execution order on per-layer lanes (Fig. 3): predicted pieces back to back;
    with a verification report, one measured bar per kernel on the layer's "measured" lane."""
    if not choice.feasible:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    order = ps.order
    infos = [ps.info(k, choice.index[k]) for k in order]
    counts = [len(i.ms) for i in infos]
    ms = np.concatenate([i.ms for i in infos])
    end = np.cumsum(ms)

    def rep(values):
        return [v for v, c in zip(values, counts) for _ in range(c)]

    kernels = [ps.kernels[k] for k in order]
    layers = rep([k.layer for k in kernels])
    cols = {
        "lane": layers,
        "layer": layers,
        "row": ["predicted"] * len(ms),
        "kernel": rep([k.id for k in kernels]),
        "kind": rep([k.kind.short for k in kernels]),
        "piece": [p for i in infos for p in i.piece],
        "batch": np.concatenate([i.batch for i in infos]),
        "plan": [p for i in infos for p in i.plan],
        "engine": [e for i in infos for e in i.engine],
        "start_ms": end - ms,
        "end_ms": end,
        "duration_ms": ms,
    }
    frame = pd.DataFrame(cols, columns=TIMELINE_COLUMNS)
    if not measured:
        return frame
    rows, clock = [], 0.0
    for k, info in zip(kernels, infos):
        dt = float(measured.get(k.id, np.nan))
        if np.isnan(dt):
            continue
        rows.append(
            (
                f"{k.layer} (measured)",
                k.layer,
                "measured",
                k.id,
                k.kind.short,
                "whole kernel",
                int(info.batch.sum()),
                info.plans,
                "measured",
                clock,
                clock + dt,
                dt,
            )
        )
        clock += dt
    return pd.concat([frame, pd.DataFrame(rows, columns=TIMELINE_COLUMNS)], ignore_index=True)


def workspace_frame(ps: PolicySets, wr: Choice, wd: Choice) -> pd.DataFrame:
    """Fig. 14: every kernel's workspace (MiB) per layer and direction, WR and WD at the same total."""
    layers = list(dict.fromkeys(k.layer for k in ps.kernels))
    rows = []
    for choice in (wr, wd):
        ws = {k.id: 0.0 for k in ps.kernels}
        if choice.feasible:
            for kernel, conf in zip(ps.kernels, configurations(ps, choice)):
                ws[kernel.id] = conf.workspace / MiB
        for layer in layers:
            rows.append(
                {
                    "layer": layer,
                    "mode": choice.mode,
                    "feasible": choice.feasible,
                    **{kind: ws.get(f"{layer}:{kind}", 0.0) for kind in KIND_ORDER},
                }
            )
    return pd.DataFrame(rows, columns=["layer", "mode", "feasible", *KIND_ORDER])


DESIRABLE_COLUMNS = (
    ["index", "workspace_mib", "time_ms", "division", "plans", "engines", "chosen"],
    ["index", "start", "end", "batch", "plan", "engine"],
)


def desirable_frame(ps: PolicySets, k: int, chosen: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fig. 8 for kernel ``k``: (points, pieces). Points: workspace, time, division, plans, chosen flag.
    Pieces: one row per micro-configuration with its share of the mini-batch (for the small stacked bars)."""
    if k not in ps._desirable:
        infos = [ps.info(k, j) for j in range(len(ps.sets[k]))]
        points = pd.DataFrame(
            {
                "index": np.arange(len(infos)),
                "workspace_mib": ps.ws[k] / MiB,
                "time_ms": ps.t[k],
                "division": [i.division for i in infos],
                "plans": [i.plans for i in infos],
                "engines": [i.engines for i in infos],
                "chosen": False,
            },
            columns=DESIRABLE_COLUMNS[0],
        )
        rows = []
        for j, info in enumerate(infos):
            total, done = info.batch.sum(), 0
            for b, p, e in zip(info.batch, info.plan, info.engine):
                rows.append((j, done / total, (done + b) / total, int(b), p, e))
                done += b
        ps._desirable[k] = (points, pd.DataFrame(rows, columns=DESIRABLE_COLUMNS[1]))
    points, pieces = ps._desirable[k]
    points = points.copy()
    points["chosen"] = points["index"] == (-1 if chosen is None else chosen)
    return points, pieces
