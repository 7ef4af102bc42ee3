"""CPU harness: host microseconds per planned layer, the frontend's execute replaced by a no-op.

    python benchmarks/op_host_cpu.py measure -o OUT.json [--layers 16] [--steps 300] [--label TEXT]
    python benchmarks/op_host_cpu.py report benchmarks/reports/op-host-cpu/*.json  # -> op-host-cpu.md

The eager planned step is host-bound on the H100 (benchmarks/reports/torch_training.md: ResNet-50 b64 fp16
AMP), and the host path is Python, so it can be measured and cut on any machine. The harness runs the exact
path of a planned layer (``PlannedConv2d.forward`` -> ``PlannedConvFunction`` -> the op bodies ->
engine.gpu.pieces) forward and backward, on CPU tensors of a tiny layer (so torch's own work is a few
dispatches, as a CUDA launch is), with three things replaced: the cuDNN frontend module (absent here),
each built plan's ``_execute_with_raw_ptrs`` (a Python no-op taking the same five integers) and the
handle's stream lookup (a C builtin returning 0). Autocast is CUDA autocast switched on by
``torch.set_autocast_enabled("cuda", True)``: the planned path tests that flag and casts itself.

A chain of ``--layers`` identical 3x3 convolutions (the first one's input needs no gradient, as a network's
first layer) runs forward then ``backward``; the median over ``--steps`` steps divided by the layer count is
host us per layer. Three chains, interleaved step by step so a busy machine slows them alike:

- ``planned``: PlannedConv2d layers, 1 piece per kernel and, in a second chain, 2 pieces;
- ``floor``: a bare ``torch.autograd.Function`` that allocates its outputs and does nothing else (under AMP
  the module casts the weight first, as autocast does for stock);
- ``stock``: ``nn.Conv2d`` on the same CPU tensors (CPU autocast in bf16 for AMP): stock's dispatch path,
  an indicator only (CPU kernels, not cuDNN's).

``cProfile`` of planned steps lists where the Python time goes (top functions by own time).
"""

import argparse
import cProfile
import io
import json
import platform
import pstats
import re
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from engine.fileio import atomic_write  # noqa: E402
from engine.testing import fake_frontend as fake  # noqa: E402

N, C, HW = 8, 8, 2  # the layer: tiny, so CPU kernels cost what a dispatch costs
MEASURED = ("fp16", "tf32")  # each in its default layout (engine.precision): fp16 AMP NHWC, TF32 NCHW


