"""Memory plans executed on the GPU (marker ``gpu``): engine.pytorch.memory on torchvision ResNet-18 and AlexNet,
and on the generic layers of MobileNetV3-Large, EfficientNet-B0, ConvNeXt-Tiny and ViT-B/16 (squeeze-excitation
multiplies, Hardswish/SiLU/GELU, permutes, LayerNorm, layer scale, stochastic depth: functional layers the
runtime observes and re-forwards).

Run on the GPU host: ``python -m pytest -m gpu tests/test_gpu_memory.py -s`` (``-s`` shows the predicted
and measured peaks). Each test plans the imported model with ``plan_memory`` (tensors as PyTorch allocates
them, convention ``pytorch``; ``layrub-inter`` in its own ``caffe`` convention; no profile) and runs one
warm-up and one measured training step of a stock model and of a copy under the runtime, at mini-batch 32
(16 for the generic models), 224x224, TF32 allowed, ``cudnn.benchmark`` off:

* the loss and every parameter gradient equal stock's within 5e-3 relative L2 (offloading moves bytes,
  re-forwards rerun the same kernels on the same inputs, so the forward is the same; only
  non-deterministic backward kernels differ);
* a third step runs under ``torch.cuda.set_sync_debug_mode("error")``: no host synchronisation;
* the peak of ``torch.cuda.max_memory_allocated()`` over the step (minus what was allocated before it:
  weights, the other model and its gradients) is below stock's wherever the plan predicts a peak more than
  5 % below liveness's in the same convention (at batch 32 AlexNet's FC weights and gradients dominate: no
  policy is predicted to cut its peak by that much, and none is asserted to);
* a fourth step traced by ``runtime.trace_memory()`` has the same peak as the untraced one, its points in
  the plan's order;
* bytes moved and re-forwards are the plan's (where the model saves every tensor the plan offloads).

The documented path (docs/memory-runtimes.md) on torchvision ResNet-18 b128, the bundled H100 profile's network
and mini-batch: ``plan_memory(net, policy, convention="pytorch", profile=..., framework_bytes=...)``, with
``conv_plan=`` where a WR plan is applied, then ``apply_memory_policy``: the step's measured peak
(``torch.cuda.max_memory_allocated``, everything the test allocated counted) within 10 % of ``predicted()``.

``prefetch_late`` (prefetches the compute stream reached before they finished, on the GPU's clock) is
printed, not required to be 0: vDNN prefetches one layer ahead and a 100 MB copy does not hide behind one
layer's backward at batch 32, which is the stall the plan's time model predicts; the measurement itself
is checked by forcing a late and an on-time prefetch.
"""

from __future__ import annotations

import copy
import gc

import pytest

torch = pytest.importorskip("torch")
torchvision = pytest.importorskip("torchvision")
pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA GPU")]

from engine.memory import plan_memory  # noqa: E402
from engine.precision import PRECISIONS  # noqa: E402
from engine.pytorch import apply_memory_policy, apply_plan  # noqa: E402
from engine.pytorch.importer import import_model  # noqa: E402
from engine.units import format_size  # noqa: E402

BATCH = 32
GENERIC = ("mobilenet_v3_large", "efficientnet_b0", "convnext_tiny", "vit_b_16")  # functional layers, re-forwarded too
BATCHES = {"resnet18": BATCH, "alexnet": BATCH} | dict.fromkeys(GENERIC, 16)
TOL = PRECISIONS["tf32"].tolerance
POLICIES = ("vdnn-all-p", "vdnn-conv-p", "sn-offload", "sn-recompute", "superneurons", "layrub-inter")
OFFLOADING = ("vdnn-all-p", "vdnn-conv-p", "sn-offload", "sn-recompute", "layrub-inter")


def rel(a, b) -> float:
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


@pytest.fixture(autouse=True)
def _tf32():
    old = torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = True, False
    yield
    torch.backends.cudnn.allow_tf32, torch.backends.cudnn.benchmark = old
    torch.cuda.set_sync_debug_mode(0)


def step(model, x, target):
    model.zero_grad(set_to_none=True)
    torch.manual_seed(1)  # the same dropout masks in both models
    loss = torch.nn.functional.cross_entropy(model(x), target)
    loss.backward()
    return loss.detach()


