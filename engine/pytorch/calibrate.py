"""Measure the memory planner's time model on this GPU host; engine.memory.calibrate turns it into TimeParams.

    python -m engine.pytorch.calibrate -o h100.json --model torchvision:alexnet=256 --model torchvision:vgg16=64

What is measured (CUDA events on the device, median of ``repeats`` after warm-up):

- ``copy``: pinned host -> device and device -> host copies of ``copy_bytes``, each alone on its own stream,
  and both at once on two streams (``duplex_*``: each direction's rate while the other runs);
- ``hbm``: effective device-memory rate of elementwise ops (relu, add, scalar mul, copy) on ``hbm_bytes``
  tensors, bytes read + written per second; ``rate`` is their median;
- ``framework``: bytes PyTorch keeps allocated itself after a GEMM's forward and backward (cuBLAS and cuBLASLt
  workspaces), which the memory planner counts beside the network's tensors;
- ``fc``: GEMM rate of FC-shaped products (``torch.mm``, TF32 as the training runs unless ``tf32=False``);
  ``flops`` is the median over the shapes;
- ``layers``: forward and backward time of every non-conv layer of a torch model at a mini-batch, each layer
  timed alone on inputs of the shapes a forward pass gives it (recorded by forward hooks), named as the
  importer names its layers (module name; ``name_1``, ``name_2`` for later calls of one module), plus the loss
  (cross-entropy, the importer's ``prob``). Layers the imported Network does not have (aliases such as
  Flatten) are left out; functional ReLUs, residual adds and concatenations are timed from the Network's
  shapes (an add or concat's backward passes views: 0 ms); any other layer no module call gave (a generic
  function or tensor method, a module fx keeps whole, a functional pool or dropout) is its traced node
  replayed alone on inputs of the shapes it had (engine/pytorch/replay.py), so every non-conv layer is timed.
  Depthwise convolutions (groups = input channels) in fp32 NCHW are timed too: ATen runs them with its own kernels,
  not cuDNN, so the profile's cuDNN times are not theirs (``KernelSignature.aten_depthwise``).

On a CPU device the same code times with ``time.perf_counter`` (the tests use that to check the names).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from datetime import datetime, timezone

import torch
from torch import nn

from ..memory.calibrate import FORMAT, VERSION, merge, save
from ..memory.timemodel import layer_key
from .replay import time_generic

MiB = 1 << 20
FC_SHAPES = ((256, 9216, 4096), (256, 4096, 4096), (64, 25088, 4096), (64, 2048, 1000))  # AlexNet, VGG, ResNet


class _Timer:
    """Start/stop marks on the current CUDA stream (events), or wall-clock on a CPU device."""

    def __init__(self, device: torch.device, stream=None):
        self.cuda = device.type == "cuda"
        self.stream = stream
        self.marks: list[tuple] = []

    def start(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record(self.stream)
            return e
        return time.perf_counter()

    def stop(self, begin) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record(self.stream)
            self.marks.append((begin, e))
        else:
            self.marks.append((begin, time.perf_counter()))

    def times_ms(self) -> list[float]:
        if self.cuda:
            torch.cuda.synchronize()
            return [a.elapsed_time(b) for a, b in self.marks]
        return [(b - a) * 1e3 for a, b in self.marks]


GPU_CYCLES_PER_MS = 2.0e6  # an upper bound of the GPU clock (H100: 1.98 GHz): a longer sleep is harmless


def timed_ms(fn, device: torch.device, repeats: int = 10, warmup: int = 3, setup=None) -> list[float]:
    """Device times of ``fn(setup())`` (``setup`` runs outside the timed window, on the same stream, before it).

    On CUDA the stream first sleeps for longer than the host takes to queue every repeat, so the events time
    the kernels back to back, as in a training step where the GPU runs ahead of the host: without it a small
    layer's time is its launch and autograd overhead (dropout's backward read 1.2 ms instead of microseconds)."""
    host_ms = float("inf")
    for _ in range(max(1, warmup)):
        t0 = time.perf_counter()
        fn(setup() if setup else None)
        host_ms = min(host_ms, (time.perf_counter() - t0) * 1e3)
    timer = _Timer(device)
    if timer.cuda:
        torch.cuda.synchronize(device)
        sleep_ms = min(500.0, 3 * host_ms * repeats + 1.0)
        torch.cuda._sleep(int(sleep_ms * GPU_CYCLES_PER_MS))
    for _ in range(repeats):
        arg = setup() if setup else None
        t0 = timer.start()
        fn(arg)
        timer.stop(t0)
    return timer.times_ms()


def median(xs: list[float]) -> float:
    return float(statistics.median(xs))


# --- the host: copies, elementwise ops, GEMMs -----------------------------------------------------------


def measure_copies(nbytes: int = 256 * MiB, repeats: int = 10) -> dict:
    """Pinned host<->device copy rates, bytes/s: each direction alone and both at once."""
    dev = torch.device("cuda")
    src_h = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    dst_h = torch.empty(nbytes, dtype=torch.uint8, pin_memory=True)
    src_d = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    dst_d = torch.empty(nbytes, dtype=torch.uint8, device=dev)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()

    def alone(copy, stream) -> float:
        t = _Timer(dev, stream)
        for i in range(repeats + 2):
            torch.cuda.synchronize()
            with torch.cuda.stream(stream):
                t0 = t.start()
                copy()
                if i >= 2:
                    t.stop(t0)
        return nbytes / (median(t.times_ms()) / 1e3)

    h2d = alone(lambda: src_d.copy_(src_h, non_blocking=True), s1)
    d2h = alone(lambda: dst_h.copy_(dst_d, non_blocking=True), s2)
    up, down = _Timer(dev, s1), _Timer(dev, s2)
    for i in range(repeats + 2):
        torch.cuda.synchronize()
        with torch.cuda.stream(s1):
            a = up.start()
            src_d.copy_(src_h, non_blocking=True)
        with torch.cuda.stream(s2):
            b = down.start()
            dst_h.copy_(dst_d, non_blocking=True)
        if i >= 2:
            with torch.cuda.stream(s1):
                up.stop(a)
            with torch.cuda.stream(s2):
                down.stop(b)
    torch.cuda.synchronize()
    return {
        "h2d": h2d,
        "d2h": d2h,
        "duplex_h2d": nbytes / (median(up.times_ms()) / 1e3),
        "duplex_d2h": nbytes / (median(down.times_ms()) / 1e3),
        "bytes": nbytes,
    }


def measure_hbm(nbytes: int = 512 * MiB, repeats: int = 10) -> dict:
    """Effective device-memory rate of elementwise ops, bytes moved per second."""
    dev = torch.device("cuda")
    n = nbytes // 4
    a = torch.rand(n, device=dev)
    b = torch.rand(n, device=dev)
    out = torch.empty(n, device=dev)
    ops = {
        "relu": (lambda _: torch.clamp_min(a, 0.0, out=out), 2),  # bytes moved per element of a: 2 or 3
        "add": (lambda _: torch.add(a, b, out=out), 3),
        "mul": (lambda _: torch.mul(a, 2.0, out=out), 2),
        "copy": (lambda _: out.copy_(a), 2),
    }
    rates = {name: moved * nbytes / (median(timed_ms(fn, dev, repeats)) / 1e3) for name, (fn, moved) in ops.items()}
    return {"rate": median(list(rates.values())), "ops": rates, "bytes": nbytes}


def measure_gemm(shapes=FC_SHAPES, repeats: int = 10) -> dict:
    """GEMM rate, flop/s, of FC-shaped products (m samples, k inputs, n outputs)."""
    dev = torch.device("cuda")
    rates = []
    for m, k, n in shapes:
        x, w = torch.randn(m, k, device=dev), torch.randn(k, n, device=dev)
        ms = median(timed_ms(lambda _: torch.mm(x, w), dev, repeats))
        rates.append([m, k, n, 2 * m * k * n / (ms / 1e3)])
    return {
        "flops": median([r[3] for r in rates]),
        "shapes": rates,
        "tf32": bool(torch.backends.cuda.matmul.allow_tf32),
    }


def measure_framework_bytes() -> dict:
    """Bytes PyTorch keeps allocated after a Linear layer's forward and backward once every tensor is freed: the
    cuBLAS and cuBLASLt workspaces of the current stream, which a training step holds beside its tensors. Run
    before any other GEMM of the process, or it finds them already allocated."""
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    layer = nn.Linear(1024, 1024).cuda()
    x = torch.randn(256, 1024, device="cuda", requires_grad=True)
    layer(x).sum().backward()
    del layer, x
    torch.cuda.synchronize()
    return {"bytes": int(torch.cuda.memory_allocated() - base)}


# --- a model's non-conv layers -----------------------------------------------------------------------------

Spec = tuple  # (shape, dtype, memory format) of one input tensor


def layer_calls(model: nn.Module, example: torch.Tensor) -> list[tuple[str, nn.Module, list[Spec]]]:
    """(layer name, module, input specs) of every call of a non-conv (or depthwise conv) leaf module in one forward,
    in call order; a module's later calls are ``name_1``, ``name_2`` as the importer names them. Only each input's
    shape, dtype and memory format are kept (no activation is held)."""
    names = {m: n for n, m in model.named_modules()}
    seen: dict[str, int] = {}
    calls, hooks = [], []

    def hook(mod, args, _out):
        base = names[mod]
        i = seen.get(base, 0)
        seen[base] = i + 1
        ins = [
            (
                tuple(a.shape),
                a.dtype,
                torch.channels_last
                if a.dim() == 4 and not a.is_contiguous() and a.is_contiguous(memory_format=torch.channels_last)
                else torch.contiguous_format,
            )
            for a in args
            if isinstance(a, torch.Tensor)
        ]
        calls.append((base if i == 0 else f"{base}_{i}", mod, ins))

    for m, n in names.items():
        if n and not any(True for _ in m.children()) and (not isinstance(m, nn.Conv2d) or _depthwise(m)):
            hooks.append(m.register_forward_hook(hook))
    try:
        with torch.no_grad():
            model(example)
    finally:
        for h in hooks:
            h.remove()
    return calls


def _depthwise(conv: nn.Conv2d) -> bool:
    """ATen's ``is_depthwise`` (run by its own kernels in fp32 NCHW, ``KernelSignature.aten_depthwise``)."""
    return conv.groups == conv.in_channels > 1 and conv.out_channels % conv.in_channels == 0


