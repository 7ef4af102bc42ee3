"""Full PyTorch training steps: stock cuDNN (GPU free, and under memory pressure) vs planned convolutions.

    python benchmarks/torch_training.py measure -o benchmarks/reports/torch_training.json   # GPU host
    python benchmarks/torch_training.py report benchmarks/reports/torch_training.json       # anywhere

``measure`` runs every case in its own process (``cudnn.benchmark`` fixes an algorithm per shape at the
first call, so cases must not share a process) and appends each result to the JSON file as it comes
(atomically). A case is one torchvision model, mini-batch, precision and one of:

- ``stock-free``: stock PyTorch, ``cudnn.benchmark=True``, the whole GPU free;
- ``stock-X``: the same with only X MiB free beside the step's own memory, reproduced as in
  ../shared/reference/pytorch-integration.md §1: a filler tensor holds the rest, set before the first step;
- ``wr-X`` / ``wd-X``: the model with ``engine.pytorch.apply_plan`` of a WR plan at X per kernel / a WD plan
  of X in total (engine.planner.make_plan on the bundled H100 profile), under the same pressure.
  ``wr-X-graph`` replays the whole step (forward, backward, SGD update) as one captured CUDA graph.

"The step's own memory" is measured per model by a probe (the planned WR step at the smallest X, GPU free):
the device memory in use after its steps (allocator segments, CUDA context, cuBLAS/cuDNN workspaces) less
the plan's workspace arena. The torch.profiler pass runs after the timed steps with the filler released
(CUPTI needs memory of its own); the algorithms chosen under pressure stay. Each case reports the median step
time and its 10-90 % range over the timed steps (CUDA events), the convolution share of GPU time
(torch.profiler: device time of cuDNN convolution ops, stock or planned), the fraction of the step the GPU is
busy, the peak allocation and the workspace arena (planned; stock PyTorch's workspace is not observable).
``report`` writes benchmarks/reports/torch_training.md and a PNG from the JSON alone.
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

MODELS = {"alexnet": 256, "resnet50": 64, "vgg16": 64}
PRESSURE_MIB = (64, 256)
CONV_OPS = ("aten::cudnn_convolution", "aten::convolution_backward", "ucudnn::conv_forward",
            "ucudnn::conv_backward_data", "ucudnn::conv_backward_filter")
MIB = 1 << 20
FILLER_RULE = "a planned case's arena counts inside its X; the filler goes back to the device before profiling"


def profile_name(net: str, batch: int, precision: str) -> str:
    layout = "nhwc" if precision == "fp16" else "nchw"
    return f"h100-{net}-b{batch}-{precision}-{layout}-powerOfTwo"


# --- one case, in its own process ----------------------------------------------------------------

def run_case(net: str, precision: str, case: str, steps: int, own: int | None) -> dict:
    import torch
    import torchvision

    batch = MODELS[net]
    amp = precision == "fp16"
    torch.backends.cudnn.benchmark = True
    torch.backends.cudnn.allow_tf32 = True
    torch.backends.cuda.matmul.allow_tf32 = True
    torch.manual_seed(0)
    fmt = torch.channels_last if amp else torch.contiguous_format
    model = getattr(torchvision.models, net)(weights=None).cuda().to(memory_format=fmt)
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=fmt)
    target = torch.randint(0, 1000, (batch,), device="cuda")
    for p in model.parameters():
        p.grad = torch.zeros_like(p)
    kind, _, rest = case.partition("-")
    limit_mib = int(rest.split("-")[0]) if rest and rest != "free" else None
    graph = case.endswith("-graph")
    out = {"model": net, "batch": batch, "precision": precision, "case": case, "steps": steps}
    arena = 0
    if kind in ("wr", "wd"):
        from engine.planner import make_plan
        from engine.profile import Profile, resolve_profile
        from engine.pytorch import apply_plan
        from engine.zoo import get_network
        profile = Profile.load(resolve_profile(profile_name(net, batch, precision)))
        plan = make_plan(profile, get_network(net, batch), mode=kind, budget=limit_mib * MIB, policy="powerOfTwo",
                         command=f"benchmarks/torch_training.py case {net} {precision} {case}")
        apply_plan(model, plan)
        arena = model.ucudnn.workspace
        out.update(predicted_conv_ms=plan.totals.time_ms, plan_workspace=plan.totals.workspace,
                   unplanned=model.ucudnn.unplanned)
    out["arena"] = arena

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    torch.cuda.synchronize()
    filler = None
    if limit_mib is not None and own is not None:
        torch.cuda.empty_cache()
        free, total = torch.cuda.mem_get_info()
        # what the steps will add at device level (activations, allocator segments, library workspaces), as the
        # probe measured it, plus X MiB: everything else is held by the filler. A planned case's arena is already
        # in use, so it counts against its X (the run of 2026-11-23 left planned cases their arena plus X).
        need = own - (total - free) + limit_mib * MIB
        out["filler"] = max(free - need, 0)
        if out["filler"]:
            filler = torch.empty(out["filler"], dtype=torch.uint8, device="cuda")
    try:
        run = step
        if graph:
            s = torch.cuda.Stream()
            s.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(s):
                for _ in range(3):
                    step()
            torch.cuda.current_stream().wait_stream(s)
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                step()
            run = g.replay
        for _ in range(5):
            run()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        ev = [torch.cuda.Event(enable_timing=True) for _ in range(steps + 1)]
        ev[0].record()
        for i in range(steps):
            run()
            ev[i + 1].record()
        torch.cuda.synchronize()
        times = sorted(ev[i].elapsed_time(ev[i + 1]) for i in range(steps))
        free, total = torch.cuda.mem_get_info()
        out["device_used"] = total - free - (filler.numel() if filler is not None else 0)
        out["peak"] = torch.cuda.max_memory_allocated() - (filler.numel() if filler is not None else 0)
        out["step_ms"] = statistics.median(times)
        out["step_ms_p10"], out["step_ms_p90"] = times[len(times) // 10], times[(9 * len(times)) // 10]
        # the profiler (CUPTI) needs device memory of its own: the filler goes first. The algorithms stay as
        # chosen under pressure (cudnn.benchmark's cache, the plan), and each needs the workspace it had.
        del filler
        torch.cuda.empty_cache()  # back to the device, not only to PyTorch's cache
        from torch.profiler import ProfilerActivity, profile
        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
            t0 = time.perf_counter()
            for _ in range(3):
                run()
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / 3 * 1e3
        conv = kernels = 0.0
        for e in prof.key_averages():
            if e.key in CONV_OPS:
                conv += e.device_time_total / 1e3
        for e in prof.events():
            if e.device_type.name == "CUDA":
                kernels += e.device_time / 1e3
        out["conv_ms"] = conv / 3
        out["gpu_busy"] = min(kernels / 3 / wall, 1.0) if wall else None
        out["profiled_step_ms"] = wall
        if kind in ("wr", "wd"):
            out["fallbacks"] = dict(model.ucudnn.fallbacks)
    except torch.OutOfMemoryError as err:
        out["error"] = f"out of memory: {str(err).splitlines()[0][:200]}"
    except Exception as err:  # recorded, so one failing case does not lose the others
        out["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return out


# --- driver ---------------------------------------------------------------------------------------

def provenance(command: str) -> dict:
    """The profiler's provenance of this GPU (engine.gpu.runtime) plus the PyTorch build."""
    import torch

    from engine.gpu import runtime
    return dict(runtime.provenance(command), torch=torch.__version__, torch_cudnn=torch.backends.cudnn.version())


