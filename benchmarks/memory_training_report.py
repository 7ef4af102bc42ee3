"""memory_training's report (no GPU): the markdown tables, the targets computed from the results, the README block
and the figures (memory_training_figures.py), from the results file alone."""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import json  # noqa: E402

from benchmarks.memory_training_figures import plot, plot_ticks  # noqa: E402
from benchmarks.memory_training_predict import (
    BUNDLED,
    CAPACITIES_GIB,
    CONVENTION,
    FILLS,
    GiB,
    MAX_BATCH,  # noqa: E402
    MIN_PEAK,
    MODELS,
    MODERN,
    PAPER,
    POLICIES,
    STEP,
    STOCK,
    WORKSPACE,
    _r,
)
from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402
from engine.memory.reserve import RESERVE  # noqa: E402


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
    lines = [
        "| policy | peak GiB predicted | measured | pred/meas | step ms predicted | measured (10-90 %) | "
        "pred/meas | offloaded MiB/step pred / meas | re-forwards pred / recomputed meas | targets: peak 10 %, "
        "step 15 % |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for policy in POLICIES:
        r = _r(doc, "step", net, policy, MODELS[net])
        label = f"{policy} (stock PyTorch)" if policy == STOCK else policy
        if r is None:
            lines.append(f"| {label} | not run | | | | | | | | |")
            continue
        p = r.get("predicted", {})
        if "error" in r:
            lines.append(
                f"| {label} | {_gib(p.get('peak'))} | {r['error'][:200]} | | {p.get('iteration_ms') or 0:.1f} | | | | "
                "| not measured |"
            )
            continue
        off = per_step(r["stats"], "offloaded_bytes")
        rec = per_step(r["stats"], "recomputed_layers")
        lines.append(
            f"| {label} | {_gib(p['peak'])} | {_gib(r['peak'])} | {_ratio(p['peak'], r['peak'])} | "
            f"{p['iteration_ms']:.1f} | {r['step_ms']:.1f} ({r['step_ms_p10']:.1f}-{r['step_ms_p90']:.1f}) | "
            f"{_ratio(p['iteration_ms'], r['step_ms'])} | {p['offload_bytes'] / 2**20:.0f} / "
            f"{'-' if off is None else f'{off / 2**20:.0f}'} | {p['recompute_count']} / "
            f"{'-' if rec is None else f'{rec:g}'} | {verdict(r)} |"
        )
    traces = [(p, _r(doc, "step", net, p, MODELS[net])) for p in POLICIES]
    return lines + [
        f"- {p}: measured, but no per-tick trace ({r['trace_error']})" for p, r in traces if r and "trace_error" in r
    ]


def verdict(r: dict) -> str:
    """Whether a measured case meets issue 23's targets: peak within 10 %, step time within 15 % of predicted."""
    p = r["predicted"]
    peak, step = r["peak"] / p["peak"] - 1, r["step_ms"] / p["iteration_ms"] - 1 if p.get("iteration_ms") else None
    return f"peak {peak:+.1%} {'met' if abs(peak) <= 0.10 else 'NOT met'}, step " + (
        "not predicted" if step is None else f"{step:+.1%} {'met' if abs(step) <= 0.15 else 'NOT met'}"
    )


def modern_lines(doc) -> list[str]:
    """Issue 23's acceptance on the MODERN models, computed from the results: every case at the model's batch
    within the peak and step targets, and each stock step using at least MIN_PEAK."""
    cases = [r for r in doc["results"] if r["kind"] == "step" and r["model"] in MODERN and r["capacity"] is None]
    if not cases:
        return []
    good = [r for r in cases if "error" not in r and "predicted" in r]
    met = [r for r in good if verdict(r).count("NOT") == 0 and "not predicted" not in verdict(r)]
    failed = [f"{r['model']} {r['variant']}: {r['error'][:120]}" for r in cases if "error" in r]
    stock = [r for r in good if r["variant"] == STOCK]
    small = [f"{r['model']} {_gib(r['peak'])} GiB" for r in stock if r["peak"] < MIN_PEAK]
    return [
        f"- issue 23, modern models ({', '.join(f'{n} b{b}' for n, b in MODERN.items())}): {len(met)} of "
        f"{len(cases)} cases meet both targets (peak within 10 %, step time within 15 %)"
        + (f"; failed: {'; '.join(failed)}" if failed else ""),
        f"- issue 23, stock step of each modern model at least {MIN_PEAK / GiB:.0f} GiB measured: "
        f"{len(stock) - len(small)} of {len(stock)}" + (f" (not: {', '.join(small)})" if small else ""),
    ]


def profile_lines(doc) -> list[str]:
    """How each MODERN model's convolutions were timed: the profile this benchmark measured."""
    out = []
    for net, res in doc.get("profiles", {}).items():
        got = f"{res['rows']} rows in {res['seconds']:.0f} s" if "error" not in res else f"FAILED: {res['error']}"
        out.append(
            f"- {net} b{MODELS[net]}: convolutions timed by a profile measured in the run (undivided, cuDNN's "
            f"heuristic list only: the `heuristic` rule's order, workspaces and times; GPU {res.get('gpu_uuid', '?')}"
            f"): {got}"
        )
        if res.get("depthwise"):
            out.append(
                f"  - {res['depthwise']} of its {res['convolutions']} convolutions are depthwise: stock PyTorch runs "
                "them in TF32 NCHW with its own CUDA kernels, not cuDNN (ATen's `use_cudnn_depthwise` takes cuDNN "
                "for depthwise only in channels_last or fp16), while the prediction times them by cuDNN's "
                "heuristic plan and counts its workspace: a step-time or peak miss of this model may come from there"
            )
    return out


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
    return [
        f"| capacity | variant | largest batch predicted{then} | found | found/predicted | timed at batch | "
        f"step ms predicted{then} / measured (10-90 %) | images/s | peak GiB predicted{then} / measured |",
        "|---|---|---|---|---|---|---|---|---|",
    ]


def capacity_entry_rows(doc, net, gib, e, results=None) -> list[str]:
    """Stock PyTorch and each searched paper policy (predicted and found largest batch), timed where the run timed
    it; the best paper policy + STEP at the batch both were timed at."""
    found, best, stepped = e.get("found", {}), e["best"], e.get("stepped", {})
    src = dict(doc, results=results) if results is not None else doc
    variants = [STOCK, best] + [p for p in PAPER if p != best and (p in found or p in e.get("skipped", {}))]
    rows = []
    for variant in variants + [best + STEP]:
        label = "stock PyTorch" if variant == STOCK else variant.replace(STEP, " + per-step WR workspace")
        pair = variant.endswith(STEP)
        f = found.get(variant.removesuffix(STEP))
        pred = e["predicted"].get(variant)
        fails = None if pair else fails_above(src, net, variant, gib * GiB, f)
        shown = (
            "-" if f is None else (f"{f} (paper policy's)" if pair else f"{f}" + (f" ({fails} fails)" if fails else ""))
        )
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
            why = "not timed" if variant not in (STOCK, best) and not pair else "not run"
            rows.append(f"{head} {why if r is None else r['error'][:90]} | | |")
            continue
        p = r.get("predicted", {})
        pms = f"{p['iteration_ms']:.1f} / " if p.get("iteration_ms") else ""
        rows.append(
            f"{head} {pms}{r['step_ms']:.1f} ({r['step_ms_p10']:.1f}-{r['step_ms_p90']:.1f}) | "
            f"{b / r['step_ms'] * 1e3:,.0f} | {_gib(p.get('peak'))} / {_gib(r['peak'])} |"
        )
    return rows


def at_limit(e: dict, predicted: int) -> bool:
    """A predicted largest batch at the prediction's limit says only "at least this many"."""
    return predicted >= e.get("limit", MAX_BATCH + 1)


def fails_above(doc, net: str, variant: str, cap: int, found: int | None) -> int | None:
    """The smallest batch above ``found`` whose try ran out of memory (how close the search came)."""
    failed = [
        r["batch"]
        for r in doc["results"]
        if r["kind"] == "try"
        and r.get("oom")
        and (r["model"], r["variant"], r["capacity"]) == (net, variant, cap)
        and r["batch"] > (found or 0)
    ]
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

    pairs = {
        t: (_r(doc, "step", net, best + STEP, t, cap), _r(doc, "step", net, best, t, cap))
        for t in sorted(
            {
                r["batch"]
                for r in doc["results"]
                if r["kind"] == "step"
                and r["model"] == net
                and r["capacity"] == cap
                and r["variant"] in (best, best + STEP)
            },
            reverse=True,
        )
    }
    mine, paper = pairs.get(b, (None, None))
    if mine and paper and "error" not in mine and "error" not in paper:
        gain = paper["step_ms"] / mine["step_ms"] - 1
        hosts = (
            "on one host"
            if mine.get("gpu_uuid") == paper.get("gpu_uuid")
            else "on two hosts: not a comparison the target accepts"
        )
        p = mine.get("predicted", {})
        stalls = (
            f"; its plan predicts {p['stall_ms']:.0f} ms of the {p['iteration_ms']:.0f} ms step waiting on host "
            f"copies, which no convolution speed shortens"
            if p.get("stall_ms") and p.get("iteration_ms")
            else ""
        )
        only = [t for t, (m, s) in pairs.items() if m and "error" not in m and s and s.get("oom")]
        alone = (
            (
                f"; at batch {', '.join(map(str, only))} only the per-step plan trained (stock convolutions ran out "
                "of memory)"
            )
            if only
            else ""
        )
        return (
            f"{label} at batch {b}: {mine['step_ms']:.1f} ms against {paper['step_ms']:.1f} ms with stock "
            f"convolutions ({'faster' if gain > 0 else 'slower'} by {abs(gain):.1%}; target: faster), {hosts}"
            f"{stalls}{alone}"
        )
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
        out.append(
            f"| {r['model']} {r['variant']} b{r['batch']}{cap} | {(r.get('gpu_uuid') or '?')[:12]} | {got} | "
            f"{_gib(r.get('peak')) if 'error' not in r else '-'} | {r.get('replaced_in_call', '?')} | "
            f"{r.get('why', '')} |"
        )
    if rows and tries:
        out.append("")
    for (net, variant, cap, why), rs in tries.items():
        fit = max((r["batch"] for r in rs if r.get("ok")), default="-")
        oom = min((r["batch"] for r in rs if r.get("oom")), default="-")
        out.append(
            f"- {net} {variant} under {cap // GiB} GiB, its search ({len(rs)} tries): trained up to batch "
            f"{fit}, out of memory from {oom}; {why}"
        )
    return out


def accuracy_lines(doc, details: bool = True) -> list[str]:
    """The issue's targets, computed from the results: peaks within 10 % and step times within 15 % of the
    prediction, largest batches within 5 %, and the per-step workspace against the same paper policy."""
    peak_ok, time_ok, peak_miss, time_miss = 0, 0, [], []
    cases = [
        r
        for r in doc["results"]
        if r["kind"] == "step" and r["capacity"] is None and "error" not in r and "predicted" in r
    ]
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
    lines = [
        f"- measured peak within 10 % of predicted: {peak_ok} of {len(cases)} cases"
        + (f" (not: {', '.join(peak_miss)})" if peak_miss else ""),
        f"- measured step time within 15 % of predicted (calibrated): {time_ok} of {len(cases)} cases"
        + (f" (not: {', '.join(time_miss)}; measured / predicted - 1)" if time_miss else ""),
    ]
    per_gib: dict[int, list[int]] = {}  # capacity -> [within 5 %, compared, at the prediction's limit]
    detail = []
    for key, e in doc.get("capacity", {}).items():
        count = per_gib.setdefault(int(key.split("/")[1]), [0, 0, 0])
        for variant, f in e.get("found", {}).items():
            pred = e["predicted"].get(variant)
            if f and pred and at_limit(e, pred):
                count[2] += 1
                detail.append(
                    f"- {key} GiB, {variant}: largest batch found {f}, predicted at least {pred} (the "
                    "prediction's limit: no comparison)"
                )
            elif f and pred:
                count[0] += abs(f / pred - 1) <= 0.05
                count[1] += 1
                detail.append(
                    f"- {key} GiB, {variant}: largest batch found {f}, predicted {pred} "
                    f"({f / pred - 1:+.1%}; target within 5 %)"
                )
        for variant, why in e.get("search_error", {}).items():
            lines.append(f"- {key} GiB, {variant}: the search did not finish ({why})")
        for variant, why in e.get("skipped", {}).items():
            lines.append(f"- {key} GiB, {variant}: not searched ({why})")
        if e.get("host_limited"):
            lines.append(
                f"- {key} GiB: {e['best']} is timed, the best paper policy this host can run "
                f"({e['host_limited']} is predicted best)"
            )
        line = per_step_comparison(doc, key, e)
        if line:
            lines.append(line)
    summary = [
        f"- under {gib} GiB, largest batch found within 5 % of predicted: {ok} of {n} searches"
        + (f" ({lim} more reached the prediction's limit)" if lim else "")
        for gib, (ok, n, lim) in sorted(per_gib.items())
    ]
    return lines[:2] + summary + lines[2:] + (detail if details else [])


def earlier_lines(doc) -> list[str]:
    """Runs kept from earlier calls of this script, with their own provenance (shown as measured then)."""
    out = []
    for run in doc.get("earlier_runs", []):
        prov = run["provenance"]
        out += [
            f"### Earlier run: {prov['date']}",
            "",
            run.get("why", ""),
            "",
            f"- command: `{prov['command']}`; {prov.get('gpu')}; allocator: "
            f"{prov.get('allocator', 'default (fixed segments)')}",
            "",
        ]
        for key, e in run.get("capacity", {}).items():
            net, gib = key.split("/")
            out += [*capacity_head(" then"), *capacity_entry_rows(doc, net, int(gib), e, run["results"]), ""]
    return out


def calibration_lines(doc) -> list[str]:
    """The time model each lent machine calibrated (a run of several calls keeps every host's), and the cases each
    predicted."""
    cals = doc.get("calibrations") or {
        r.get("gpu_uuid", "?"): r["doc"] for r in doc["results"] if r["kind"] == "calibrate-host" and "doc" in r
    }
    if not cals:
        return ["- time model: not calibrated in this run (assumed constants)"]
    cases = [r for r in doc["results"] if r["kind"] == "step" and "predicted" in r]
    lines = []
    for uuid, tp in cals.items():
        c, h, f = tp.get("copy", {}), tp.get("hbm", {}), tp.get("fc", {})
        layers = sum(len(v) for v in tp.get("layers", {}).values())
        used = sum(r.get("calibration_uuid") == uuid for r in cases)
        lines.append(
            f"- time model calibrated on {uuid} (predicts {used} of the {len(cases)} timed cases): pinned "
            f"copies {c.get('h2d', 0) / 1e9:.1f} GB/s host->device, {c.get('d2h', 0) / 1e9:.1f} GB/s "
            f"device->host alone, {c.get('duplex_h2d', 0) / 1e9:.1f} / {c.get('duplex_d2h', 0) / 1e9:.1f} "
            f"GB/s both at once; elementwise HBM {h.get('rate', 0) / 1e12:.2f} TB/s; FC GEMM "
            f"{f.get('flops', 0) / 1e12:.1f} TFLOP/s; {layers} non-conv layer times measured (used at the "
            "models' own batches; other batches model them by roofline)"
        )
    return lines + host_lines(doc)


def host_lines(doc) -> list[str]:
    """Which lent machine measured what: each lent call may land on another machine, and copy rates are a host's.
    Says how many cases were predicted with a calibration measured on another machine than their own."""
    cases = [r for r in doc["results"] if r["kind"] == "step" and "predicted" in r]
    other = sorted(
        {
            (r.get("gpu_uuid") or "?", r.get("calibration_uuid") or "?")
            for r in cases
            if r.get("gpu_uuid") != r.get("calibration_uuid")
        }
    )
    if not other:
        return []
    n = sum(r.get("gpu_uuid") != r.get("calibration_uuid") for r in cases)
    return [
        f"- NOTE: {n} of {len(cases)} cases were predicted with a calibration from another lent machine than "
        f"the one they ran on (" + "; ".join(f"ran on {g}, calibrated on {c}" for g, c in other) + "): their "
        "predicted times carry that machine's copy rates"
    ]


def report(args) -> int:
    doc = json.loads(Path(args.results).read_text())
    prov = doc["provenance"]
    nets = [
        n
        for n in MODELS
        if any(r["model"] == n for r in doc["results"]) or any(k.startswith(f"{n}/") for k in doc.get("capacity", {}))
    ]
    synthetic = " (SYNTHETIC data)" if prov.get("synthetic") else ""
    lines = [
        f"# Memory policies in PyTorch training steps: predicted vs measured{synthetic}",
        "",
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
        *calibration_lines(doc),
    ]
    for i, call in enumerate(doc.get("calls", []), 1):
        lines.append(f"- call {i}: {call['date']} on {call['gpu_uuid']}: `{call['command']}`")
    lines += [f"- note: {n}" for n in doc.get("notes", [])]
    if "predicted_at" in doc:
        pa = doc["predicted_at"]
        lines.append(f"- predictions recomputed on a CPU at {pa['commit']} ({pa['date']}): `{pa['command']}`")
    lines += profile_lines(doc)
    lines += ["", "## Targets", "", *accuracy_lines(doc), *modern_lines(doc), ""]
    for net in nets:
        lines += [f"## {net} b{MODELS[net]}", "", *policy_rows(doc, net), ""]
        r = _r(doc, "step", net, STOCK, MODELS[net])
        if r and r.get("predicted", {}).get("time_model"):
            lines += [f"- {r['predicted']['time_model']}", ""]
        if net not in BUNDLED:
            lines += [
                f"- batch {MODELS[net]}: the smallest multiple of 16 whose stock step `plan_memory` predicts to hold "
                f"at least {MIN_PEAK / GiB:.0f} GiB + 10 %, tensors only (`batch_for`); no capacity runs (its "
                "profile has the undivided batch alone)",
                "",
            ]
            continue
        lines += [
            "Under a memory cap (`torch.cuda.set_per_process_memory_fraction`):",
            "",
            *capacity_rows(doc, net),
            "",
        ]
        for gib in CAPACITIES_GIB:
            e = doc.get("capacity", {}).get(f"{net}/{gib}", {})
            if "predicted" in e:
                lines.append(
                    f"- {gib} GiB, largest batch predicted per policy: "
                    + ", ".join(f"{k} {v}" for k, v in e["predicted"].items())
                    + "".join(f"; search for {k} failed: {v}" for k, v in e.get("search_error", {}).items())
                )
        lines.append("")
    if doc.get("earlier_runs"):
        lines += ["## Earlier runs", "", *earlier_lines(doc)]
    if doc.get("replaced"):
        lines += [
            "## Replaced results",
            "",
            "Cases run again later; their measurements as they were:",
            "",
            *replaced_lines(doc),
            "",
        ]
    lines += [
        "## Reading it",
        "",
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
        "found a little above, where the allocator's blocks take less than the reserve.",
        "",
    ]
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
    head = (
        f"Memory policies in PyTorch training steps on the {prov['gpu']} (PyTorch {prov.get('torch')}, "
        f"{prov['date'][:10]}{', SYNTHETIC data' if prov.get('synthetic') else ''}): peak GiB and step ms, "
        "predicted / measured. Every case, the capacity runs and the method: "
        "[benchmarks/reports/memory_training.md](benchmarks/reports/memory_training.md)."
    )
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
                cells.append(
                    f"{_gib(p['peak'])} / {_gib(r['peak'])} GiB, {p['iteration_ms']:.0f} / {r['step_ms']:.0f} ms"
                )
        lines.append(f"| {net} b{MODELS[net]} | " + " | ".join(cells) + " |")
    return "\n".join(
        lines
        + [
            "",
            "Against the targets (computed from the same file):",
            "",
            *accuracy_lines(doc, details=False),
            *modern_lines(doc),
            *host_lines(doc),
        ]
    )
