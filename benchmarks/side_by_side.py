"""Side-by-side benchmark: a framework's fallback, the engine sweep, WR, WD and PyTorch, measured on the GPU.

The mu-cuDNN paper's Fig. 10 and Fig. 13 on today's GPU, with the two effects apart. For each network
of NETWORKS and each per-kernel workspace limit L of LIMITS, the total convolution time of one training
step (every Forward, BackwardData and BackwardFilter kernel) of

  (a) framework: per kernel, the first plan in cuDNN's heuristic order whose workspace fits L, undivided;
  (b) best undivided engine: per kernel, the fastest measured plan of any engine that fits L, undivided
      (make_plan, policy undivided): what the engine sweep alone gains over (a);
  (c) WR powerOfTwo: mu-cuDNN's per-kernel DP under L (make_plan, mode wr): what micro-batching adds to (b);
  (d) WD: one budget of (number of kernels) x L divided by the 0-1 ILP (make_plan, mode wd; one arena);

beside the unlimited-workspace optimum (WR powerOfTwo with no limit) and PyTorch's F.conv2d forward and
backward with cudnn.benchmark and unlimited memory. AlexNet adds the paper's WD budget of 120 MiB, and in
TF32 the same rows restricted to cuDNN's heuristic list.

    python benchmarks/side_by_side.py measure --torch    # GPU host; about 4 minutes with the defaults
    python benchmarks/side_by_side.py report             # anywhere: side_by_side.md and README's table

``measure`` plans every configuration from the bundled profiles with engine.planner.make_plan, executes
each kernel's configuration with engine.gpu.executor (pieces back-to-back, wgrad adds included) and times
it with CUDA events (warm-up, median of ``--repeats``), in ``--runs`` independent runs over all networks;
AlexNet TF32's WR 64 MiB and WD 120 MiB plans are also verified against a float64 reference in every run.
The results file (plans included) is rewritten atomically after every network. ``report`` reads only
that file and gives each time as the median of the runs with their range.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.errors import InfeasibleBudgetError  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402
from engine.precision import PRECISIONS  # noqa: E402
from benchmarks.readme import README, write_block  # noqa: E402
from engine.units import MiB, format_size  # noqa: E402

NETWORKS = [  # (network, batch, precision, layout, bundled profile)
    ("alexnet", 256, "tf32", "NCHW", "h100-alexnet-b256-tf32-nchw-powerOfTwo"),
    ("resnet18", 128, "tf32", "NCHW", "h100-resnet18-b128-tf32-nchw-powerOfTwo"),
    ("resnet50", 32, "tf32", "NCHW", "h100-resnet50-b32-tf32-nchw-powerOfTwo"),
    ("resnet50", 64, "tf32", "NCHW", "h100-resnet50-b64-tf32-nchw-powerOfTwo"),
    ("vgg16", 64, "tf32", "NCHW", "h100-vgg16-b64-tf32-nchw-powerOfTwo"),
    ("densenet40", 256, "tf32", "NCHW", "h100-densenet40-b256-tf32-nchw-powerOfTwo"),
    ("googlenet", 128, "tf32", "NCHW", "h100-googlenet-b128-tf32-nchw-powerOfTwo"),
    ("alexnet", 256, "fp16", "NHWC", "h100-alexnet-b256-fp16-nhwc-powerOfTwo"),
    ("resnet50", 32, "fp16", "NHWC", "h100-resnet50-b32-fp16-nhwc-powerOfTwo"),
]
LIMITS = (8 * MiB, 64 * MiB, 512 * MiB)
README_LIMIT = 64 * MiB
PAPER_WD_BUDGET = 120 * MiB  # the paper's AlexNet budget (mu-cuDNN §IV-C)
UNLIMITED = 1 << 40
HEURISTIC = " [heuristic list only]"
ROWS = {
    "framework": "(a) framework: heuristic order, first that fits",
    "undivided": "(b) best undivided engine",
    "wr": "(c) WR powerOfTwo",
    "wd": "(d) WD",
    "optimum": "unlimited optimum",
}
VERIFY = {("wr", 64 * MiB), ("wd", PAPER_WD_BUDGET)}  # (row, budget) verified against float64
DEFAULT_RESULTS = ROOT / "benchmarks" / "reports" / "side_by_side_results.json.gz"
DEFAULT_REPORT = ROOT / "benchmarks" / "reports" / "side_by_side.md"


def tag(e: dict) -> str:
    return f"{e['network']}-b{e['batch']}-{e['precision']}"


# ----------------------------------------------------------------------------------- planning (CPU)
def _kernels(plan_kernels) -> list[dict]:
    return [
        {
            "id": k.id,
            "signature": k.signature,
            "workspace": k.workspace,
            "offset": k.offset,
            "micro": [
                {"batch": m.batch, "plan": m.plan, "time_ms": m.time_ms, "workspace": m.workspace} for m in k.micro
            ],
        }
        for k in plan_kernels
    ]


def _config(
    row: str, limit: int | None, budget: int, mode: str, kernels: list[dict], arena: int | None, engines: str
) -> dict:
    ws = [k["workspace"] for k in kernels]
    return {
        "row": row,
        "engines": engines,
        "limit": limit,
        "budget": budget,
        "mode": mode,
        "kernels": kernels,
        "predicted_ms": sum(m["time_ms"] for k in kernels for m in k["micro"]),
        "workspace_sum": sum(ws),
        "workspace_max": max(ws),
        "arena": arena,
    }


def plan_network(name: str, batch: int, precision: str, layout: str, profile_name: str) -> dict:
    """Every configuration of one network, planned from its bundled profile (no GPU needed)."""
    from engine.planner import make_plan
    from engine.profile import Profile, resolve_profile
    from engine.zoo import get_network

    full = Profile.load(resolve_profile(profile_name))
    net = get_network(name, batch)
    kernels = net.kernels(precision, layout)
    engine_sets = [("all", full)]
    if full.swept and name == "alexnet" and precision == "tf32":
        engine_sets.append(("heuristics", full.restrict("heuristics")))
    entry = {
        "network": name,
        "batch": batch,
        "precision": precision,
        "layout": layout,
        "profile": profile_name,
        "profile_provenance": {k: full.provenance.get(k) for k in ("gpu", "cudnn_version", "frontend_version", "date")},
        "swept": full.swept,
        "kernel_count": len(kernels),
        "configs": [],
        "infeasible": [],
    }

    def add(row, limit, budget, engines, prof, mode, policy):
        try:
            plan = make_plan(prof, net, mode=mode, budget=budget, policy=policy, precision=precision, layout=layout)
        except InfeasibleBudgetError as err:
            entry["infeasible"].append({"row": row, "engines": engines, "limit": limit, "reason": str(err)})
            return
        entry["configs"].append(_config(row, limit, budget, mode, _kernels(plan.kernels), plan.arena_size, engines))

    for engines, prof in engine_sets:
        add("optimum", None, UNLIMITED, engines, prof, "wr", "powerOfTwo")
        for L in LIMITS if engines == "all" else (README_LIMIT,):
            if engines == "all":
                first = [full.heuristic_first(k.signature.key, batch, L) for k in kernels]
                if all(first):
                    ks = [
                        {
                            "id": k.id,
                            "signature": k.signature.key,
                            "workspace": m.workspace,
                            "offset": None,
                            "micro": [
                                {"batch": m.batch, "plan": m.plan, "time_ms": m.time_ms, "workspace": m.workspace}
                            ],
                        }
                        for k, m in zip(kernels, first)
                    ]
                    entry["configs"].append(_config("framework", L, L, "wr", ks, None, "heuristics"))
                else:
                    entry["infeasible"].append(
                        {
                            "row": "framework",
                            "engines": "heuristics",
                            "limit": L,
                            "reason": "no heuristic-list plan at the full batch fits",
                        }
                    )
                add("undivided", L, L, engines, prof, "wr", "undivided")
            add("wr", L, L, engines, prof, "wr", "powerOfTwo")
            if engines == "all":
                add("wd", L, len(kernels) * L, engines, prof, "wd", "powerOfTwo")
        if name == "alexnet":
            add("wd", None, PAPER_WD_BUDGET, engines, prof, "wd", "powerOfTwo")
    return entry


# ----------------------------------------------------------------------------------- measure (GPU)
def _time_config(cfg: dict, batch: int, ctx, plans, bufs: dict, repeats: int, cache: dict) -> list[float]:
    """Measured ms of each kernel of ``cfg`` (identical kernel configurations timed once per run)."""
    from engine.gpu import runtime
    from engine.gpu.executor import Arena, KernelExecutor, KernelRun
    from engine.gpu.profiler import KernelBuffers
    from engine.kernels import KernelSignature

    runs = [
        KernelRun(
            k["id"],
            KernelSignature.from_key(k["signature"], batch),
            [(m["batch"], m["plan"]) for m in k["micro"]],
            k["workspace"],
            k["offset"],
        )
        for k in cfg["kernels"]
    ]
    exes = [KernelExecutor(r, plans) for r in runs]
    arena = Arena(runs, exes, cfg["mode"])
    out = []
    for r, ex in zip(runs, exes):
        key = (r.sig.key, tuple(r.micro))
        if key not in cache:
            if r.sig.key not in bufs:
                bufs[r.sig.key] = KernelBuffers(r.sig, batch)
            b = bufs[r.sig.key]
            ptrs, w_arr, ws_ptr = b.pointers(batch, 0), b.w, arena.pointer(r)
            times = runtime.time_repeats(
                ctx, lambda i: ex.enqueue(ptrs, ws_ptr, ctx, w_array=w_arr), repeats=repeats, warmup=2
            )
            cache[key] = runtime.median(times)
        out.append(cache[key])
    cfg["arena_allocated"] = arena.size
    return out


def _torch_convs(name: str, batch: int, prec: str, layout: str, repeats: int) -> dict:
    """PyTorch F.conv2d forward + backward per conv layer, cudnn.benchmark on, unlimited memory."""
    import torch
    import torch.nn.functional as F

    from engine.zoo import get_network

    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = PRECISIONS[prec].allow_tf32
    dtype = getattr(torch, PRECISIONS[prec].torch_dtype)
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    net = get_network(name, batch)
    total, extra_max = 0.0, 0
    for layer in net.conv_layers():
        p = layer.params
        c, h, w = net.layer(layer.inputs[0]).out_shape
        need_dx = net.needs_grad[layer.inputs[0]]
        x = torch.randn(batch, c, h, w, device="cuda", dtype=dtype).to(memory_format=fmt).requires_grad_(need_dx)
        wt = torch.randn(p["k"], c // p["groups"], p["r"], p["s"], device="cuda", dtype=dtype)
        wt = wt.to(memory_format=fmt).requires_grad_(True)
        kw = dict(
            stride=(p["stride_h"], p["stride_w"]),
            padding=(p["pad_h"], p["pad_w"]),
            dilation=(p["dil_h"], p["dil_w"]),
            groups=p["groups"],
        )
        y = F.conv2d(x, wt, **kw)
        dy = torch.randn_like(y)

        def step():
            F.conv2d(x, wt, **kw).backward(dy)

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
        total += statistics.median(ev[i].elapsed_time(ev[i + 1]) for i in range(repeats))
        # peak above the live tensors, less the step's own outputs (y, dx, dw): an upper bound on workspace
        extra = (
            torch.cuda.max_memory_allocated()
            - base
            - y.numel() * y.element_size()
            - (x.numel() * x.element_size() if need_dx else 0)
            - wt.numel() * wt.element_size()
        )
        extra_max = max(extra_max, extra)
    return {
        "measured_ms": total,
        "extra_bytes_max": int(max(extra_max, 0)),
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "allow_tf32": torch.backends.cudnn.allow_tf32,
    }


def release_gpu_memory() -> None:
    """Hand CuPy's and PyTorch's cached blocks back to the GPU between the engine's configurations and the PyTorch
    column: neither allocator frees the other's cache when it runs out, so PyTorch's column would not have the
    GPU free, and DenseNet-40's WD at 58 GiB ran out of memory in a second run while PyTorch still held the
    first run's cache."""
    import gc

    import cupy as cp

    gc.collect()
    cp.get_default_memory_pool().free_all_blocks()
    if "torch" in sys.modules:
        sys.modules["torch"].cuda.empty_cache()


