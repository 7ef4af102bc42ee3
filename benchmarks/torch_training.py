"""Full PyTorch training steps: stock cuDNN (GPU free, and under memory pressure) vs planned convolutions.

    python benchmarks/torch_training.py measure -o benchmarks/reports/torch_training.json   # GPU host
    python benchmarks/torch_training.py report benchmarks/reports/torch_training.json       # anywhere

``measure`` runs every case in its own process (``cudnn.benchmark`` fixes an algorithm per shape at the
first call, so cases must not share a process) and appends each result to the JSON file as it comes
(atomically); ``--rounds N`` runs a model's cases N times round after round (on the lent H200 hosts one
process's step differed from the next's by up to 38 % with the same code, so a single pair cannot judge 3 %).
A case is one torchvision model, mini-batch, precision and one of:

- ``stock-free``: stock PyTorch, ``cudnn.benchmark=True``, the whole GPU free;
- ``stock-X``: the same with only X MiB free beside the step's own memory at its peak: a filler tensor holds
  the rest, set before the first step. Convolutions that run away from the peak still see the memory the step
  has not allocated yet (or has freed), and the case records how much that was at each convolution;
- ``legacy-X``: stock PyTorch on its legacy cuDNN path with its workspace cap, the one knob a PyTorch user has
  (``TORCH_CUDNN_V8_API_DISABLED=1 CUDNN_CONV_WSCAP_DBG=X``; the default v8/v9 path ignores the cap), GPU free;
- ``stock-X-each``: X MiB free at every convolution while ``cudnn.benchmark`` chooses its algorithms, as
  when convolutions are measured alone: during the first step, hooks around
  each convolution's forward and backward cap PyTorch's allocator (``set_per_process_memory_fraction``) at what
  it holds plus the layer's own new tensors plus X MiB, and lift the cap after; the algorithms chosen then stay
  for the timed steps, which run uncapped;
- ``wr-X`` / ``wd-X``: the model with ``engine.pytorch.apply_plan`` of a WR plan at X per kernel / a WD plan
  of X in total (engine.planner.make_plan on the bundled profile of the GPU's model, else H100's), under the
  same pressure. A MEASURED model
  (MobileNetV3-Large, EfficientNet-B0, ConvNeXt-Tiny: no bundled profile) is planned by
  ``engine.gpu.planning.profile_and_plan``, the one-line API's path (``engine.pytorch.optimize``), from the
  profiler's cache in ``--profile-cache`` (``--engines``: default ``heuristics``, cuDNN's heuristic list only,
  which keeps its profile to minutes): the run measures it first, in a process of its own (case ``profile``),
  and a later call on the same cache measures nothing.
  ``wr-X-free``: the plan with the whole GPU free (no filler), the eager step a user gets by default.
  Layers where a plan predicts less gain than its host cost stay stock PyTorch (engine.stock, ``apply_plan``'s
  default; each case records them in ``kept_stock``).
- ``opt-free``: the one-line API, ``engine.pytorch.optimize(model, mode="free")``: profiled into the cache and
  planned at the first forward (a warm-up step, not timed), WR at the memory free then, GPU free.
  ``wr-X-graph`` / ``stock-free-graph`` replay the whole step (forward, backward, SGD update) as one captured
  CUDA graph, with the GPU free: a plan's algorithms and workspace do not depend on the memory free (only its
  arena is used), while graph capture keeps a memory pool of its own that a filler sized for the plain step
  would starve.

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
import functools
import json
import os
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
README_RESULTS = ROOT / "benchmarks" / "reports" / "torch_training.json"  # what the README's block quotes

from benchmarks import common  # noqa: E402
from benchmarks.common import save_json, timed_steps  # noqa: E402
from benchmarks.figures import pyplot, write_png  # noqa: E402
from benchmarks.readme import README, write_block  # noqa: E402
from engine.fileio import atomic_write  # noqa: E402
from engine.precision import PRECISIONS  # noqa: E402

BUNDLED = {"alexnet": 256, "resnet50": 64, "vgg16": 64}  # planned from bundled profiles (profile_name)
MEASURED = {"mobilenet_v3_large": 64, "efficientnet_b0": 64, "convnext_tiny": 64}  # profiled by the run (issue 23)
MODELS = BUNDLED | MEASURED
MEASURED_CASES = ("stock-free", "legacy-64", "wr-64-free", "wr-256-free")  # issue 23: beside stock-free and legacy
PRESSURE_MIB = (64, 256)
CONV_OPS = (
    "aten::cudnn_convolution",
    "aten::_conv_depthwise2d",  # PyTorch's own depthwise kernels: ATen's pick in NCHW fp32/TF32 (cuDNN: fp16, NHWC)
    "aten::convolution_backward",
    "ucudnn::conv_forward",
    "ucudnn::conv_backward_data",
    "ucudnn::conv_backward_filter",
)
MIB = 1 << 20
FILLER_RULE = "a planned case's arena counts inside its X; the filler goes back to the device before profiling"


def profile_name(net: str, batch: int, precision: str) -> str:
    """The bundled profile measured on this GPU's model (``h200-...`` on an H200) where there is one, else H100's."""
    import torch

    from benchmarks.profile_multigpu import gpu_model
    from engine.profile import bundled_profiles

    tail = f"{net}-b{batch}-{precision}-{PRECISIONS[precision].layout.lower()}-powerOfTwo"
    gpu = gpu_model(torch.cuda.get_device_name()) if torch.cuda.is_available() else "h100"
    return f"{gpu}-{tail}" if f"{gpu}-{tail}" in bundled_profiles() else f"h100-{tail}"


# --- one case, in its own process ----------------------------------------------------------------


def plan_for(net: str, batch: int, precision: str, mode: str, budget: int, cache: str | None, engines: str):
    """The plan of a ``wr-X`` / ``wd-X`` case (and of case ``profile``, which measures what the cache lacks):
    a BUNDLED model's from its bundled profile; a MEASURED model's through ``profile_and_plan`` on ``cache``.
    Returns (plan, what profiling did)."""
    from engine.planner import make_plan
    from engine.profile import Profile, resolve_profile
    from engine.zoo import get_network

    command = f"benchmarks/torch_training.py case {net} {precision} {mode}-{budget // MIB}"
    if net in BUNDLED:
        name = profile_name(net, batch, precision)
        plan = make_plan(
            Profile.load(resolve_profile(name)),
            get_network(net, batch),
            mode=mode,
            budget=budget,
            policy="powerOfTwo",
            command=command,
        )
        return plan, {"profile": name}
    from engine.gpu.planning import profile_and_plan
    from engine.pytorch.loader import load_network

    done = profile_and_plan(
        load_network(f"torchvision:{net}", batch),
        mode=mode,
        budget=budget,
        precision=precision,
        layout=PRECISIONS[precision].layout,
        cache=cache,
        engines=engines,
        command=command,
    )
    return done.plan, {"graphs": done.graphs, "measured": done.measured, "profile_s": round(done.seconds, 1)}


def profile_case(net: str, precision: str, cache: str, engines: str) -> dict:
    """Case ``profile``: a MEASURED model's graphs the cache lacks measured, and the WR 64 MiB plan made."""
    batch = MODELS[net]
    plan, done = plan_for(net, batch, precision, "wr", 64 * MIB, cache, engines)
    return dict(
        {"model": net, "batch": batch, "precision": precision, "case": "profile", "engines": engines},
        predicted_conv_ms=plan.totals.time_ms,
        **done,
    )


