"""memory_training's GPU driver (``measure``): the calibration of each host, the policy cases, and the capacity
runs (memory_training_search.py), each case in its own process, results saved after each."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import contextlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import subprocess  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from concurrent.futures import ThreadPoolExecutor  # noqa: E402

from benchmarks import common  # noqa: E402
from benchmarks.common import save_json  # noqa: E402
from benchmarks.memory_training_case import gpu_uuid  # noqa: E402
from benchmarks.memory_training_predict import (
    ALLOC_CONF,
    BUNDLED,
    CONVENTION,
    GiB,
    MODELS,
    WORKSPACE,  # noqa: E402
    calibration,
    profile_path,
    profiles_dir,
    time_params_path,
    torch_name,
)
from benchmarks.memory_training_search import capacity  # noqa: E402
from engine.memory.reserve import RESERVE  # noqa: E402

ENTRY = Path(__file__).with_name("memory_training.py")  # the CLI every case process runs


def case_key(r: dict) -> str:
    return f"{r['kind']}/{r['model']}/{r['variant']}/{r['batch']}/{r['capacity']}"


def redo_name(r: dict) -> str:
    """How ``--redo`` names a case: NET/POLICY for a step, NET/calibrate-layers for a model's layer times."""
    return f"{r['model']}/{r['variant'] or r['kind']}"