def measured_step(model, x, target):
    """(loss, peak bytes the step allocated above what was allocated before it)."""
    model.zero_grad(set_to_none=True)
    gc.collect()  # no earlier step's garbage freed (or not) inside the measured one
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    loss = step(model, x, target)
    torch.cuda.synchronize()
    return loss, torch.cuda.max_memory_allocated() - base


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("net", list(BATCHES))
def test_runtime_step_equals_stock_without_host_sync_and_below_its_peak(net, policy):
    batch = BATCHES[net]
    torch.manual_seed(0)
    stock = getattr(torchvision.models, net)(weights=None, num_classes=10).cuda()
    managed = copy.deepcopy(stock)
    network = import_model(stock, (3, 224, 224), batch, net)
    convention = "caffe" if policy == "layrub-inter" else "pytorch"
    result = plan_memory(network, policy=policy, convention=convention)
    stock_plan = plan_memory(network, policy="liveness", convention=convention)
    predicts_lower = result.peak < 0.95 * stock_plan.peak
    x = torch.randn(batch, 3, 224, 224, device="cuda")
    target = torch.randint(0, 10, (batch,), device="cuda")
    runtime = apply_memory_policy(managed, result, example_input=x)
    try:
        step(stock, x, target)  # warm-up: cuDNN, pinned host buffers, the side stream
        step(managed, x, target)
        loss_stock, peak_stock = measured_step(stock, x, target)
        loss_managed, peak_managed = measured_step(managed, x, target)
        s = runtime.stats
        print(
            f"\n{net} b{batch} {policy}: predicted peak {format_size(result.peak)} ({result.convention} tensors; "
            f"liveness {format_size(stock_plan.peak)}), "
            f"measured step peak {format_size(peak_managed)} vs stock {format_size(peak_stock)}; offloaded "
            f"{format_size(s['offloaded_bytes'])} (plan {format_size(result.summary['offload_bytes'])}), "
            f"{s['prefetches']} prefetches, {s['prefetch_late']} late on the GPU clock "
            f"({s['prefetch_pending_at_unpack']} pending by event.query), {s['on_demand']} on demand, "
            f"{s['recomputed_layers']} re-forwards (plan {result.plan.recompute_count})"
        )
        for d in runtime.deviations:
            print(f"  deviation: {d}")

        assert rel(loss_managed, loss_stock) <= TOL
        for (name, p), q in zip(stock.named_parameters(), managed.parameters()):
            assert q.grad is not None, f"{name}: no gradient"
            assert rel(q.grad, p.grad) <= TOL, f"{name}: gradient relative L2 error {rel(q.grad, p.grad):.2e}"
        for (name, b), c in zip(stock.named_buffers(), managed.buffers()):
            if b.is_floating_point():
                assert rel(c, b) <= TOL, f"{name}: running statistics differ"
            else:
                assert torch.equal(c, b), f"{name}: differs"

        assert s["recomputed_layers"] == result.plan.recompute_count and s["recompute_extra"] == 0
        assert 0 <= s["prefetch_late"] <= s["prefetches"] + s["on_demand"]
        if policy in OFFLOADING and result.summary["offload_bytes"] > 0:  # ViT-B/16: one conv, nothing to offload
            assert s["offloaded_bytes"] > 0
            if not runtime.deviations:
                assert s["offloads"] == s["prefetches"] + s["on_demand"]
                assert s["offloaded_bytes"] == result.summary["offload_bytes"]
                assert s["prefetched_bytes"] == result.summary["prefetch_bytes"]
        if predicts_lower:
            assert peak_managed < peak_stock, (
                f"{policy}: the step's peak {format_size(peak_managed)} is not below stock's {format_size(peak_stock)}"
            )

        runtime.trace_memory()
        managed.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        loss_traced = step(managed, x, target)
        torch.cuda.synchronize()
        runtime.trace_memory(False)
        rows = runtime.memory_trace
        traced_peak = max(torch.cuda.max_memory_allocated(), max(r["peak"] for r in rows)) - base
        points = [(r["tick"], r["end"]) for r in rows]
        assert points == sorted(set(points)) and len(points) >= len(runtime.layers.names)
        assert abs(traced_peak - peak_managed) <= 0.01 * peak_managed + (2 << 20), (
            f"traced peak {format_size(traced_peak)} vs {format_size(peak_managed)} untraced"
        )
        assert rel(loss_traced, loss_managed) <= 1e-6

        managed.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            out = managed(x)
            torch.nn.functional.cross_entropy(out, target).backward()
        finally:
            torch.cuda.set_sync_debug_mode(0)
        assert runtime.stats["steps"] == 4
    finally:
        runtime.remove()