def _tensor(spec: Spec, device) -> torch.Tensor:
    shape, dtype, fmt = spec
    if not dtype.is_floating_point:
        return torch.zeros(shape, dtype=dtype, device=device)
    return torch.randn(shape, dtype=dtype, device=device).contiguous(memory_format=fmt).requires_grad_()


def _time_layer(mod: nn.Module, inputs: list[Spec], device, repeats: int) -> tuple[float, float]:
    """(forward ms, backward ms) of one module alone; backward is 0 when nothing needs a gradient."""
    leaves = [_tensor(spec, device) for spec in inputs]
    params = [p for p in mod.parameters() if p.requires_grad]

    def fresh():  # in-place modules (ReLU(inplace=True)) write a copy, never the leaf
        return [x.clone() for x in leaves]

    with torch.enable_grad():
        fwd = median(timed_ms(lambda xs: mod(*xs), device, repeats, setup=fresh))
        out = mod(*fresh())
        wrt = [x for x in leaves if x.requires_grad] + params
        if not (isinstance(out, torch.Tensor) and out.requires_grad and wrt):
            return fwd, 0.0
        grad = torch.randn_like(out)
        bwd = median(
            timed_ms(
                lambda _: torch.autograd.grad(out, wrt, grad, retain_graph=True, allow_unused=True), device, repeats
            )
        )
    return fwd, bwd


