"""The dashboard's door to engine.gpu, which is optional: imported lazily, and a missing or broken CUDA
stack reads as "no GPU, because ...", never as an error. Imports no Panel."""

from __future__ import annotations

import importlib


def gpu_status() -> tuple[bool, str]:
    """(available, reason); a missing engine.gpu or missing CUDA stack reads as 'no GPU', never an error."""
    try:
        gpu = importlib.import_module("engine.gpu")
    except ImportError as err:
        return False, f"GPU support is not installed ({err})"
    try:
        ok, reason = gpu.available()
    except Exception as err:  # a broken driver must not take the dashboard down
        return False, f"GPU check failed: {err}"
    return bool(ok), str(reason)


def gpu_function(name: str):
    """``engine.gpu.profile_network`` or ``engine.gpu.verify_plan``, looked up when a job starts."""
    return getattr(importlib.import_module("engine.gpu"), name)


def measured_times(report: dict) -> dict[str, float]:
    """Per-kernel measured times (ms) from ``engine.gpu.verify_plan``'s report (``kernels[*].id/measured_ms``)."""
    return {
        str(k["id"]): float(k["measured_ms"]) for k in report.get("kernels", []) if k.get("measured_ms") is not None
    }