def test_prefetch_lateness_is_measured_on_the_gpu_clock():
    """A prefetch queued behind other work on the side stream is late at its use; one used after the
    compute stream was busy long enough is not; both give back the offloaded bytes."""
    from engine.pytorch.offload import Mover, Stored, View

    device = torch.device("cuda")
    t = torch.randn(1 << 22, device=device)  # 16 MiB
    cycles = 200_000_000  # ~0.1 s at H100 clocks

    mover = Mover(device)
    s = Stored("Y:x", "Y:x#0", t, mover)
    mover.offload(s)
    mover.release(s)
    with torch.cuda.stream(mover.side):
        torch.cuda._sleep(cycles)  # the side stream is busy: the prefetch starts late
    mover.prefetch(s)
    assert torch.equal(s.tensor(View.of(t)), t)
    assert mover.late() == 1 and mover.on_demand == 0

    mover.reset()
    s = Stored("Y:x", "Y:x#0", t, mover)
    mover.offload(s)
    mover.release(s)
    mover.prefetch(s)
    torch.cuda._sleep(cycles)  # the compute stream is busy: the prefetch has finished
    assert torch.equal(s.tensor(View.of(t)), t)
    assert mover.late() == 0
    assert mover.offloaded_bytes == mover.prefetched_bytes == t.numel() * 4


def test_offload_and_prefetch_issue_no_host_sync():
    from engine.pytorch.offload import Mover, Stored, View

    device = torch.device("cuda")
    t = torch.randn(1 << 20, device=device)
    mover = Mover(device)
    warm = Stored("Y:x", "Y:x#0", t, mover)  # pins the host buffer outside the checked region
    mover.offload(warm)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        s = Stored("Y:x", "Y:x#0", t, mover)
        mover.offload(s)
        mover.release(s)
        mover.prefetch(s)
        back = s.tensor(View.of(t)) * 1
    finally:
        torch.cuda.set_sync_debug_mode(0)
    assert torch.equal(back, t)


DOC_BATCH = 128
DOC_PROFILE = "h100-resnet18-b128-tf32-nchw-powerOfTwo"


@pytest.fixture(scope="module")
def doc_plans():
    """The bundled profile and its WR plan at 64 MiB per kernel for the imported ResNet-18 b128 (made once). On
    another GPU than the bundled profile's, this GPU is profiled (cuDNN's heuristic list), as the README tells a
    user: a plan's engine ids are not portable."""
    from engine.planner import make_plan
    from engine.profile import Profile, resolve_profile
    from engine.pytorch.loader import load_network

    profile = Profile.load(resolve_profile(DOC_PROFILE))
    net = load_network("torchvision:resnet18", DOC_BATCH)
    if profile.provenance.get("gpu") != torch.cuda.get_device_name():
        import tempfile

        from engine.gpu.profiler import profile_network

        with tempfile.TemporaryDirectory() as tmp:
            profile = profile_network(
                net, policy="powerOfTwo", precision="tf32", layout="NCHW", engines="heuristics", cache_path=f"{tmp}/c"
            )
    return profile, make_plan(profile, net, mode="wr", budget=64 << 20, policy="powerOfTwo")


@pytest.mark.parametrize("convs", ["stock", "wr-64MiB"])
@pytest.mark.parametrize("policy", ["liveness", "vdnn-all-p", "sn-recompute"])
def test_documented_path_predicts_the_measured_peak(policy, convs, doc_plans):
    from engine.pytorch.calibrate import measure_framework_bytes

    profile, wr = doc_plans
    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    framework = measure_framework_bytes()["bytes"]  # cuBLAS/cuBLASLt workspaces: 0 if an earlier test made them
    torch.manual_seed(0)
    model = torchvision.models.resnet18(weights=None).cuda().train()
    net = import_model(model, (3, 224, 224), DOC_BATCH, "torchvision:resnet18")
    conv_plan = wr if convs != "stock" else None
    result = plan_memory(
        net, policy, convention="pytorch", profile=profile, framework_bytes=framework, conv_plan=conv_plan
    )
    runtime = apply_memory_policy(model, result)
    if conv_plan is not None:  # after the memory runtime: it traces the model's stock nn.Conv2d leaves
        apply_plan(model, conv_plan, input_shape=(3, 224, 224))
    x = torch.randn(DOC_BATCH, 3, 224, 224, device="cuda")
    target = torch.randint(0, 1000, (DOC_BATCH,), device="cuda")
    try:
        for _ in range(2):
            step(model, x, target)
        model.zero_grad(set_to_none=True)
        gc.collect()
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        step(model, x, target)
        torch.cuda.synchronize()
        measured = torch.cuda.max_memory_allocated() - base
        predicted = runtime.predicted()["peak"]
        s = runtime.stats
        print(
            f"\nresnet18 b{DOC_BATCH} {policy}, {convs} convolutions: predicted peak {format_size(predicted)} "
            f"(rule {result.workspace_rule}, workspace {format_size(result.summary['peak_workspace'])} at most, "
            f"framework {format_size(framework)}), measured {format_size(measured)}, "
            f"ratio {predicted / measured:.3f}; "
            f"{s['prefetches']} prefetches, {s['prefetch_late']} late, {s['recomputed_layers']} re-forwards"
        )
        assert predicted is not None and abs(predicted / measured - 1) <= 0.10
    finally:
        runtime.remove()
        if conv_plan is not None:
            from engine.pytorch import remove_plan

            remove_plan(model)
        del model
        gc.collect()
        torch.cuda.empty_cache()