def _time_join(network, layer, device, dtype, repeats: int) -> float:
    """Forward ms of a residual add or channel concat of the layer's inputs (their backward passes gradients
    through as views: no kernel)."""
    ins = [torch.randn((network.batch, *network.layer(s).out_shape), device=device, dtype=dtype) for s in layer.inputs]
    if layer.op == "concat":
        out = torch.empty((network.batch, *layer.out_shape), device=device, dtype=dtype)
        return median(timed_ms(lambda _: torch.cat(ins, dim=1, out=out), device, repeats))

    def add(_):
        acc = ins[0].clone() if len(ins) > 2 else ins[0]
        for x in ins[1:]:
            acc = acc.add_(x) if acc is not ins[0] else torch.add(acc, x)
        return acc

    return median(timed_ms(add, device, repeats))


def _time_loss(logits_shape, device, repeats: int) -> tuple[float, float]:
    logits = torch.randn(logits_shape, device=device, requires_grad=True)
    target = torch.randint(0, logits_shape[1], (logits_shape[0],), device=device)
    with torch.enable_grad():
        fwd = median(timed_ms(lambda _: nn.functional.cross_entropy(logits, target), device, repeats))
        loss = nn.functional.cross_entropy(logits, target)
        bwd = median(timed_ms(lambda _: torch.autograd.grad(loss, [logits], retain_graph=True), device, repeats))
    return fwd, bwd


