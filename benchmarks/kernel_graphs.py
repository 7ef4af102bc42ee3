"""Per-kernel CUDA graphs (engine.pytorch.kernelgraph, apply_plan's ``graphs``) against launching every piece.

    python benchmarks/kernel_graphs.py measure -o benchmarks/reports/kernel-graphs.json   # GPU host
    python benchmarks/kernel_graphs.py report                                             # anywhere

``measure``: (1) the layer of benchmarks/op_host_cost.py (64 -> 64 channels, 3x3, 14x14, mini-batch 64) split
into 1, 2, 4 and 8 micro-batches of one plan per direction, fp16 NHWC and TF32 NCHW: host microseconds per op
call (its Python body, as an eager step calls it) and elapsed microseconds on a free GPU, by
op_host_cost.host_and_elapsed_us, with graphs and without; the results of both paths against a float64
reference on fresh random data, three times over, and how many replays ran (a graph reads memory as it is at
replay). (2) ResNet-50 b64 eager training steps with every layer of a WR plan applied (``keep_stock=False``, so
each layer pays the op's host cost), from the bundled profile of this GPU: stock PyTorch, the plan without
graphs and with, in interleaved rounds (CUDA events, median of each round's steps), and the loss and every
gradient of one step with graphs against the same step without. ``report`` writes
benchmarks/reports/kernel-graphs.md and README's block from the JSON alone.
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.op_host_cost import BATCH, PIECES, TARGETS, common_plan, host_and_elapsed_us  # noqa: E402
from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402

REPORT = ROOT / "benchmarks" / "reports" / "kernel-graphs.md"
DEFAULT_JSON = ROOT / "benchmarks" / "reports" / "kernel-graphs.json"
CASES = ("forward", "forward with bias", "backward_data", "backward_filter", "forward+backward")
MODELS = (  # network, batch, precision, layout, WR budget per kernel (the networks with bundled H200 profiles)
    ("alexnet", 256, "fp16", "NHWC", "256MiB"),
    ("alexnet", 256, "tf32", "NCHW", "256MiB"),
    ("resnet50", 64, "fp16", "NHWC", "256MiB"),
    ("resnet50", 64, "tf32", "NCHW", "256MiB"),
    ("resnet50", 64, "tf32", "NCHW", "64MiB"),
    ("vgg16", 64, "fp16", "NHWC", "256MiB"),
    ("vgg16", 64, "tf32", "NCHW", "256MiB"),
)
VARIANTS = ("stock", "pieces", "graphs", "default")  # default: apply_plan's own (keep_stock and graphs on)
ROUNDS, WARMUP_STEPS, STEPS = 4, 5, 30


def measure_layer(torch, precision: str, layout: str) -> dict:
    from engine.gpu.graphs import ExecutionPlans
    from engine.gpu.pieces import Pieces
    from engine.kernels import KernelKind, KernelSignature
    from engine.pytorch import conv as ops
    from engine.pytorch.kernelgraph import KernelGraphs

    ctx = ops.TorchContext.get(0)
    plans = ExecutionPlans(ctx)
    dtype, fmt = ops.TORCH_DTYPE[precision], ops.MEMORY_FORMAT[layout]
    kinds = (KernelKind.FORWARD, KernelKind.BACKWARD_DATA, KernelKind.BACKWARD_FILTER)
    sigs = [KernelSignature(k, BATCH, 64, 14, 14, 64, 3, 3, 1, 1, precision=precision, layout=layout) for k in kinds]
    names = {sig.kind: common_plan(plans, sig, [BATCH // p for p in PIECES]) for sig in sigs}
    x, gy = (torch.randn(BATCH, 64, 14, 14, device="cuda", dtype=dtype).to(memory_format=fmt) for _ in "xy")
    w = torch.randn(64, 64, 3, 3, device="cuda", dtype=dtype).to(memory_format=fmt)
    b = torch.randn(64, device="cuda", dtype=dtype)
    rows, checks = [], []
    for p in PIECES:
        handles = {}
        for graphs in (False, True):
            built = [Pieces(f"kg:{sig.kind.short}", sig, [(BATCH // p, names[sig.kind])] * p, plans) for sig in sigs]
            L = ops.PlannedLayer(f"p{p}", *built, None, ctx, (1, 1), (1, 1), (1, 1), 1, graphs=graphs)
            handles[graphs] = ops.register(L)
        for graphs, h in handles.items():
            xg, wg = (t.detach().clone().requires_grad_() for t in (x, w))
            calls = {
                "forward": lambda h=h: ops._forward(x, w, None, h),
                "forward with bias": lambda h=h: ops._forward(x, w, b, h),
                "backward_data": lambda h=h: ops._backward_data(gy, w, h),
                "backward_filter": lambda h=h: ops._backward_filter(x, gy, w, h),
                "forward+backward": lambda h=h, xg=xg, wg=wg: ops.planned_conv(xg, wg, None, h).backward(gy),
            }
            for case, fn in calls.items():
                host, elapsed = host_and_elapsed_us(torch, fn)
                rows.append(
                    {"precision": precision, "pieces": p, "graphs": graphs, "case": case}
                    | {"host_us": round(host, 2), "elapsed_us": round(elapsed, 2)}
                )
                print(json.dumps(rows[-1]), flush=True)
        checks.append(check_layer(torch, ops, KernelGraphs, handles, x, w, gy) | {"precision": precision, "pieces": p})
        print(json.dumps(checks[-1]), flush=True)
    return {"rows": rows, "checks": checks}


def check_layer(torch, ops, KernelGraphs, handles: dict, x, w, gy) -> dict:
    """Both paths against float64 on fresh data, three times; the graph path called four times a round (so
    captured, then replayed at the same addresses); replays counted by wrapping CUDAGraph.replay."""
    F = torch.nn.functional
    err = {}
    count, replay = [0], torch.cuda.CUDAGraph.replay

    def counting(graph):
        count[0] += 1
        return replay(graph)

    torch.cuda.CUDAGraph.replay = counting
    try:
        for _ in range(3):
            x.normal_(), w.normal_(), gy.normal_()
            for name, fn, ref in (
                (
                    "forward",
                    lambda h: ops._forward(x, w, None, h),
                    lambda: F.conv2d(x.double(), w.double(), None, 1, 1),
                ),
                (
                    "backward_data",
                    lambda h: ops._backward_data(gy, w, h),
                    lambda: torch.nn.grad.conv2d_input(x.shape, w.double(), gy.double(), 1, 1),
                ),
                (
                    "backward_filter",
                    lambda h: ops._backward_filter(x, gy, w, h),
                    lambda: torch.nn.grad.conv2d_weight(x.double(), w.shape, gy.double(), 1, 1),
                ),
            ):
                r = ref().cpu()
                scale = float(r.abs().max())
                direct = fn(handles[False]).double().cpu()
                for _ in range(4):
                    graph = fn(handles[True]).double().cpu()
                    for key, v in (("graphs vs direct", graph - direct), ("graphs vs float64", graph - r)):
                        err[f"{name} {key}"] = max(err.get(f"{name} {key}", 0.0), float(v.abs().max()) / scale)
                err[f"{name} direct vs float64"] = max(
                    err.get(f"{name} direct vs float64", 0.0), float((direct - r).abs().max()) / scale
                )
    finally:
        torch.cuda.CUDAGraph.replay = replay
    L = ops.layer(handles[True])
    launchers = {"forward": L.run_f, "backward_data": L.run_bd, "backward_filter": L.graphs_bf.launch}
    failed = {k: getattr(getattr(f, "__self__", None), "failed", None) for k, f in launchers.items()}
    return {"max_rel_err": err, "replays": count[0], "capture_failed": {k: v for k, v in failed.items() if v}}


def measure_model(torch, net: str, batch: int, precision: str, layout: str, budget: str) -> dict:
    import torchvision

    from engine.gpu.runtime import provenance
    from engine.planner import make_plan
    from engine.profile import Profile, bundled_profiles
    from engine.pytorch import apply_plan, remove_plan
    from engine.zoo import get_network

    here = provenance()
    gpu = "h200" if "H200" in here["gpu"] else "h100"
    name = f"{gpu}-{net}-b{batch}-{precision}-{layout.lower()}-powerOfTwo"
    profile = Profile.load(bundled_profiles()[name])
    if (profile.provenance["gpu"], profile.provenance["cudnn_version"]) != (here["gpu"], here["cudnn_version"]):
        return {"skipped": f"{name} is of {profile.provenance['gpu']} cuDNN {profile.provenance['cudnn_version']}"}
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
    amp = precision == "fp16"
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    torch.manual_seed(0)
    x = torch.randn(batch, 3, 224, 224, device="cuda").to(memory_format=fmt)
    target = torch.randint(0, 1000, (batch,), device="cuda")
    plan = make_plan(profile, get_network(net, batch), mode="wr", budget=budget, command="benchmarks/kernel_graphs.py")
    stock = getattr(torchvision.models, net)().cuda().to(memory_format=fmt)
    for m in stock.modules():  # dropout off: the copies compare kernels, not masks
        if isinstance(m, torch.nn.Dropout):
            m.p = 0.0
    models = {"stock": stock}
    for graphs in (False, True):  # copies of the same weights, each with the plan applied once
        models["graphs" if graphs else "pieces"] = apply_plan(
            copy.deepcopy(stock), plan, keep_stock=False, graphs=graphs
        )
    models["default"] = apply_plan(copy.deepcopy(stock), plan)
    kept = len(models["default"].ucudnn.stock)
    opts = {k: torch.optim.SGD(m.parameters(), lr=1e-3) for k, m in models.items()}

    def step(model):
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        return loss

    grads = {}
    for key in ("pieces", "graphs"):  # the same weights and kernels: the same numbers (three steps: past capture)
        for _ in range(3):
            models[key].zero_grad(set_to_none=True)
            loss = step(models[key])
        grads[key] = (float(loss), {n: q.grad.detach().clone() for n, q in models[key].named_parameters()})
    diff = max(
        float((grads["graphs"][1][n].float() - g.float()).norm() / (g.float().norm() + 1e-30))
        for n, g in grads["pieces"][1].items()
    )
    losses = {k: v[0] for k, v in grads.items()}
    del grads

    def timed(key: str) -> float:
        model, opt = models[key], opts[key]
        times = []
        for i in range(WARMUP_STEPS + STEPS):
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            step(model)
            opt.step()
            opt.zero_grad(set_to_none=False)
            b.record()
            torch.cuda.synchronize()
            if i >= WARMUP_STEPS:
                times.append(a.elapsed_time(b))
        return statistics.median(times)

    out = {"model": net, "batch": batch, "precision": precision, "layout": layout, "budget": budget}
    out |= {"profile": name, "kernels": len(plan.kernels), "pieces": sum(len(k.micro) for k in plan.kernels)}
    out |= {"layers": len({k.layer for k in plan.kernels}), "default_kept_stock": kept}
    out["rounds"] = []
    for i in range(ROUNDS):  # each round in another order: a host-bound step drifts within a round
        order = VARIANTS[i % len(VARIANTS) :] + VARIANTS[: i % len(VARIANTS)]
        times = {f"{k}_ms": round(timed(k), 3) for k in order}
        out["rounds"].append({f"{k}_ms": times[f"{k}_ms"] for k in VARIANTS} | {"order": list(order)})
        print(json.dumps(out["rounds"][-1]), flush=True)
    for m in models.values():
        if hasattr(m, "ucudnn"):
            remove_plan(m)
    return out | {"loss": losses, "max_grad_rel_l2": diff}


def measure(args) -> None:
    import torch

    from engine.gpu.runtime import provenance

    data = {"provenance": provenance() | {"torch": torch.__version__}, "command": " ".join(sys.argv), "layers": []}
    data["date"] = dt.datetime.now(dt.timezone.utc).isoformat()[:19]
    for precision, layout in (("fp16", "NHWC"), ("tf32", "NCHW")):
        data["layers"].append(measure_layer(torch, precision, layout) | {"precision": precision, "layout": layout})
    data["models"] = [measure_model(torch, *m) for m in MODELS]
    atomic_write(args.output, json.dumps(data, indent=1))


# --- report -----------------------------------------------------------------------------------------------


def load(path: Path) -> dict:
    return json.loads(Path(path).read_text())


def host(data: dict, precision: str, p: int, graphs: bool, case: str) -> dict:
    layer = next(x for x in data["layers"] if x["precision"] == precision)
    return next(r for r in layer["rows"] if (r["pieces"], r["graphs"], r["case"]) == (p, graphs, case))


def slope_text(v: float) -> str:
    """A per-piece slope for prose: a negative one is noise around nothing."""
    return f"{v:.2f} us" if v >= 0 else f"about 0 us (a slope of {v:.2f})"


def per_piece(data: dict, precision: str, graphs: bool, case: str = "forward") -> float:
    """Least-squares slope of host us over the piece count (op_host_cost's per-piece measure)."""
    xs = list(PIECES)
    ys = [host(data, precision, p, graphs, case)["host_us"] for p in xs]
    mx, my = statistics.mean(xs), statistics.mean(ys)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys)) / sum((a - mx) ** 2 for a in xs)


