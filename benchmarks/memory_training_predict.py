"""memory_training's predictions (CPU): the memory plan each case runs, what a case records of it, the largest
batches predicted under a capacity, and ``predict``, every prediction of a results file made again."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import json  # noqa: E402

from benchmarks.common import git_commit, save_json  # noqa: E402
from engine.memory.policies import get_policy  # noqa: E402

# the models with a bundled H100 profile (every case, the capacity runs included)
BUNDLED = {"alexnet": 256, "vgg16": 64, "resnet50": 64}
# issue 23's modern CNNs and ViT, at the batch ``batch_for`` picks (tests/test_memory_training_modern.py checks it):
# their convolutions are timed by a profile this benchmark measures itself (``measure_profile``), no capacity runs
MODERN = {"mobilenet_v3_large": 224, "efficientnet_b0": 112, "convnext_tiny": 96, "regnet_y_1_6gf": 144, "vit_b_16": 80}
MODELS = BUNDLED | MODERN
MIN_PEAK = 8 << 30  # a modern model's stock step uses at least this much (issue 23)
PEAK_MARGIN = 0.10  # ... with the margin of the peak target (a measured peak 10 % under the prediction still does)
BATCH_STEP = 16
POLICIES = ("liveness", "vdnn-conv-p", "vdnn-all-p", "sn-recompute", "superneurons")
PAPER = POLICIES[1:]
CAPACITIES_GIB = (12, 16)
# plans that fill the capacity (the registry's fills_capacity, and every + STEP plan: workspace rule wr) are made for
# (1 - engine.memory.reserve.RESERVE) x capacity by plan_memory (pytorch convention): room for the caching
# allocator's reserved-but-unallocated blocks and for prediction error
FILLS = tuple(p for p in POLICIES if get_policy(p).fills_capacity)
STOCK = next(p for p in POLICIES if get_policy(p).pytorch == "stock")  # liveness: stock PyTorch, nothing installed
WORKSPACE = "heuristic"  # stock cuDNN in PyTorch with cudnn.benchmark off: its heuristic order
CONVENTION = "pytorch"
MAX_BATCH = 8192
GiB = 1 << 30
# every case process: the caching allocator maps pages as it grows instead of cutting fixed segments, so a cap
# fails where the tensors stop fitting, not where fragmentation does (the planner models tensors, not segments)
ALLOC_CONF = "expandable_segments:True"
STEP = "+steps"  # variant suffix: the paper policy with the per-step micro-batched workspace plan


def profile_name(net: str) -> str:
    """The bundled H100 profile of a BUNDLED model; a MODERN model's own (undivided, cuDNN's heuristic list: all
    the ``heuristic`` workspace rule reads), measured by this benchmark into ``profiles_dir``."""
    if net in BUNDLED:
        return f"h100-{net}-b{MODELS[net]}-tf32-nchw-powerOfTwo"
    return f"{net}-b{MODELS[net]}-tf32-nchw-undivided-heuristics"


def torch_name(net: str) -> str:
    return f"torchvision:{net}"


def profiles_dir(out: Path) -> Path:
    """Where a results file's measured profiles are kept (beside it, like its calibration)."""
    return out.with_name(out.stem + "_profiles")


def profile_path(net: str, profiles: Path) -> Path:
    return Path(profiles) / f"{profile_name(net)}.profile.json.gz"


def _profile(net: str, profiles: Path | None = None):
    """A model's profile: bundled, or the one measured into ``profiles`` (one clear line when it is not there)."""
    from engine.errors import EngineError
    from engine.profile import Profile, resolve_profile

    if net in BUNDLED:
        return Profile.load(resolve_profile(profile_name(net)))
    path = profile_path(net, profiles or profiles_dir(ROOT / "benchmarks/reports/memory_training.json"))
    if not path.exists():
        raise EngineError(
            f"no profile of {net} at {path}: run `benchmarks/memory_training.py measure --configs {net}` on a GPU "
            "host first (it measures one)"
        )
    return Profile.load(path)


def batch_for(net: str, at_least: float = MIN_PEAK * (1 + PEAK_MARGIN)) -> int:
    """The smallest multiple of BATCH_STEP whose stock (liveness) step ``plan_memory`` predicts to hold at least
    ``at_least`` bytes, tensors only (no profile, so no workspace: a lower bound of what stock PyTorch takes).
    The peak grows affinely with the batch: two predictions place the answer, a few more confirm it."""
    from engine.memory import plan_memory
    from engine.pytorch.loader import load_network

    def peak(b: int) -> int:
        return plan_memory(load_network(torch_name(net), b), STOCK, convention=CONVENTION).summary["peak"]

    lo, hi = peak(BATCH_STEP), peak(2 * BATCH_STEP)
    b = max(BATCH_STEP, BATCH_STEP * int(1 + (at_least - lo) / (hi - lo)))
    while b > BATCH_STEP and peak(b - BATCH_STEP) >= at_least:
        b -= BATCH_STEP
    while peak(b) < at_least:
        b += BATCH_STEP
    return b


def calibration(path) -> tuple:
    """(TimeParams, framework bytes, GPU uuid of the host measured) of a calibration file; (None, 0, "") without."""
    if not path or not Path(path).exists():
        return None, 0, ""
    from engine.memory.calibrate import load

    return calibration_of(load(path))


def calibration_of(doc: dict) -> tuple:
    from engine.memory.calibrate import framework_bytes, time_params

    return time_params(doc), framework_bytes(doc), doc.get("provenance", {}).get("gpu_uuid", "")