def save(path: Path, doc: dict) -> None:
    atomic_write(path, (json.dumps(doc, indent=1) + "\n").encode())


def child(net, precision, case, steps, own) -> dict:
    cmd = [sys.executable, __file__, "case", net, precision, case, "--steps", str(steps)]
    if own is not None:
        cmd += ["--own", str(own)]
    t0 = time.time()
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"model": net, "precision": precision, "case": case, "error": "did not finish within 300 s"}
    lines = [ln for ln in r.stdout.splitlines() if ln.startswith("{")]
    if r.returncode or not lines:
        errs = [ln for ln in r.stderr.splitlines() if "Error" in ln and "nanobind" not in ln]
        tail = (errs or r.stderr.strip().splitlines() or ["(no output)"])[-1][:300]
        return {"model": net, "precision": precision, "case": case, "error": f"exit {r.returncode}: {tail}"}
    res = json.loads(lines[-1])
    res["wall_s"] = round(time.time() - t0, 1)
    return res


def keep(doc: dict, res: dict) -> None:
    """Add a case's result, replacing an earlier one of the same case (a --resume retry of a failure)."""
    key = (res["model"], res["precision"], res["case"])
    doc["results"] = [r for r in doc["results"] if (r["model"], r["precision"], r["case"]) != key] + [res]