def measure_layers(
    model: nn.Module, input_shape, batch: int, network=None, repeats: int = 10
) -> tuple[dict, list[str]]:
    """({layer: {"F": ms, "B": ms, "op": module type}}, unmatched) for a model's non-conv layers (and depthwise
    convolutions, ATen's) at ``batch``, in train mode. With ``network`` (the imported Network) only its layers are
    kept, its loss layer gets cross-entropy's times, and ``unmatched`` lists the module calls the Network has no
    layer for."""
    device = next(model.parameters()).device
    dtype = next(model.parameters()).dtype
    model.train()
    example = torch.zeros((batch, *input_shape), device=device, dtype=dtype)
    calls = layer_calls(model, example)
    layers = {layer.name: layer for layer in network.layers} if network is not None else None
    out, unmatched = {}, []
    for name, mod, inputs in calls:
        if layers is not None and name not in layers:
            unmatched.append(name)
            continue
        fwd, bwd = _time_layer(mod, inputs, device, repeats)
        out[name] = {"F": fwd, "B": bwd, "op": type(mod).__name__}
    for layer in network.layers if network is not None else []:  # functional ops: timed from the Network's shapes
        if layer.name in out:
            continue
        if layer.op in ("add", "concat"):
            out[layer.name] = {
                "F": _time_join(network, layer, device, dtype, repeats),
                "B": 0.0,
                "op": f"{layer.op} (functional)",
            }
        elif layer.op == "relu":
            spec = ((network.batch, *network.layer(layer.inputs[0]).out_shape), dtype, torch.contiguous_format)
            fwd, bwd = _time_layer(nn.ReLU(), [spec], device, repeats)
            out[layer.name] = {"F": fwd, "B": bwd, "op": "relu (functional)"}
    loss = network.layers[-1].name if network is not None and network.layers[-1].op == "softmax" else None
    rest = (
        {x.name for x in network.layers if x.op not in ("conv", "data") and x.name not in out and x.name != loss}
        if network is not None
        else ()
    )  # generic layers, and functional pools, softmaxes, dropouts the Network's shapes do not time
    if rest:
        out.update(time_generic(model, network, input_shape, batch, rest, device, repeats, _time_layer))
    if network is not None and network.layers[-1].op == "softmax" and network.layers[-1].name not in out:
        with torch.no_grad():
            logits = model(example)
        fwd, bwd = _time_loss(tuple(logits.shape), device, repeats)
        out[network.layers[-1].name] = {"F": fwd, "B": bwd, "op": "cross_entropy"}
    return out, unmatched


# --- the whole document ----------------------------------------------------------------------------------


def provenance(command: str, synthetic: bool = False) -> dict:
    cuda = torch.cuda.is_available()
    dev = torch.cuda.get_device_name() if cuda else "cpu"
    return {
        "gpu": dev,
        "gpu_uuid": str(torch.cuda.get_device_properties(0).uuid) if cuda else "",
        "torch": torch.__version__,
        "cudnn": torch.backends.cudnn.version(),
        "date": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "command": command,
        "synthetic": synthetic,
    }


def measure(
    models: list[tuple[str, int]] = (),
    host: bool = True,
    repeats: int = 10,
    tf32: bool = True,
    copy_bytes: int = 256 * MiB,
    command: str = "",
) -> dict:
    """The measurements document of this host (engine.memory.calibrate's format): copies, HBM and GEMM rates
    (``host``) and the non-conv layer times of each (torch network name, mini-batch) in ``models``."""
    from .loader import load_model, load_network

    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.allow_tf32 = tf32
    doc = {"format": FORMAT, "version": VERSION, "provenance": provenance(command)}
    doc["provenance"]["tf32"] = tf32
    if host:
        doc["framework"] = measure_framework_bytes()
        doc["copy"] = measure_copies(copy_bytes, repeats)
        doc["hbm"] = measure_hbm(repeats=repeats)
        doc["fc"] = measure_gemm(repeats=repeats)
        torch.cuda.empty_cache()
    doc["layers"] = {}
    for name, batch in models:
        net = load_network(name, batch)
        model, shape = load_model(name, device="cuda")
        key = layer_key(net.name, batch)
        doc["layers"][key], unmatched = measure_layers(model, shape, batch, net, repeats)
        if unmatched:
            doc["provenance"].setdefault("unmatched_module_calls", {})[key] = unmatched
        del model
        torch.cuda.empty_cache()
    return doc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m engine.pytorch.calibrate", description=__doc__.splitlines()[0])
    ap.add_argument("-o", "--output", required=True, help="measurements JSON (python -m engine memory --time-params)")
    ap.add_argument(
        "--model",
        action="append",
        default=[],
        metavar="NAME=BATCH",
        help="a torch network name and mini-batch whose non-conv layers to time, e.g. "
        "torchvision:alexnet=256 (repeatable)",
    )
    ap.add_argument("--no-host", action="store_true", help="skip copies, HBM and GEMM rates")
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--no-tf32", action="store_true", help="strict fp32 GEMMs and convolutions")
    ap.add_argument("--merge", action="store_true", help="merge into the output file's measurements")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: no CUDA device; calibration measures a GPU host", file=sys.stderr)
        return 2
    models = []
    for spec in args.model:
        name, _, b = spec.rpartition("=")
        if not name or not b.isdigit():
            print(f"error: --model {spec!r} is not NAME=BATCH", file=sys.stderr)
            return 2
        models.append((name, int(b)))
    doc = measure(
        models,
        not args.no_host,
        args.repeats,
        not args.no_tf32,
        command="python -m engine.pytorch.calibrate " + " ".join(argv or sys.argv[1:]),
    )
    if args.merge:
        from pathlib import Path

        from ..memory.calibrate import load

        if Path(args.output).exists():
            doc = merge(load(args.output), doc)
    save(args.output, doc)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