def run_case(
    net: str,
    precision: str,
    case: str,
    steps: int,
    own: int | None,
    cache: str | None = None,
    engines: str = "heuristics",
) -> dict:
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
    kind, level, *flags = case.split("-")
    if kind == "legacy":  # the cap is in the environment (child); otherwise a stock step with the GPU free
        kind, level = "stock", "free"
    limit_mib = int(level) if level.isdigit() else None
    graph, each, unpressed = "graph" in flags, "each" in flags, "free" in flags
    out = {"model": net, "batch": batch, "precision": precision, "case": case, "steps": steps}
    arena = 0
    if kind == "opt":  # planned in the first warm-up step; the profile goes into the same cache
        from engine.pytorch import optimize

        optimize(model, mode="free", engines=engines, cache=str(cache) if cache else None, progress=False)
    if kind in ("wr", "wd"):
        from engine.pytorch import apply_plan

        plan, done = plan_for(net, batch, precision, kind, limit_mib * MIB, cache, engines)
        out.update(done, engines=engines if net in MEASURED else "bundled profile")
        t0 = time.perf_counter()
        apply_plan(model, plan)  # builds every piece's plan, NVRTC compiles included
        torch.cuda.synchronize()
        arena = model.ucudnn.workspace
        out.update(
            apply_s=time.perf_counter() - t0,
            predicted_conv_ms=plan.totals.time_ms,
            plan_workspace=plan.totals.workspace,
            unplanned=model.ucudnn.unplanned,
            kept_stock=sorted(model.ucudnn.stock),  # engine.stock: the plan gains less than its host cost there
        )
    out["arena"] = arena

    def step():
        with torch.autocast("cuda", dtype=torch.float16, enabled=amp):
            loss = torch.nn.functional.cross_entropy(model(x), target)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=False)

    torch.cuda.synchronize()
    filler = None
    if limit_mib is not None and own is not None and not each and not graph and not unpressed:
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
        if each:  # the first step chooses every algorithm with X MiB free at its convolution
            hooks = squeeze_at_convs(model, limit_mib * MIB, amp)
            step()
            torch.cuda.synchronize()
            out["squeezed"] = hooks.remove()
            torch.cuda.empty_cache()
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
        timed = timed_steps(run, steps, warmup=5)
        free, total = torch.cuda.mem_get_info()
        out["device_used"] = total - free - (filler.numel() if filler is not None else 0)
        out["peak"] = torch.cuda.max_memory_allocated() - (filler.numel() if filler is not None else 0)
        out["step_ms"], out["step_ms_p10"], out["step_ms_p90"] = (
            timed[k] for k in ("step_ms", "step_ms_p10", "step_ms_p90")
        )
        if filler is not None:  # one more step, untimed: the memory free to each convolution under this filler
            out["free_at_convs"] = free_at_convs(model, step)
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
        conv = conv_time(prof)
        out["host_us_per_op"] = conv.pop("host_us") / conv["calls"] if conv["calls"] else None
        out["conv_ms"] = conv.pop("ms") / 3
        conv["naive_ms"] /= 3  # per step, as conv_ms
        out["conv_profile"] = conv  # how the profiler's attribution was read (conv_time)
        kernels = sum(e.device_time for e in prof.events() if e.device_type.name == "CUDA") / 1e3
        out["gpu_busy"] = min(kernels / 3 / wall, 1.0) if wall else None
        out["profiled_step_ms"] = wall
        if kind in ("wr", "wd", "opt"):
            out["fallbacks"] = dict(model.ucudnn.fallbacks)
        if kind == "opt":
            out["planned_layers"] = len(model.ucudnn.planned)
            out["kept_stock"] = sorted(model.ucudnn.stock)
    except torch.OutOfMemoryError as err:
        out["error"] = f"out of memory: {str(err).splitlines()[0][:200]}"
    except Exception as err:  # recorded, so one failing case does not lose the others
        out["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200] if str(err) else ''}"
    return out


def conv_time(prof) -> dict:
    """Convolution device time (ms over the profiled steps), each GPU kernel counted once.

    Summing ``device_time_total`` of the CONV_OPS keys (``key_averages``) counts a kernel once per CPU event
    torch.profiler linked it to, and that linking is not stable: two runs of one case (VGG-16 TF32, WR plan
    at 64 MiB, H100, PyTorch 2.11, 5,004 kernels in 3 steps) gave 11,996 kernel links and a "conv" sum of
    131.7 ms per 59.7 ms step, then 5,239 links and 45.0 ms (benchmarks/reports/torch_training-op-path-2.log).
    Here each kernel event is matched to the runtime or driver call that launched it by CUPTI's correlation
    id and counted once when that call was made during a convolution op on the host (the backward runs on
    the autograd thread while the main thread waits in ``backward()``, so host times do not interleave).
    Also returned: the outermost conv ops' host time and count, the per-link sum (``naive_ms``), the counts
    behind a difference, and the kernels whose launching call is not in the trace (not counted)."""
    import bisect

    events = prof.events()
    cpu = [e for e in events if e.device_type.name == "CPU"]
    conv = [e for e in cpu if e.key in CONV_OPS]

    def in_conv(e) -> bool:
        while e is not None:
            if e.key in CONV_OPS:
                return True
            e = e.cpu_parent
        return False

    outer = [e for e in conv if not in_conv(e.cpu_parent)]
    raw = prof.profiler.kineto_results.events()
    spans = sorted((k.start_ns(), k.end_ns()) for k in raw if k.device_type().name == "CPU" and k.name() in CONV_OPS)
    merged: list[list[int]] = []
    for start, end in spans:
        if merged and start <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], end)
        else:
            merged.append([start, end])
    starts = [m[0] for m in merged]
    launch = {
        k.correlation_id(): k.start_ns() for k in raw if k.device_type().name == "CPU" and k.name().startswith("cu")
    }  # cudaLaunchKernel, cuLaunchKernel...

    def during_conv(t: int | None) -> bool:
        i = bisect.bisect_right(starts, t) - 1 if t is not None else -1
        return i >= 0 and t <= merged[i][1]

    kernels = [k for k in raw if k.device_type().name == "CUDA"]
    ms = sum(k.duration_ns() for k in kernels if during_conv(launch.get(k.correlation_id()))) / 1e6
    return {
        "ms": ms,
        "host_us": sum(e.cpu_time_total for e in outer),
        "calls": len(outer),
        "naive_ms": sum(e.device_time_total for e in conv) / 1e3,
        "conv_events": len(conv),
        "nested_conv_events": len(conv) - len(outer),
        "unmatched_kernels": sum(k.correlation_id() not in launch for k in kernels),
        "unlinked_launches": sum(
            k.linked_correlation_id() == 0 for k in raw if k.device_type().name == "CPU" and k.name().startswith("cu")
        ),
        "kernel_links": sum(len(e.kernels) for e in cpu),
        "kernel_events": len(kernels),
    }