def measure(args) -> int:
    out = Path(args.output)
    doc = json.loads(out.read_text()) if out.exists() and args.resume else {"results": []}
    doc["provenance"] = provenance("python benchmarks/torch_training.py " + " ".join(sys.argv[1:]))
    doc["provenance"]["filler_rule"] = FILLER_RULE
    done = {(r["model"], r["precision"], r["case"]) for r in doc["results"] if "error" not in r}
    for spec in args.configs:
        net, precision = spec.split(":")
        probe = next((r for r in doc["results"] if (r["model"], r["precision"], r["case"]) ==
                      (net, precision, "probe") and "error" not in r), None)
        if probe is None:
            probe = child(net, precision, f"wr-{min(args.pressure)}", args.steps, None)
            probe["case"] = "probe"
            keep(doc, probe)
            save(out, doc)
        own = probe["device_used"] - probe["arena"] if "error" not in probe else None
        cases = ["stock-free"] + [f"{k}-{x}" for x in args.pressure for k in ("stock", "wr", "wd")]
        cases += [f"wr-{x}-graph" for x in args.pressure[:1]]
        for case in cases:
            if (net, precision, case) in done:
                continue
            res = child(net, precision, case, args.steps, own)
            print(json.dumps({k: res.get(k) for k in ("model", "precision", "case", "step_ms", "conv_ms",
                                                      "gpu_busy", "peak", "arena", "error")}), flush=True)
            keep(doc, res)
            save(out, doc)
    return 0


# --- report (no GPU) ------------------------------------------------------------------------------

