"""SYNTHETIC stand-ins for the GPU side of engine.gpu.distributed, for CPU tests only.

Dask worker processes import this module by name, so everything here is module level. A fake GPU is
named by the CUDA_VISIBLE_DEVICES value its worker was started with; its rows are
engine.testing.synthetic.synthetic_rows, labelled SYNTHETIC.
"""

from __future__ import annotations

import json
import os
import time

from ..gpu.distributed import GPUContextLost
from .synthetic import synthetic_rows


def device() -> str:
    return os.environ.get("CUDA_VISIBLE_DEVICES", "?")


def probe() -> dict:
    """Provenance of this worker's fake GPU."""
    return {
        "gpu": "SYNTHETIC-GPU",
        "driver": "-",
        "cudnn_version": "-",
        "frontend_version": "-",
        "gpu_uuid": f"SYNTHETIC-{device()}",
        "host": "SYNTHETIC-host",
        "synthetic": True,
    }


def mixed_probe() -> dict:
    """Fake GPU "1" is another model."""
    return dict(probe(), gpu="SYNTHETIC-GPU-B" if device() == "1" else "SYNTHETIC-GPU")


def shared_probe() -> dict:
    """Every worker reports the same GPU."""
    return dict(probe(), gpu_uuid="SYNTHETIC-0")


def log_lines(log) -> list[list]:
    """[tag, signature, micro_batch, device, notes given] per measurement attempt, in the order they started."""
    try:
        with open(log) as f:
            return [json.loads(line) for line in f]
    except FileNotFoundError:
        return []


def measure(
    graph, settings, notes, gpu, log: str, tag: str, pause: float = 0.01, faults: dict | None = None
) -> tuple[list[dict], dict]:
    """SYNTHETIC rows of ``graph`` after ``pause`` s (no split: the GPU lock ``gpu`` is not taken), each attempt
    logged to ``log`` under ``tag`` with the number of plans whose numerical notes it was given.

    ``faults`` maps "signature@b" to (kind, times): the first ``times`` attempts of that graph under
    this tag "die" (the worker process exits), "raise" a RuntimeError, or "lose" the GPU context.
    """
    with open(log, "a") as f:
        f.write(json.dumps([tag, graph.key, graph.b, device(), len(notes)]) + "\n")
    kind, times = (faults or {}).get(f"{graph.key}@{graph.b}", (None, 0))
    attempt = sum(1 for t, k, b, *_ in log_lines(log) if (t, k, b) == (tag, graph.key, graph.b))
    if kind and attempt <= times:
        if kind == "die":
            os._exit(1)
        if kind == "lose":
            raise GPUContextLost("SYNTHETIC CUDA error: an illegal memory access was encountered")
        raise RuntimeError(f"SYNTHETIC fault at attempt {attempt}")
    time.sleep(pause)
    return synthetic_rows(graph.sig, [graph.b]), {}


def pipeline_measure(
    graph, settings, notes, gpu, log: str, build: float = 0.02, timing: float = 0.005, die_at: int | None = None
) -> tuple[list[dict], dict]:
    """engine.gpu.pipeline's worker measurement on a fake GPU: ``build`` s of host work, then ``timing`` s
    holding ``gpu``; logs [pid, signature, b, GPU held from, until] to ``log``. ``die_at``: the worker
    exits when the log already holds that many graphs."""
    if die_at is not None and len(log_lines(log)) >= die_at:
        os._exit(5)
    time.sleep(build)
    with gpu:
        t0 = time.time()
        time.sleep(timing)
        t1 = time.time()
    with open(log, "a") as f:
        f.write(json.dumps([os.getpid(), graph.key, graph.b, t0, t1, len(notes)]) + "\n")
    return synthetic_rows(graph.sig, [graph.b]), {
        "heuristics": build / 2,
        "sweep": build / 2,
        "timing": timing,
        "sweep_skips": {"SYNTHETIC": 1},
    }


def staggered_probe(folder: str) -> dict:
    """probe() at once for the first worker to start, 2 s later for the others (a slow CUDA start); each
    worker's ready time is written to ``folder``/ready-PID."""
    try:
        os.close(os.open(os.path.join(folder, "first"), os.O_CREAT | os.O_EXCL))
    except FileExistsError:
        time.sleep(2.0)
    with open(os.path.join(folder, f"ready-{os.getpid()}"), "w") as f:
        f.write(repr(time.time()))
    return probe()


def failing_probe() -> dict:
    raise RuntimeError("SYNTHETIC: no GPU here")


def exiting_probe() -> dict:
    os._exit(7)
