"""``optimize(model)`` on one model of every torchvision family, on a GPU: does the one line work on any CNN?

    python benchmarks/torchvision_optimize.py run --out DIR [--models a,b]   # on a GPU host
    python benchmarks/torchvision_optimize.py report [DIR ...]              # anywhere

``run`` takes each model in a process of its own (a crash loses one model): fresh random weights, the smooth variant
(engine.testing.torchmodels: the convolutions untouched, kinks and random draws removed), strict fp32 (TF32 off for
convolutions and matmuls), batch 8. One copy trains a step with stock PyTorch, one with ``optimize(model, "4MiB",
policy=[8, 4], engines="heuristics", keep_stock=False)`` (every convolution through the planned ops; 4 MiB so some
kernels split into micro-batches; a profile cache of its own, from cold, so its first step holds everything a user's
first step on a new machine does) and one in float64, the reference. Both fp32 runs are measured by their distance
to float64: the output, the whole gradient (every parameter's, concatenated) and each parameter's gradient. A model
passes when every convolution it has is planned and the planned run is no farther from float64 than twice stock's
distance plus fp32's verification tolerance, on the output, on the whole gradient and on each parameter whose stock
gradient is within 1e-2 of float64 (others are zero but for rounding, such as a convolution bias that the next
BatchNorm cancels; they are counted). Models ``optimize`` cannot plan (a video model's 5-D input) must run stock
PyTorch with one warning naming why. ``report`` writes benchmarks/reports/torchvision-optimize.md from the DIRs'
results.json.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import git_commit, provenance, run_case, save_json  # noqa: E402

# one model of each torchvision family (the smallest), name -> (builder module, input C x H x W)
MODELS = {
    "vgg11_bn": ("", (3, 128, 128)),
    "resnet18": ("", (3, 128, 128)),
    "resnext50_32x4d": ("", (3, 128, 128)),
    "wide_resnet50_2": ("", (3, 128, 128)),
    "densenet121": ("", (3, 128, 128)),
    "googlenet": ("", (3, 128, 128)),
    "inception_v3": ("", (3, 160, 160)),
    "squeezenet1_1": ("", (3, 128, 128)),
    "shufflenet_v2_x0_5": ("", (3, 128, 128)),
    "mnasnet0_5": ("", (3, 128, 128)),
    "mobilenet_v2": ("", (3, 128, 128)),
    "mobilenet_v3_small": ("", (3, 128, 128)),
    "efficientnet_b0": ("", (3, 128, 128)),
    "efficientnet_v2_s": ("", (3, 128, 128)),
    "regnet_x_400mf": ("", (3, 128, 128)),
    "regnet_y_400mf": ("", (3, 128, 128)),
    "convnext_tiny": ("", (3, 128, 128)),
    "maxvit_t": ("", (3, 224, 224)),
    "swin_t": ("", (3, 128, 128)),
    "vit_b_16": ("", (3, 224, 224)),
    "fcn_resnet50": ("segmentation", (3, 128, 128)),
    "deeplabv3_mobilenet_v3_large": ("segmentation", (3, 128, 128)),
    "lraspp_mobilenet_v3_large": ("segmentation", (3, 128, 128)),
    "r3d_18": ("video", (3, 8, 64, 64)),
}
BATCH = 8
BUDGET, POLICY = "4MiB", [8, 4]
SIGNAL = 1e-2  # a parameter whose stock gradient is farther than this from float64's is rounding noise there
REPORT = ROOT / "benchmarks" / "reports" / "torchvision-optimize.md"
RUNS = ROOT / "benchmarks" / "reports" / "torchvision-optimize"  # one folder per run, each with its results.json


def build(name: str):
    """The model with fresh random weights (seed 0), smooth, on the GPU."""
    import torch
    import torchvision

    from engine.testing.torchmodels import smooth

    family, _ = MODELS[name]
    torch.manual_seed(0)
    module = getattr(torchvision.models, family) if family else torchvision.models
    kwargs = {"weights": None, "num_classes": 5 if family == "segmentation" else 10}
    if family == "segmentation":
        kwargs.update(weights_backbone=None, aux_loss=False)
    if name in ("googlenet", "inception_v3"):
        kwargs.update(aux_logits=False, init_weights=True)
    return smooth(getattr(module, name)(**kwargs)).cuda()


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-300))


def case(name: str, cache: str) -> dict:
    """One model: stock, planned and float64 steps; the distances of both fp32 runs to float64."""
    import copy
    import warnings

    import torch

    from engine.precision import PRECISIONS
    from engine.pytorch import optimize

    torch.backends.cudnn.allow_tf32 = torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.benchmark = False
    stock = build(name)
    planned, exact = copy.deepcopy(stock), copy.deepcopy(stock).double()
    convs = [n for n, m in stock.named_modules() if isinstance(m, torch.nn.Conv2d)]
    t0 = time.perf_counter()
    auto = optimize(planned, BUDGET, policy=POLICY, engines="heuristics", cache=cache, progress=False, keep_stock=False)
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(BATCH, *MODELS[name][1], device="cuda", generator=g)

    def step(model, inp):
        out = model(inp)
        out = out["out"] if isinstance(out, dict) else out
        weights = torch.randn(out.shape, device="cuda", generator=torch.Generator("cuda").manual_seed(2))
        (out * weights.to(out.dtype)).sum().backward()  # a smooth loss of any output
        return out.detach()

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        yp = step(planned, x)
    first_s = time.perf_counter() - t0
    ys, ye = step(stock, x), step(exact, x.double())
    said = [str(w.message) for w in seen if str(w.message).startswith("optimize:")]
    res = dict(name=name, input=[BATCH, *MODELS[name][1]], convs=len(convs), first_step_s=round(first_s, 2))
    res["warnings"] = said
    if auto.current is None:
        res["stock"] = next(iter(auto.stock.values()), None)
        return res
    applied = auto.plans[auto.current]
    res.update(
        planned=len(applied.planned),
        unplanned=applied.unplanned,
        fallbacks=applied.fallbacks,
        kernels=len(applied.plan.kernels),
        split=sum(len(k.micro) > 1 for k in applied.plan.kernels),
        history=auto.history,
    )
    mine = dict(planned.named_parameters())
    grads = [(n, p.grad, mine[n].grad, e.grad) for (n, p), e in zip(stock.named_parameters(), exact.parameters())]
    res["missing_gradients"] = [n for n, s, q, _ in grads if (s is None) != (q is None)]
    grads = [g for g in grads if g[1] is not None and g[2] is not None]
    cat = [torch.cat([t.reshape(-1).double() for t in ts]) for ts in zip(*[g[1:] for g in grads])]
    per = [(n, rel(q, e), rel(s, e)) for n, s, q, e in grads]
    signal = [(n, p, s) for n, p, s in per if s <= SIGNAL]
    tol = PRECISIONS["fp32"].tolerance
    above = [
        r for r in signal if r[2] >= tol
    ]  # where stock's own error is above fp32's tolerance a ratio means something
    worst = max(above, key=lambda r: r[1] / r[2]) if above else max(signal, key=lambda r: r[1], default=("", 0.0, 0.0))
    res.update(
        output=dict(planned=rel(yp, ye), stock=rel(ys, ye)),
        gradient=dict(planned=rel(cat[1], cat[2]), stock=rel(cat[0], cat[2])),
        parameters=len(per),
        signal=len(signal),
        worst=dict(parameter=worst[0], planned=worst[1], stock=worst[2]),
    )
    res["passed"] = (
        len(applied.planned) == len(convs)
        and not res["missing_gradients"]
        and all(res[k]["planned"] <= 2 * res[k]["stock"] + tol for k in ("output", "gradient"))
        and all(p <= 2 * s + tol for _, p, s in signal)
    )
    return res


def run(args) -> None:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    path = out / "results.json"
    doc = json.loads(path.read_text()) if path.exists() else {"models": {}}
    doc["provenance"] = provenance("python benchmarks/torchvision_optimize.py run", commit=git_commit())
    doc["settings"] = dict(batch=BATCH, budget=BUDGET, policy=POLICY, engines="heuristics", precision="fp32")
    names = args.models.split(",") if args.models else list(MODELS)
    for name in names:
        if "error" not in doc["models"].get(name, {"error": None}) and not args.again:
            continue
        cmd = [sys.executable, __file__, "case", name, "--cache", str(out / f"{name}.sqlite")]
        doc["models"][name] = run_case(cmd, {"name": name}, args.timeout, failed={"passed": False})
        save_json(path, doc)
        r = doc["models"][name]
        print(name, r.get("passed"), r.get("error") or r.get("stock") or "", flush=True)


def load(dirs: list[Path]) -> tuple[dict, dict]:
    """{model: result} of the runs in ``dirs`` (a later run's model replaces an earlier one's), and the last
    run's provenance."""
    rows, prov = {}, None
    for d in dirs:
        doc = json.loads((Path(d) / "results.json").read_text())
        rows.update(doc["models"])
        prov = doc["provenance"]
    return rows, prov


