"""Side-by-side benchmark: what a framework does vs WR vs WD vs PyTorch, measured on the GPU.

The mu-cuDNN paper's Fig. 10 and Fig. 13 on today's GPU. For each bundled network and each
per-kernel workspace limit L (8, 64, 512 MiB) it measures the total convolution time of

  (a) undivided: per kernel, the first plan in cuDNN's heuristic order whose workspace fits L
      (what a framework does under a workspace limit);
  (b) WR: per kernel, the WR dynamic program under L, with powerOfTwo and (AlexNet) all;
  (c) WD: one total budget of (number of kernels) x L divided by the 0-1 ILP (one arena);
  (d) PyTorch F.conv2d forward and backward with cudnn.benchmark on and unlimited memory;

plus the unlimited-workspace optimum, each with the workspace it used. Two steps, so that the
optimizers run where PuLP/HiGHS are installed and the GPU host only measures:

    python benchmarks/side_by_side.py prepare -o benchmarks/reports/side_by_side_plans.json
    python benchmarks/side_by_side.py measure benchmarks/reports/side_by_side_plans.json \
        -o side_by_side_results.json            # on the GPU host
    python benchmarks/side_by_side.py report benchmarks/reports/side_by_side_results.json.gz \
        -o benchmarks/reports/side_by_side.md

Every configuration is executed by engine.gpu.executor (pieces back-to-back, wgrad adds
included) and timed with CUDA events: warm-up, then the median of repeats. AlexNet's WR 64 MiB
and WD plans are also run through engine.gpu.verify (results checked against a float64 reference).
"""

from __future__ import annotations

import argparse
import gzip
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.errors import InfeasibleBudgetError  # noqa: E402
from engine.kernels import KernelSignature  # noqa: E402
from engine.units import MiB  # noqa: E402

NETWORKS = [  # (network, batch, precision, layout, powerOfTwo profile, optional `all` profile)
    ("alexnet", 256, "tf32", "NCHW", "h100-alexnet-b256-tf32-nchw-powerOfTwo", "h100-alexnet-b256-tf32-nchw-all"),
    ("resnet18", 128, "tf32", "NCHW", "h100-resnet18-b128-tf32-nchw-powerOfTwo", None),
    ("resnet50", 32, "tf32", "NCHW", "h100-resnet50-b32-tf32-nchw-powerOfTwo", None),
    ("resnet50", 64, "tf32", "NCHW", "h100-resnet50-b64-tf32-nchw-powerOfTwo", None),
    ("vgg16", 64, "tf32", "NCHW", "h100-vgg16-b64-tf32-nchw-powerOfTwo", None),
    ("densenet40", 256, "tf32", "NCHW", "h100-densenet40-b256-tf32-nchw-powerOfTwo", None),
    ("googlenet", 128, "tf32", "NCHW", "h100-googlenet-b128-tf32-nchw-powerOfTwo", None),
    ("alexnet", 256, "fp16", "NHWC", "h100-alexnet-b256-fp16-nhwc-powerOfTwo", None),
    ("resnet50", 32, "fp16", "NHWC", "h100-resnet50-b32-fp16-nhwc-powerOfTwo", None),
]
LIMITS = (8 * MiB, 64 * MiB, 512 * MiB)
HEURISTIC_NOTE = " [heuristic engines only]"
ARENA_ALIGN = 256


# ----------------------------------------------------------------------------------- prepare (CPU)
def _config(kernel, conf, time_ms=None):
    return {"id": kernel.id, "signature": kernel.signature.key,
            "micro": [{"batch": m.batch, "plan": m.plan, "time_ms": m.time_ms, "workspace": m.workspace}
                      for m in conf],
            "workspace": max((m.workspace for m in conf), default=0),
            "time_ms": sum(m.time_ms for m in conf) if time_ms is None else time_ms}