def report(args) -> int:
    from engine.units import format_size
    doc = json.loads(Path(args.results).read_text())
    prov = doc["provenance"]
    rows = [r for r in doc["results"] if r["case"] != "probe"]
    lines = ["# PyTorch training steps with planned convolutions (measured)", "",
             f"- GPU: {prov['gpu']} (driver {prov['driver']}), cuDNN {prov['cudnn_version']}, cudnn-frontend "
             f"{prov['frontend_version']}, PyTorch {prov['torch']}", f"- date: {prov['date']}; command: "
             f"`{prov['command']}`; report: `python benchmarks/torch_training.py report {args.results}`",
             "- each case in its own process; median step time (forward, backward, SGD update) over the timed "
             "steps after 5 warm-up steps, with the 10-90 % range; conv = device time of the convolution ops "
             "(torch.profiler, 3 steps); GPU busy = kernel time / wall time of those steps",
             "- X MiB free: a filler tensor leaves X MiB beside the step's own device memory (probe: the planned WR "
             "step's device memory in use, less its arena); wr-X: WR plan, X per kernel; wd-X: WD plan, X in total; "
             "-graph: the whole "
             "step replayed as one CUDA graph", ""]
    for key in sorted({(r["model"], r["precision"]) for r in rows}, key=lambda k: (list(MODELS).index(k[0]), k[1])):
        sub = [r for r in rows if (r["model"], r["precision"]) == key]
        free = next((r for r in sub if r["case"] == "stock-free" and "step_ms" in r), None)
        lines += [f"## {key[0]} b{MODELS[key[0]]} {key[1]}{' channels_last AMP' if key[1] == 'fp16' else ' NCHW'}", "",
                  "| case | step ms (10-90 %) | conv ms | stock-free conv / conv | GPU busy | peak | workspace arena |",
                  "|---|---|---|---|---|---|---|"]
        for r in sub:
            if "error" in r:
                lines.append(f"| {r['case']} | {r['error']} | | | | | |")
                continue
            vs = f"{free['conv_ms'] / r['conv_ms']:.2f}" if free and r.get("conv_ms") else ""
            lines.append(f"| {r['case']} | {r['step_ms']:.2f} ({r['step_ms_p10']:.2f}-{r['step_ms_p90']:.2f}) | "
                         f"{r['conv_ms']:.2f} | {vs} | {r['gpu_busy']:.0%} | {format_size(r['peak'])} | "
                         f"{format_size(r['arena']) if r['arena'] else '-'} |")
        lines.append("")
        for x in PRESSURE_MIB:
            st = next((r for r in sub if r["case"] == f"stock-{x}" and "conv_ms" in r), None)
            if st and free:
                lines.append(f"- stock-{x}: peak allocation {st['peak'] / free['peak']:.3f}x stock-free's, "
                             f"convolutions "
                             f"{st['conv_ms'] / free['conv_ms']:.2f}x its time")
            for k in ("wr", "wd"):
                pl = next((r for r in sub if r["case"] == f"{k}-{x}" and "conv_ms" in r), None)
                if st and pl:
                    lines.append(f"- {k}-{x} vs stock-{x}: stock/planned convolution time "
                                 f"{st['conv_ms'] / pl['conv_ms']:.2f}, "
                                 f"step time {st['step_ms'] / pl['step_ms']:.2f} (above 1: the plan is faster)")
        lines.append("")
    lines += ["## Reading it", "",
              "- Stock PyTorch under X MiB free: where its peak allocation equals the free case's, cuDNN found the "
              "workspace it wanted among the blocks the step itself frees (PyTorch sizes workspace from the caching "
              "allocator's largest free block, not from the device's free memory), so this filler does not reproduce "
              "the slow-down measured for isolated convolutions (../shared/reference/pytorch-integration.md §1).",
              "- GPU busy well below 90 % in a planned case means the step is host-bound: every micro-batch is one "
              "Python-level cuDNN launch; a -graph case (one CUDA graph per step) removes that cost where it ran (see "
              "its rows).",
              f"- WD at a total of X MiB divides X among all kernels ({kernel_counts(rows)}), so each gets a small "
              "fraction of what WR gives it at X per kernel.",
              *([] if prov.get("filler_rule") == FILLER_RULE else [
                  "- This run's filler left a planned case X MiB beyond its arena, while stock got X; planned "
                  "convolutions use only their arena (and a dW-sized scratch), so the extra memory could not speed "
                  "them up, but it was not the same headroom (the script counts the arena inside X since). Its "
                  "profiler pass released the filler to PyTorch's cache, not to the device."]),
              *verify_flags(rows), ""]
    md = Path(args.output or Path(args.results).with_suffix(".md"))
    atomic_write(md, "\n".join(lines).encode())
    plot(rows, md.with_suffix(".png"))
    write_block(README, "torch_training", readme_block(doc))
    print(f"wrote {md}, {md.with_suffix('.png')} and the block in {README}")
    return 0