class ConvHooks:
    """Calls ``before(module, phase, input_shape)`` and ``after(module, phase)`` around every ``nn.Conv2d``'s
    forward (module hooks) and backward (a pre-hook on its autograd node, and the hook after its weight
    gradient is accumulated): module backward hooks would clash with torchvision's in-place ReLUs."""

    def __init__(self, model, before, after):
        import torch

        self.handles = []
        for m in model.modules():
            if isinstance(m, torch.nn.Conv2d):
                self.handles += [
                    m.register_forward_pre_hook(lambda mod, args: before(mod, "F", args[0].shape)),
                    m.register_forward_hook(self._forward_done(before, after)),
                    m.weight.register_post_accumulate_grad_hook(lambda w, mod=m: after(mod, "B")),
                ]

    def _forward_done(self, before, after):
        def hook(mod, args, output):
            after(mod, "F")
            if output.grad_fn is not None:
                shape = args[0].shape
                output.grad_fn.register_prehook(lambda grads: before(mod, "B", shape))

        return hook

    def remove(self):
        for h in self.handles:
            h.remove()


def squeeze_at_convs(model, x_bytes: int, amp: bool):
    """Until ``.remove()``, cap PyTorch's allocator at each convolution to what it holds plus the layer's own new
    tensors plus ``x_bytes`` (``set_per_process_memory_fraction``, so cuBLAS and cuDNN handles are not starved)."""
    import torch

    total = torch.cuda.mem_get_info()[1]
    item = 2 if amp else 4
    state = {"count": 0}

    def before(mod, phase, shape):
        torch.cuda.empty_cache()
        n, _, h, w = shape
        (kh, kw), (sh, sw), (ph, pw), (dh, dw) = mod.kernel_size, mod.stride, mod.padding, mod.dilation
        out = (
            n
            * mod.out_channels
            * ((h + 2 * ph - dh * (kh - 1) - 1) // sh + 1)
            * ((w + 2 * pw - dw * (kw - 1) - 1) // sw + 1)
        )
        x, weights = n * shape[1] * h * w, mod.weight.numel()
        if phase == "F":  # the output, and under autocast the casts of input and weight
            own = out * item + ((x + weights) * item if amp else 0)
        else:  # grad input, grad weight (under autocast also its fp32 cast), grad bias
            own = x * item + weights * (item + (4 if amp else 0)) + 4 * mod.out_channels
        cap = torch.cuda.memory_reserved() + own + x_bytes + (8 << 20)  # 8 MiB: block rounding of those tensors
        torch.cuda.set_per_process_memory_fraction(min(cap / total, 1.0))
        state["count"] += 1

    def after(mod, phase):
        torch.cuda.set_per_process_memory_fraction(1.0)

    hooks = ConvHooks(model, before, after)

    class Handle:
        def remove(self):
            hooks.remove()
            torch.cuda.set_per_process_memory_fraction(1.0)
            return state["count"]

    return Handle()


def free_at_convs(model, step) -> list[int]:
    """Bytes PyTorch could give each convolution call of one step (device free + its cache's unused blocks)."""
    import torch

    seen = []

    def before(mod, phase, shape):
        free, _ = torch.cuda.mem_get_info()
        seen.append(free + torch.cuda.memory_reserved() - torch.cuda.memory_allocated())

    hooks = ConvHooks(model, before, lambda *a: None)
    try:
        step()
        torch.cuda.synchronize()
    finally:
        hooks.remove()
    return seen


# --- driver ---------------------------------------------------------------------------------------


def provenance(command: str) -> dict:
    """The profiler's provenance of this GPU (engine.gpu.runtime) plus the PyTorch build and this checkout's commit."""
    return common.provenance(command, commit=common.git_commit())


def legacy_env(case: str) -> dict | None:
    """The environment of a ``legacy-X`` case: PyTorch's legacy cuDNN path with its X MiB workspace cap."""
    if not case.startswith("legacy-"):
        return None
    return dict(os.environ, TORCH_CUDNN_V8_API_DISABLED="1", CUDNN_CONV_WSCAP_DBG=case.split("-")[1])


def child(net, precision, case, steps, own, args=None, timeout: float = 300) -> dict:
    cmd = [sys.executable, __file__, "case", net, precision, case, "--steps", str(steps)]
    if own is not None:
        cmd += ["--own", str(own)]
    if args is not None:
        cmd += ["--profile-cache", str(args.profile_cache), "--engines", args.engines]
    return common.run_case(
        cmd, {"model": net, "precision": precision, "case": case}, timeout, env=legacy_env(case), stamp=True
    )


def cache_file(folder) -> str:
    """The profiler's SQLite cache in a ``--profile-cache`` folder."""
    return str(Path(folder) / "profiles.sqlite")


def keep(doc: dict, res: dict) -> None:
    """Add a case's result, replacing an earlier one of the same case (a --resume retry of a failure)."""
    doc["results"] = [r for r in doc["results"] if case_key(r) != case_key(res)] + [res]


def needs_filler(case: str) -> bool:
    """Whether a case runs under a filler sized by the probe (stock-X, wr-X, wd-X without a flag)."""
    kind, level, *flags = case.split("-")
    return kind in ("stock", "wr", "wd") and level.isdigit() and not flags


def default_cases(pressure: list[int], precision: str) -> list[str]:
    """Every case at each X for TF32; fp16 rows (device time is scarce) leave out the larger X's WD and -each
    cases and the CUDA graphs."""
    low, high = min(pressure), max(pressure)
    if precision != "tf32":
        return ["stock-free", f"wr-{low}-free", f"wr-{high}-free", "opt-free"] + [
            c
            for x in pressure
            for c in (f"legacy-{x}", f"stock-{x}", f"stock-{x}-each", f"wr-{x}", f"wd-{x}")
            if x == low or not c.endswith(("-each", f"wd-{x}"))
        ]
    return (
        ["stock-free", "stock-free-graph", f"wr-{low}-free", f"wr-{high}-free", "opt-free"]
        + [c for x in pressure for c in (f"legacy-{x}", f"stock-{x}", f"stock-{x}-each", f"wr-{x}", f"wd-{x}")]
        + [f"wr-{low}-graph"]
    )


def measure(args) -> int:
    out = Path(args.output)
    t_start = time.time()
    args.profile_cache = Path(args.profile_cache or out.with_name(out.stem + "_profile_cache"))
    args.profile_cache.mkdir(parents=True, exist_ok=True)
    doc = json.loads(out.read_text()) if out.exists() and args.resume else {"results": []}
    prov = provenance("python benchmarks/torch_training.py " + " ".join(sys.argv[1:]))
    prov["filler_rule"] = FILLER_RULE
    doc["runs"] = doc.get("runs", [doc["provenance"]] if "provenance" in doc else []) + [prov]  # a --resume adds one
    doc["provenance"] = prov
    done = {(r["model"], r["precision"], r["case"]) for r in doc["results"] if "error" not in r}
    for spec in args.configs:
        net, precision = spec.split(":")
        cases = args.cases or (list(MEASURED_CASES) if net in MEASURED else default_cases(args.pressure, precision))
        if net in MEASURED and any(c.startswith(("wr-", "wd-")) and (net, precision, c) not in done for c in cases):
            if time.time() - t_start > args.budget_s:
                print(f"budget of {args.budget_s} s spent: run again with --resume to go on", flush=True)
                return 0
            # every graph the cache lacks, measured once in a process of its own, until the call's end at most
            left = max(60, args.budget_s + 300 - (time.time() - t_start))
            res = child(net, precision, "profile", args.steps, None, args, timeout=left)
            doc.setdefault("profiles", {}).setdefault(f"{net}:{precision}", []).append(res)  # one per call
            save_json(out, doc)
            print(json.dumps(res), flush=True)
            if "error" in res:  # no plan: the stock cases only
                cases = [c for c in cases if not c.startswith(("wr-", "wd-"))]
        probe = next(
            (
                r
                for r in doc["results"]
                if (r["model"], r["precision"], r["case"]) == (net, precision, "probe") and "error" not in r
            ),
            None,
        )
        if probe is None and any(needs_filler(c) for c in cases):
            probe = child(net, precision, f"wr-{min(args.pressure)}", args.steps, None, args)
            probe["case"] = "probe"
            keep(doc, probe)
            save_json(out, doc)
        own = probe["device_used"] - probe["arena"] if probe and "error" not in probe else None
        for rnd in range(args.rounds):  # round after round of the cases, so a slow spell of the host hits them all
            for case in cases:
                if rnd == 0 and (net, precision, case) in done:
                    continue
                if rnd > 0 and not has_result(doc, net, precision, case):
                    continue
                if time.time() - t_start > args.budget_s:
                    print(f"budget of {args.budget_s} s spent: run again with --resume to go on", flush=True)
                    return 0
                res = child(net, precision, case, args.steps, own, args)
                print(json.dumps({k: res.get(k) for k in SHOWN} | {"round": rnd + 1}), flush=True)
                if rnd == 0:
                    keep(doc, res)
                else:
                    add_round(doc, res)
                save_json(out, doc)
    return 0


SHOWN = ("model", "precision", "case", "step_ms", "conv_ms", "gpu_busy", "peak", "arena", "error")
ROUND_KEYS = ("step_ms", "step_ms_p10", "step_ms_p90", "gpu_busy", "measured_at", "apply_s")


def case_key(r: dict) -> tuple[str, str, str]:
    return r["model"], r["precision"], r["case"]


def has_result(doc: dict, net: str, precision: str, case: str) -> bool:
    return any(case_key(r) == (net, precision, case) and "error" not in r for r in doc["results"])


def add_round(doc: dict, res: dict) -> None:
    """A later round's run of a case: its step time joins the case's ``rounds`` and the case's ``step_ms`` becomes
    the median over the rounds (a failed round is kept with its error and left out of the median); the rest
    (conv time, peak, ...) stays the first round's."""
    row = next(r for r in doc["results"] if case_key(r) == case_key(res))
    rounds = row.setdefault("rounds", [{k: row.get(k) for k in ROUND_KEYS}])
    rounds.append({"error": res["error"]} if "error" in res else {k: res.get(k) for k in ROUND_KEYS})
    row["step_ms"] = statistics.median(r["step_ms"] for r in rounds if "error" not in r)


# --- report (no GPU) ------------------------------------------------------------------------------


def report(args) -> int:
    from engine.units import format_size

    doc = json.loads(Path(args.results).read_text())
    prov = doc["provenance"]
    rows = [r for r in doc["results"] if not r["case"].startswith("probe")]
    lines = [
        "# PyTorch training steps with planned convolutions (measured)",
        "",
        f"- GPU: {prov['gpu']} (driver {prov['driver']}), cuDNN {prov['cudnn_version']}, cudnn-frontend "
        f"{prov['frontend_version']}, PyTorch {prov['torch']}",
        *[f"- run {i + 1}: {r['date']}, `{r['command']}`" for i, r in enumerate(doc.get("runs", [prov]))],
        *profile_lines(doc),
        f"- each case's start time is `measured_at` in the JSON; report: "
        f"`python benchmarks/torch_training.py report {args.results}`",
        "- each case in its own process; median step time (forward, backward, SGD update) over the timed "
        "steps after 5 warm-up steps, with the 10-90 % range; conv = device time of the convolution ops "
        "(torch.profiler, 3 steps); GPU busy = kernel time / wall time of those steps",
        "- stock-X: a filler tensor leaves X MiB beside the step's own device memory at its peak (probe: the "
        "planned WR step's device memory in use, less its arena); stock-X-each: X MiB free beside each "
        "convolution's own new tensors while cuDNN chooses its algorithms (first step), as for the isolated "
        "convolutions measured alone; wr-X: WR plan, X per kernel; wd-X: WD "
        "plan, X in total; -graph: the whole step replayed as one CUDA graph",
        *(
            [
                "- rounds (`--rounds N`): a model's cases ran round after round, each in a process of its own; a step "
                "time shown with rounds is their median, and the eager comparison judges the median of the rounds' "
                "ratios (each round's two cases ran minutes apart at most, so a slow spell of the host hits both)"
            ]
            if any(len(r.get("rounds", [])) > 1 for r in rows)
            else []
        ),
        "",
    ]
    for key in sorted({(r["model"], r["precision"]) for r in rows}, key=lambda k: (list(MODELS).index(k[0]), k[1])):
        sub = ordered([r for r in rows if (r["model"], r["precision"]) == key])
        free = next((r for r in sub if r["case"] == "stock-free" and "step_ms" in r), None)
        lines += [
            f"## {key[0]} b{MODELS[key[0]]} {key[1]}{' channels_last AMP' if key[1] == 'fp16' else ' NCHW'}",
            "",
            "| case | step ms (10-90 %) | conv ms | stock-free conv / conv | GPU busy | host us / conv op | peak "
            "| workspace arena |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for r in sub:
            if "error" in r:
                lines.append(f"| {r['case']} | {r['error']} | | | | | | |")
                continue
            vs = f"{free['conv_ms'] / r['conv_ms']:.2f}" if free and r.get("conv_ms") and not double_counted(r) else "-"
            conv = "? (counted twice)" if double_counted(r) else f"{r['conv_ms']:.2f}" if r["conv_ms"] else "- (graph)"
            lines.append(
                f"| {r['case']} | {step_text(r)} | "
                f"{conv} | {vs} | {busy_of(r):.0%} | {host_us(r)} | {format_size(r['peak'])} | "
                f"{format_size(r['arena']) if r['arena'] else '-'} |"
            )
        lines.append("")
        lines += applied_lines(sub, doc.get("runs")) + comparisons(sub, free) + [""]
    lines += superseded_lines(doc) + [
        "## Reading it",
        "",
        "- stock-X (X MiB free at the step's peak) barely slows stock PyTorch: PyTorch sizes cuDNN workspace from "
        "what its caching allocator can get at that moment, and away from the peak the step has far more than X "
        "free (the free-at-convolutions lines above, measured in the run). The slow-down measured for isolated "
        "convolutions appears when every convolution has only X free while cuDNN chooses: stock-X-each.",
        "- GPU busy well below 90 % in a planned case means the step is host-bound: every micro-batch is one "
        "Python-level cuDNN launch; the -graph cases (one CUDA graph per step) remove that cost. In a graph "
        "replay torch.profiler does not attribute kernels to operators, so those rows have no conv time.",
        "- GPU busy of a case run under a filler (stock-X, wr-X, wd-X) is understated: the filler is released and "
        "the allocator's cache emptied before the profiled steps, so those steps grow the allocator again "
        "(cudaMalloc on the host path). Step times come from the timed steps, before that.",
        "- stock-X-each failed where the allocator cap left a convolution less than its own tensors: cuBLAS "
        "creating its handle (AlexNet TF32) and the casts autocast adds (fp16). Those rows are missing, not "
        "estimated.",
        *(
            [
                f"- WD at a total of X MiB divides X among all kernels ({kernel_counts(rows)}), so each gets a small "
                "fraction of what WR gives it at X per kernel."
            ]
            if any(r["case"].startswith("wd-") for r in rows)
            else []
        ),
        *verify_flags(rows),
        "",
    ]
    md = Path(args.output or Path(args.results).with_suffix(".md"))
    atomic_write(md, "\n".join(lines).encode())
    plot(rows, md.with_suffix(".png"))
    if args.readme is None and Path(args.results).resolve() == README_RESULTS:
        args.readme = str(README)
    if args.readme:
        write_block(Path(args.readme), "torch_training", readme_block(doc))
    print(f"wrote {md} and {md.with_suffix('.png')}" + (f" and the block in {args.readme}" if args.readme else ""))
    return 0


TARGETS = {"alexnet": 3.0, "vgg16": 3.0, "resnet50": 1.8}  # issue 12: planned vs stock at 64 MiB free
LEGACY_TARGETS = {"alexnet": 3.5, "vgg16": 4.0, "resnet50": 3.0}  # issue 22: wr-64 vs legacy-64 convolutions
EAGER_TARGET = 1.03  # issue 22: an eager planned step (wr-256) at most this times stock-free's


def applied_lines(sub: list[dict], runs: list[dict] | None = None) -> list[str]:
    """How long ``apply_plan`` took in each planned case that recorded it: it builds every piece's cuDNN plan,
    runtime-compiled engines compiled again (NVRTC), once per process before the first step. Each round's time
    with the commit of the run that measured it (the latest run started before it), as code changes it."""
    starts = sorted((r["date"], r.get("commit", "?")) for r in runs or [] if r.get("date"))

    def commit(at) -> str:
        before = [c for d, c in starts if at and d <= at]
        return f" at {before[-1]}" if before else ""

    took = []
    for r in sub:
        timed = [x for x in r.get("rounds", [r]) if x.get("apply_s") is not None]
        if timed:
            took.append(
                f"{r['case']} " + ", ".join(f"{x['apply_s']:.1f} s{commit(x.get('measured_at'))}" for x in timed)
            )
    return [f"- apply_plan (every piece's plan built, runtime compiles included): {'; '.join(took)}"] if took else []


def superseded_lines(doc: dict) -> list[str]:
    """Results a later run replaced after a fix (``superseded`` in the JSON, each with ``why``): what the fix
    changed, measured the same way."""
    sup = doc.get("superseded", [])
    if not sup:
        return []
    out = [
        "## Superseded results",
        "",
        "Replaced by the rows above after a fix, kept for what it changed (the same cases, an earlier call).",
        "",
        "| model | case | measured at | step ms | conv ms | GPU busy | why replaced |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sup:
        out.append(
            f"| {r['model']} b{MODELS[r['model']]} {r['precision']} | {r['case']} | {r['measured_at']} | "
            f"{r['step_ms']:.2f} | {r['conv_ms']:.2f} | {r['gpu_busy']:.0%} | {r['why']} |"
        )
    return out + [""]


def profile_lines(doc: dict) -> list[str]:
    """How each MEASURED model's plans were made: its profile, measured by the run through profile_and_plan."""
    out = []
    for key, r in ((k, r) for k, calls in doc.get("profiles", {}).items() for r in calls):
        if "error" in r:
            out.append(f"- {key}: its profile FAILED in the call of {r.get('measured_at')} ({r['error']})")
            continue
        only = ", cuDNN's heuristic list only" if r["engines"] == "heuristics" else ""
        out.append(
            f"- {key} b{r['batch']}: planned from a profile measured in the run (`profile_and_plan`, the one-line "
            f"API's path; engines: {r['engines']}{only}; policy powerOfTwo): {r['graphs']} graphs, "
            f"{r['measured']} measured by the call of {r.get('measured_at')} ({r['profile_s']:.0f} s; 0: all from "
            "the cache); its WR plan "
            f"at 64 MiB predicts {r['predicted_conv_ms']:.2f} ms of convolutions"
        )
    return out


def host_us(r: dict) -> str:
    """Host microseconds per convolution op call (torch.profiler CPU time of the ops; runs before -graph)."""
    v = r.get("host_us_per_op")
    return f"{v:.0f}" if v else "-"


def paired(a: dict, b: dict) -> list[float]:
    """a's step time over b's per round, where both ran the same rounds (torch_training measure --rounds)."""
    ra, rb = a.get("rounds", []), b.get("rounds", [])
    if len(ra) < 2 or len(ra) != len(rb):
        return []
    return [x["step_ms"] / y["step_ms"] for x, y in zip(ra, rb) if "error" not in x and "error" not in y]


def busy_of(r: dict) -> float:
    """A case's GPU busy fraction: over rounds, their median, as for its step time (one round's alone is as noisy
    as that round's step)."""
    ok = [x["gpu_busy"] for x in r.get("rounds", []) if "error" not in x and x.get("gpu_busy") is not None]
    return statistics.median(ok) if len(ok) > 1 else r["gpu_busy"]


def step_text(r: dict) -> str:
    """A case's step time: the median with its 10-90 % range, or over rounds, the median and the rounds' range."""
    ok = [x["step_ms"] for x in r.get("rounds", []) if "error" not in x]
    if len(ok) > 1:
        return f"{r['step_ms']:.2f} ({len(ok)} rounds: {min(ok):.2f}-{max(ok):.2f})"
    return f"{r['step_ms']:.2f} ({r['step_ms_p10']:.2f}-{r['step_ms_p90']:.2f})"


def spread_of(r: dict) -> float:
    """A case's 10-90 % step-time range as a share of its median."""
    return (r["step_ms_p90"] - r["step_ms_p10"]) / r["step_ms"]


def comparisons(sub: list[dict], free: dict | None) -> list[str]:
    """The sentences under a model's table, every ratio computed from its rows."""
    get = {r["case"]: r for r in sub if "conv_ms" in r}
    out = []
    for x in PRESSURE_MIB:
        st, each = get.get(f"stock-{x}"), get.get(f"stock-{x}-each")
        if st and free:
            out.append(
                f"- stock-{x}: peak allocation {st['peak'] / free['peak']:.3f}x stock-free's, convolutions "
                f"{st['conv_ms'] / free['conv_ms']:.2f}x its time"
            )
        if st and st.get("free_at_convs"):
            f = sorted(st["free_at_convs"])
            out.append(
                f"- stock-{x}: memory PyTorch could give its {len(f)} convolution calls (device free + its "
                f"cache's unused blocks, one step): min {f[0] / MIB:.0f} MiB, median "
                f"{f[len(f) // 2] / MIB:.0f} MiB, max {f[-1] / MIB:.0f} MiB"
            )
        if each and free:
            out.append(
                f"- stock-{x}-each: convolutions {each['conv_ms'] / free['conv_ms']:.2f}x stock-free's time, "
                f"step {each['step_ms'] / free['step_ms']:.2f}x ({each.get('squeezed', 0)} convolution calls "
                "squeezed)"
            )
        for k in ("wr", "wd"):
            pl = get.get(f"{k}-{x}")
            for base in (b for b in (each, st) if b):
                if pl:
                    out.append(
                        f"- {k}-{x} vs {base['case']}: stock/planned convolution time "
                        f"{base['conv_ms'] / pl['conv_ms']:.2f}, step time {base['step_ms'] / pl['step_ms']:.2f} "
                        "(above 1: the plan is faster)"
                    )
            if pl and free:
                out.append(
                    f"- {k}-{x} vs stock-free: stock/planned convolution time {free['conv_ms'] / pl['conv_ms']:.2f}"
                    f", step time {free['step_ms'] / pl['step_ms']:.2f}"
                )
        legacy, wr = get.get(f"legacy-{x}"), get.get(f"wr-{x}") or get.get(f"wr-{x}-free")
        if legacy and wr:
            ratio = legacy["conv_ms"] / wr["conv_ms"]
            target = LEGACY_TARGETS.get(sub[0]["model"]) if x == 64 else None
            out.append(
                f"- {wr['case']} vs legacy-{x} (PyTorch's own workspace cap at X MiB): convolutions {ratio:.2f}x "
                "faster, "
                f"step {legacy['step_ms'] / wr['step_ms']:.2f}x"
                + (f" (issue 22 target >= {target:g}: {'met' if ratio >= target else 'NOT met'})" if target else "")
            )
    eager = get.get("wr-256-free") or get.get("wr-256")
    if eager and free:
        pairs = paired(eager, free)
        r = statistics.median(pairs) if pairs else eager["step_ms"] / free["step_ms"]
        busy = (busy_of(free) - busy_of(eager)) * 100
        spread = (max(pairs) - min(pairs)) / r if pairs else max(spread_of(x) for x in (eager, free))
        side = "" if abs(busy) <= 5 else ": planned lower" if busy > 0 else ": planned higher"
        noisy = spread > 2 * (EAGER_TARGET - 1)  # the host varies more than the target allows: no verdict
        verdict = "not judged" if noisy else "met" if r <= EAGER_TARGET else "NOT met"
        out.append(
            f"- eager {eager['case']} step {r:.3f}x stock-free's (issue 22 target <= {EAGER_TARGET}: "
            f"{verdict}); GPU busy {busy_of(eager):.0%} vs "
            f"{busy_of(free):.0%} ({'within' if abs(busy) <= 5 else 'NOT within'} 5 points{side})"
            + (
                f" (the median of {len(pairs)} rounds' ratios, {min(pairs):.3f}-{max(pairs):.3f}, each round the "
                "two cases one after the other)"
                if pairs
                else ""
            )
            + (
                f"; {'its rounds spread' if pairs else 'a 10-90 % range spans'} {spread:.0%} of its median, too wide "
                f"to judge {EAGER_TARGET - 1:.0%} on this host"
                if noisy
                else ""
            )
        )
    for r in (r for r in sub if free and r is not free and r.get("kept_stock")):
        if len(r["kept_stock"]) == conv_layers(r["model"]):
            out.append(
                f"- {r['case']} left all {len(r['kept_stock'])} convolutions stock, so its step runs stock "
                f"PyTorch's code{' (and one shape check per forward)' if r['case'].startswith('opt-') else ''}: its "
                f"{r['step_ms'] / free['step_ms']:.3f}x of stock-free is how much this host varies between two "
                "processes"
            )
    planned_from = sorted({r["profile"] for r in sub if r.get("profile")})
    if planned_from:
        out.append(f"- wr cases planned from the bundled profile {', '.join(f'`{n}`' for n in planned_from)}")
    gs, gp = (
        get.get("stock-free-graph"),
        next((r for c, r in get.items() if c.startswith("wr-") and c.endswith("-graph")), None),
    )
    if gp:
        out.append(
            f"- {gp['case']}: step {gp['step_ms']:.2f} ms, GPU busy {gp['gpu_busy']:.0%}"
            + (
                f"; stock-free-graph {gs['step_ms']:.2f} ms (stock/planned {gs['step_ms'] / gp['step_ms']:.2f})"
                if gs
                else ""
            )
        )
    model = sub[0]["model"] if sub else None
    each64, wr64 = get.get("stock-64-each"), get.get("wr-64")
    if model in TARGETS and sub[0]["precision"] == "tf32" and each64 and wr64 and free:  # the TF32 targets
        ratio = each64["conv_ms"] / wr64["conv_ms"]
        out.append(
            f"- **issue 12 targets**: wr-64 convolutions {ratio:.2f}x faster than stock-64-each (target >= "
            f"{TARGETS[model]:g}: {'met' if ratio >= TARGETS[model] else 'NOT met'}); wr-64 convolutions "
            f"{wr64['conv_ms'] / free['conv_ms']:.2f}x stock-free's time (target <= 1: "
            f"{'met' if wr64['conv_ms'] <= free['conv_ms'] else 'NOT met'})"
        )
        bound = each64["conv_ms"] / free["conv_ms"]
        if ratio < TARGETS[model] and bound < TARGETS[model]:
            out.append(
                f"  - what stands in the way of the speed-up: stock-64-each is only {bound:.2f}x slower than "
                f"stock-free, so even a plan as fast as stock-free would be {bound:.2f}x faster, below the target"
            )
        pred = wr64.get("predicted_conv_ms")
        if wr64["conv_ms"] > free["conv_ms"] and pred and pred > free["conv_ms"]:
            out.append(
                f"  - what stands in the way of matching stock-free: the profile itself predicts {pred:.2f} ms for "
                f"the best WR plan at 64 MiB per kernel, against {free['conv_ms']:.2f} ms measured for stock "
                "PyTorch with all the memory it wants: no configuration within 64 MiB per kernel is as fast "
                "as the engines cuDNN picks with more workspace"
            )
        elif wr64["conv_ms"] > free["conv_ms"] and pred:
            out.append(
                f"  - what stands in the way of matching stock-free: the profile predicts {pred:.2f} ms for the "
                f"WR plan, below stock-free's {free['conv_ms']:.2f} ms, but it measured {wr64['conv_ms']:.2f} "
                "ms in the step: the plan loses in execution (one launch per micro-batch, dW adds, the bias "
                "kept separate), not in its choice of engines"
            )
    return out


def ordered(sub: list[dict]) -> list[dict]:
    """A model's rows in the order of default_cases (a --resume puts re-run cases last in the JSON)."""
    order = default_cases(list(PRESSURE_MIB), "tf32")
    return sorted(sub, key=lambda r: order.index(r["case"]) if r["case"] in order else len(order))


README_CASES = (
    "stock-free",
    "legacy-64",
    "stock-64",
    "stock-64-each",
    "wr-64",
    "wr-64-free",
    "wr-256-free",
    "opt-free",
    "wr-64-graph",
)


def readme_block(doc: dict) -> str:
    """Convolution and step times of the main cases measured, one row per model and precision."""
    prov, rows = doc["provenance"], [r for r in doc["results"] if not r["case"].startswith("probe")]
    cases = [c for c in README_CASES if any(r["case"] == c for r in rows)]
    lines = [
        f"Full training steps on the {prov['gpu']} (cuDNN {prov['cudnn_version']}, PyTorch {prov['torch']}, "
        f"{prov['date'][:10]}): convolution time (torch.profiler) / whole step, median ms; legacy-X: stock PyTorch "
        "on its legacy cuDNN path with its workspace cap of X MiB (`TORCH_CUDNN_V8_API_DISABLED=1 "
        "CUDNN_CONV_WSCAP_DBG=X`); stock-X: only X MiB free beside the step's own memory at its peak; -each: X MiB "
        "free at every convolution when cuDNN chooses its algorithms; wr-X: the model with a WR plan at X per "
        "kernel applied, eager (-free: the GPU otherwise free); -graph: one CUDA graph per step. Every case and "
        "the method: [benchmarks/reports/torch_training.md](benchmarks/reports/torch_training.md).",
        "",
        "| model | " + " | ".join(cases) + " |",
        "|---|" + "---|" * len(cases),
    ]
    for key in sorted({(r["model"], r["precision"]) for r in rows}, key=lambda k: (list(MODELS).index(k[0]), k[1])):
        cells = []
        for case in cases:
            r = next((r for r in rows if (r["model"], r["precision"], r["case"]) == (*key, case)), None)
            cells.append(
                "not run"
                if r is None
                else "failed"
                if "error" in r
                else f"? / {r['step_ms']:.2f}"
                if double_counted(r)
                else f"{r['conv_ms']:.2f} / {r['step_ms']:.2f}"
                if r["conv_ms"]
                else f"- / {r['step_ms']:.2f}"
            )
        label = f"{key[0]} b{MODELS[key[0]]} {'fp16 channels_last AMP' if key[1] == 'fp16' else 'TF32 NCHW'}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines + ["", reading(rows)])


def reading(rows: list[dict]) -> str:
    """The README's summary, every number computed here from the results."""

    def get(model, precision, *cases):
        return next(
            (
                r
                for c in cases
                for r in rows
                if (r["model"], r["precision"], r["case"]) == (model, precision, c) and r.get("step_ms") is not None
            ),
            None,
        )

    keys = sorted({(r["model"], r["precision"]) for r in rows}, key=lambda k: (list(MODELS).index(k[0]), k[1]))
    eager, legacy, busy, one_line = [], [], [], []
    for model, precision in keys:
        opt = get(model, precision, "opt-free")
        if opt and get(model, precision, "stock-free"):
            one_line.append(
                f"{model} {precision} {opt['step_ms'] / get(model, precision, 'stock-free')['step_ms']:.3f}x"
            )
        free, plan = get(model, precision, "stock-free"), get(model, precision, "wr-256-free", "wr-256")
        if free and plan:
            eager.append(f"{model} {precision} {plan['step_ms'] / free['step_ms']:.3f}x")
            if free.get("gpu_busy") and plan.get("gpu_busy"):
                busy.append(f"{model} {precision} {busy_of(plan):.0%} vs {busy_of(free):.0%}")
        cap, wr = get(model, precision, "legacy-64"), get(model, precision, "wr-64-free", "wr-64")
        if cap and wr and cap.get("conv_ms") and wr.get("conv_ms") and not double_counted(wr):
            legacy.append(f"{model} {precision} {cap['conv_ms'] / wr['conv_ms']:.2f}x")
        elif cap and wr:
            legacy.append(f"{model} {precision} (steps: {cap['step_ms'] / wr['step_ms']:.2f}x)")
    out = []
    if eager:
        out.append(
            f"An eager planned step (WR at 256 MiB per kernel, the GPU otherwise free, no CUDA graph) takes "
            f"{', '.join(eager)} stock PyTorch's step with the GPU free (issue 22's target: at most "
            f"{EAGER_TARGET}x); GPU busy, planned vs stock: {', '.join(busy)}."
        )
    if one_line:
        out.append(
            f'Through the one-line API (`optimize(model, mode="free")`, layers it does not speed up left stock): '
            f"{', '.join(one_line)} stock's step."
        )
    if legacy:
        out.append(
            f"At 64 MiB the WR plan's convolutions are {', '.join(legacy)} faster than PyTorch's own workspace "
            "cap at 64 MiB (legacy-64, the one knob a PyTorch user has)."
        )
    doubled = sorted(f"{r['model']} {r['precision']} {r['case']}" for r in rows if double_counted(r))
    if doubled:
        out.append(
            f"Convolution time shown as ? ({', '.join(doubled)}): measured by device time per op name, which counted "
            "kernels the profiler linked to several CPU events more than once (more than the whole step); runs "
            "with `conv_profile` count each kernel once (conv_time)."
        )
    return " ".join(out) or "No case to summarise."


def double_counted(r: dict) -> bool:
    """A convolution time from the per-op-name sum (no ``conv_profile``) longer than the whole step: impossible,
    so counted twice."""
    return "conv_profile" not in r and bool(r.get("conv_ms")) and r["conv_ms"] > r.get("step_ms", float("inf"))


@functools.lru_cache(maxsize=None)
def twin(net: str):
    """The Network of a model's training step: the zoo twin of a BUNDLED model, the torchvision model itself
    (imported) for a MEASURED one (the zoo has no twin of those)."""
    from engine.zoo import get_network

    return get_network(net if net in BUNDLED else f"torchvision:{net}", MODELS[net])


def conv_layers(net: str) -> int:
    """Convolution layers of ``net``, to tell a case that left every one stock."""
    return len({k.layer for k in twin(net).kernels()})


def kernel_counts(rows) -> str:
    """Convolution kernels per model with a WD case (a BUNDLED one), from the zoo twin of its torchvision model."""
    return ", ".join(
        f"{len(twin(net).kernels())} for {net}"
        for net in sorted({r["model"] for r in rows if r["case"].startswith("wd-")}, key=list(MODELS).index)
    )


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
                out.append(
                    f"- {name}: its {cfg.get('row')} plan at {cfg.get('limit', 0) // MIB} MiB FAILED `verify` "
                    f"in side_by_side.md ({', '.join(failed)}). Triaged on the H100 (verify-triage/README.md): "
                    "run alone, each of those kernels equals both a float64 cuDNN and a native float64 "
                    "convolution within TF32 tolerance, and in PyTorch the planned first block of VGG-16 "
                    "equals stock. Cause, found after that run: `verify` filled its inputs on the default "
                    "stream and read them on the context's non-blocking stream, so large kernels were compared "
                    "with a reference computed from half-written inputs; fixed." + after_fix(name)
                )
    return out


def after_fix(name: str) -> str:
    """What ``python -m engine verify`` said of that plan after the stream fix (its committed report), if run."""
    path = ROOT / "benchmarks" / "reports" / "verify-triage" / f"verify-after-fix-{name}-wr64.json"
    if not path.exists():
        return " Not yet re-run on a GPU."
    doc = json.loads(path.read_text())
    worst = max(k["rel_l2"] for k in doc["kernels"])
    verdict = "passed every kernel" if doc["totals"]["all_passed"] else f"failed {', '.join(doc['totals']['failed'])}"
    return (
        f" Re-run after the fix ({doc['provenance']['date']}, verify-triage/{path.name}): `python -m engine "
        f"verify` {verdict} of the plan, largest relative L2 error {worst:.1e}."
    )


def plot(rows, path: Path) -> None:
    plt = pyplot()
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
    write_png(fig, path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    m = sub.add_parser("measure")
    m.add_argument("-o", "--output", default="benchmarks/reports/torch_training.json")
    m.add_argument(
        "--configs",
        nargs="+",
        default=["alexnet:tf32", "resnet50:tf32", "vgg16:tf32", "alexnet:fp16", "resnet50:fp16", "vgg16:fp16"],
    )
    m.add_argument("--pressure", nargs="+", type=int, default=list(PRESSURE_MIB))
    m.add_argument("--cases", nargs="+", help="cases to run (default: default_cases)")
    m.add_argument("--steps", type=int, default=20)
    m.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run each model's cases this many times, round after round; a case's step time is its rounds' median",
    )
    m.add_argument("--resume", action="store_true", help="keep results already in the output file")
    m.add_argument(
        "--profile-cache",
        help="folder of the profiler's cache for the MEASURED models (default: beside the output); a later call "
        "on the same folder measures nothing",
    )
    m.add_argument("--engines", default="heuristics", choices=["sweep", "heuristics"], help="MEASURED models' profile")
    m.add_argument("--budget-s", type=float, default=1e9, help="launch no new case after this many seconds")
    c = sub.add_parser("case")
    c.add_argument("net", choices=list(MODELS))
    c.add_argument("precision", choices=list(PRECISIONS))
    c.add_argument("case")
    c.add_argument("--steps", type=int, default=20)
    c.add_argument("--own", type=int)
    c.add_argument("--profile-cache")
    c.add_argument("--engines", default="heuristics", choices=["sweep", "heuristics"])
    r = sub.add_parser("report")
    r.add_argument("results")
    r.add_argument("-o", "--output")
    r.add_argument(
        "--readme",
        help="README whose torch_training block to rewrite ('' for none; default: README.md for the README's own "
        "results, benchmarks/reports/torch_training.json, none for another run's)",
    )
    args = ap.parse_args(argv)
    if args.cmd == "case":
        cache = cache_file(args.profile_cache) if args.profile_cache else None
        if args.case == "profile":
            print(json.dumps(profile_case(args.net, args.precision, cache, args.engines)))
        else:
            print(json.dumps(run_case(args.net, args.precision, args.case, args.steps, args.own, cache, args.engines)))
        return 0
    return measure(args) if args.cmd == "measure" else report(args)


if __name__ == "__main__":
    sys.exit(main())