def planned_chain(torch, precision: str, layers: int, pieces: int):
    from engine.precision import PRECISIONS

    fake.load_ops()
    layout = PRECISIONS[precision].layout
    micro = {short: [N // pieces] * pieces for short in ("F", "BD", "BF")}
    applied, mods = None, []
    for i in range(layers):
        m = torch.nn.Conv2d(C, C, 3, padding=1, bias=False)
        applied = fake.plan_module(
            m, (N, C, HW, HW), micro, precision, layout, compute=False, applied=applied, name=f"c{i}"
        )
        mods.append(m)
    return torch.nn.Sequential(*mods)


def floor_chain(torch, precision: str, layers: int):
    amp = precision == "fp16"

    class Floor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(w)
            return torch.empty_like(x)

        @staticmethod
        def backward(ctx, gy):
            (w,) = ctx.saved_tensors
            return (torch.empty_like(gy) if ctx.needs_input_grad[0] else None), torch.empty_like(w)

    class FloorConv(torch.nn.Conv2d):
        def forward(self, x):
            w = self.weight.to(torch.float16) if amp else self.weight
            return Floor.apply(x, w)

    return torch.nn.Sequential(*[FloorConv(C, C, 3, padding=1, bias=False) for _ in range(layers)])


def _input(torch, precision):
    x = torch.randn(N, C, HW, HW)
    return x.half().to(memory_format=torch.channels_last) if precision == "fp16" else x


def _step(torch, model, x, cpu_amp=False):
    """Host ns of one forward and of one backward: (wall, this thread's CPU time) of each. The CPU time
    leaves out the time the thread waits for a core on a shared machine (autograd runs a CPU backward on the
    calling thread)."""
    for p in model.parameters():
        p.grad = None
    t0, c0 = time.perf_counter_ns(), time.thread_time_ns()
    if cpu_amp:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y = model(x)
    else:
        y = model(x)
    t1, c1 = time.perf_counter_ns(), time.thread_time_ns()
    torch.autograd.backward(y, torch.ones_like(y))
    t2, c2 = time.perf_counter_ns(), time.thread_time_ns()
    return (t1 - t0, t2 - t1), (c1 - c0, c2 - c1)


def measure_precision(torch, precision: str, layers: int, steps: int, profile_steps: int) -> dict:
    amp = precision == "fp16"
    chains = {
        "planned, 1 piece": planned_chain(torch, precision, layers, 1),
        "planned, 2 pieces": planned_chain(torch, precision, layers, 2),
        "floor": floor_chain(torch, precision, layers),
        "stock": torch.nn.Sequential(*[torch.nn.Conv2d(C, C, 3, padding=1, bias=False) for _ in range(layers)]),
    }
    if amp:  # an NHWC model is channels_last throughout, its parameters too
        chains = {name: m.to(memory_format=torch.channels_last) for name, m in chains.items()}
    x = _input(torch, precision)
    xs = {"stock": x.float().to(memory_format=torch.channels_last) if amp else x}
    times = {name: {"wall": ([], []), "cpu": ([], [])} for name in chains}
    torch.set_autocast_enabled("cuda", amp)
    torch.set_autocast_dtype("cuda", torch.float16)
    try:
        for i in range(steps + 20):
            for name, model in chains.items():
                wall, cpu = _step(torch, model, xs.get(name, x), cpu_amp=amp and name == "stock")
                if i >= 20:
                    for clock, (f, b) in (("wall", wall), ("cpu", cpu)):
                        times[name][clock][0].append(f)
                        times[name][clock][1].append(b)
        prof = cProfile.Profile()
        prof.enable()
        for _ in range(profile_steps):
            _step(torch, chains["planned, 1 piece"], x)
        prof.disable()
    finally:
        torch.set_autocast_enabled("cuda", False)
    out = io.StringIO()
    pstats.Stats(prof, stream=out).sort_stats("tottime").print_stats(14)
    result = {}
    for name, clocks in times.items():
        result[name] = {}
        for clock, (f, b) in clocks.items():
            fw, bw = statistics.median(f) / 1e3 / layers, statistics.median(b) / 1e3 / layers
            result[name][clock] = {
                "forward_us": round(fw, 2),
                "backward_us": round(bw, 2),
                "layer_us": round(fw + bw, 2),
            }
    return {"per_layer": result, "profile": _trim(out.getvalue())}


def _trim(text: str) -> str:
    """pstats' table without its header and with paths relative to the tree or to site-packages."""
    lines = text.splitlines()
    start = next((i for i, line in enumerate(lines) if "ncalls" in line), 0)
    return "\n".join(
        re.sub(r"\S*/site-packages/", "", line.replace(str(ROOT) + "/", "")) for line in lines[start:] if line.strip()
    )


def measure(args) -> None:
    import torch

    torch.set_num_threads(1)
    data = {
        "machine": f"{platform.processor() or platform.machine()}, {_cpu_name()}, Python {platform.python_version()}",
        "torch": torch.__version__,
        "measured_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "layers": args.layers,
        "steps": args.steps,
        "label": args.label,
        "precisions": {
            p: measure_precision(torch, p, args.layers, args.steps, args.profile_steps) for p in args.precisions
        },
    }
    atomic_write(Path(args.output), json.dumps(data, indent=1) + "\n")
    for p, d in data["precisions"].items():
        for name, clocks in d["per_layer"].items():
            w, c = clocks["wall"], clocks["cpu"]
            print(
                f"{p:5} {name:18} wall {w['forward_us']:6.1f} + {w['backward_us']:6.1f}   "
                f"cpu {c['forward_us']:6.1f} + {c['backward_us']:6.1f} = {c['layer_us']:6.1f} us/layer"
            )


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return "unknown CPU"


def report(args) -> None:
    runs = [json.loads(Path(p).read_text()) for p in args.inputs]
    lines = [
        "# Host cost of a planned layer: CPU harness, frontend execute replaced by a no-op",
        "",
        "<!-- generated: python benchmarks/op_host_cpu.py report benchmarks/reports/op-host-cpu/*.json; "
        "do not edit -->",
        "",
        "Method: benchmarks/op_host_cpu.py's docstring. Host us per layer, median over the steps of a chain of "
        "identical 3x3 convolutions on tiny CPU tensors, as this thread's CPU time (wall time beside it); the "
        "cuDNN frontend's execute is a Python no-op, so what remains is the Python and dispatcher work of the "
        "planned path. `floor`: a bare `torch.autograd.Function` that only allocates its outputs (under AMP "
        "after the weight cast autocast makes for stock too); `stock`: `nn.Conv2d` on CPU, whose CPU kernels "
        "compute (an indicator of the dispatch path only, not of cuDNN's host cost). The machine is shared: "
        "compare rows of one run, and runs made one after the other.",
        "",
        "| run | " + " | ".join(f"{p}, planned 1 piece / floor" for p in MEASURED) + " |",
        "|---|" + "---|" * len(MEASURED),
    ]
    for run in runs:
        ratio = []
        for p in MEASURED:
            pl = run["precisions"].get(p, {}).get("per_layer")
            ratio.append(
                f"{pl['planned, 1 piece']['cpu']['layer_us'] / pl['floor']['cpu']['layer_us']:.2f}x" if pl else "-"
            )
        lines.append(f"| {run['label']} | " + " | ".join(ratio) + " |")
    lines.append("")
    for run in runs:
        lines += [
            f"## {run['label']}",
            "",
            f"{run['machine']}, torch {run['torch']}, {run['measured_at']}; {run['layers']} layers x "
            f"{run['steps']} steps.",
            "",
            "| precision | chain | forward us | backward us | layer us | layer us, wall | above floor |",
            "|---|---|---|---|---|---|---|",
        ]
        for p, d in run["precisions"].items():
            floor = d["per_layer"]["floor"]["cpu"]["layer_us"]
            for name, clocks in d["per_layer"].items():
                r, wall = clocks["cpu"], clocks["wall"]
                above = f"{r['layer_us'] - floor:+.1f}" if name != "floor" else "-"
                lines.append(
                    f"| {p} | {name} | {r['forward_us']:.1f} | {r['backward_us']:.1f} | {r['layer_us']:.1f} | "
                    f"{wall['layer_us']:.1f} | {above} |"
                )
        extra = {
            p: d["per_layer"]["planned, 2 pieces"]["cpu"]["layer_us"]
            - d["per_layer"]["planned, 1 piece"]["cpu"]["layer_us"]
            for p, d in run["precisions"].items()
        }
        lines += [
            "",
            "Host us of one more piece in each of the three kernels (2 pieces less 1 piece, forward + backward): "
            + ", ".join(f"{p} {v:+.1f}" for p, v in extra.items())
            + ". For fp16 the second BackwardFilter piece also starts the fp32 sum of dW (a cast and an add, "
            "CPU kernels here); TF32 has no Python work per piece that fp16 lacks, so TF32's larger host time "
            "per piece on the GPU (benchmarks/reports/op-host-cost.md) is below the Python, in the frontend's "
            "execute and cuDNN (GPU kernels per launch: benchmarks/op_host_cost.py). CPU casts to fp16 are slow "
            "kernels here (10-30 us), which inflates every fp16 row alike.",
            "",
        ]
        for p, d in run["precisions"].items():
            prof = _trim(d["profile"])
            lines += [f"cProfile of planned steps ({p}, 1 piece), by own time:", "", "```", prof, "```", ""]
    atomic_write(Path(args.output), "\n".join(lines))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", required=True)
    m.add_argument("--layers", type=int, default=16)
    m.add_argument("--steps", type=int, default=300)
    m.add_argument("--profile-steps", type=int, default=50)
    m.add_argument("--precisions", nargs="+", default=list(MEASURED), choices=MEASURED)
    m.add_argument("--label", default="this tree")
    r = sub.add_parser("report")
    r.add_argument("inputs", nargs="+")
    r.add_argument("-o", "--output", default=str(ROOT / "benchmarks/reports/op-host-cpu.md"))
    args = ap.parse_args()
    measure(args) if args.cmd == "measure" else report(args)


if __name__ == "__main__":
    main()
