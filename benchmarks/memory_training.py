"""Memory policies in real PyTorch training steps: the memory planner's predictions against measurements.

    python benchmarks/memory_training.py measure --resume      # GPU host; repeat until it prints "all done"
    python benchmarks/memory_training.py report benchmarks/reports/memory_training.json   # anywhere

For torchvision AlexNet b256, VGG-16 b64 and ResNet-50 b64 (TF32, NCHW, ``cudnn.benchmark`` off so cuDNN takes
its heuristic order, as the planner's ``heuristic`` workspace rule assumes), ``measure`` runs every case in its
own process and appends each result to the JSON file as it comes (atomically; ``--resume`` keeps what is there,
and ``--budget-s`` stops launching cases in time for a 10-minute GPU call). Parts (``--parts``):

- ``calibrate``: the time model of this host (engine.pytorch.calibrate: pinned copies both ways and duplex,
  elementwise HBM rate, FC GEMM rate, and every non-conv layer's forward and backward time of each model),
  saved beside the results as ``*_time_params.json`` for ``python -m engine memory --time-params``;
- ``policies``: one training step (zero grads, forward, cross-entropy, backward) per model and memory policy the
  memory runtime executes (``liveness`` is stock PyTorch; ``vdnn-conv-p``, ``vdnn-all-p``, ``sn-recompute``,
  ``superneurons`` through ``engine.pytorch.apply_memory_policy``). Predicted: ``plan_memory`` on the imported
  network, tensors as PyTorch allocates them (convention ``pytorch``), workspace rule ``heuristic``, the
  calibrated TimeParams. Measured: peak ``torch.cuda.max_memory_allocated`` (reset after warm-up), step time
  (CUDA events, median and 10-90 % range over the timed steps), the runtime's stats;
- ``capacity``: under ``torch.cuda.set_per_process_memory_fraction`` of 12 and 16 GiB, the largest mini-batch
  predicted to fit (``engine.memory.max_batch``) against the largest found by trying (a search over the batch,
  each try in its own process, out-of-memory caught) for stock PyTorch and the paper policy predicted to fit the
  largest batch, and the step time at the found batch; then that policy with per-step micro-batched workspace
  (``engine.memory.step_plan`` applied with ``apply_plan``, each kernel limited to what the plan leaves free
  under the capacity less a ``RESERVE`` for prediction error) at the paper policy's found batch.

``report`` writes benchmarks/reports/memory_training.md, a PNG and the README block from the JSON alone.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

MODELS = {"alexnet": 256, "vgg16": 64, "resnet50": 64}
POLICIES = ("liveness", "vdnn-conv-p", "vdnn-all-p", "sn-recompute", "superneurons")
PAPER = POLICIES[1:]
CAPACITIES_GIB = (12, 16)
RESERVE = 0.05          # the per-step plan is made for (1 - RESERVE) x capacity: room for prediction error
WORKSPACE = "heuristic"  # stock cuDNN in PyTorch with cudnn.benchmark off: its heuristic order
CONVENTION = "pytorch"
MAX_BATCH = 8192
GiB = 1 << 30
STEP = "+steps"          # variant suffix: the paper policy with the per-step micro-batched workspace plan


def profile_name(net: str) -> str:
    return f"h100-{net}-b{MODELS[net]}-tf32-nchw-powerOfTwo"


def torch_name(net: str) -> str:
    return f"torchvision:{net}"


# --- predictions (CPU) -----------------------------------------------------------------------------------

def _profile(net: str):
    from engine.profile import Profile, resolve_profile
    return Profile.load(resolve_profile(profile_name(net)))


def memory_result(net: str, batch: int, variant: str, capacity: int | None, time_params=None):
    """The memory plan a case runs: ``variant`` is a policy, or a paper policy + STEP (workspace rule wr under
    (1 - RESERVE) x capacity)."""
    from engine.memory import plan_memory
    from engine.pytorch.loader import load_network
    policy, steps = variant.removesuffix(STEP), variant.endswith(STEP)
    cap = int(capacity * (1 - RESERVE)) if steps else capacity
    return plan_memory(load_network(torch_name(net), batch), policy, capacity=cap, profile=_profile(net),
                       workspace="wr" if steps else WORKSPACE, convention=CONVENTION, time_params=time_params)


def predicted(res) -> dict:
    """What the report sets beside the measurement (JSON-clean: no NaN)."""
    s = res.to_dict(ticks=False)["summary"]
    keys = ("peak", "iteration_ms", "conv_ms", "stall_ms", "compute_ms", "offload_bytes", "prefetch_bytes",
            "recompute_count", "fits", "min_capacity", "layer_runs_measured", "layer_runs_modelled")
    return dict({k: s[k] for k in keys}, time_model=res.time_note, workspace_rule=res.workspace_rule,
                convention=res.convention)


def predict_capacity(net: str, capacity: int) -> dict:
    """Largest mini-batch predicted to fit: stock, each paper policy, and the best paper policy + STEP."""
    from engine.memory import max_batch
    prof = _profile(net)
    out = {}
    for policy in POLICIES:
        out[policy] = max_batch(torch_name(net), policy, capacity, profile=prof, workspace=WORKSPACE,
                                convention=CONVENTION, limit=MAX_BATCH)
    best = max(PAPER, key=lambda p: out[p])   # ties: the earlier (cheaper) policy
    out[best + STEP] = max_batch(torch_name(net), best, int(capacity * (1 - RESERVE)), profile=prof, workspace="wr",
                                 convention=CONVENTION, limit=MAX_BATCH)
    return {"predicted": out, "best": best}


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


def _steps(torch, model, x, target, rt, warmup: int, steps: int) -> dict:
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
    return {"step_ms": statistics.median(times), "step_ms_p10": times[len(times) // 10],
            "step_ms_p90": times[(9 * len(times)) // 10], "peak": torch.cuda.max_memory_allocated(),
            "peak_reserved": torch.cuda.max_memory_reserved(), "steps": steps, "stats": stats}


def run_case(kind: str, net: str, variant: str, batch: int, capacity: int | None, time_params: str | None,
             warmup: int, steps: int) -> dict:
    """kind: ``step`` (predict and measure), ``try`` (does it fit: 2 steps), ``calibrate-host``,
    ``calibrate-layers``."""
    out = {"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity}
    if kind == "calibrate-host":
        from engine.pytorch.calibrate import measure
        return dict(out, doc=measure([], host=True))
    if kind == "calibrate-layers":
        from engine.pytorch.calibrate import measure
        return dict(out, doc=measure([(torch_name(net), batch)], host=False))
    import torch

    try:
        tp = None
        if time_params and kind == "step":
            from engine.memory.calibrate import load_time_params
            tp = load_time_params(time_params)
        # a stock try needs no memory plan (nothing to apply); every other case runs one
        res = None if (kind, variant) == ("try", "liveness") else memory_result(net, batch, variant, capacity, tp)
        if res is not None and kind == "step":
            out["predicted"] = predicted(res)
        plan = None
        if variant.endswith(STEP):
            from engine.memory import step_plan
            plan = step_plan(res, _profile(net), command=f"benchmarks/memory_training.py {kind} {net} {variant} {batch}")
            out["plan"] = {"conv_ms": plan.totals.time_ms, "max_workspace": plan.totals.max_workspace,
                           "divided": sum(len(k.micro) > 1 for k in plan.kernels), "kernels": len(plan.kernels)}
        torch, model, x, target = _setup(net, batch, capacity)
        rt = _runtime(model, res, plan) if res is not None else None
        got = _steps(torch, model, x, target, rt, 1 if kind == "try" else warmup, 1 if kind == "try" else steps)
        out.update(ok=True, **({} if kind == "try" else got))
        if plan is not None:
            out["fallbacks"] = dict(model.ucudnn.fallbacks)
    except torch.OutOfMemoryError as err:
        out.update(ok=False, oom=True, error=f"out of memory: {str(err).splitlines()[0][:200]}")
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
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
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
    t_start = time.time()
    # kept: successes and out-of-memory answers; other failures run again under --resume (once per call)
    done = {case_key(r): r for r in doc["results"] if "error" not in r or r.get("oom")}

    def budget():
        if time.time() - t_start > args.budget_s:
            raise Budget

    def run(kind, net, variant="", batch=0, capacity=None, timeout=args.timeout):
        key = case_key({"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity})
        if key in done:
            return done[key]
        budget()
        res = child(args, kind, net, variant, batch, capacity, timeout)
        doc["results"] = [r for r in doc["results"] if case_key(r) != key] + [res]
        done[key] = res
        save(out, doc)
        print(json.dumps({k: res.get(k) for k in ("kind", "model", "variant", "batch", "capacity", "ok", "step_ms",
                                                  "peak", "error")}), flush=True)
        return res

    # capacity predictions are CPU work: started now, in parallel with the GPU cases
    pending = {}
    if "capacity" in args.parts:
        for net in args.configs:
            for gib in CAPACITIES_GIB:
                if f"{net}/{gib}" not in doc["capacity"]:
                    pending[net, gib] = start_prediction(net, gib)
    try:
        if "calibrate" in args.parts:
            docs = [run("calibrate-host", "host")] + [run("calibrate-layers", net, batch=MODELS[net])
                                                      for net in args.configs]
            from engine.memory.calibrate import merge, save as save_tp
            ok = [d["doc"] for d in docs if d and "doc" in d]
            if ok:
                save_tp(time_params_path(out), merge(*ok))
        if "policies" in args.parts:
            for net in args.configs:
                for policy in POLICIES:
                    run("step", net, policy, MODELS[net])
        if "capacity" in args.parts:
            for net in args.configs:
                for gib in CAPACITIES_GIB:
                    capacity(args, doc, out, run, budget, pending, net, gib)
    except Budget:
        print(f"budget of {args.budget_s} s spent: run again with --resume to go on", flush=True)
        for p in pending.values():
            p.kill()
        return 0
    print("all done", flush=True)
    return 0


def start_prediction(net: str, gib: int) -> subprocess.Popen:
    """``predict-capacity`` in a process that sees no GPU (CPU work, beside the GPU cases)."""
    import os
    return subprocess.Popen([sys.executable, __file__, "predict-capacity", net, str(gib * GiB)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES=""))


def capacity(args, doc, out, run, budget, pending, net, gib) -> None:
    """Predicted vs found largest batch under ``gib`` GiB for stock and the best paper policy; step times there;
    the best paper policy + STEP at the paper policy's found batch."""
    key, cap = f"{net}/{gib}", gib * GiB
    entry = doc["capacity"].get(key)
    if entry is None:
        budget()
        proc = pending.pop((net, gib))
        try:
            so, se = proc.communicate(timeout=args.timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            print(f"{key}: the max-batch prediction did not finish within {args.timeout} s", flush=True)
            return
        if proc.returncode:   # not kept: --resume tries again
            print(f"{key}: the max-batch prediction failed: {(se.strip().splitlines() or ['?'])[-1][:300]}", flush=True)
            return
        entry = doc["capacity"][key] = json.loads(so.strip().splitlines()[-1])
        save(out, doc)
    found, failed = entry.setdefault("found", {}), entry.setdefault("search_error", {})
    for variant in ("liveness", entry["best"]):
        if variant not in found:
            def fits(b, v=variant):
                r = run("try", net, v, b, cap, args.try_timeout)
                if "error" in r and not r.get("oom"):
                    raise SearchError(r["error"])
                return bool(r.get("ok"))
            try:
                found[variant] = search(fits, entry["predicted"][variant] or MODELS[net])
                failed.pop(variant, None)
            except SearchError as err:   # recorded, not kept as an answer: --resume searches again
                failed[variant] = str(err)
            save(out, doc)
        if found.get(variant):
            run("step", net, variant, found[variant], cap)
    b = found.get(entry["best"])
    if b:
        run("step", net, entry["best"] + STEP, b, cap)


def search(fits, guess: int) -> int:
    """The largest batch with fits(batch), starting from ``guess``: bracket by factors 1.25, 1.5, 2, 4, 8, ...
    (a good prediction costs few tries, a bad one not many more), then bisect to 2 % (fits is assumed monotone;
    each call is one try in its own process)."""
    factors = (1.25, 1.5, 2.0)
    guess = max(1, min(guess, MAX_BATCH))
    if fits(guess):
        lo, hi, i = guess, None, 0
        while hi is None and lo < MAX_BATCH:
            f = factors[i] if i < len(factors) else 2.0 ** (i - 1)
            nxt = min(MAX_BATCH, max(lo + 1, int(guess * f)))
            if fits(nxt):
                lo = nxt
            else:
                hi = nxt
            i += 1
        if hi is None:
            return lo
    else:
        lo, hi, i = 0, guess, 0
        while lo == 0 and hi > 1:
            f = factors[i] if i < len(factors) else 2.0 ** (i - 1)
            nxt = min(hi - 1, max(1, int(guess / f)))
            if fits(nxt):
                lo = nxt
            else:
                hi = nxt
            i += 1
        if lo == 0:
            return 0
    while hi - lo > max(1, lo // 50):
        mid = (lo + hi) // 2
        if fits(mid):
            lo = mid
        else:
            hi = mid
    return lo


def provenance(command: str) -> dict:
    import torch

    from engine.gpu import runtime
    return dict(runtime.provenance(command), torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version(),
                total_memory=torch.cuda.get_device_properties(0).total_memory, convention=CONVENTION,
                workspace_rule=WORKSPACE, reserve=RESERVE)


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
            lines.append(f"| {label} | {_gib(p.get('peak'))} | {r['error']} | | "
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
    lines = ["| capacity | variant | largest batch predicted | found | step ms at found batch (10-90 %) | images/s | "
             "peak GiB measured |", "|---|---|---|---|---|---|---|"]
    for gib in CAPACITIES_GIB:
        e = doc.get("capacity", {}).get(f"{net}/{gib}")
        if e is None:
            lines.append(f"| {gib} GiB | not run | | | | | |")
            continue
        if "error" in e:
            lines.append(f"| {gib} GiB | prediction failed: {e['error']} | | | | | |")
            continue
        found = e.get("found", {})
        best = e["best"]
        for variant, batch in (("liveness", found.get("liveness")), (best, found.get(best)),
                               (best + STEP, found.get(best))):
            label = {"liveness": "stock PyTorch"}.get(variant, variant.replace(STEP, " + per-step WR workspace"))
            r = _r(doc, "step", net, variant, batch, gib * GiB) if batch else None
            shown_found = "-" if batch is None else (f"{batch} (paper policy's)" if variant.endswith(STEP) else batch)
            if r is None or "error" in r:
                why = "not run" if r is None else r["error"]
                lines.append(f"| {gib} GiB | {label} | {e['predicted'].get(variant, '-')} | {shown_found} | {why} "
                             "| | |")
                continue
            lines.append(f"| {gib} GiB | {label} | {e['predicted'].get(variant, '-')} | {shown_found} | "
                         f"{r['step_ms']:.1f} ({r['step_ms_p10']:.1f}-{r['step_ms_p90']:.1f}) | "
                         f"{batch / r['step_ms'] * 1e3:,.0f} | {_gib(r['peak'])} |")
    return lines


def calibration_lines(doc) -> list[str]:
    tp = next((r["doc"] for r in doc["results"] if r["kind"] == "calibrate-host" and "doc" in r), None)
    if tp is None:
        return ["- time model: not calibrated in this run (assumed constants)"]
    c, h, f = tp.get("copy", {}), tp.get("hbm", {}), tp.get("fc", {})
    layers = sum(len(r["doc"].get("layers", {}).get(k, {})) for r in doc["results"]
                 if r["kind"] == "calibrate-layers" and "doc" in r for k in r["doc"].get("layers", {}))
    return [f"- time model calibrated on this host: pinned copies {c.get('h2d', 0) / 1e9:.1f} GB/s host->device, "
            f"{c.get('d2h', 0) / 1e9:.1f} GB/s device->host alone, {c.get('duplex_h2d', 0) / 1e9:.1f} / "
            f"{c.get('duplex_d2h', 0) / 1e9:.1f} GB/s both at once; elementwise HBM "
            f"{h.get('rate', 0) / 1e12:.2f} TB/s; "
            f"FC GEMM {f.get('flops', 0) / 1e12:.1f} TFLOP/s; {layers} non-conv layer times measured "
            "(used at the models' own batches; other batches model them by roofline)"]


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
             "warm-up, 10-90 % range in brackets; peak = `torch.cuda.max_memory_allocated` over the timed steps",
             f"- predicted: `plan_memory` on the imported network, tensors as PyTorch allocates them (convention "
             f"`{CONVENTION}`), workspace rule `{WORKSPACE}` (cuDNN's heuristic first, as PyTorch without "
             f"`cudnn.benchmark`), per-step plans with rule `wr` under {1 - RESERVE:.0%} of the capacity",
             *calibration_lines(doc), ""]
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
                    f"{k} {v}" for k, v in e["predicted"].items()) + f"; tried: stock and {e['best']}" +
                    "".join(f"; search for {k} failed: {v}" for k, v in e.get("search_error", {}).items()))
        lines.append("")
    lines += ["## Reading it", "",
              "- pred/meas of the peak near 1 means the planner's tensor inventory is PyTorch's; the prediction has "
              "no allocator rounding or fragmentation, and the measurement includes cuDNN and cuBLAS workspaces.",
              "- Offloaded bytes and recomputations measured are the runtime's own counters (per step).",
              "- The per-step WR row runs at the paper policy's found batch, so its step time compares with the "
              "paper policy's at the same memory; its largest batch predicted is for the plan's (1 - reserve) "
              "capacity.", ""]
    md = Path(args.output or Path(args.results).with_suffix(".md"))
    atomic_write(md, "\n".join(lines).encode())
    plot(doc, nets, md.with_suffix(".png"))
    readme = Path(args.readme) if args.readme else README
    write_block(readme, "memory_training", readme_block(doc))
    print(f"wrote {md}, {md.with_suffix('.png')} and the block in {readme}")
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
    return "\n".join(lines)


def plot(doc, nets, path: Path) -> None:
    import io

    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
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
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    plt.close(fig)
    atomic_write(path, buf.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default="benchmarks/reports/memory_training.json")
    m.add_argument("--configs", nargs="+", default=list(MODELS), choices=list(MODELS))
    m.add_argument("--parts", nargs="+", default=["calibrate", "policies", "capacity"],
                   choices=["calibrate", "policies", "capacity"])
    m.add_argument("--warmup", type=int, default=3)
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--timeout", type=int, default=150, help="seconds per case process")
    m.add_argument("--try-timeout", type=int, default=120, help="seconds per capacity try")
    m.add_argument("--budget-s", type=float, default=420,
                   help="launch no new case after this many seconds (with --timeout, under a 10-minute call)")
    m.add_argument("--resume", action="store_true", help="keep results already in the output file")
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
        print(json.dumps(predict_capacity(args.net, args.capacity)))
        return 0
    return measure(args) if args.cmd == "measure" else report(args)


if __name__ == "__main__":
    sys.exit(main())