def _stock_row(r: dict) -> bool:
    """A model optimize() could not plan passes when it ran stock PyTorch with exactly one warning."""
    return "planned" not in r and "error" not in r and len(r["warnings"]) == 1


def render(rows: dict, p: dict, dirs: list[str]) -> str:
    lines = [
        "# `optimize(model)` on one model of every torchvision family",
        "",
        f"Written by `python benchmarks/torchvision_optimize.py report` from {', '.join(dirs)}; measured by "
        f"`python benchmarks/torchvision_optimize.py run` on {p['gpu']} (driver {p['driver']}, cuDNN "
        f"{p['cudnn_version']}, frontend {p['frontend_version']}, torch {p['torch']}), {p['date']}, commit "
        f"{p['commit']}.",
        "",
        __doc__.split("\n\n", 2)[2].split("``report``")[0].strip(),
        "",
        "Errors are relative L2 distances to float64. vit_b_16's output is zero in every run (torchvision "
        "initialises its head to zero), so its output distance is 0. First step: the planned model's first "
        "forward and backward, with the import, profiling, planning and applying the plan in it.",
        "",
        "| model | input | convolutions planned | kernels split | graphs measured | first step s | output: planned / "
        "stock | whole gradient: planned / stock | the parameter gradient farthest above stock's: planned / stock "
        "(of the gradients stock gets right) | passed |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for name in MODELS:
        r = rows.get(name)
        if r is None:
            continue
        inp = "x".join(map(str, r.get("input", [])))
        if "error" in r:
            lines.append(f"| {name} | {inp} | failed: {r['error']} | | | | | | | no |")
        elif "planned" not in r:
            lines.append(
                f"| {name} | {inp} | stock PyTorch, {len(r['warnings'])} warning: {r.get('stock')} | | | "
                f"{r['first_step_s']:.1f} | | | | {'yes' if _stock_row(r) else 'no'} |"
            )
        else:
            lines.append(
                f"| {name} | {inp} | {r['planned']} of {r['convs']} | {r['split']} of {r['kernels']} | "
                f"{r['history'][0]['measured']} | {r['first_step_s']:.1f} | "
                f"{r['output']['planned']:.1e} / {r['output']['stock']:.1e} | "
                f"{r['gradient']['planned']:.1e} / {r['gradient']['stock']:.1e} | "
                f"{r['worst']['planned']:.1e} / {r['worst']['stock']:.1e} ({r['signal']} of {r['parameters']}) | "
                f"{'yes' if r['passed'] else 'no'} |"
            )
    return "\n".join(lines) + "\n"


def readme_block(rows: dict, p: dict) -> str:
    planned = [r for r in rows.values() if "planned" in r]
    stock = [name for name, r in rows.items() if "planned" not in r]
    ok = [r for r in planned if r["passed"]]
    grad = {w: [r["gradient"][w] for r in planned] for w in ("planned", "stock")}
    first = [r["first_step_s"] for r in planned]
    return (
        f'`optimize(model, "{BUDGET}", policy={POLICY}, engines="heuristics", keep_stock=False)` on one model of '
        f"each of {len(planned)} torchvision families at batch {BATCH} in strict fp32, each from a cold profile "
        f"cache on an {p['gpu']} ({p['date'][:10]}): {len(ok)} of {len(planned)} planned every convolution "
        f"({sum(r['planned'] for r in planned):,} in all, {sum(r['split'] for r in planned)} kernels split into "
        f"micro-batches) and trained a step no farther from float64 than twice stock PyTorch's own distance plus "
        f"1e-5, on the output, the whole gradient and each parameter's (whole gradient: planned "
        f"{min(grad['planned']):.1e}-{max(grad['planned']):.1e}, stock {min(grad['stock']):.1e}-"
        f"{max(grad['stock']):.1e}); the first step, import, profiling and planning included, took "
        f"{min(first):.1f}-{max(first):.1f} s; "
        + "; ".join(
            f"{n} ran stock PyTorch with {len(rows[n]['warnings'])} warning ({rows[n].get('stock')})" for n in stock
        )
        + " "
        "([benchmarks/reports/torchvision-optimize.md](benchmarks/reports/torchvision-optimize.md))."
    )


def report(args) -> None:
    dirs = args.dirs or [str(d.relative_to(ROOT)) for d in sorted(RUNS.iterdir()) if (d / "results.json").exists()]
    rows, prov = load([ROOT / d for d in dirs])
    from benchmarks.readme import README, write_block
    from engine.fileio import atomic_write

    atomic_write(REPORT, render(rows, prov, dirs).encode())
    write_block(README, "torchvision_optimize", readme_block(rows, prov))
    print(REPORT)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--out", required=True)
    r.add_argument("--models", default="")
    r.add_argument("--again", action="store_true", help="measure models already in DIR/results.json again")
    r.add_argument("--timeout", type=float, default=240)
    c = sub.add_parser("case")
    c.add_argument("name", choices=list(MODELS))
    c.add_argument("--cache", required=True)
    rep = sub.add_parser("report")
    rep.add_argument("dirs", nargs="*", help="run folders, relative to the repository (default: every run)")
    a = ap.parse_args()
    if a.cmd == "case":
        print(json.dumps(case(a.name, a.cache)))
    elif a.cmd == "run":
        run(a)
    else:
        report(a)


if __name__ == "__main__":
    main()
