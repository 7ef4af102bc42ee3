"""Tidy pandas frames of a ``MemoryResult`` for the dashboard's memory tab (pure; no plotting)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from .tensors import CLASSES


def memory_frames(result) -> dict[str, pd.DataFrame]:
    """Frames for the memory timeline of one ``MemoryResult`` (iteration.py).

    ``memory``: stacked memory, one row per (tick, class) with bytes > 0 at some tick:
        tick, step, layer, phase (F forward, B backward, R re-forward), cls (one of
        tensors.CLASSES: weights, weight_grads, optimizer, bn_stats, input, activations,
        gradients, masks, workspace), bytes.
    ``lines``: one row per tick: tick, step, layer, phase, live (bytes without workspace),
        workspace, total, capacity (bytes, NaN when unbounded), free_for_workspace (capacity -
        live, NaN when unbounded), live_tensors (resident activation/gradient storages),
        start_ms, end_ms, stall_ms (NaN without a profile).
    ``copies``: one row per host-device copy, for an offload lane and a prefetch lane:
        lane (offload | prefetch), storage, tensors, bytes, reason, issue_tick, issue_step,
        deadline_tick (the tick that waits for it; NaN if none), start_ms, end_ms (NaN without
        a profile).
    ``recompute``: one row per re-forward tick: tick, step, layer, compute_ms, start_ms.
    ``kernels``: one row per convolution kernel: tick, step, layer, kind, signature, free
        (bytes free for workspace; inf when unbounded), workspace, time_ms, division (micro-batch
        division, e.g. 2x128), plans, fits.
    ``summary``: one row of the result's summary (peak, peak_step, avg_time_weighted,
        iteration_ms, offload_bytes, ...), with network, batch, policy, capacity.
    """
    t = result.ticks
    present = [c for c in CLASSES if c in t and (t[c] > 0).any()]
    memory = t.melt(id_vars=["tick", "step", "layer", "phase"], value_vars=present, var_name="cls", value_name="bytes")
    memory["cls"] = pd.Categorical(memory["cls"], categories=list(CLASSES))
    memory = memory.sort_values(["tick", "cls"]).reset_index(drop=True)
    cap = np.nan if result.capacity is None else float(result.capacity)
    lines = t[
        [
            "tick",
            "step",
            "layer",
            "phase",
            "live",
            "workspace",
            "total",
            "live_tensors",
            "start_ms",
            "end_ms",
            "stall_ms",
        ]
    ].copy()
    lines.insert(7, "capacity", cap)
    lines.insert(8, "free_for_workspace", cap - lines["live"])
    copies = result.copies.rename(columns={"direction": "lane"})[
        [
            "lane",
            "storage",
            "tensors",
            "bytes",
            "reason",
            "issue_tick",
            "issue_step",
            "deadline_tick",
            "start_ms",
            "end_ms",
        ]
    ].copy()
    copies["deadline_tick"] = pd.to_numeric(copies["deadline_tick"], errors="coerce")
    rec = t[t.phase == "R"][["tick", "step", "layer", "compute_ms", "start_ms"]].reset_index(drop=True)
    summary = pd.DataFrame(
        [{"network": result.network, "batch": result.batch, "policy": result.policy, "capacity": cap, **result.summary}]
    )
    return {
        "memory": memory,
        "lines": lines,
        "copies": copies,
        "recompute": rec,
        "kernels": result.kernels.copy(),
        "summary": summary,
    }