def _with_offsets(kernels):
    off = 0
    for k in kernels:
        k["offset"] = off
        off += -(-k["workspace"] // ARENA_ALIGN) * ARENA_ALIGN
    return off


def prepare(args) -> None:
    from engine.optimize import desirable_set, network_front, wd, wr
    from engine.policies import batch_sizes
    from engine.profile import Profile, resolve_profile
    from engine.zoo import get_network

    out = {"networks": [], "limits": list(LIMITS), "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    for name, batch, prec, layout, pname, all_name in NETWORKS:
        if args.only and f"{name}-b{batch}-{prec}" not in args.only:
            continue
        prof = Profile.load(resolve_profile(pname))
        prof_all = Profile.load(resolve_profile(all_name)) if all_name else None
        net = get_network(name, batch)
        kernels = net.kernels(prec, layout)
        pow2 = batch_sizes("powerOfTwo", batch)
        cand = {k.signature.key: prof.candidates(k.signature.key, pow2) for k in kernels}
        sets = {key: desirable_set(c, batch) for key, c in cand.items()}
        entry = {"network": name, "batch": batch, "precision": prec, "layout": layout, "profile": pname,
                 "profile_all": all_name, "provenance": prof.provenance, "configs": []}

        def add(label, limit, mode, ks, predicted=None, **extra):
            arena = _with_offsets(ks) if mode == "wd" else max((k["workspace"] for k in ks), default=0)
            entry["configs"].append({"label": label, "limit": limit, "mode": mode, "kernels": ks,
                                     "predicted_ms": sum(k["time_ms"] for k in ks) if predicted is None else predicted,
                                     "workspace_sum": sum(k["workspace"] for k in ks),
                                     "workspace_max": max((k["workspace"] for k in ks), default=0),
                                     "arena": arena, **extra})

        best = [_config(k, min(sets[k.signature.key], key=lambda c: c.time_ms).micro) for k in kernels]
        add("optimum (unlimited workspace)", None, "wr", best)
        # WR variants; a heuristics-only `all` profile is set beside the same engines at powerOfTwo
        variants = [("powerOfTwo", prof, "")]
        heur = prof.restrict("heuristics") if prof.swept and prof_all is not None and not prof_all.swept else None
        if prof_all is not None:
            variants.append(("all", prof_all, HEURISTIC_NOTE if heur else ""))
        if heur:
            variants.append(("powerOfTwo", heur, HEURISTIC_NOTE))
            hsets = {k.signature.key: desirable_set(heur.candidates(k.signature.key, pow2), batch) for k in kernels}
            add(f"optimum (unlimited workspace){HEURISTIC_NOTE}", None, "wr",
                [_config(k, min(hsets[k.signature.key], key=lambda c: c.time_ms).micro) for k in kernels])
        for L in LIMITS:
            und = []
            for k in kernels:
                m = prof.heuristic_first(k.signature.key, batch, L)
                und.append(_config(k, [m]) if m else None)
            if all(und):
                add("(a) undivided, heuristic order", L, "wr", und)
            for policy, p, note in variants:
                sizes = batch_sizes(policy, batch)
                try:
                    ks = [_config(k, wr(p.candidates(k.signature.key, sizes), batch, L).micro) for k in kernels]
                    add(f"(b) WR {policy}{note}", L, "wr", ks)
                except InfeasibleBudgetError as err:
                    print(f"{name} WR {policy} {L}: {err}", file=sys.stderr)
            total = len(kernels) * L
            budgets = [(total, f"(c) WD total {len(kernels)} x limit")]
            if name == "alexnet" and L == 8 * MiB:
                budgets.append((120 * MiB, "(c) WD total 120 MiB (the paper's AlexNet budget)"))
                if heur:
                    budgets.append((120 * MiB, f"(c) WD total 120 MiB{HEURISTIC_NOTE}"))
            for budget, label in budgets:
                ksets = [(hsets if HEURISTIC_NOTE in label else sets)[k.signature.key] for k in kernels]
                try:
                    res = wd(ksets, budget)
                except InfeasibleBudgetError as err:
                    print(f"{name} WD {budget}: {err}", file=sys.stderr)
                    continue
                ks = [_config(k, c.micro) for k, c in zip(kernels, res.configurations)]
                add(label, budget, "wd", ks, n_variables=res.n_variables, solve_ms=res.solve_time_s * 1e3)
        front = network_front([sets[k.signature.key] for k in kernels])
        entry["front_points"] = len(front)
        out["networks"].append(entry)
        print(f"prepared {name} b{batch} {prec}: {len(entry['configs'])} configurations", file=sys.stderr)
    Path(args.output).write_text(json.dumps(out, indent=1))


# ----------------------------------------------------------------------------------- measure (GPU)
def _measure_config(cfg, batch, ctx, plans, bufs, repeats, cache):
    from engine.gpu import runtime
    from engine.gpu.executor import Arena, KernelExecutor, KernelRun
    from engine.gpu.profiler import KernelBuffers

    runs = [KernelRun(k["id"], KernelSignature.from_key(k["signature"], batch),
                      [(m["batch"], m["plan"]) for m in k["micro"]], k["workspace"], k.get("offset"))
            for k in cfg["kernels"]]
    exes = [KernelExecutor(r, plans) for r in runs]
    arena = Arena(runs, exes, cfg["mode"])
    for k, r, ex in zip(cfg["kernels"], runs, exes):
        key = (r.sig.key, tuple(r.micro))
        if key not in cache:
            if r.sig.key not in bufs:
                bufs[r.sig.key] = KernelBuffers(r.sig, batch)
            b = bufs[r.sig.key]
            ptrs, w_arr, ws_ptr = b.pointers(batch, 0), b.w, arena.pointer(r)
            times = runtime.time_repeats(ctx, lambda i: ex.enqueue(ptrs, ws_ptr, ctx, w_array=w_arr),
                                         repeats=repeats, warmup=2)
            cache[key] = runtime.median(times)
        k["measured_ms"] = cache[key]
    cfg["measured_ms"] = sum(k["measured_ms"] for k in cfg["kernels"])
    cfg["arena_allocated"] = arena.size
    cfg["scratch_bytes"] = sum(e.scratch_bytes for e in exes)


def _torch_convs(name, batch, prec, layout, repeats):
    """PyTorch F.conv2d forward + backward per conv layer, cudnn.benchmark on, unlimited memory."""
    import torch
    import torch.nn.functional as F

    from engine.zoo import get_network
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = prec == "tf32"
    dtype = torch.float16 if prec == "fp16" else torch.float32
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    net = get_network(name, batch)
    total, extra_max, rows = 0.0, 0, []
    for layer in net.conv_layers():
        p = layer.params
        c, h, w = net.layer(layer.inputs[0]).out_shape
        need_dx = net.needs_grad[layer.inputs[0]]
        x = torch.randn(batch, c, h, w, device="cuda", dtype=dtype).to(memory_format=fmt).requires_grad_(need_dx)
        wt = torch.randn(p["k"], c // p["groups"], p["r"], p["s"], device="cuda", dtype=dtype)
        wt = wt.to(memory_format=fmt).requires_grad_(True)
        kw = dict(stride=(p["stride_h"], p["stride_w"]), padding=(p["pad_h"], p["pad_w"]),
                  dilation=(p["dil_h"], p["dil_w"]), groups=p["groups"])
        y = F.conv2d(x, wt, **kw)
        dy = torch.randn_like(y)

        def step():
            out = F.conv2d(x, wt, **kw)
            out.backward(dy)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(repeats + 1)]
        ev[0].record()
        for i in range(repeats):
            step()
            ev[i + 1].record()
        torch.cuda.synchronize()
        times = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(repeats))
        med = times[len(times) // 2]
        # peak above the live tensors, less the step's own outputs (y, dx, dw): an upper bound on workspace
        extra = torch.cuda.max_memory_allocated() - base - y.numel() * y.element_size() \
            - (x.numel() * x.element_size() if need_dx else 0) - wt.numel() * wt.element_size()
        extra_max = max(extra_max, extra)
        total += med
        rows.append({"layer": layer.name, "ms": med, "extra_bytes": int(max(extra, 0))})
    return {"measured_ms": total, "layers": rows, "extra_bytes_max": int(max(extra_max, 0)),
            "torch": torch.__version__, "cudnn": torch.backends.cudnn.version(),
            "allow_tf32": torch.backends.cudnn.allow_tf32}


def measure(args) -> None:
    from engine.gpu import runtime
    from engine.gpu.graphs import PlanCache
    from engine.gpu.verify import verify_plan

    data = json.loads(Path(args.plans).read_text())
    ctx = runtime.context()
    data["provenance"] = runtime.provenance("python benchmarks/side_by_side.py " + " ".join(sys.argv[1:]))
    deadline = time.time() + args.budget_s
    for entry in data["networks"]:
        tag = f"{entry['network']}-b{entry['batch']}-{entry['precision']}"
        if args.only and tag not in args.only:
            continue
        if time.time() > deadline:
            print(f"skip {tag}: out of time", file=sys.stderr)
            continue
        prof = entry["provenance"]
        if (prof["gpu"], prof["cudnn_version"]) != (data["provenance"]["gpu"], data["provenance"]["cudnn_version"]):
            print(f"skip {tag}: profiled on {prof['gpu']} cuDNN {prof['cudnn_version']}, this is "
                  f"{data['provenance']['gpu']} cuDNN {data['provenance']['cudnn_version']}", file=sys.stderr)
            continue
        t0 = time.time()
        plans, bufs, cache = PlanCache(ctx), {}, {}
        for cfg in entry["configs"]:
            _measure_config(cfg, entry["batch"], ctx, plans, bufs, args.repeats, cache)
            print(f"{tag:28s} {cfg['label'][:44]:44s} {str((cfg['limit'] or 0) // MiB):>5} MiB  pred "
                  f"{cfg['predicted_ms']:8.2f}  meas {cfg['measured_ms']:8.2f} ms", file=sys.stderr, flush=True)
        if entry["network"] == "alexnet" and entry["precision"] == "tf32":
            for cfg in entry["configs"]:
                if cfg["label"] == "(b) WR powerOfTwo" and cfg["limit"] == 64 * MiB or cfg["label"].startswith(
                        "(c) WD total 120 MiB (the paper"):
                    plan = {"mode": cfg["mode"], "network": {"name": "alexnet", "batch": entry["batch"]},
                            "kernels": cfg["kernels"]}
                    rep = verify_plan(plan, repeats=args.repeats)
                    cfg["verify"] = rep["totals"] | {"max_rel_l2": max(k["rel_l2"] for k in rep["kernels"]),
                                                     "kernels": [{f: k[f] for f in ("id", "predicted_ms", "measured_ms",
                                                                                    "ratio", "rel_l2")}
                                                                 for k in rep["kernels"]]}
                    print(f"verify {cfg['label']}: {cfg['verify']}", file=sys.stderr, flush=True)
        if args.torch:
            try:
                entry["torch"] = _torch_convs(entry["network"], entry["batch"], entry["precision"],
                                              entry["layout"], args.repeats)
                print(f"{tag:28s} PyTorch cudnn.benchmark: {entry['torch']['measured_ms']:.2f} ms", file=sys.stderr)
            except Exception as err:  # PyTorch is an optional extra
                entry["torch"] = {"error": f"{type(err).__name__}: {err}"}
        entry["measure_seconds"] = round(time.time() - t0, 1)
        Path(args.output).write_text(json.dumps(data, indent=1, default=float))
    Path(args.output).write_text(json.dumps(data, indent=1, default=float))


# ----------------------------------------------------------------------------------- report
def report(args) -> None:
    from engine.units import format_size
    raw = Path(args.results).read_bytes()
    data = json.loads(gzip.decompress(raw) if args.results.endswith(".gz") else raw)
    p = data.get("provenance", {})
    lines = ["# Side-by-side: framework fallback vs WR vs WD vs PyTorch (measured)", "",
             f"- GPU: {p.get('gpu')} (driver {p.get('driver')}, CUDA runtime {p.get('cuda_runtime')}), "
             f"cuDNN {p.get('cudnn_version')}, cudnn-frontend {p.get('frontend_version')}, CuPy {p.get('cupy_version')}",
             f"- date: {p.get('date')}; command: `{p.get('command')}`; plans prepared {data.get('created')} by "
             f"`python benchmarks/side_by_side.py prepare` from the bundled profiles",
             "- times: total convolution time of one training step (all F, BD, BF kernels), each kernel executed "
             "by engine.gpu.executor and timed with CUDA events (median of repeats after warm-up); predicted = "
             "sum of profiled piece times",
             "- workspace: WR/undivided = sum of per-kernel workspaces (one per kernel, as Caffe and mu-cuDNN's WR "
             "model) and max; WD = the one arena; PyTorch = largest peak allocation above a layer's tensors "
             "(an upper bound on its workspace)",
             "- PyTorch: per conv layer, `F.conv2d` then autograd backward, timed with CUDA events around back-to-back "
             "steps after warm-up; unlike the executor's numbers these include whatever host overhead a small layer "
             "cannot hide, and `cudnn.benchmark` may pick other algorithms from run to run (GoogLeNet b128 measured "
             "21.9 ms and 35.0 ms in two runs of this benchmark on 2026-11-21)",
             "- engines: profiles made with the engine sweep hold every engine configuration cuDNN offers; (a) "
             "still takes only plans from cuDNN's heuristic list, as a framework would. Rows marked "
             f"`{HEURISTIC_NOTE.strip()}` use the same measurements restricted to that list (AlexNet's `all` "
             "profile was measured before the sweep existed)", ""]
    for e in data["networks"]:
        if not any("measured_ms" in c for c in e["configs"]):
            continue
        opt = next(c for c in e["configs"] if c["limit"] is None)
        lines += [f"## {e['network']} b{e['batch']} {e['precision']} {e['layout']}", "",
                  f"profile `{e['profile']}`" + (f" and `{e['profile_all']}`" if e.get("profile_all") else ""), "",
                  "| configuration | limit / budget | predicted ms | measured ms | vs (a) at same limit | "
                  "vs optimum | workspace sum | workspace max |", "|---|---|---|---|---|---|---|---|"]
        base = {c["limit"]: c["measured_ms"] for c in e["configs"] if c["label"].startswith("(a)")}
        for c in e["configs"]:
            if "measured_ms" not in c:
                continue
            lim = "unlimited" if c["limit"] is None else format_size(c["limit"])
            per_limit = c["limit"] if c["mode"] == "wr" else (c["limit"] // len(c["kernels"]) if not
                                                                c["label"].startswith("(c) WD total 120") else 8 * MiB)
            sp = base.get(per_limit)
            vs_a = f"{sp / c['measured_ms']:.2f}x faster" if sp and not c["label"].startswith("(a)") else ""
            ws = format_size(c["arena"]) if c["mode"] == "wd" else format_size(c["workspace_sum"])
            lines.append(f"| {c['label']} | {lim} | {c['predicted_ms']:.2f} | {c['measured_ms']:.2f} | {vs_a} | "
                         f"{c['measured_ms'] / opt['measured_ms']:.2f}x | {ws} | {format_size(c['workspace_max'])} |")
        t = e.get("torch")
        if t and "measured_ms" in t:
            lines.append(f"| (d) PyTorch {t['torch']} F.conv2d fwd+bwd, cudnn.benchmark, allow_tf32={t['allow_tf32']} "
                         f"| unlimited | | {t['measured_ms']:.2f} | | {t['measured_ms'] / opt['measured_ms']:.2f}x | | "
                         f"{format_size(t['extra_bytes_max'])} |")
        elif t:
            lines.append(f"| (d) PyTorch | | | not run: {t.get('error')} | | | | |")
        for c in e["configs"]:
            if "verify" in c:
                v = c["verify"]
                lines.append("")
                lines.append(f"verify `{c['label']}` at {format_size(c['limit'])}: "
                             f"{'all kernels passed' if v['all_passed'] else 'FAILED ' + str(v['failed'])}, "
                             f"largest relative L2 error {v['max_rel_l2']:.1e}, measured {v['measured_ms']:.2f} ms "
                             f"vs predicted {v['predicted_ms']:.2f} ms (ratio {v['ratio']:.3f})"
                             + (f"; per kernel from {min(k['ratio'] for k in v['kernels']):.2f} to "
                                f"{max(k['ratio'] for k in v['kernels']):.2f}" if v.get("kernels") else ""))
        lines.append("")
    Path(args.output).write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    a = sub.add_parser("prepare"); a.add_argument("-o", "--output", required=True); a.add_argument("--only", nargs="*")
    b = sub.add_parser("measure"); b.add_argument("plans"); b.add_argument("-o", "--output", required=True)
    b.add_argument("--repeats", type=int, default=5); b.add_argument("--torch", action="store_true")
    b.add_argument("--only", nargs="*"); b.add_argument("--budget-s", type=float, default=480)
    c = sub.add_parser("report"); c.add_argument("results"); c.add_argument("-o", "--output", required=True)
    args = ap.parse_args()
    {"prepare": prepare, "measure": measure, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