def write_json(data: dict, path: Path) -> None:
    """Atomic: a half-written results file never replaces a whole one."""
    atomic_write(path, json.dumps(data, indent=1), gzip_suffix=True)


def measure(args) -> None:
    from engine.gpu import runtime
    from engine.gpu.graphs import ExecutionPlans
    from engine.gpu.verify import verify_plan

    t0 = time.time()
    ctx = runtime.context()
    prov = runtime.provenance("python benchmarks/side_by_side.py " + " ".join(sys.argv[1:]))
    data = {
        "format": "ucudnn-explorer-side-by-side",
        "version": 2,
        "provenance": prov,
        "runs": args.runs,
        "repeats": args.repeats,
        "limits": list(LIMITS),
        "networks": [],
    }
    for spec in NETWORKS:
        if args.only and f"{spec[0]}-b{spec[1]}-{spec[2]}" not in args.only:
            continue
        entry = plan_network(*spec)
        p = entry["profile_provenance"]
        if (p["gpu"], p["cudnn_version"]) != (prov["gpu"], prov["cudnn_version"]):
            print(f"skip {tag(entry)}: profiled on {p['gpu']} cuDNN {p['cudnn_version']}", file=sys.stderr)
            continue
        data["networks"].append(entry)
    print(f"planned {len(data['networks'])} networks in {time.time() - t0:.1f} s", file=sys.stderr, flush=True)
    out = Path(args.output)
    for run in range(args.runs):
        for entry in data["networks"]:
            if time.time() - t0 > args.budget_s:
                print(f"skip {tag(entry)} run {run + 1}: out of time (--budget-s)", file=sys.stderr, flush=True)
                continue
            t1 = time.time()
            plans, bufs, cache = ExecutionPlans(ctx), {}, {}
            for cfg in entry["configs"]:
                try:  # a configuration that fails is recorded; the others are still measured
                    kernel_ms = _time_config(cfg, entry["batch"], ctx, plans, bufs, args.repeats, cache)
                except Exception as err:
                    cfg.setdefault("errors", []).append(f"run {run + 1}: {type(err).__name__}: {str(err)[:300]}")
                    print(f"{tag(entry)} {label(cfg)}: {cfg['errors'][-1]}", file=sys.stderr, flush=True)
                    continue
                cfg.setdefault("kernel_ms", []).append(kernel_ms)
                cfg.setdefault("measured_ms", []).append(sum(kernel_ms))
                if entry["precision"] == "tf32" and cfg["engines"] == "all" and (cfg["row"], cfg["budget"]) in VERIFY:
                    plan = {
                        "mode": cfg["mode"],
                        "network": {"name": entry["network"], "batch": entry["batch"]},
                        "kernels": cfg["kernels"],
                    }
                    try:
                        rep = verify_plan(plan, repeats=args.repeats)
                    except Exception as err:
                        cfg.setdefault("errors", []).append(
                            f"verify, run {run + 1}: {type(err).__name__}: {str(err)[:300]}"
                        )
                        continue
                    cfg.setdefault("verify", []).append(
                        rep["totals"]
                        | {
                            "max_rel_l2": max(k["rel_l2"] for k in rep["kernels"]),
                            "kernel_ratio_min": min(k["ratio"] for k in rep["kernels"]),
                            "kernel_ratio_max": max(k["ratio"] for k in rep["kernels"]),
                        }
                    )
            plans = bufs = cache = None  # this network's buffers and plans go back before PyTorch runs
            release_gpu_memory()
            if args.torch:
                try:
                    t = _torch_convs(
                        entry["network"], entry["batch"], entry["precision"], entry["layout"], args.repeats
                    )
                except Exception as err:  # PyTorch is an optional extra
                    t = {"error": f"{type(err).__name__}: {err}"}
                entry.setdefault("torch", []).append(t)
                release_gpu_memory()
            entry.setdefault("measure_seconds", []).append(round(time.time() - t1, 1))
            print(f"run {run + 1}: {tag(entry)} in {time.time() - t1:.1f} s", file=sys.stderr, flush=True)
            write_json(data, out)
    data["seconds"] = round(time.time() - t0, 1)
    write_json(data, out)


