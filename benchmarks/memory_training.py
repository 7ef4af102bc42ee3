"""Memory policies in real PyTorch training steps: the memory planner's predictions against measurements.

    python benchmarks/memory_training.py measure --resume      # GPU host; repeat until it prints "all done"
    python benchmarks/memory_training.py predict benchmarks/reports/memory_training.json  # CPU: predictions again
    python benchmarks/memory_training.py report benchmarks/reports/memory_training.json   # anywhere

For torchvision AlexNet b256, VGG-16 b64 and ResNet-50 b64 (BUNDLED: every part), and issue 23's MobileNetV3-Large
b224, EfficientNet-B0 b112, ConvNeXt-Tiny b96, RegNetY-1.6GF b144 and ViT-B/16 b80 (MODERN: the smallest multiples of
16 whose stock step the planner predicts to hold 8 GiB + 10 % in tensors alone, ``batch_for``; parts ``calibrate``
and ``policies``; no bundled profile covers them, so the run first measures each one's profile, undivided and
cuDNN's heuristic list only, into ``*_profiles/`` beside the results: ``memory_training_case.measure_profile``)
(TF32, NCHW, ``cudnn.benchmark`` off so cuDNN takes
its heuristic order, as the planner's ``heuristic`` workspace rule assumes), ``measure`` runs every case in its
own process and appends each result to the JSON file as it comes (atomically; ``--resume`` keeps what is there
but failures, ``--redo NET/VARIANT`` runs such kept cases again, and ``--budget-s`` stops launching cases in time
for a 10-minute GPU call). Each lent call may land on another
machine: a calibration measured on another GPU host runs again first (each host's is kept in the file, and every
case records the GPU it ran on and the one its prediction was calibrated on). Every case process runs with
``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, so a cap fails
where the tensors stop fitting rather than where fixed segments fragment. Parts (``--parts``):

- ``calibrate``: the time model of this host (engine.pytorch.calibrate: pinned copies both ways and duplex,
  elementwise HBM rate, FC GEMM rate, and every non-conv layer's forward and backward time of each model),
  saved beside the results as ``*_time_params.json`` for ``python -m engine memory --time-params``;
- ``policies``: one training step (zero grads, forward, cross-entropy, backward) per model and memory policy
  (``--policies``, default all) the
  memory runtime executes (``liveness`` is stock PyTorch; ``vdnn-conv-p``, ``vdnn-all-p``, ``sn-recompute``,
  ``superneurons`` through ``engine.pytorch.apply_memory_policy``). Predicted: ``plan_memory`` on the imported
  network, tensors as PyTorch allocates them (convention ``pytorch``), workspace rule ``heuristic``, the
  calibrated TimeParams and the calibration's framework bytes. A case the memory runtime refuses (or any other
  failure) records its one-line error as its result. Measured: peak ``torch.cuda.max_memory_allocated``
  (reset after warm-up), step time (CUDA events, median and 10-90 % range over the timed steps), the runtime's
  stats, and one more step traced per plan tick (``MemoryRuntime.trace_memory``) beside the predicted ticks;
- ``search`` and ``timed`` (the capacity runs): under ``torch.cuda.set_per_process_memory_fraction`` of 12 and
  16 GiB (``--capacities``), the largest mini-batch predicted to fit (``engine.memory.max_batch``) against the
  largest found by trying, for stock PyTorch and every paper policy (at the capacities ``--search-all`` names; at
  the others the one predicted to fit the largest batch alone, or, where that one would pin more than the host may
  give, the best one the host can run). Each try runs in its own process, out-of-memory
  caught; every search runs at once, their tries together under the GPU's memory and, for their pinned buffers,
  half the host's (a search whose tries alone would pin more is skipped and says so); a search ends when its
  fitting and failing batches are ``--precision`` apart. Then (``timed``), one case at a time, the step time at
  the found batch of stock PyTorch and of the best paper policy (at 97 % of it if the longer timed run does not
  fit), and that policy with per-step micro-batched workspace (``engine.memory.step_plan`` applied with
  ``apply_plan``, each kernel limited to what the plan leaves free under the capacity less the reserve, as
  for every plan that fills the capacity: engine/memory/reserve.py) at the same batch (lower where either does not
  fit there; ``--pair-at NET/GIB=BATCH`` names the batch), the two on one host: kept results from two hosts run
  again, and the replaced ones stay listed.

``report`` writes benchmarks/reports/memory_training.md, a PNG and the README block from the JSON alone.

This file is the command line; the jobs are in ``memory_training_predict.py`` (the memory plan of each case,
``predict``), ``memory_training_case.py`` (one case in its own process), ``memory_training_measure.py`` (the
driver), ``memory_training_search.py`` (the capacity searches and timed pairs), ``memory_training_report.py`` and
``memory_training_figures.py``; what the GPU benchmarks share is in ``common.py``.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks.memory_training_case import run_case  # noqa: E402
from benchmarks.memory_training_measure import measure  # noqa: E402
from benchmarks.memory_training_predict import (
    BUNDLED,
    CAPACITIES_GIB,
    MODELS,
    POLICIES,
    calibration,
    predict_capacity,  # noqa: E402
    repredict,
)
from benchmarks.memory_training_report import report  # noqa: E402


def pair_batch(text: str) -> tuple[str, int]:
    """``NET/GIB=BATCH`` of ``--pair-at``."""
    key, _, batch = text.partition("=")
    net, _, gib = key.partition("/")
    if (
        net not in BUNDLED
        or not gib.isdigit()
        or int(gib) not in CAPACITIES_GIB
        or not batch.isdigit()
        or int(batch) < 1
    ):
        raise argparse.ArgumentTypeError(
            f"{text!r} is not NET/GIB=BATCH with NET one of {', '.join(BUNDLED)}, "
            f"GIB one of {', '.join(map(str, CAPACITIES_GIB))} and BATCH >= 1"
        )
    return key, int(batch)


def redo_case(text: str) -> str:
    net, _, variant = text.partition("/")
    if net not in MODELS or not variant:
        raise argparse.ArgumentTypeError(f"{text!r}: expected NET/VARIANT, NET one of {', '.join(MODELS)}")
    return text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default="benchmarks/reports/memory_training.json")
    m.add_argument("--configs", nargs="+", default=list(MODELS), choices=list(MODELS))
    m.add_argument(
        "--parts",
        nargs="+",
        default=["calibrate", "policies", "search", "timed"],
        choices=["calibrate", "policies", "search", "timed"],
    )
    m.add_argument(
        "--policies",
        nargs="+",
        default=list(POLICIES),
        choices=list(POLICIES),
        help="the memory policies of part policies (default: all)",
    )
    m.add_argument(
        "--precision",
        type=float,
        default=0.02,
        help="a capacity search ends when the batches fitting and failing are this close (relative)",
    )
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--timeout", type=int, default=150, help="seconds per case process")
    m.add_argument("--try-timeout", type=int, default=120, help="seconds per capacity try")
    m.add_argument(
        "--capacities",
        nargs="+",
        type=int,
        default=list(CAPACITIES_GIB),
        choices=list(CAPACITIES_GIB),
        metavar="GIB",
        help="capacity runs, GiB (default: 12 16)",
    )
    m.add_argument(
        "--parallel",
        type=int,
        default=5,
        help="tries at once per capacity search (all searches run at once, their tries together under "
        "the GPU's memory and half the host's)",
    )
    m.add_argument(
        "--search-all",
        nargs="*",
        type=int,
        default=[12],
        metavar="GIB",
        help="capacities at which stock and every paper policy are searched (at the others: stock and "
        "the best paper policy; default: 12)",
    )
    m.add_argument(
        "--budget-s",
        type=float,
        default=420,
        help="launch no new case after this many seconds (with --timeout, under a 10-minute call)",
    )
    m.add_argument("--resume", action="store_true", help="keep results already in the output file")
    m.add_argument(
        "--redo",
        nargs="*",
        default=[],
        type=redo_case,
        metavar="NET/VARIANT",
        help="with --resume: run these cases again although kept (convnext_tiny/sn-recompute: a policy's step; "
        "convnext_tiny/calibrate-layers: its layer times); the replaced results are listed in the file's `replaced`",
    )
    m.add_argument(
        "--pair-at",
        nargs="*",
        default={},
        type=pair_batch,
        metavar="NET/GIB=BATCH",
        help="time the best paper policy and its per-step plan at this batch (e.g. vgg16/12=256) instead "
        "of the paper policy's timed batch",
    )
    c = sub.add_parser("case")
    for a in ("kind", "net", "variant"):
        c.add_argument(a)
    c.add_argument("batch", type=int)
    c.add_argument("capacity", type=int)
    c.add_argument("--time-params")
    c.add_argument("--warmup", type=int, default=3)
    c.add_argument("--steps", type=int, default=20)
    c.add_argument("--profiles", type=Path, help="the folder of the MODERN models' measured profiles")
    p = sub.add_parser("predict-capacity")
    p.add_argument("net")
    p.add_argument("capacity", type=int)
    p.add_argument("--time-params")
    q = sub.add_parser("predict", help="recompute the predictions of a results file (CPU)")
    q.add_argument("results")
    q.add_argument("--configs", nargs="+", choices=list(MODELS), help="only these models' cases (default: all)")
    r = sub.add_parser("report")
    r.add_argument("results")
    r.add_argument("-o", "--output")
    r.add_argument("--readme", help="the file whose block to rewrite (default README.md)")
    args = ap.parse_args(argv)
    if args.cmd == "case":
        print(
            json.dumps(
                run_case(
                    args.kind,
                    args.net,
                    "" if args.variant == "-" else args.variant,
                    args.batch,
                    args.capacity or None,
                    args.time_params,
                    args.warmup,
                    args.steps,
                    args.profiles,
                )
            )
        )
        return 0
    if args.cmd == "predict-capacity":
        print(json.dumps(predict_capacity(args.net, args.capacity, calibration(args.time_params)[1])))  # no GPU here
        return 0
    if args.cmd == "predict":
        return repredict(args)
    if args.cmd == "measure":
        args.pair_at = dict(args.pair_at)
        return measure(args)
    return report(args)


if __name__ == "__main__":
    sys.exit(main())