def child(args, kind, net, variant="", batch=0, capacity=None, timeout=300) -> dict:
    cmd = [
        sys.executable,
        str(ENTRY),
        "case",
        kind,
        net,
        variant or "-",
        str(batch),
        str(capacity or 0),
        "--warmup",
        str(args.warmup),
        "--steps",
        str(args.steps),
        "--profiles",
        str(profiles_dir(Path(args.output))),
    ]
    tp = time_params_path(Path(args.output))
    if tp.exists():
        cmd += ["--time-params", str(tp)]
    base = {"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity}
    return common.run_case(
        cmd, base, timeout, env=dict(os.environ, PYTORCH_CUDA_ALLOC_CONF=ALLOC_CONF), failed={"ok": False}
    )


class Budget(Exception):
    """The wall-clock budget of this call is spent: rerun with --resume."""


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
    done = {
        case_key(r): r
        for r in doc["results"]
        if ("error" not in r or r.get("oom")) and (not r["kind"].startswith("calibrate") or r.get("gpu_uuid") == here)
    }
    # --redo: once per code commit (a call cut short by its budget and resumed with the same --redo goes on)
    commit = doc["provenance"].get("commit")
    again = [k for k, r in done.items() if redo_name(r) in args.redo and r.get("redone_at", ()) != commit]
    redo = {k: done.pop(k) for k in again}
    lock = threading.RLock()  # capacity searches run in threads: one writer of ``doc``, ``done`` and the file

    def budget():
        if time.time() - t_start > args.budget_s:
            raise Budget

    def run(kind, net, variant="", batch=0, capacity=None, timeout=args.timeout, again=False):
        return run_many(kind, net, variant, [batch], capacity, timeout, again=again)[0]

    def run_many(kind, net, variant, batches, capacity=None, timeout=args.timeout, hold=None, again=False):
        """Cases that differ only in the batch, at once, each process inside ``hold(batch)`` when given (capacity
        tries: the GPU memory and pinned host memory they may take together); results in the order of
        ``batches``. ``again``: run here even where a result is kept (it replaces that one)."""
        keys = [
            case_key({"kind": kind, "model": net, "variant": variant, "batch": b, "capacity": capacity})
            for b in batches
        ]
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
                    if key in done and again:  # kept, not lost: the report lists what a new run replaced
                        doc.setdefault("replaced", []).append(
                            dict(done[key], replaced_in_call=len(doc["calls"]), why="its pair ran again on one host")
                        )
                    elif key in redo:
                        doc.setdefault("replaced", []).append(
                            dict(redo.pop(key), replaced_in_call=len(doc["calls"]), why="asked to run again (--redo)")
                        )
                        res["redone_at"] = commit
                    doc["results"] = [r for r in doc["results"] if case_key(r) != key] + [res]
                    done[key] = res
                    print(
                        json.dumps(
                            {
                                k: res.get(k)
                                for k in (
                                    "kind",
                                    "model",
                                    "variant",
                                    "batch",
                                    "capacity",
                                    "ok",
                                    "step_ms",
                                    "peak",
                                    "error",
                                )
                            }
                        ),
                        flush=True,
                    )
            with lock:
                save_json(out, doc)
            if any(isinstance(f.exception(), Budget) for f in futures):
                raise Budget
        with lock:
            return [done[k] for k in keys]

    pending = {}
    capacity_runs = bool({"search", "timed"} & set(args.parts))
    capacity_nets = [net for net in args.configs if net in BUNDLED]  # a MODERN model's profile is undivided
    from engine.memory.calibrate import load as load_tp, measured_layers, merge, save as save_tp

    calibrated_on = calibration(time_params_path(out))[2]
    mine = load_tp(time_params_path(out)) if calibrated_on == here and "calibrate" not in args.parts else None
    if "calibrate" not in args.parts and calibrated_on != here:
        print(
            f"the calibration beside {out} is not this host's ({calibrated_on or 'none'}): calibrating first",
            flush=True,
        )
    # this host's calibration lacks the layer times of a network it has not run yet: measured before its cases
    lacking = [net for net in args.configs if mine is None or not measured_layers(mine, torch_name(net), MODELS[net])]
    try:
        measure_profiles(args, doc, out, budget, t_start)
        if lacking:
            docs = ([run("calibrate-host", "host")] if mine is None else [{"doc": mine}]) + [
                run("calibrate-layers", net, batch=MODELS[net], timeout=layers_timeout(args, t_start))
                for net in lacking
            ]
            ok = [d["doc"] for d in docs if d and "doc" in d]
            if ok:
                merged = merge(*ok)
                merged["provenance"]["gpu_uuid"] = here
                save_tp(time_params_path(out), merged)
                doc.setdefault("calibrations", {})[here] = merged  # each host's, for `predict` of its cases
                save_json(out, doc)
        # capacity predictions are CPU work (with the calibration's framework bytes): beside the GPU cases
        if capacity_runs:
            for net in capacity_nets:
                for gib in args.capacities:
                    if f"{net}/{gib}" not in doc["capacity"]:
                        pending[net, gib] = start_prediction(net, gib, time_params_path(out))
        if "policies" in args.parts:
            for net in args.configs:
                for policy in args.policies:
                    run("step", net, policy, MODELS[net])
        if capacity_runs:
            entries = {
                (net, gib): e
                for net in capacity_nets
                for gib in args.capacities
                if (e := capacity_prediction(args, doc, out, pending, net, gib)) is not None
            }
            capacity(args, doc, out, run, run_many, lock, entries)
    except Budget:
        print(f"budget of {args.budget_s} s spent: run again with --resume to go on", flush=True)
        for (net, gib), p in list(pending.items()):  # finished predictions are kept, the others stopped
            if p.poll() is None:
                p.kill()
            else:
                capacity_prediction(args, doc, out, pending, net, gib)
        return 0
    print("all done", flush=True)
    return 0


LAYERS_TIMEOUT = 300  # seconds for a model's layer calibration (a MODERN model has hundreds of non-conv layers)


def layers_timeout(args, t_start: float) -> int:
    """A layer calibration's time limit: LAYERS_TIMEOUT, within the call's end (``--budget-s`` + ``--timeout``)."""
    return int(max(args.timeout, min(LAYERS_TIMEOUT, args.budget_s + args.timeout - (time.time() - t_start))))


def measure_profiles(args, doc, out: Path, budget, t_start: float) -> None:
    """The profile of each MODERN model the run lacks (memory_training_case.measure_profile), before its
    calibration: the cases' predictions need its convolution times. A profile's process may run until the
    call's end (``--budget-s`` + ``--timeout``); the profiler's cache beside the results keeps what it measured,
    so a call cut short goes on where it stopped (with ``--resume``)."""
    folder = profiles_dir(out)
    for net in args.configs:
        if net in BUNDLED or profile_path(net, folder).exists():
            continue
        budget()
        left = max(60, int(args.budget_s + args.timeout - (time.time() - t_start)))
        res = child(args, "profile", net, batch=MODELS[net], timeout=left)
        doc.setdefault("profiles", {})[net] = res
        save_json(out, doc)
        print(
            json.dumps({k: res.get(k) for k in ("kind", "model", "batch", "profile", "seconds", "error")}), flush=True
        )


def start_prediction(net: str, gib: int, time_params: Path) -> subprocess.Popen:
    """``predict-capacity`` in a process that sees no GPU (CPU work, beside the GPU cases)."""
    cmd = [sys.executable, str(ENTRY), "predict-capacity", net, str(gib * GiB)]
    if time_params.exists():
        cmd += ["--time-params", str(time_params)]
    return subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=dict(os.environ, CUDA_VISIBLE_DEVICES="")
    )


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
    if proc.returncode:  # not kept: --resume tries again
        print(f"{key}: the max-batch prediction failed: {(se.strip().splitlines() or ['?'])[-1][:300]}", flush=True)
        return None
    entry = doc["capacity"][key] = json.loads(so.strip().splitlines()[-1])
    save_json(out, doc)
    return entry


def provenance(command: str) -> dict:
    import torch

    return common.provenance(
        command,
        total_memory=torch.cuda.get_device_properties(0).total_memory,
        convention=CONVENTION,
        workspace_rule=WORKSPACE,
        reserve=RESERVE,
        allocator=ALLOC_CONF,
        commit=common.git_commit(),
    )