# ----------------------------------------------------------------------------------- report
def load(path: str | Path) -> dict:
    raw = Path(path).read_bytes()
    return json.loads(gzip.decompress(raw) if str(path).endswith(".gz") else raw)


def med(xs: list[float]) -> float:
    return statistics.median(xs)


def ms_range(xs: list[float]) -> str:
    """Median of the runs and their range."""
    if len(xs) == 1:
        return f"{xs[0]:.2f}"
    return f"{med(xs):.2f} ({min(xs):.2f}-{max(xs):.2f})"


def label(c: dict) -> str:
    text = ROWS[c["row"]]
    if c["row"] == "wd":
        text += f" total {format_size(c['budget'])}" + (
            " (the paper's AlexNet budget)" if c["limit"] is None else " (kernels x limit)"
        )
    return text + (HEURISTIC if c["engines"] == "heuristics" and c["row"] != "framework" else "")


def find(e: dict, row: str, limit: int | None, engines: str = "all") -> dict | None:
    if row == "framework":
        engines = "heuristics"
    return next(
        (
            c
            for c in e["configs"]
            if c["row"] == row and c["limit"] == limit and c["engines"] == engines and c.get("measured_ms")
        ),
        None,
    )


def torch_times(e: dict) -> list[float]:
    return [t["measured_ms"] for t in e.get("torch", []) if "measured_ms" in t]


