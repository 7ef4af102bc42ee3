"""Memory policies in real PyTorch training steps: the memory planner's predictions against measurements.

    python benchmarks/memory_training.py measure --resume      # GPU host; repeat until it prints "all done"
    python benchmarks/memory_training.py predict benchmarks/reports/memory_training.json  # CPU: predictions again
    python benchmarks/memory_training.py report benchmarks/reports/memory_training.json   # anywhere

For torchvision AlexNet b256, VGG-16 b64 and ResNet-50 b64 (TF32, NCHW, ``cudnn.benchmark`` off so cuDNN takes
its heuristic order, as the planner's ``heuristic`` workspace rule assumes), ``measure`` runs every case in its
own process and appends each result to the JSON file as it comes (atomically; ``--resume`` keeps what is there,
and ``--budget-s`` stops launching cases in time for a 10-minute GPU call). Each lent call may land on another
machine: a calibration measured on another GPU host runs again first (each host's is kept in the file, and every
case records the GPU it ran on and the one its prediction was calibrated on). Every case process runs with ``PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True``, so a cap fails
where the tensors stop fitting rather than where fixed segments fragment. Parts (``--parts``):

- ``calibrate``: the time model of this host (engine.pytorch.calibrate: pinned copies both ways and duplex,
  elementwise HBM rate, FC GEMM rate, and every non-conv layer's forward and backward time of each model),
  saved beside the results as ``*_time_params.json`` for ``python -m engine memory --time-params``;
- ``policies``: one training step (zero grads, forward, cross-entropy, backward) per model and memory policy the
  memory runtime executes (``liveness`` is stock PyTorch; ``vdnn-conv-p``, ``vdnn-all-p``, ``sn-recompute``,
  ``superneurons`` through ``engine.pytorch.apply_memory_policy``). Predicted: ``plan_memory`` on the imported
  network, tensors as PyTorch allocates them (convention ``pytorch``), workspace rule ``heuristic``, the
  calibrated TimeParams and the calibration's framework bytes. Measured: peak ``torch.cuda.max_memory_allocated``
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
  ``apply_plan``, each kernel limited to what the plan leaves free under the capacity less a ``RESERVE``, as
  for every plan that fills the capacity: ``planning_capacity``) at the same batch (lower where either does not
  fit there; ``--pair-at NET/GIB=BATCH`` names the batch), the two on one host: kept results from two hosts run
  again, and the replaced ones stay listed.

``report`` writes benchmarks/reports/memory_training.md, a PNG and the README block from the JSON alone.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.figures import pyplot, write_png  # noqa: E402
from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

MODELS = {"alexnet": 256, "vgg16": 64, "resnet50": 64}
POLICIES = ("liveness", "vdnn-conv-p", "vdnn-all-p", "sn-recompute", "superneurons")
PAPER = POLICIES[1:]
CAPACITIES_GIB = (12, 16)
# plans that fill the capacity (these policies, and every + STEP plan) are made for (1 - RESERVE) x capacity:
# room for the caching allocator's reserved-but-unallocated blocks and for prediction error
RESERVE = 0.05
FILLS = ("superneurons",)
WORKSPACE = "heuristic"  # stock cuDNN in PyTorch with cudnn.benchmark off: its heuristic order
CONVENTION = "pytorch"
MAX_BATCH = 8192
GiB = 1 << 30
# every case process: the caching allocator maps pages as it grows instead of cutting fixed segments, so a cap
# fails where the tensors stop fitting, not where fragmentation does (the planner models tensors, not segments)
ALLOC_CONF = "expandable_segments:True"
STEP = "+steps"          # variant suffix: the paper policy with the per-step micro-batched workspace plan


def profile_name(net: str) -> str:
    return f"h100-{net}-b{MODELS[net]}-tf32-nchw-powerOfTwo"


def torch_name(net: str) -> str:
    return f"torchvision:{net}"


# --- predictions (CPU) -----------------------------------------------------------------------------------

def _profile(net: str):
    from engine.profile import Profile, resolve_profile
    return Profile.load(resolve_profile(profile_name(net)))


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


def memory_result(net: str, batch: int, variant: str, capacity: int | None, time_params=None, framework: int = 0):
    """The memory plan a case runs: ``variant`` is a policy, or a paper policy + STEP (workspace rule wr);
    ``framework``: bytes PyTorch holds itself (calibrated)."""
    from engine.memory import plan_memory
    from engine.pytorch.loader import load_network
    policy, steps = variant.removesuffix(STEP), variant.endswith(STEP)
    cap = planning_capacity(variant, capacity)
    return plan_memory(load_network(torch_name(net), batch), policy, capacity=cap, profile=_profile(net),
                       workspace="wr" if steps else WORKSPACE, convention=CONVENTION, time_params=time_params,
                       framework_bytes=framework)


def planning_capacity(variant: str, capacity: int | None) -> int | None:
    """The capacity a plan is made for: (1 - RESERVE) x ``capacity`` where the plan fills what it is given
    (SuperNeurons keeps tensors resident up to it, + STEP gives it to workspace), else ``capacity``. A plan filled
    to the cap leaves nothing for the caching allocator, whose reserved-but-unallocated blocks count against
    the cap: filled, ResNet-50 under 16 GiB trained only up to batch 211 of the 426 predicted."""
    fills = variant.endswith(STEP) or variant in FILLS
    return int(capacity * (1 - RESERVE)) if fills and capacity is not None else capacity


def predicted(res) -> dict:
    """What the report sets beside the measurement (JSON-clean: no NaN)."""
    s = res.to_dict(ticks=False)["summary"]
    keys = ("peak", "iteration_ms", "conv_ms", "stall_ms", "compute_ms", "offload_bytes", "prefetch_bytes",
            "recompute_count", "fits", "min_capacity", "layer_runs_measured", "layer_runs_modelled")
    return dict({k: s[k] for k in keys}, time_model=res.time_note, workspace_rule=res.workspace_rule,
                convention=res.convention)


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
        out[policy] = max_batch(torch_name(net), policy, planning_capacity(policy, capacity), profile=prof,
                                workspace=WORKSPACE, convention=CONVENTION, limit=limit, framework_bytes=framework)
    best = best or best_policy(out)
    out[best + STEP] = max_batch(torch_name(net), best, planning_capacity(best + STEP, capacity), profile=prof,
                                 workspace="wr", convention=CONVENTION, limit=limit, framework_bytes=framework)
    return {"predicted": out, "best": best, "limit": limit}


def best_policy(predicted: dict) -> str:
    return max(PAPER, key=lambda p: predicted[p])   # ties: the earlier (cheaper) policy


# --- one case, in its own process (GPU) ------------------------------------------------------------------

def _setup(net: str, batch: int, capacity: int | None):
    import torch
    import torchvision
    torch.backends.cudnn.benchmark = False
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    if capacity:
        total = torch.cuda.get_device_properties(0).total_memory
        torch.cuda.set_per_process_memory_fraction(min(1.0, capacity / total))
    torch.manual_seed(0)
    model = getattr(torchvision.models, net)(weights=None).cuda().train()
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (batch,), device="cuda")
    return torch, model, x, target


def _runtime(model, res, plan=None):
    """Install the memory policy, then apply the per-step plan: the runtime matches plan layers to modules by
    tracing the model with torch.fx, which sees stock ``nn.Conv2d`` leaves only before ``apply_plan`` swaps their
    class (its hooks stay on the same module objects after)."""
    rt = None
    if res.policy != "liveness":
        try:
            from engine.pytorch import apply_memory_policy
        except ImportError as err:
            raise RuntimeError(f"the memory runtime is not available here ({err})") from None
        rt = apply_memory_policy(model, res)
    if plan is not None:
        from engine.pytorch import apply_plan
        apply_plan(model, plan)
    return rt


def _snapshot(rt) -> dict:
    return json.loads(json.dumps(dict(rt.stats), default=str)) if rt is not None else {}


def _steps(torch, model, x, target, rt, warmup: int, steps: int, res=None) -> dict:
    """Warm-up, timed steps (their peak), then with ``res`` one more step traced per plan tick by the memory
    runtime (``trace_memory``; installed for that step alone when the case runs stock PyTorch)."""
    params = list(model.parameters())

    def step():
        for p in params:
            p.grad = None
        # the memory runtime stays installed on the model (its ``with`` form would remove it after one step)
        loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()

    for _ in range(warmup):
        step()
    torch.cuda.synchronize()
    torch.cuda.reset_peak_memory_stats()
    ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
    stats = []
    ev[0].record()
    for i in range(steps):
        step()
        ev[i + 1].record()
        stats.append(_snapshot(rt))
    torch.cuda.synchronize()
    times = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(steps))
    out = {"step_ms": statistics.median(times), "step_ms_p10": times[len(times) // 10],
           "step_ms_p90": times[(9 * len(times)) // 10], "peak": torch.cuda.max_memory_allocated(),
           "peak_reserved": torch.cuda.max_memory_reserved(), "steps": steps, "stats": stats}
    if res is not None:
        from engine.pytorch import apply_memory_policy
        tracer = rt if rt is not None else apply_memory_policy(model, res)
        tracer.trace_memory()
        torch.cuda.reset_peak_memory_stats()
        step()
        torch.cuda.synchronize()
        tracer.trace_memory(False)
        out["memory_trace"] = [[r["tick"], r["end"], r["allocated"], r["peak"]] for r in tracer.memory_trace]
        out["deviations"] = tracer.deviations
        if rt is None:
            tracer.remove()
    return out


def gpu_uuid() -> str:
    import torch
    return str(torch.cuda.get_device_properties(0).uuid)


def run_case(kind: str, net: str, variant: str, batch: int, capacity: int | None, time_params: str | None,
             warmup: int, steps: int) -> dict:
    """kind: ``step`` (predict and measure), ``try`` (does it fit: 2 steps), ``calibrate-host``,
    ``calibrate-layers``."""
    out = {"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity}
    if kind == "calibrate-host":
        from engine.pytorch.calibrate import measure
        return dict(out, doc=measure([], host=True), gpu_uuid=gpu_uuid())
    if kind == "calibrate-layers":
        from engine.pytorch.calibrate import measure
        return dict(out, doc=measure([(torch_name(net), batch)], host=False), gpu_uuid=gpu_uuid())
    import torch

    try:
        tp, framework, calibrated_on = calibration(time_params)
        out["gpu_uuid"], out["calibration_uuid"] = gpu_uuid(), calibrated_on
        # a stock try needs no memory plan (nothing to apply); every other case runs one
        res = None if (kind, variant) == ("try", "liveness") else memory_result(net, batch, variant, capacity, tp,
                                                                                framework)
        if res is not None and kind == "step":
            out["predicted"] = predicted(res)
            out["predicted_ticks"] = predicted_ticks(res)
        plan = None
        if variant.endswith(STEP):
            from engine.memory import step_plan
            plan = step_plan(res, _profile(net), command=f"benchmarks/memory_training.py {kind} {net} {variant} {batch}")
            out["plan"] = {"conv_ms": plan.totals.time_ms, "max_workspace": plan.totals.max_workspace,
                           "divided": sum(len(k.micro) > 1 for k in plan.kernels), "kernels": len(plan.kernels)}
        torch, model, x, target = _setup(net, batch, capacity)
        rt = _runtime(model, res, plan) if res is not None else None
        got = _steps(torch, model, x, target, rt, 1 if kind == "try" else warmup, 1 if kind == "try" else steps,
                     res if kind == "step" else None)
        if rt is not None:
            out["notes"] = rt.notes
        out.update(ok=True, **({} if kind == "try" else got))
        if plan is not None:
            out["fallbacks"] = dict(model.ucudnn.fallbacks)
    except torch.OutOfMemoryError as err:
        # the first line holds what PyTorch had allocated and reserved: kept whole to diagnose a miss
        out.update(ok=False, oom=True, error=f"out of memory: {str(err).splitlines()[0][:600]}")
    except Exception as err:  # recorded, so one failing case does not lose the others
        out.update(ok=False, error=f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}")
    return out


# --- driver -----------------------------------------------------------------------------------------------

def save(path: Path, doc: dict) -> None:
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())


def case_key(r: dict) -> str:
    return f"{r['kind']}/{r['model']}/{r['variant']}/{r['batch']}/{r['capacity']}"


def child(args, kind, net, variant="", batch=0, capacity=None, timeout=300) -> dict:
    cmd = [sys.executable, __file__, "case", kind, net, variant or "-", str(batch), str(capacity or 0),
           "--warmup", str(args.warmup), "--steps", str(args.steps)]
    tp = time_params_path(Path(args.output))
    if tp.exists():
        cmd += ["--time-params", str(tp)]
    base = {"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity}
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout,
                           env=dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=ALLOC_CONF))
    except subprocess.TimeoutExpired:
        return dict(base, ok=False, error=f"did not finish within {timeout} s")
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        errs = [ln for ln in r.stderr.splitlines() if "Error" in ln and "nanobind" not in ln]
        tail = (errs or r.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return dict(base, ok=False, error=f"exit {r.returncode}: {tail}")
    res = json.loads(lines[-1])
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def time_params_path(out: Path) -> Path:
    return out.with_name(out.stem + "_time_params.json")


class Budget(Exception):
    """The wall-clock budget of this call is spent: rerun with --resume."""


class SearchError(Exception):
    """A capacity try failed for another reason than running out of memory."""


def measure(args) -> int:
    out = Path(args.output)
    doc = json.loads(out.read_text()) if out.exists() and args.resume else {"results": [], "capacity": {}}
    doc.setdefault("capacity", {})
    doc["provenance"] = provenance("python benchmarks/memory_training.py " + " ".join(sys.argv[1:]))
    doc.setdefault("calls", []).append({k: doc["provenance"].get(k) for k in ("date", "command", "gpu_uuid")})
    t_start = time.time()
    # kept: successes and out-of-memory answers; other failures run again under --resume (once per call); a
    # calibration from another GPU host (each lent machine may be another) runs again: copy rates are the host's
    here = gpu_uuid()
    done = {case_key(r): r for r in doc["results"] if ("error" not in r or r.get("oom"))
            and (not r["kind"].startswith("calibrate") or r.get("gpu_uuid") == here)}
    lock = threading.RLock()       # capacity searches run in threads: one writer of ``doc``, ``done`` and the file

    def budget():
        if time.time() - t_start > args.budget_s:
            raise Budget

    def run(kind, net, variant="", batch=0, capacity=None, timeout=args.timeout, again=False):
        return run_many(kind, net, variant, [batch], capacity, timeout, again=again)[0]

    def run_many(kind, net, variant, batches, capacity=None, timeout=args.timeout, hold=None, again=False):
        """Cases that differ only in the batch, at once, each process inside ``hold(batch)`` when given (capacity
        tries: the GPU memory and pinned host memory they may take together); results in the order of
        ``batches``. ``again``: run here even where a result is kept (it replaces that one)."""
        keys = [case_key({"kind": kind, "model": net, "variant": variant, "batch": b, "capacity": capacity})
                for b in batches]
        with lock:
            todo = [(k, b) for k, b in zip(keys, batches) if again or k not in done]
        if todo:
            budget()

            def one(kb):
                with hold(kb[1]) if hold else contextlib.nullcontext():
                    budget()
                    return child(args, kind, net, variant, kb[1], capacity, timeout)
            with ThreadPoolExecutor(max_workers=len(todo)) as pool:
                futures = [pool.submit(one, kb) for kb in todo]
            for (key, _), fut in zip(todo, futures):
                if isinstance(fut.exception(), Budget):
                    continue
                res = fut.result()
                with lock:
                    if key in done and again:   # kept, not lost: the report lists what a new run replaced
                        doc.setdefault("replaced", []).append(dict(
                            done[key], replaced_in_call=len(doc["calls"]), why="its pair ran again on one host"))
                    doc["results"] = [r for r in doc["results"] if case_key(r) != key] + [res]
                    done[key] = res
                    print(json.dumps({k: res.get(k) for k in ("kind", "model", "variant", "batch", "capacity", "ok",
                                                              "step_ms", "peak", "error")}), flush=True)
            with lock:
                save(out, doc)
            if any(isinstance(f.exception(), Budget) for f in futures):
                raise Budget
        with lock:
            return [done[k] for k in keys]

    pending = {}
    capacity_runs = bool({"search", "timed"} & set(args.parts))
    from engine.memory.calibrate import load as load_tp, measured_layers, merge, save as save_tp
    calibrated_on = calibration(time_params_path(out))[2]
    mine = load_tp(time_params_path(out)) if calibrated_on == here and "calibrate" not in args.parts else None
    if "calibrate" not in args.parts and calibrated_on != here:
        print(f"the calibration beside {out} is not this host's ({calibrated_on or 'none'}): calibrating first",
              flush=True)
    # this host's calibration lacks the layer times of a network it has not run yet: measured before its cases
    lacking = [net for net in args.configs if mine is None or not measured_layers(mine, torch_name(net), MODELS[net])]
    try:
        if lacking:
            docs = ([run("calibrate-host", "host")] if mine is None else [{"doc": mine}]) + [
                run("calibrate-layers", net, batch=MODELS[net]) for net in lacking]
            ok = [d["doc"] for d in docs if d and "doc" in d]
            if ok:
                merged = merge(*ok)
                merged["provenance"]["gpu_uuid"] = here
                save_tp(time_params_path(out), merged)
                doc.setdefault("calibrations", {})[here] = merged   # each host's, for `predict` of its cases
                save(out, doc)
        # capacity predictions are CPU work (with the calibration's framework bytes): beside the GPU cases
        if capacity_runs:
            for net in args.configs:
                for gib in args.capacities:
                    if f"{net}/{gib}" not in doc["capacity"]:
                        pending[net, gib] = start_prediction(net, gib, time_params_path(out))
        if "policies" in args.parts:
            for net in args.configs:
                for policy in POLICIES:
                    run("step", net, policy, MODELS[net])
        if capacity_runs:
            capacity(args, doc, out, run, run_many, lock, pending)
    except Budget:
        print(f"budget of {args.budget_s} s spent: run again with --resume to go on", flush=True)
        for (net, gib), p in list(pending.items()):   # finished predictions are kept, the others stopped
            if p.poll() is None:
                p.kill()
            else:
                capacity_prediction(args, doc, out, pending, net, gib)
        return 0
    print("all done", flush=True)
    return 0


def start_prediction(net: str, gib: int, time_params: Path) -> subprocess.Popen:
    """``predict-capacity`` in a process that sees no GPU (CPU work, beside the GPU cases)."""
    cmd = [sys.executable, __file__, "predict-capacity", net, str(gib * GiB)]
    if time_params.exists():
        cmd += ["--time-params", str(time_params)]
    return subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))


def capacity_prediction(args, doc, out, pending, net, gib) -> dict | None:
    """The capacity entry of ``net`` under ``gib`` GiB, its predictions collected from their process."""
    key = f"{net}/{gib}"
    if key in doc["capacity"]:
        return doc["capacity"][key]
    proc = pending.pop((net, gib))
    try:
        so, se = proc.communicate(timeout=args.timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        print(f"{key}: the max-batch prediction did not finish within {args.timeout} s", flush=True)
        return None
    if proc.returncode:   # not kept: --resume tries again
        print(f"{key}: the max-batch prediction failed: {(se.strip().splitlines() or ['?'])[-1][:300]}", flush=True)
        return None
    entry = doc["capacity"][key] = json.loads(so.strip().splitlines()[-1])
    save(out, doc)
    return entry


def capacity(args, doc, out, run, run_many, lock, pending) -> None:
    """Under each capacity: the largest batch found by trying for stock PyTorch and each paper policy (at the
    capacities ``--search-all`` names; elsewhere the best one alone), every search at once in threads sharing the
    GPU's and the host's memory; then, one case at a time, the timed steps at the found batches of stock and the
    best paper policy, and that policy + STEP at the same batch."""
    entries = {}
    for net in args.configs:
        for gib in args.capacities:
            e = capacity_prediction(args, doc, out, pending, net, gib)
            if e is not None:
                entries[net, gib] = e
    total = doc["provenance"].get("total_memory") or 80 * GiB
    slots = Slots(GPU_SHARE * total, HOST_SHARE * host_memory())
    searches = []
    for (net, gib), e in entries.items():
        found, skipped = e.setdefault("found", {}), e.setdefault("skipped", {})
        e.setdefault("search_error", {})

        def pinning(variant):
            guess = min(e["predicted"][variant] or MODELS[net], batch_limit(net))
            return guess, pinned_per_sample(net, variant, guess, gib * GiB)

        def too_much(guess, pinned):
            return pinned * guess > HOST_SHARE * host_memory()
        if "host_limited" not in e and too_much(*pinning(e["best"])):
            # the host cannot hold what the predicted best pins: time the best paper policy it can run instead
            runnable = [p for p in PAPER if not too_much(*pinning(p))]
            if runnable:
                e["host_limited"], e["best"] = e["best"], max(runnable, key=lambda p: e["predicted"][p] or 0)
        order = ["liveness", e["best"]] + [p for p in PAPER if p != e["best"] and (
            gib in args.search_all or p == e.get("host_limited"))]
        for variant in order:
            guess, pinned = pinning(variant)
            if too_much(guess, pinned):
                skipped[variant] = (f"would pin {pinned * guess / GiB:.0f} GiB of host memory at the predicted batch, "
                                    f"more than {HOST_SHARE:.0%} of this host's {host_memory() / GiB:.0f} GiB")
            elif variant not in found and "search" in args.parts:
                searches.append((net, gib, variant, guess, pinned))
    width = max(2, min(args.parallel, int(GPU_SHARE * total / (min(args.capacities) * GiB)) // max(1, len(searches))))

    def one_search(net, gib, variant, guess, pinned):
        cap, e = gib * GiB, entries[net, gib]

        def fits_many(batches):
            answers = {}
            for b, r in zip(batches, run_many("try", net, variant, batches, cap, args.try_timeout,
                                              hold=lambda b: slots.hold(cap, pinned * b))):
                if "error" in r and not r.get("oom"):
                    raise SearchError(r["error"])
                answers[b] = bool(r.get("ok"))
            return answers
        try:
            got = search(fits_many, guess, width, batch_limit(net), args.precision)
            with lock:
                e["found"][variant] = got
                e["search_error"].pop(variant, None)
        except SearchError as err:   # recorded, not kept as an answer: --resume searches again
            with lock:
                e["search_error"][variant] = str(err)
        with lock:
            save(out, doc)

    if searches:
        with ThreadPoolExecutor(max_workers=len(searches)) as pool:
            futures = [pool.submit(one_search, *s) for s in searches]
        for f in futures:
            if f.exception() is not None:
                raise f.exception()
    if "timed" not in args.parts:
        return
    for (net, gib), e in sorted(entries.items(), key=lambda kv: kv[0][1]):   # timed: one at a time, the GPU quiet
        cap, found, stepped = gib * GiB, e["found"], e.setdefault("stepped", {})
        for variant in ("liveness", e["best"]):
            if found.get(variant):
                stepped[variant] = timed_step(run, net, variant, found[variant], cap)
                save(out, doc)
        b, pair = stepped.get(e["best"]), e["best"] + STEP
        chosen = args.pair_at.get(f"{net}/{gib}")
        if chosen:     # the user's batch: no prediction lowers it first
            stepped[pair] = timed_pair(run, net, e["best"], chosen, cap)
            save(out, doc)
        elif b:
            stepped[pair] = timed_pair(run, net, e["best"], b, cap, e["predicted"].get(pair))
            save(out, doc)


def timed_step(run, net: str, variant: str, batch: int, cap: int, lower: int | None = None) -> int:
    """The timed steps at a found batch, which sits at the edge of memory (a try runs 2 steps, the timed case 24 and
    a traced one): where they run out of memory they run once more at ``lower`` (default 97 % of it). Returns the
    batch they ran at."""
    r = run("step", net, variant, batch, cap)
    if r.get("oom") and batch > 1:
        lower = max(1, min(lower or batch, int(batch * 0.97)))
        run("step", net, variant, lower, cap)
        return lower
    return batch


def timed_pair(run, net: str, policy: str, batch: int, cap: int, predicted: int | None = None) -> int:
    """``policy`` + STEP timed at the batch ``policy`` was timed at; where it does not fit there, both run at the
    largest batch its plan predicts to fit (``predicted``; at most 97 % of the first), and where ``policy`` alone
    does not fit at that batch, both run once more at 97 % of it, so the two step times compare at one batch and
    one cap. The two run on one host: where their kept results come from two, both run again here. Returns the
    batch."""
    def pair(b, again=False):
        return run("step", net, policy + STEP, b, cap, again=again), run("step", net, policy, b, cap, again=again)

    b = timed_step(run, net, policy + STEP, batch, cap, predicted)
    for lower in (True, False):
        mine, paper = pair(b)
        if mine.get("ok") and paper.get("ok") and mine.get("gpu_uuid") != paper.get("gpu_uuid"):
            mine, paper = pair(b, again=True)
        if not (lower and mine.get("ok") and paper.get("oom") and b > 1):
            break
        b = max(1, int(b * 0.97))
    return b


def pinned_per_sample(net: str, variant: str, batch: int, cap: int) -> float:
    """Pinned host bytes per sample a try of ``variant`` takes (the plan's offloaded bytes at ``batch``)."""
    if variant == "liveness":
        return 0.0
    return memory_result(net, batch, variant, cap).summary["offload_bytes"] / batch


GPU_SHARE = 0.85   # the memory caps of tries at once (a cap is a limit, not a reservation: beyond, they would fail)
HOST_SHARE = 0.5   # pinned buffers of tries at once (five offloading tries pinned more than a 128 GiB host had);
                   # a search whose tries alone would pin more is skipped: the host, not the GPU, would limit it


def host_memory() -> int:
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


class Slots:
    """What capacity tries running at once hold together: their memory caps under the GPU's memory (a cap is a
    limit, not a reservation) and their pinned buffers under a share of the host's. A try larger than a budget
    runs when nothing else holds that budget, so every try runs in the end."""

    def __init__(self, gpu: float, host: float):
        self.free = {"gpu": gpu, "host": host}
        self.holders = {"gpu": 0, "host": 0}
        self.cond = threading.Condition()

    def _fits(self, need: dict) -> bool:
        return all(need[k] <= self.free[k] or not self.holders[k] for k in need)

    @contextlib.contextmanager
    def hold(self, gpu: float, host: float):
        need = {"gpu": gpu, "host": host}
        with self.cond:
            self.cond.wait_for(lambda: self._fits(need))
            for k in need:
                self.free[k] -= need[k]
                self.holders[k] += need[k] > 0
        try:
            yield
        finally:
            with self.cond:
                for k in need:
                    self.free[k] += need[k]
                    self.holders[k] -= need[k] > 0
                self.cond.notify_all()


def search(fits_many, guess: int, width: int = 1, top: int = MAX_BATCH, precision: float = 0.02) -> int:
    """The largest batch b with fits(b), starting from ``guess``. Each round tries up to ``width`` batches at once
    (``fits_many(batches) -> {batch: fits}``, each a try in its own process): first around the guess, then
    bracketing by growing factors (a good prediction costs one or two rounds, a bad one not many more), then
    narrowing to ``precision``, never above ``top``. ``fits`` is assumed monotone; where it is not, the largest
    batch seen fitting wins."""
    guess = max(1, min(guess, top))
    lo, hi = 0, top + 1                # lo fits (0: none known), hi does not (top + 1: none known)

    def ask(batches) -> None:
        nonlocal lo, hi
        todo = sorted({b for b in batches if lo < b < hi})[:width]
        for b, ok in fits_many(todo).items():
            if ok:
                lo = max(lo, b)
            else:
                hi = min(hi, b)
        if hi <= lo:                   # not monotone: trust the fit, forget the failure below it
            hi = top + 1

    near = (1.0, 0.96, 1.04, 0.92, 1.1, 0.85, 1.2, 0.75, 1.4)
    ask([int(guess * f) for f in near[:width]])
    grow = 1
    while hi > top and lo < top:                      # everything tried so far fits: grow
        ask([min(top, max(lo + i, int(lo * (1 + 0.04 * grow * i)))) for i in range(1, width + 1)])
        grow *= 2
    while lo == 0 and hi > 1:                         # nothing fits yet: shrink
        ask([max(1, int(hi * f)) for f in (0.8, 0.6, 0.4, 0.25, 0.1, 0.05, 0.01)[:width]])
    while hi <= top and hi - lo > max(1, int(lo * precision)):
        n = min(width, hi - lo - 1)
        ask([lo + (hi - lo) * i // (n + 1) for i in range(1, n + 1)])
    return lo


def provenance(command: str) -> dict:
    import torch

    from engine.gpu import runtime
    return dict(runtime.provenance(command), torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version(),
                total_memory=torch.cuda.get_device_properties(0).total_memory, convention=CONVENTION,
                workspace_rule=WORKSPACE, reserve=RESERVE, allocator=ALLOC_CONF)


# --- predictions again (no GPU) ----------------------------------------------------------------------------

def repredict(args) -> int:
    """Recompute every prediction in a results file with this checkout's planner and the run's own calibrated
    time parameters; the measurements are left as they are. Predictions are CPU work, so a model fixed after a
    GPU run is checked against that run without measuring again; the file records when and at which commit."""
    from datetime import datetime, timezone

    out = Path(args.results)
    doc = json.loads(out.read_text())
    latest = calibration(time_params_path(out))
    own = {uuid: calibration_of(c) for uuid, c in doc.get("calibrations", {}).items()}
    for r in doc["results"]:
        if r["kind"] != "step" or "predicted" not in r:
            continue
        tp, framework, r["calibration_uuid"] = own.get(r.get("gpu_uuid"), latest)   # the case's own host if kept
        res = memory_result(r["model"], r["batch"], r["variant"], r["capacity"], tp, framework)
        r["predicted"], r["predicted_ticks"] = predicted(res), predicted_ticks(res)
    tp, framework, _ = latest
    for key, entry in doc.get("capacity", {}).items():
        if "predicted" in entry:
            net, gib = key.split("/")
            entry["predicted"] = predict_capacity(net, int(gib) * GiB, framework, entry["best"])["predicted"]
            if best_policy(entry["predicted"]) not in (entry["best"], entry.get("host_limited")):   # best then
                entry["best_now"] = best_policy(entry["predicted"])
    commit = subprocess.run(["git", "describe", "--always", "--dirty"], capture_output=True, text=True, cwd=ROOT).stdout.strip()
    doc["predicted_at"] = {"commit": commit or "unknown",
                           "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                           "command": f"python benchmarks/memory_training.py predict {args.results}"}
    save(out, doc)
    print(f"predictions in {out} recomputed at {doc['predicted_at']['commit']}")
    return 0


# --- report (no GPU) --------------------------------------------------------------------------------------

def _r(doc, kind, net, variant, batch, capacity=None):
    return next((r for r in doc["results"] if (r["kind"], r["model"], r["variant"], r["batch"], r["capacity"]) ==
                 (kind, net, variant, batch, capacity)), None)


def per_step(stats: list[dict], key: str):
    """A runtime stat per step from its snapshots after each timed step: cumulative counters by their growth,
    per-step ones by the last value; lists count their entries."""
    vals = [s.get(key) for s in stats if key in s]
    if not vals:
        return None
    vals = [len(v) if isinstance(v, (list, tuple, dict)) else v for v in vals]
    if not all(isinstance(v, (int, float)) for v in vals):
        return None
    if len(vals) > 1 and vals[-1] > vals[0]:
        return (vals[-1] - vals[0]) / (len(vals) - 1)
    return vals[-1]


def _gib(n) -> str:
    return "-" if n is None else f"{n / GiB:.2f}"


def _ratio(a, b) -> str:
    return f"{a / b:.2f}" if a and b else "-"


def policy_rows(doc, net) -> list[str]:
    lines = ["| policy | peak GiB predicted | measured | pred/meas | step ms predicted | measured (10-90 %) | "
             "pred/meas | offloaded MiB/step pred / meas | re-forwards pred / recomputed meas |",
             "|---|---|---|---|---|---|---|---|---|"]
    for policy in POLICIES:
        r = _r(doc, "step", net, policy, MODELS[net])
        label = "liveness (stock PyTorch)" if policy == "liveness" else policy
        if r is None:
            lines.append(f"| {label} | not run | | | | | | | |")
            continue
        p = r.get("predicted", {})
        if "error" in r:
            lines.append(f"| {label} | {_gib(p.get('peak'))} | {r['error'][:200]} | | "
                         f"{p.get('iteration_ms') or 0:.1f} | | | | |")
            continue
        off = per_step(r["stats"], "offloaded_bytes")
        rec = per_step(r["stats"], "recomputed_layers")
        lines.append(f"| {label} | {_gib(p['peak'])} | {_gib(r['peak'])} | {_ratio(p['peak'], r['peak'])} | "
                     f"{p['iteration_ms']:.1f} | {r['step_ms']:.1f} ({r['step_ms_p10']:.1f}-{r['step_ms_p90']:.1f}) | "
                     f"{_ratio(p['iteration_ms'], r['step_ms'])} | {p['offload_bytes'] / 2**20:.0f} / "
                     f"{'-' if off is None else f'{off / 2**20:.0f}'} | {p['recompute_count']} / "
                     f"{'-' if rec is None else f'{rec:g}'} |")
    return lines


def capacity_rows(doc, net) -> list[str]:
    lines = capacity_head()
    for gib in CAPACITIES_GIB:
        e = doc.get("capacity", {}).get(f"{net}/{gib}")
        if e is None:
            lines.append(f"| {gib} GiB | not run | | | | | | | |")
            continue
        lines += capacity_entry_rows(doc, net, gib, e)
    return lines


def capacity_head(then: str = "") -> list[str]:
    return [f"| capacity | variant | largest batch predicted{then} | found | found/predicted | timed at batch | "
            f"step ms predicted{then} / measured (10-90 %) | images/s | peak GiB predicted{then} / measured |",
            "|---|---|---|---|---|---|---|---|---|"]


def capacity_entry_rows(doc, net, gib, e, results=None) -> list[str]:
    """Stock PyTorch and each searched paper policy (predicted and found largest batch), timed where the run timed
    it; the best paper policy + STEP at the batch both were timed at."""
    found, best, stepped = e.get("found", {}), e["best"], e.get("stepped", {})
    src = dict(doc, results=results) if results is not None else doc
    variants = ["liveness", best] + [p for p in PAPER if p != best and (p in found or p in e.get("skipped", {}))]
    rows = []
    for variant in variants + [best + STEP]:
        label = {"liveness": "stock PyTorch"}.get(variant, variant.replace(STEP, " + per-step WR workspace"))
        pair = variant.endswith(STEP)
        f = found.get(variant.removesuffix(STEP))
        pred = e["predicted"].get(variant)
        fails = None if pair else fails_above(src, net, variant, gib * GiB, f)
        shown = "-" if f is None else (f"{f} (paper policy's)" if pair else f"{f}" + (f" ({fails} fails)" if fails
                                                                                        else ""))
        if variant in e.get("skipped", {}):
            shown = "not searched"
        ratio = f"{f / pred:.3f}" if f and pred and not pair and not at_limit(e, pred) else ""
        if pred is not None and at_limit(e, pred):
            pred = f">= {pred} (limit)"
        # an earlier run's entry without "stepped" (an earlier format) timed every variant at the found batch
        b = (found.get(best) if pair else f) if results is not None and "stepped" not in e else stepped.get(variant)
        r = _r(src, "step", net, variant, b, gib * GiB) if b else None
        head = f"| {gib} GiB | {label} | {pred if pred is not None else '-'} | {shown} | {ratio} | {b or '-'} |"
        if r is None or "error" in r:
            why = "not timed" if variant not in ("liveness", best) and not pair else "not run"
            rows.append(f"{head} {why if r is None else r['error'][:90]} | | |")
            continue
        p = r.get("predicted", {})
        pms = f"{p['iteration_ms']:.1f} / " if p.get("iteration_ms") else ""
        rows.append(f"{head} {pms}{r['step_ms']:.1f} ({r['step_ms_p10']:.1f}-{r['step_ms_p90']:.1f}) | "
                    f"{b / r['step_ms'] * 1e3:,.0f} | {_gib(p.get('peak'))} / {_gib(r['peak'])} |")
    return rows


def at_limit(e: dict, predicted: int) -> bool:
    """A predicted largest batch at the prediction's limit says only "at least this many"."""
    return predicted >= e.get("limit", MAX_BATCH + 1)


def fails_above(doc, net: str, variant: str, cap: int, found: int | None) -> int | None:
    """The smallest batch above ``found`` whose try ran out of memory (how close the search came)."""
    failed = [r["batch"] for r in doc["results"] if r["kind"] == "try" and r.get("oom") and
              (r["model"], r["variant"], r["capacity"]) == (net, variant, cap) and r["batch"] > (found or 0)]
    return min(failed, default=None)


def per_step_comparison(doc, key: str, e: dict) -> str | None:
    """The best paper policy + STEP against the same policy with stock convolutions, at one batch and cap; where
    they never both trained at one batch, every batch the pair tried."""
    best = e["best"]
    b = e.get("stepped", {}).get(best + STEP)
    net, gib = key.split("/")
    cap = int(gib) * GiB
    label = f"- {key} GiB, {best} + per-step WR workspace"
    if not b:
        timed = e.get("stepped", {}).get(best)
        return f"{label}: not run (its paper policy was timed at batch {timed})" if timed else None

    def outcome(r):
        if r is None:
            return "not run"
        return f"{r['step_ms']:.1f} ms" if "error" not in r else ("out of memory" if r.get("oom") else "failed")
    pairs = {t: (_r(doc, "step", net, best + STEP, t, cap), _r(doc, "step", net, best, t, cap)) for t in sorted(
        {r["batch"] for r in doc["results"] if r["kind"] == "step" and r["model"] == net and r["capacity"] == cap
         and r["variant"] in (best, best + STEP)}, reverse=True)}
    mine, paper = pairs.get(b, (None, None))
    if mine and paper and "error" not in mine and "error" not in paper:
        gain = paper["step_ms"] / mine["step_ms"] - 1
        hosts = ("on one host" if mine.get("gpu_uuid") == paper.get("gpu_uuid") else
                 "on two hosts: not a comparison the target accepts")
        p = mine.get("predicted", {})
        stalls = (f"; its plan predicts {p['stall_ms']:.0f} ms of the {p['iteration_ms']:.0f} ms step waiting on host "
                  f"copies, which no convolution speed shortens" if p.get("stall_ms") and p.get("iteration_ms") else "")
        only = [t for t, (m, s) in pairs.items() if m and "error" not in m and s and s.get("oom")]
        alone = (f"; at batch {', '.join(map(str, only))} only the per-step plan trained (stock convolutions ran out "
                 "of memory)") if only else ""
        return (f"{label} at batch {b}: {mine['step_ms']:.1f} ms against {paper['step_ms']:.1f} ms with stock "
                f"convolutions ({'faster' if gain > 0 else 'slower'} by {abs(gain):.1%}; target: faster), {hosts}"
                f"{stalls}{alone}")
    steps = "; ".join(f"batch {t}: {outcome(m)} per-step, {outcome(s)} stock" for t, (m, s) in pairs.items())
    return f"{label}: no batch where both trained ({steps})"


def replaced_lines(doc) -> list[str]:
    """Results a later run replaced (kept: nothing measured is dropped from the file): steps one by one, a
    search's tries as what they found."""
    rows = [r for r in doc.get("replaced", []) if r["kind"] == "step"]
    tries = {}
    for r in doc.get("replaced", []):
        if r["kind"] == "try":
            tries.setdefault((r["model"], r["variant"], r["capacity"], r.get("why", "")), []).append(r)
    out = []
    if rows:
        out += ["| case | GPU | measured | peak GiB | replaced in call | why |", "|---|---|---|---|---|---|"]
    for r in rows:
        cap = f", {r['capacity'] // GiB} GiB" if r.get("capacity") else ""
        got = f"{r['step_ms']:.1f} ms" if "error" not in r else ("out of memory" if r.get("oom") else "failed")
        out.append(f"| {r['model']} {r['variant']} b{r['batch']}{cap} | {(r.get('gpu_uuid') or '?')[:12]} | {got} | "
                   f"{_gib(r.get('peak')) if 'error' not in r else '-'} | {r.get('replaced_in_call', '?')} | "
                   f"{r.get('why', '')} |")
    if rows and tries:
        out.append("")
    for (net, variant, cap, why), rs in tries.items():
        fit = max((r["batch"] for r in rs if r.get("ok")), default="-")
        oom = min((r["batch"] for r in rs if r.get("oom")), default="-")
        out.append(f"- {net} {variant} under {cap // GiB} GiB, its search ({len(rs)} tries): trained up to batch "
                   f"{fit}, out of memory from {oom}; {why}")
    return out


def accuracy_lines(doc, details: bool = True) -> list[str]:
    """The issue's targets, computed from the results: peaks within 10 % and step times within 15 % of the
    prediction, largest batches within 5 %, and the per-step workspace against the same paper policy."""
    peak_ok, time_ok, peak_miss, time_miss = 0, 0, [], []
    cases = [r for r in doc["results"] if r["kind"] == "step" and r["capacity"] is None and "error" not in r
             and "predicted" in r]
    for r in cases:
        p = r["predicted"]
        e_peak = r["peak"] / p["peak"] - 1
        e_time = r["step_ms"] / p["iteration_ms"] - 1
        name = f"{r['model']} {r['variant']}"
        peak_ok += abs(e_peak) <= 0.10
        time_ok += abs(e_time) <= 0.15
        if abs(e_peak) > 0.10:
            peak_miss.append(f"{name} {e_peak:+.0%}")
        if abs(e_time) > 0.15:
            time_miss.append(f"{name} {e_time:+.0%}")
    lines = [f"- measured peak within 10 % of predicted: {peak_ok} of {len(cases)} cases"
             + (f" (not: {', '.join(peak_miss)})" if peak_miss else ""),
             f"- measured step time within 15 % of predicted (calibrated): {time_ok} of {len(cases)} cases"
             + (f" (not: {', '.join(time_miss)}; measured / predicted - 1)" if time_miss else "")]
    per_gib: dict[int, list[int]] = {}       # capacity -> [within 5 %, compared, at the prediction's limit]
    detail = []
    for key, e in doc.get("capacity", {}).items():
        count = per_gib.setdefault(int(key.split("/")[1]), [0, 0, 0])
        for variant, f in e.get("found", {}).items():
            pred = e["predicted"].get(variant)
            if f and pred and at_limit(e, pred):
                count[2] += 1
                detail.append(f"- {key} GiB, {variant}: largest batch found {f}, predicted at least {pred} (the "
                              "prediction's limit: no comparison)")
            elif f and pred:
                count[0] += abs(f / pred - 1) <= 0.05
                count[1] += 1
                detail.append(f"- {key} GiB, {variant}: largest batch found {f}, predicted {pred} "
                              f"({f / pred - 1:+.1%}; target within 5 %)")
        for variant, why in e.get("search_error", {}).items():
            lines.append(f"- {key} GiB, {variant}: the search did not finish ({why})")
        for variant, why in e.get("skipped", {}).items():
            lines.append(f"- {key} GiB, {variant}: not searched ({why})")
        if e.get("host_limited"):
            lines.append(f"- {key} GiB: {e['best']} is timed, the best paper policy this host can run "
                         f"({e['host_limited']} is predicted best)")
        line = per_step_comparison(doc, key, e)
        if line:
            lines.append(line)
    summary = [f"- under {gib} GiB, largest batch found within 5 % of predicted: {ok} of {n} searches"
               + (f" ({lim} more reached the prediction's limit)" if lim else "")
               for gib, (ok, n, lim) in sorted(per_gib.items())]
    return lines[:2] + summary + lines[2:] + (detail if details else [])


def earlier_lines(doc) -> list[str]:
    """Runs kept from earlier calls of this script, with their own provenance (shown as measured then)."""
    out = []
    for run in doc.get("earlier_runs", []):
        prov = run["provenance"]
        out += [f"### Earlier run: {prov['date']}", "", run.get("why", ""), "",
                f"- command: `{prov['command']}`; {prov.get('gpu')}; allocator: "
                f"{prov.get('allocator', 'default (fixed segments)')}", ""]
        for key, e in run.get("capacity", {}).items():
            net, gib = key.split("/")
            out += [*capacity_head(" then"), *capacity_entry_rows(doc, net, int(gib), e, run["results"]), ""]
    return out


def calibration_lines(doc) -> list[str]:
    """The time model each lent machine calibrated (a run of several calls keeps every host's), and the cases each
    predicted."""
    cals = doc.get("calibrations") or {
        r.get("gpu_uuid", "?"): r["doc"] for r in doc["results"] if r["kind"] == "calibrate-host" and "doc" in r}
    if not cals:
        return ["- time model: not calibrated in this run (assumed constants)"]
    cases = [r for r in doc["results"] if r["kind"] == "step" and "predicted" in r]
    lines = []
    for uuid, tp in cals.items():
        c, h, f = tp.get("copy", {}), tp.get("hbm", {}), tp.get("fc", {})
        layers = sum(len(v) for v in tp.get("layers", {}).values())
        used = sum(r.get("calibration_uuid") == uuid for r in cases)
        lines.append(f"- time model calibrated on {uuid} (predicts {used} of the {len(cases)} timed cases): pinned "
                     f"copies {c.get('h2d', 0) / 1e9:.1f} GB/s host->device, {c.get('d2h', 0) / 1e9:.1f} GB/s "
                     f"device->host alone, {c.get('duplex_h2d', 0) / 1e9:.1f} / {c.get('duplex_d2h', 0) / 1e9:.1f} "
                     f"GB/s both at once; elementwise HBM {h.get('rate', 0) / 1e12:.2f} TB/s; FC GEMM "
                     f"{f.get('flops', 0) / 1e12:.1f} TFLOP/s; {layers} non-conv layer times measured (used at the "
                     "models' own batches; other batches model them by roofline)")
    return lines + host_lines(doc)


def host_lines(doc) -> list[str]:
    """Which lent machine measured what: each lent call may land on another machine, and copy rates are a host's.
    Says how many cases were predicted with a calibration measured on another machine than their own."""
    cases = [r for r in doc["results"] if r["kind"] == "step" and "predicted" in r]
    other = sorted({(r.get("gpu_uuid") or "?", r.get("calibration_uuid") or "?") for r in cases
                    if r.get("gpu_uuid") != r.get("calibration_uuid")})
    if not other:
        return []
    n = sum(r.get("gpu_uuid") != r.get("calibration_uuid") for r in cases)
    return [f"- NOTE: {n} of {len(cases)} cases were predicted with a calibration from another lent machine than "
            f"the one they ran on (" + "; ".join(f"ran on {g}, calibrated on {c}" for g, c in other) + "): their "
            "predicted times carry that machine's copy rates"]


def report(args) -> int:
    doc = json.loads(Path(args.results).read_text())
    prov = doc["provenance"]
    nets = [n for n in MODELS if any(r["model"] == n for r in doc["results"]) or
            any(k.startswith(f"{n}/") for k in doc.get("capacity", {}))]
    synthetic = " (SYNTHETIC data)" if prov.get("synthetic") else ""
    lines = [f"# Memory policies in PyTorch training steps: predicted vs measured{synthetic}", "",
             f"- GPU: {prov['gpu']}, cuDNN {prov.get('cudnn_version')}, PyTorch {prov.get('torch')}; date "
             f"{prov['date']}; command: `{prov['command']}`; report: "
             f"`python benchmarks/memory_training.py report {args.results}`",
             "- step: zero grads (set to None), forward, cross-entropy, backward; torchvision models, TF32, NCHW, "
             "`cudnn.benchmark` off; each case in its own process; median step time over the timed steps after "
             "warm-up, 10-90 % range in brackets; peak = `torch.cuda.max_memory_allocated` over the timed steps; "
             "one more step traced per plan tick (`MemoryRuntime.trace_memory`) gives the per-tick figure",
             f"- allocator: `PYTORCH_CUDA_ALLOC_CONF={prov.get('allocator', 'default')}` in every case process"
             + ("" if prov.get("allocator") else " (fixed segments: fragmentation counts against a cap)"),
             f"- predicted: `plan_memory` on the imported network, tensors as PyTorch allocates them (convention "
             f"`{CONVENTION}`), workspace rule `{WORKSPACE}` (cuDNN's heuristic first, as PyTorch without "
             f"`cudnn.benchmark`); plans that fill the capacity (per-step plans, rule `wr`, and "
             f"{', '.join(FILLS)}) are made for {1 - RESERVE:.0%} of it, the rest left to the caching allocator",
             *calibration_lines(doc)]
    for i, call in enumerate(doc.get("calls", []), 1):
        lines.append(f"- call {i}: {call['date']} on {call['gpu_uuid']}: `{call['command']}`")
    lines += [f"- note: {n}" for n in doc.get("notes", [])]
    if "predicted_at" in doc:
        pa = doc["predicted_at"]
        lines.append(f"- predictions recomputed on a CPU at {pa['commit']} ({pa['date']}): `{pa['command']}`")
    lines += ["", "## Targets", "", *accuracy_lines(doc), ""]
    for net in nets:
        lines += [f"## {net} b{MODELS[net]}", "", *policy_rows(doc, net), ""]
        r = _r(doc, "step", net, "liveness", MODELS[net])
        if r and r.get("predicted", {}).get("time_model"):
            lines += [f"- {r['predicted']['time_model']}", ""]
        lines += ["Under a memory cap (`torch.cuda.set_per_process_memory_fraction`):", "",
                  *capacity_rows(doc, net), ""]
        for gib in CAPACITIES_GIB:
            e = doc.get("capacity", {}).get(f"{net}/{gib}", {})
            if "predicted" in e:
                lines.append(f"- {gib} GiB, largest batch predicted per policy: " + ", ".join(
                    f"{k} {v}" for k, v in e["predicted"].items()) +
                    "".join(f"; search for {k} failed: {v}" for k, v in e.get("search_error", {}).items()))
        lines.append("")
    if doc.get("earlier_runs"):
        lines += ["## Earlier runs", "", *earlier_lines(doc)]
    if doc.get("replaced"):
        lines += ["## Replaced results", "", "Cases run again later; their measurements as "
                  "they were:", "", *replaced_lines(doc), ""]
    lines += ["## Reading it", "",
              "- pred/meas of the peak near 1 means the planner's tensor inventory is PyTorch's: the prediction counts "
              "the input batch as held by the training loop, cuDNN's workspace as PyTorch picks it (the first plan "
              "in cuDNN's heuristic order it can allocate, plans the profiler did not time included) and the "
              "cuBLAS/cuBLASLt workspaces PyTorch keeps (measured by the calibration); it has no allocator rounding "
              "or fragmentation.",
              "- Offloaded bytes and recomputations measured are the runtime's own counters (per step).",
              "- Predicted step times under a cap: at a mini-batch the profile never measured (every capacity "
              "case's), the `heuristic` rule takes cuDNN's order at the largest measured size below it, each plan's "
              "time scaled by the batch and its workspace grown as it grew between the two largest sizes: cuDNN may "
              "rank plans otherwise at the batch itself, and the scaled times are those of the measured size's "
              "efficiency. The targets compare step times at the models' own batches only.",
              "- The per-step WR row runs at the batch the paper policy was timed at; where the per-step plan does "
              "not fit there, both run at its predicted largest batch (at most 97 % of the first), and where the "
              "paper policy alone does not fit at that batch, both run once more at 97 % of it, so the two step "
              "times compare at one batch, one cap and one host (kept results from two hosts run again; the "
              "replaced ones are listed). Its largest batch predicted is for the plan's (1 - reserve) capacity.",
              "- A capacity-aware SuperNeurons plan fills the capacity it is made for: its LRU offloads only what "
              "must go, so its predicted peak sits within a few hundredths of a GiB of that capacity at every batch. "
              f"Made for the whole cap, the caching allocator's unallocated blocks did not fit beside it (the "
              f"replaced results); made for {1 - RESERVE:.0%} of it, its largest batch is predicted for that and "
              "found a little above, where the allocator's blocks take less than the reserve.", ""]
    md = Path(args.output or Path(args.results).with_suffix(".md"))
    atomic_write(md, "\n".join(lines).encode())
    plot(doc, nets, md.with_suffix(".png"))
    ticks_png = md.with_name(md.stem + "_ticks.png")
    plot_ticks(doc, nets, ticks_png)
    readme = Path(args.readme) if args.readme else README
    write_block(readme, "memory_training", readme_block(doc))
    print(f"wrote {md}, {md.with_suffix('.png')}, {ticks_png} and the block in {readme}")
    return 0


def readme_block(doc: dict) -> str:
    prov = doc["provenance"]
    nets = [n for n in MODELS if any(r["model"] == n for r in doc["results"])]
    head = (f"Memory policies in PyTorch training steps on the {prov['gpu']} (PyTorch {prov.get('torch')}, "
            f"{prov['date'][:10]}{', SYNTHETIC data' if prov.get('synthetic') else ''}): peak GiB and step ms, "
            "predicted / measured. Every case, the capacity runs and the method: "
            "[benchmarks/reports/memory_training.md](benchmarks/reports/memory_training.md).")
    lines = [head, "", "| model | " + " | ".join(POLICIES) + " |", "|---|" + "---|" * len(POLICIES)]
    for net in nets:
        cells = []
        for policy in POLICIES:
            r = _r(doc, "step", net, policy, MODELS[net])
            if r is None:
                cells.append("not run")
            elif "error" in r:
                cells.append("failed")
            else:
                p = r["predicted"]
                cells.append(f"{_gib(p['peak'])} / {_gib(r['peak'])} GiB, {p['iteration_ms']:.0f} / "
                             f"{r['step_ms']:.0f} ms")
        lines.append(f"| {net} b{MODELS[net]} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", "Against the targets (computed from the same file):", "",
                               *accuracy_lines(doc, details=False),
                               *host_lines(doc)])


def plot(doc, nets, path: Path) -> None:
    plt = pyplot()
    fig, axes = plt.subplots(2, max(1, len(nets)), figsize=(4.5 * max(1, len(nets)), 7), squeeze=False)
    for j, net in enumerate(nets):
        rows = [(p, _r(doc, "step", net, p, MODELS[net])) for p in POLICIES]
        rows = [(p, r) for p, r in rows if r and "error" not in r]
        ys = range(len(rows))
        for i, (what, pred, meas, unit) in enumerate((("peak", lambda r: r["predicted"]["peak"] / GiB,
                                                       lambda r: r["peak"] / GiB, "GiB"),
                                                      ("step", lambda r: r["predicted"]["iteration_ms"],
                                                       lambda r: r["step_ms"], "ms"))):
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


def plot_ticks(doc, nets, path: Path, variants=("liveness", "vdnn-all-p", "sn-recompute")) -> None:
    """Per plan tick: the predicted total beside the measured peak of the traced step."""
    plt = pyplot()
    fig, axes = plt.subplots(len(variants), max(1, len(nets)), figsize=(5 * max(1, len(nets)), 2.6 * len(variants)),
                             squeeze=False)
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


def pair_batch(text: str) -> tuple[str, int]:
    """``NET/GIB=BATCH`` of ``--pair-at``."""
    key, _, batch = text.partition("=")
    net, _, gib = key.partition("/")
    if net not in MODELS or not gib.isdigit() or int(gib) not in CAPACITIES_GIB or not batch.isdigit() or \
            int(batch) < 1:
        raise argparse.ArgumentTypeError(f"{text!r} is not NET/GIB=BATCH with NET one of {', '.join(MODELS)}, "
                                         f"GIB one of {', '.join(map(str, CAPACITIES_GIB))} and BATCH >= 1")
    return key, int(batch)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default="benchmarks/reports/memory_training.json")
    m.add_argument("--configs", nargs="+", default=list(MODELS), choices=list(MODELS))
    m.add_argument("--parts", nargs="+", default=["calibrate", "policies", "search", "timed"],
                   choices=["calibrate", "policies", "search", "timed"])
    m.add_argument("--precision", type=float, default=0.02,
                   help="a capacity search ends when the batches fitting and failing are this close (relative)")
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--timeout", type=int, default=150, help="seconds per case process")
    m.add_argument("--try-timeout", type=int, default=120, help="seconds per capacity try")
    m.add_argument("--capacities", nargs="+", type=int, default=list(CAPACITIES_GIB), choices=list(CAPACITIES_GIB),
                   metavar="GIB", help="capacity runs, GiB (default: 12 16)")
    m.add_argument("--parallel", type=int, default=5,
                   help="tries at once per capacity search (all searches run at once, their tries together under "
                        "the GPU's memory and half the host's)")
    m.add_argument("--search-all", nargs="*", type=int, default=[12], metavar="GIB",
                   help="capacities at which stock and every paper policy are searched (at the others: stock and "
                        "the best paper policy; default: 12)")
    m.add_argument("--budget-s", type=float, default=420,
                   help="launch no new case after this many seconds (with --timeout, under a 10-minute call)")
    m.add_argument("--resume", action="store_true", help="keep results already in the output file")
    m.add_argument("--pair-at", nargs="*", default={}, type=pair_batch, metavar="NET/GIB=BATCH",
                   help="time the best paper policy and its per-step plan at this batch (e.g. vgg16/12=256) instead "
                        "of the paper policy's timed batch")
    c = sub.add_parser("case")
    for a in ("kind", "net", "variant"):
        c.add_argument(a)
    c.add_argument("batch", type=int)
    c.add_argument("capacity", type=int)
    c.add_argument("--time-params")
    c.add_argument("--warmup", type=int, default=3)
    c.add_argument("--steps", type=int, default=20)
    p = sub.add_parser("predict-capacity")
    p.add_argument("net")
    p.add_argument("capacity", type=int)
    p.add_argument("--time-params")
    q = sub.add_parser("predict", help="recompute the predictions of a results file (CPU)")
    q.add_argument("results")
    r = sub.add_parser("report")
    r.add_argument("results")
    r.add_argument("-o", "--output")
    r.add_argument("--readme", help="the file whose block to rewrite (default README.md)")
    args = ap.parse_args(argv)
    if args.cmd == "case":
        print(json.dumps(run_case(args.kind, args.net, "" if args.variant == "-" else args.variant, args.batch,
                                  args.capacity or None, args.time_params, args.warmup, args.steps)))
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