def unpacked_mismatches(model, net, batch, size, policy, device, monkeypatch) -> list[str]:
    """Every re-forward's output against the layer's output in forward, and every tensor the runtime hands
    autograd in backward against the value autograd saved in forward: a re-forward reruns the same kernels on
    the same inputs and an offload moves bytes, so each must match. The first mismatch names the layer or the
    saved tensor (plan layer, re-forward key or stored record, pack index) that is wrong, where a gradient
    comparison only says that something is. Values are copied with torch functions off (the runtime's
    observer would take a copy for a plan layer)."""
    from engine.pytorch import memory, memory_step, recompute

    network = import_model(model, (3, size, size), batch, net)
    result = plan_memory(network, policy=policy, convention="pytorch")
    x = torch.randn(batch, 3, size, size, device=device)
    target = torch.randint(0, 10, (batch,), device=device)
    runtime = apply_memory_policy(model, result, example_input=x)
    packed: dict[int, tuple] = {}
    outputs: dict[str, torch.Tensor] = {}
    found: list[str] = []
    pack, unpack, post, run = memory_step.Step.pack, memory.unpack, memory_step.Step.post, recompute.Recomputer.run

    def differs(value, saved) -> str | None:
        if value.shape != saved.shape:
            return f"shape {tuple(value.shape)} for {tuple(saved.shape)}"
        strides = "" if value.stride() == saved.stride() else f" (strides {value.stride()} for {saved.stride()})"
        if value.dtype.is_floating_point and rel(value, saved) > TOL:
            return f"relative L2 error {rel(value, saved):.2e}{strides}"
        if not value.dtype.is_floating_point and not torch.equal(value, saved):
            return f"differs{strides}"
        return None

    def post_watched(self, module, out):
        cur = self.cur
        if not self.recomputing and cur is not None and isinstance(out, torch.Tensor):
            if self.schedule.dropped(cur.layer):
                with torch._C.DisableTorchFunction():
                    outputs[cur.layer] = out.detach().clone()
        return post(self, module, out)

    def run_watched(self, layer, planned=True):
        run(self, layer, planned)
        original = outputs.get(layer)
        problem = differs(self.cache[("Y", layer)], original) if original is not None else None
        if problem:
            found.append(f"re-forward of {layer}: output {problem}")

    def pack_watched(self, t):
        h = pack(self, t)
        if isinstance(h, memory_step.Packed):
            where = self.cur.layer if self.cur is not None else self.last
            with torch._C.DisableTorchFunction():
                packed[id(h)] = (h, f"#{len(packed)} saved in {where} {tuple(t.shape)}", t.detach().clone())
        return h

    def unpack_watched(h):
        value = unpack(h)
        got = packed.get(id(h))
        if got is not None:
            _, what, saved = got
            kind = f"re-forward {h.key}" if h.key is not None else (f"stored {h.record.name}" if h.record else "kept")
            problem = differs(value, saved)
            if problem:
                found.append(f"{what} ({kind}): {problem}")
        return value

    monkeypatch.setattr(memory_step.Step, "pack", pack_watched)
    monkeypatch.setattr(memory_step.Step, "post", post_watched)
    monkeypatch.setattr(recompute.Recomputer, "run", run_watched)
    monkeypatch.setattr(memory, "unpack", unpack_watched)
    try:
        step(model, x, target)
    finally:
        runtime.remove()
    return found


@pytest.mark.parametrize("policy", ["sn-recompute", "superneurons"])
@pytest.mark.parametrize("net", ["mobilenet_v3_large", "efficientnet_b0"])
def test_every_unpacked_tensor_is_the_saved_one(net, policy, monkeypatch):
    torch.manual_seed(0)
    model = getattr(torchvision.models, net)(weights=None, num_classes=10).cuda()
    found = unpacked_mismatches(model, net, 16, 224, policy, "cuda", monkeypatch)
    assert not found, f"{len(found)} unpacked tensor(s) differ from what autograd saved; first: " + "; ".join(found[:6])