def readme_block(doc: dict) -> str:
    """Convolution and step times of the main cases, one row per model and precision."""
    prov, rows = doc["provenance"], [r for r in doc["results"] if r["case"] != "probe"]
    cases = ("stock-free", "stock-64", "wr-64", "stock-256", "wr-256")
    lines = [f"Full training steps on the {prov['gpu']} (cuDNN {prov['cudnn_version']}, PyTorch {prov['torch']}, "
             f"{prov['date'][:10]}): convolution time (torch.profiler) / whole step, median ms; X MiB = only X MiB "
             "free beside the step's own memory; wr-X = the model with a WR plan at X per kernel applied. Every case, "
             "WD and the method: [benchmarks/reports/torch_training.md](benchmarks/reports/torch_training.md).", "",
             "| model | " + " | ".join(cases) + " |", "|---|" + "---|" * len(cases)]
    for key in sorted({(r["model"], r["precision"]) for r in rows}, key=lambda k: (list(MODELS).index(k[0]), k[1])):
        cells = []
        for case in cases:
            r = next((r for r in rows if (r["model"], r["precision"], r["case"]) == (*key, case)), None)
            cells.append("not run" if r is None else "failed" if "error" in r else
                         f"{r['conv_ms']:.2f} / {r['step_ms']:.2f}")
        label = f"{key[0]} b{MODELS[key[0]]} {'fp16 channels_last AMP' if key[1] == 'fp16' else 'TF32 NCHW'}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def kernel_counts(rows) -> str:
    """Convolution kernels per model, from the zoo twin of each torchvision model measured."""
    from engine.zoo import get_network
    return ", ".join(f"{len(get_network(net, MODELS[net]).kernels())} for {net}"
                     for net in sorted({r["model"] for r in rows}, key=list(MODELS).index))


def verify_flags(rows) -> list[str]:
    """Models whose WR 64 MiB plan failed `verify` in the side-by-side benchmark's committed results."""
    import gzip
    path = ROOT / "benchmarks" / "reports" / "side_by_side_results.json.gz"
    doc = json.loads(gzip.decompress(path.read_bytes()))
    out = []
    for net in doc["networks"]:
        name = net.get("network") or net.get("name")
        for cfg in net["configs"]:
            failed = sorted({k for v in cfg.get("verify", []) for k in v.get("failed", [])})
            if failed and name in {r["model"] for r in rows}:
                out.append(f"- {name}: its {cfg.get('row')} plan at {cfg.get('limit', 0) // MIB} MiB FAILED `verify` "
                           f"in side_by_side.md ({', '.join(failed)}): its times here are of a plan not known to "
                           f"compute the right result.")
    return out


def plot(rows, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    keys = sorted({(r["model"], r["precision"]) for r in rows}, key=lambda k: (list(MODELS).index(k[0]), k[1]))
    fig, axes = plt.subplots(1, len(keys), figsize=(4 * len(keys), 4), squeeze=False)
    for ax, key in zip(axes[0], keys):
        sub = [r for r in rows if (r["model"], r["precision"]) == key and "conv_ms" in r]
        ax.barh([r["case"] for r in sub], [r["step_ms"] for r in sub], color="#bbb", label="step")
        ax.barh([r["case"] for r in sub], [r["conv_ms"] for r in sub], color="#1f77b4", label="convolutions")
        ax.set_title(f"{key[0]} {key[1]}")
        ax.set_xlabel("ms")
        ax.invert_yaxis()
    axes[0][0].legend()
    fig.tight_layout()
    import io
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90)
    atomic_write(path, buf.getvalue())


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default="benchmarks/reports/torch_training.json")
    m.add_argument("--configs", nargs="+", default=["alexnet:tf32", "resnet50:tf32", "vgg16:tf32", "alexnet:fp16",
                                                     "resnet50:fp16"])
    m.add_argument("--pressure", nargs="+", type=int, default=list(PRESSURE_MIB))
    m.add_argument("--steps", type=int, default=20)
    m.add_argument("--resume", action="store_true", help="keep results already in the output file")
    c = sub.add_parser("case")
    c.add_argument("net")
    c.add_argument("precision")
    c.add_argument("case")
    c.add_argument("--steps", type=int, default=20)
    c.add_argument("--own", type=int)
    r = sub.add_parser("report")
    r.add_argument("results")
    r.add_argument("-o", "--output")
    args = ap.parse_args(argv)
    if args.cmd == "case":
        print(json.dumps(run_case(args.net, args.precision, args.case, args.steps, args.own)))
        return 0
    return measure(args) if args.cmd == "measure" else report(args)


if __name__ == "__main__":
    sys.exit(main())