def network_name(e: dict) -> str:
    names = {
        "alexnet": "AlexNet",
        "resnet18": "ResNet-18",
        "resnet50": "ResNet-50",
        "vgg16": "VGG-16",
        "densenet40": "DenseNet-40",
        "googlenet": "GoogLeNet",
    }
    return f"{names.get(e['network'], e['network'])} b{e['batch']} {e['precision'].upper()} {e['layout']}" + (
        "" if e["swept"] else " (heuristic list only)"
    )


def runs_made(data: dict) -> int:
    return max(
        (len(c["measured_ms"]) for e in data["networks"] for c in e["configs"] if c.get("measured_ms")), default=0
    )


def readme_block(data: dict) -> str:
    """README's results: the table at README_LIMIT per kernel, the two effects in separate columns, and notes."""
    p, lim = data["provenance"], format_size(README_LIMIT)
    lines = [
        f"Measured on the {p['gpu']} with cuDNN {p['cudnn_version']} and frontend {p['frontend_version']} "
        f"({p['date'][:10]}): total convolution time of one training step (every Forward, BackwardData and "
        f"BackwardFilter kernel), each configuration executed by `engine.gpu` and timed with CUDA events; median "
        f"of {runs_made(data)} runs, range in brackets. (a) is what a framework does under a workspace limit: per "
        "kernel, the first plan in cuDNN's heuristic order that fits, undivided. (b) is the fastest undivided "
        "plan that fits among every engine the profile measured (the engine sweep; for profiles of the "
        "heuristic list only, the fastest of that list), so (a)/(b) is the sweep's gain; (c) micro-batches on "
        "top of (b), so (b)/(c) is micro-batching's. Every limit, WD and the workspace used: "
        "[benchmarks/reports/side_by_side.md](benchmarks/reports/side_by_side.md).",
        "",
        f"| network | (a) framework, {lim}/kernel | (b) best undivided engine, {lim}/kernel | "
        f"(c) WR powerOfTwo, {lim}/kernel | sweep (a)/(b) | micro-batching (b)/(c) | unlimited optimum | "
        "PyTorch `cudnn.benchmark` |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for e in data["networks"]:
        a, b, c = (find(e, r, README_LIMIT) for r in ("framework", "undivided", "wr"))
        o = find(e, "optimum", None)
        if not (a and b and c and o):
            continue
        t = torch_times(e)
        lines.append(
            f"| {network_name(e)} | {ms_range(a['measured_ms'])} | {ms_range(b['measured_ms'])} | "
            f"{ms_range(c['measured_ms'])} | {med(a['measured_ms']) / med(b['measured_ms']):.2f}x | "
            f"{med(b['measured_ms']) / med(c['measured_ms']):.2f}x | {ms_range(o['measured_ms'])} | "
            f"{ms_range(t) if t else 'not run'} |"
        )
    lines.append("")
    for e in data["networks"]:
        wd, a8, o = find(e, "wd", None), find(e, "framework", 8 * MiB), find(e, "optimum", None)
        if not (wd and a8 and o):
            continue
        h = find(e, "wd", None, "heuristics")
        lines.append(
            f"- WD with the paper's budget of {format_size(PAPER_WD_BUDGET)} for all {e['kernel_count']} "
            f"kernels of {network_name(e)}: {ms_range(wd['measured_ms'])} ms"
            + (f" ({ms_range(h['measured_ms'])} ms with the heuristic list only)" if h else "")
            + f", {med(a8['measured_ms']) / med(wd['measured_ms']):.2f}x faster than (a) at 8 MiB per kernel "
            f"and {med(wd['measured_ms']) / med(o['measured_ms']):.2f}x the unlimited optimum."
        )
    for e in data["networks"]:
        for c in e["configs"]:
            v = c.get("verify", [])
            if v:
                lines.append(
                    f"- {label(c)} for {network_name(e)} at {format_size(c['budget'])}, verified in each of "
                    f"{len(v)} runs against an undivided float64 cuDNN reference: "
                    f"{'every kernel within tolerance' if all(x['all_passed'] for x in v) else 'FAILED'} "
                    f"(largest relative L2 error {max(x['max_rel_l2'] for x in v):.1e}), measured "
                    f"{ms_range([x['measured_ms'] for x in v])} ms against {v[0]['predicted_ms']:.2f} ms "
                    "predicted."
                )
    spread = [(max(t) / min(t), e) for e in data["networks"] if len(t := torch_times(e)) > 1]
    if spread:
        r, e = max(spread, key=lambda x: x[0])
        t = torch_times(e)
        lines.append(
            f"- PyTorch's column is `F.conv2d` forward and backward per layer with `cudnn.benchmark` and "
            f"unlimited memory; it varies from run to run most for {network_name(e)}: {min(t):.2f} to "
            f"{max(t):.2f} ms."
        )
    return "\n".join(lines)


def render(data: dict, source: str) -> str:
    p = data["provenance"]
    runs = runs_made(data)
    unswept = [network_name(e) for e in data["networks"] if not e["swept"]]
    lines = [
        "# Side-by-side: framework fallback, engine sweep, WR, WD and PyTorch (measured)",
        "",
        f"- GPU: {p['gpu']} (driver {p['driver']}, CUDA runtime {p['cuda_runtime']}), cuDNN "
        f"{p['cudnn_version']}, cudnn-frontend {p['frontend_version']}, CuPy {p['cupy_version']}",
        f"- date: {p['date']}; command: `{p['command']}`; {data.get('seconds', '?')} s in all; "
        f"results: `{source}`; this report: `python benchmarks/side_by_side.py report`",
        f"- times: total convolution time of one training step (all F, BD, BF kernels); each kernel's "
        f"configuration executed by engine.gpu.executor and timed with CUDA events (2 warm-ups, median of "
        f"{data['repeats']} back-to-back repeats); every time is the median of {runs} runs over all "
        f"networks, with their range in brackets; predicted = the profile's sum of piece times",
        "- plans: engine.planner.make_plan on the bundled profiles; (a) takes per kernel the first plan in "
        "cuDNN's heuristic order whose workspace fits the limit (what a framework does); (b) is make_plan with "
        "policy `undivided`, the fastest single plan at the full batch among every measured engine; (c) adds "
        "micro-batching to (b); (d) divides one total budget by the ILP",
        "- workspace: (a)-(c) and the optimum = sum of per-kernel workspaces (one per kernel, as Caffe and "
        "mu-cuDNN's WR model) and the largest; WD = its one arena; PyTorch = largest peak allocation above a "
        "layer's tensors (an upper bound on its workspace)",
        "- PyTorch: per conv layer, `F.conv2d` then autograd backward, timed with CUDA events around "
        "back-to-back steps after warm-up; these include host overhead a small layer cannot hide, and "
        "`cudnn.benchmark` may pick other algorithms from run to run",
        f"- `{HEURISTIC.strip()}`: the same measurements restricted to cuDNN's heuristic list"
        + (
            f"; {', '.join(unswept)} were profiled without the engine sweep, so all their rows are heuristic-list only"
            if unswept
            else ""
        ),
        "",
    ]
    for e in data["networks"]:
        measured = [c for c in e["configs"] if c.get("measured_ms")]
        if not measured:
            continue
        opt = find(e, "optimum", None)
        if opt is None:
            continue
        lines += [
            f"## {network_name(e)}",
            "",
            f"profile `{e['profile']}`, {e['kernel_count']} kernels",
            "",
            "| configuration | limit / budget | predicted ms | measured ms | vs (a) at the same limit | "
            "vs optimum | workspace sum (WD: arena) | workspace max |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for c in measured:
            # the paper's WD budget is set beside (a) at 8 MiB a kernel, its share rounded down
            per = c["limit"] if c["limit"] is not None else (8 * MiB if c["row"] == "wd" else None)
            a = find(e, "framework", per) if per else None
            m = med(c["measured_ms"])
            vs_a = f"{med(a['measured_ms']) / m:.2f}x faster" if a and c["row"] != "framework" else ""
            lim = (
                "unlimited"
                if c["row"] == "optimum"
                else format_size(c["budget"]) + (" total" if c["mode"] == "wd" else " per kernel")
            )
            ws = format_size(c["arena"]) if c["mode"] == "wd" else format_size(c["workspace_sum"])
            lines.append(
                f"| {label(c)} | {lim} | {c['predicted_ms']:.2f} | {ms_range(c['measured_ms'])} | {vs_a} | "
                f"{m / med(opt['measured_ms']):.2f}x | {ws} | {format_size(c['workspace_max'])} |"
            )
        t = [x for x in e.get("torch", []) if "measured_ms" in x]
        if t:
            v = t[0]
            lines.append(
                f"| PyTorch {v['torch']} F.conv2d fwd+bwd, cudnn.benchmark, allow_tf32={v['allow_tf32']} | "
                f"unlimited | | {ms_range([x['measured_ms'] for x in t])} | | "
                f"{med([x['measured_ms'] for x in t]) / med(opt['measured_ms']):.2f}x | | "
                f"{format_size(max(x['extra_bytes_max'] for x in t))} |"
            )
        for err in {x["error"] for x in e.get("torch", []) if "error" in x}:
            lines.append(f"| PyTorch | | | not run: {err} | | | | |")
        lines.append("")
        for i in e["infeasible"]:
            lines.append(
                f"- infeasible: {ROWS[i['row']]} at {format_size(i['limit']) if i['limit'] else '-'}: {i['reason']}"
            )
        for c in e["configs"]:
            for err in c.get("errors", []):
                lines.append(f"- failed: {label(c)} at {format_size(c['budget'])}: {err}")
        for c in measured:
            for_runs = c.get("verify", [])
            if for_runs:
                ok = all(v["all_passed"] for v in for_runs)
                lines.append(
                    f"- verified {label(c)} at {format_size(c['budget'])} in {len(for_runs)} runs: "
                    f"{'all kernels passed every run' if ok else 'FAILED ' + str([v['failed'] for v in for_runs])}; "
                    f"largest relative L2 error {max(v['max_rel_l2'] for v in for_runs):.1e}; measured "
                    f"{ms_range([v['measured_ms'] for v in for_runs])} ms against {for_runs[0]['predicted_ms']:.2f} "
                    f"ms predicted; per kernel measured/predicted from "
                    f"{min(v['kernel_ratio_min'] for v in for_runs):.2f} to "
                    f"{max(v['kernel_ratio_max'] for v in for_runs):.2f}"
                )
        lines.append("")
    return "\n".join(lines)


def report(args) -> None:
    data = load(args.results)
    source = os.path.relpath(Path(args.results).resolve(), ROOT)
    atomic_write(args.output, render(data, source))
    write_block(Path(args.readme), "side_by_side", readme_block(data))
    print(f"wrote {args.output} and the table in {args.readme}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure", help="plan and measure on the GPU host")
    m.add_argument("-o", "--output", default=str(DEFAULT_RESULTS))
    m.add_argument("--runs", type=int, default=3, help="independent runs over all networks")
    m.add_argument("--repeats", type=int, default=5, help="timed repeats per kernel configuration")
    m.add_argument("--torch", action="store_true", help="also measure PyTorch (needs the torch extra)")
    m.add_argument("--only", nargs="*", help="networks as NAME-bBATCH-PRECISION, e.g. alexnet-b256-tf32")
    m.add_argument("--budget-s", type=float, default=420, help="start no network after this many seconds")
    r = sub.add_parser("report", help="side_by_side.md and README's table from a results file")
    r.add_argument("results", nargs="?", default=str(DEFAULT_RESULTS))
    r.add_argument("-o", "--output", default=str(DEFAULT_REPORT))
    r.add_argument("--readme", default=str(README), help="README whose generated table to rewrite")
    args = ap.parse_args()
    {"measure": measure, "report": report}[args.cmd](args)


if __name__ == "__main__":
    main()