def model_name(m: dict) -> str:
    return f"{m['model']} b{m['batch']} {m['precision']} {m['layout']}{' AMP' if m['precision'] == 'fp16' else ''}"


def model_ratios(m: dict) -> dict:
    """Median over the rounds of each round's planned/stock step ratio, and the range."""
    out = {}
    for key in [f"{v}_ms" for v in VARIANTS[1:] if f"{v}_ms" in m["rounds"][0]]:
        ratios = [r[key] / r["stock_ms"] for r in m["rounds"]]
        out[key] = (statistics.median(ratios), min(ratios), max(ratios))
    return out


def render(data: dict, source: str) -> str:
    p = data["provenance"]
    lines = [
        "# Per-kernel CUDA graphs against launching every piece",
        "",
        f"Written by `python benchmarks/kernel_graphs.py report` from [{Path(source).name}]({Path(source).name}), "
        f"measured by `{data['command']}` on {p['gpu']} (driver {p.get('driver', '?')}, cuDNN "
        f"{p['cudnn_version']}, frontend {p.get('frontend_version', '?')}, torch {p['torch']}), {data['date']} UTC. "
        "One planned layer (64 -> 64, 3x3, 14x14, b64) split into equal micro-batches of one plan per direction; "
        "host us per call of the op's Python body (as an eager step calls it) with the GPU held busy, median of "
        "192 calls; elapsed us per call on a free GPU. Graphs: each kernel's pieces captured per address set at "
        "its second use and replayed (engine.pytorch.kernelgraph); pieces: every piece launched from the host. "
        f"Issue 22's targets: {TARGETS['per_piece_us']:g} us per piece, {TARGETS['per_call_us']:g} us per op call.",
        "",
        "| precision | op | pieces | host us: pieces | host us: graphs | elapsed us: pieces | elapsed us: graphs |",
        "|---|---|---|---|---|---|---|",
    ]
    for layer in data["layers"]:
        for case in [c for c in CASES if any(r["case"] == c for r in layer["rows"])]:
            for n in PIECES:
                a, b = (host(data, layer["precision"], n, g, case) for g in (False, True))
                lines.append(
                    f"| {layer['precision']} {layer['layout']} | {case} | {n} | {a['host_us']:.1f} | "
                    f"{b['host_us']:.1f} | {a['elapsed_us']:.1f} | {b['elapsed_us']:.1f} |"
                )
    lines += ["", "Per piece (slope of a forward call's host us over 1, 2, 4, 8 pieces):", ""]
    for layer in data["layers"]:
        pr = layer["precision"]
        lines.append(
            f"- {pr}: {per_piece(data, pr, False):.1f} us a piece launched from the host, "
            f"{slope_text(per_piece(data, pr, True))} with graphs."
        )
    lines += [
        "",
        "Results (relative to the largest magnitude of a float64 reference, worst of 3 rounds of fresh data):",
        "",
    ]
    for layer in data["layers"]:
        for c in layer["checks"]:
            e = c["max_rel_err"]
            worst = max(v for k, v in e.items() if "graphs vs direct" in k)
            ref = max(v for k, v in e.items() if "graphs vs float64" in k)
            lines.append(
                f"- {c['precision']} {c['pieces']} piece(s): graphs against pieces {worst:.2g}, graphs against "
                f"float64 {ref:.2g}; {c['replays']} replays ran in the check"
                + (f"; capture failed: {c['capture_failed']}" if c["capture_failed"] else "")
            )
    lines += [
        "",
        "## Eager training steps",
        "",
        "Copies of one model with the same weights: stock PyTorch; `apply_plan(model, plan, keep_stock=False, "
        "graphs=False)` (pieces) and `graphs=True` (graphs), every layer the plan covers planned; and "
        "`apply_plan(model, plan)` (apply_plan's defaults: graphs, and layers the plan does not speed up left "
        "stock). The plan: WR at the budget from the bundled profile of this GPU. Interleaved rounds (from "
        "2026-11-29 12:00 each in another order), each the median of "
        f"{STEPS} steps after {WARMUP_STEPS} (CUDA events around forward, backward and an SGD step); ratios are the "
        "median of the rounds' ratios, their range in brackets. Host-bound steps (ResNet-50 in fp16 AMP: the GPU "
        "about 30 % busy) move by 5-10 % between identical models run one after another: read their ratios with "
        "that noise. The loss and gradients: three steps of the pieces copy and of the graphs copy from the same "
        "weights.",
        "",
        "| model | budget | layers / pieces | stock ms | pieces ms | graphs ms | pieces / stock | graphs / stock "
        "| apply_plan's defaults / stock (layers left stock) | loss, pieces / graphs | max gradient rel. L2, graphs vs "
        "pieces |",
        "|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for m in data["models"]:
        if "skipped" in m:
            lines.append(f"| {m.get('model', '?')} | - | skipped: {m['skipped']} | | | | | | | | |")
            continue
        med = {k: statistics.median(r[k] for r in m["rounds"]) for k in ("stock_ms", "pieces_ms", "graphs_ms")}
        q = model_ratios(m)
        ratio = lambda key: f"{q[key][0]:.3f}x ({q[key][1]:.3f}-{q[key][2]:.3f})" if key in q else "-"  # noqa: E731
        kept = f" ({m['default_kept_stock']})" if "default_kept_stock" in m else ""
        lines.append(
            f"| {model_name(m)} | {m['budget']} | {m.get('layers', '?')} / {m['pieces']} | {med['stock_ms']:.2f} | "
            f"{med['pieces_ms']:.2f} | {med['graphs_ms']:.2f} | {ratio('pieces_ms')} | {ratio('graphs_ms')} | "
            f"{ratio('default_ms')}{kept} | {m['loss']['pieces']:.6f} / {m['loss']['graphs']:.6f} | "
            f"{m['max_grad_rel_l2']:.2g} |"
        )
    return "\n".join(lines) + "\n"


def readme_block(data: dict) -> str:
    p = data["provenance"]
    rounds = max(len(m.get("rounds", [])) for m in data["models"])
    parts = []
    for m in data["models"]:
        if "skipped" in m:
            continue
        q = model_ratios(m)
        default = f", {q['default_ms'][0]:.2f}x with apply_plan's defaults" if "default_ms" in q else ""
        parts.append(
            f"{model_name(m)} at {m['budget']} {q['pieces_ms'][0]:.2f}x with every piece launched from the host, "
            f"{q['graphs_ms'][0]:.2f}x with graphs{default}"
        )
    pieces = "; ".join(
        f"{x['precision']} {per_piece(data, x['precision'], False):.1f} us a piece from the host, "
        f"{slope_text(per_piece(data, x['precision'], True))} with graphs (a forward op call "
        + " and ".join(
            f"{host(data, x['precision'], n, True, 'forward')['host_us']:.1f} us at {n} piece{'s' * (n > 1)} "
            f"({host(data, x['precision'], n, False, 'forward')['host_us']:.1f} without)"
            for n in (PIECES[0], PIECES[-1])
        )
        + ")"
        for x in data["layers"]
    )
    return (
        f"Per-kernel CUDA graphs (`apply_plan`'s and `optimize`'s `graphs=True`, the default), on {p['gpu']} "
        f"({data['date'][:10]}; issue 22's targets {TARGETS['per_piece_us']:g} us a piece, "
        f"{TARGETS['per_call_us']:g} us an op call): {pieces}. Eager training steps against stock PyTorch's, every "
        f"layer planned (`keep_stock=False`) unless said, median of {rounds} interleaved rounds (host-bound steps "
        "vary 5-10 % run to run): "
        + "; ".join(parts)
        + " ([benchmarks/reports/kernel-graphs.md](benchmarks/reports/kernel-graphs.md))."
    )


def report(args) -> None:
    data = load(args.json)
    atomic_write(REPORT, render(data, str(args.json)))
    write_block(README, "kernel_graphs", readme_block(data))
    print(REPORT.read_text())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default=str(DEFAULT_JSON))
    r = sub.add_parser("report")
    r.add_argument("json", nargs="?", default=str(DEFAULT_JSON))
    args = ap.parse_args()
    measure(args) if args.cmd == "measure" else report(args)


if __name__ == "__main__":
    main()