def batch_limit(net: str) -> int:
    """Largest mini-batch a plan may have: 16 micro-batches of the profile's largest measured size (the planner's
    own limit), so also the top of a capacity search."""
    return min(MAX_BATCH, 16 * int(_profile(net).table.micro_batch.max()))


def memory_result(
    net: str,
    batch: int,
    variant: str,
    capacity: int | None,
    time_params=None,
    framework: int = 0,
    profiles: Path | None = None,
):
    """The memory plan a case runs: ``variant`` is a policy, or a paper policy + STEP (workspace rule wr);
    ``framework``: bytes PyTorch holds itself (calibrated); ``profiles``: where a MODERN model's profile is. A
    plan that fills the capacity is made for (1 - reserve) of it (plan_memory's rule, engine/memory/reserve.py)."""
    from engine.memory import plan_memory
    from engine.pytorch.loader import load_network

    policy, steps = variant.removesuffix(STEP), variant.endswith(STEP)
    return plan_memory(
        load_network(torch_name(net), batch),
        policy,
        capacity=capacity,
        profile=_profile(net, profiles),
        workspace="wr" if steps else WORKSPACE,
        convention=CONVENTION,
        time_params=time_params,
        framework_bytes=framework,
    )


def predicted(res) -> dict:
    """What the report sets beside the measurement (JSON-clean: no NaN)."""
    s = res.to_dict(ticks=False)["summary"]
    keys = (
        "peak",
        "iteration_ms",
        "conv_ms",
        "stall_ms",
        "compute_ms",
        "offload_bytes",
        "prefetch_bytes",
        "recompute_count",
        "fits",
        "min_capacity",
        "layer_runs_measured",
        "layer_runs_modelled",
    )
    return dict(
        {k: s[k] for k in keys}, time_model=res.time_note, workspace_rule=res.workspace_rule, convention=res.convention
    )


def predicted_ticks(res) -> list:
    """Per tick of the plan: layer, phase, bytes resident in all (the planner's total) and workspace."""
    t = res.ticks
    return [[str(a), str(b), int(c), int(d)] for a, b, c, d in zip(t["layer"], t["phase"], t["total"], t["workspace"])]


def predict_capacity(net: str, capacity: int, framework: int = 0, best: str | None = None) -> dict:
    """Largest mini-batch predicted to fit: stock, each paper policy, and the best paper policy (or ``best``, the
    one a run already searched) + STEP."""
    from engine.memory import max_batch

    prof, limit = _profile(net), batch_limit(net)
    out = {}
    for policy in POLICIES:
        out[policy] = max_batch(
            torch_name(net),
            policy,
            capacity,
            profile=prof,
            workspace=WORKSPACE,
            convention=CONVENTION,
            limit=limit,
            framework_bytes=framework,
        )
    best = best or best_policy(out)
    out[best + STEP] = max_batch(
        torch_name(net),
        best,
        capacity,
        profile=prof,
        workspace="wr",
        convention=CONVENTION,
        limit=limit,
        framework_bytes=framework,
    )
    return {"predicted": out, "best": best, "limit": limit}


def _r(doc, kind, net, variant, batch, capacity=None):
    """The result of one case in a results file (None if it did not run)."""
    return next(
        (
            r
            for r in doc["results"]
            if (r["kind"], r["model"], r["variant"], r["batch"], r["capacity"]) == (kind, net, variant, batch, capacity)
        ),
        None,
    )


def best_policy(predicted: dict) -> str:
    return max(PAPER, key=lambda p: predicted[p])  # ties: the earlier (cheaper) policy


def time_params_path(out: Path) -> Path:
    return out.with_name(out.stem + "_time_params.json")


def repredict(args) -> int:
    """Recompute every prediction in a results file with this checkout's planner and the run's own calibrated
    time parameters; the measurements are left as they are. Predictions are CPU work, so a model fixed after a
    GPU run is checked against that run without measuring again; the file records when and at which commit."""
    from datetime import datetime, timezone

    out = Path(args.results)
    doc = json.loads(out.read_text())
    latest = calibration(time_params_path(out))
    own = {uuid: calibration_of(c) for uuid, c in doc.get("calibrations", {}).items()}
    only = set(getattr(args, "configs", None) or MODELS)
    for r in doc["results"]:
        if r["kind"] != "step" or "predicted" not in r or r["model"] not in only:
            continue
        tp, framework, r["calibration_uuid"] = own.get(r.get("gpu_uuid"), latest)  # the case's own host if kept
        res = memory_result(r["model"], r["batch"], r["variant"], r["capacity"], tp, framework, profiles_dir(out))
        r["predicted"], r["predicted_ticks"] = predicted(res), predicted_ticks(res)
    tp, framework, _ = latest
    for key, entry in doc.get("capacity", {}).items():
        net, gib = key.split("/")
        if "predicted" in entry and net in only:
            entry["predicted"] = predict_capacity(net, int(gib) * GiB, framework, entry["best"])["predicted"]
            if best_policy(entry["predicted"]) not in (entry["best"], entry.get("host_limited")):  # best then
                entry["best_now"] = best_policy(entry["predicted"])
    doc["predicted_at"] = {
        "commit": git_commit(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": f"python benchmarks/memory_training.py predict {args.results}"
        + (f" --configs {' '.join(sorted(only))}" if only != set(MODELS) else ""),
    }
    save_json(out, doc)
    print(f"predictions in {out} recomputed at {doc['predicted_at']['commit']}")
    return 0
