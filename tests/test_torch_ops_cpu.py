"""The planned PyTorch op path on CPU: PlannedConv2d -> PlannedConvFunction -> the op bodies -> engine.gpu.pieces,
real down to the frontend's pre-indexed execute, which engine.testing.fake_frontend replaces by a float64
convolution of the micro-batch its pointers address. Outputs and every gradient equal stock PyTorch's (to the
rounding of the planned dtype), with uneven micro-batches, several BackwardFilter pieces, gradients
accumulated over two backward passes, a bias, autocast's fp32 master weights, and a first layer whose input
needs no gradient (its BackwardData never runs). The same path on cuDNN: tests/test_gpu_torch.py."""

from __future__ import annotations

import sys

import pytest

torch = pytest.importorskip("torch")

from engine.precision import PRECISIONS  # noqa: E402
from engine.testing import fake_frontend as fake  # noqa: E402

_FAKED = ("engine.gpu.graphs", "engine.gpu.pieces", "engine.pytorch.conv")


@pytest.fixture(scope="module")
def ops():
    """engine.pytorch.apply with the op module imported against the fake frontend; afterwards that module and
    what it imported are dropped from sys.modules (apply's own binding, made before, is put back)."""
    from engine.pytorch import apply

    saved_ops = apply.ops
    cudnn, had = sys.modules.get("cudnn"), "cudnn" in sys.modules
    mods = {name: sys.modules.get(name) for name in _FAKED}
    _, conv = fake.load_ops()
    apply.ops = conv
    yield apply, conv
    apply.ops = saved_ops
    if not had:
        sys.modules.pop("cudnn", None)
    elif cudnn is not None:
        sys.modules["cudnn"] = cudnn
    for name, mod in mods.items():
        if mod is None and name != "engine.pytorch.conv":  # conv's op library stays registered: keep the module
            sys.modules.pop(name, None)


def rel(a, b) -> float:
    a, b = a.detach().double(), b.detach().double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


CASES = {
    # precision, layout, micro-batches of F / BD / BF, bias, autocast (fp32 master weights)
    "tf32 NCHW uneven": ("tf32", "NCHW", {"F": [4, 2, 1, 1], "BD": [6, 2], "BF": [3, 3, 2]}, True, False),
    "fp16 NHWC AMP": ("fp16", "NHWC", {"F": [8], "BD": [8], "BF": [2, 2, 4]}, True, True),
    "fp16 NHWC AMP one piece": ("fp16", "NHWC", {"F": [8], "BD": [8], "BF": [8]}, False, True),
    "fp16 NHWC half model": ("fp16", "NHWC", {"F": [6, 2], "BD": [8], "BF": [6, 2]}, True, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_outputs_and_gradients_equal_stock(ops, case):
    apply, conv = ops
    precision, layout, micro, bias, amp = CASES[case]
    fmt = torch.channels_last if layout == "NHWC" else torch.contiguous_format
    low = torch.float16 if precision == "fp16" else torch.float32
    torch.manual_seed(0)

    def model():
        torch.manual_seed(1)
        m = torch.nn.Sequential(
            torch.nn.Conv2d(8, 16, 3, padding=1, bias=bias), torch.nn.Conv2d(16, 8, 3, stride=2, padding=1, bias=bias)
        )
        return m.to(memory_format=fmt) if amp else m.to(dtype=low, memory_format=fmt)

    stock, planned = model(), model()
    applied = fake.plan_module(
        planned[0],
        (8, 8, 6, 6),
        {k: v for k, v in micro.items() if k != "BD"},
        precision,
        layout,
        compute=True,
        name="first",
    )
    fake.plan_module(planned[1], (8, 16, 6, 6), micro, precision, layout, compute=True, applied=applied, name="second")
    assert planned[0]._handle is not None and conv.layer(planned[0]._handle).backward_data is None
    x = torch.randn(8, 8, 6, 6).to(dtype=low, memory_format=fmt)
    gy = torch.randn(8, 8, 3, 3).to(dtype=low, memory_format=fmt)

    def run(m):
        ys = []
        for _ in range(2):  # gradients accumulate in .grad over two backward passes
            torch.set_autocast_enabled("cuda", amp)
            try:
                y = m(x) if not amp or m is planned else reference_amp(m, x)
            finally:
                torch.set_autocast_enabled("cuda", False)
            y.backward(gy)
            ys.append(y)
        return ys

    ys_planned, ys_stock = run(planned), run(stock)
    assert not applied.fallbacks
    for yp, ys in zip(ys_planned, ys_stock):
        assert yp.dtype == ys.dtype == low and yp.is_contiguous(memory_format=fmt)
        assert rel(yp, ys) <= PRECISIONS[precision].tolerance, case
    for (name, p), q in zip(planned.named_parameters(), stock.parameters()):
        assert p.grad.dtype == q.grad.dtype == p.dtype, name  # fp32 master weights get fp32 gradients
        assert rel(p.grad, q.grad) <= PRECISIONS[precision].tolerance, (case, name)


def reference_amp(m, x):
    """Stock under CUDA autocast on CPU tensors: what autocast does there, spelled out (fp16 weights, fp16
    convolution computed in fp32 and rounded, as cuDNN's fp16 with fp32 accumulation)."""
    for conv in m:
        w, b = conv.weight.to(torch.float16), None if conv.bias is None else conv.bias.to(torch.float16)
        x = torch.nn.functional.conv2d(
            x.float(), w.float(), None if b is None else b.float(), conv.stride, conv.padding
        ).to(torch.float16)
    return x


def test_a_shape_or_dtype_the_plan_was_not_made_for_runs_stock_and_is_counted(ops):
    apply, conv = ops
    m = torch.nn.Conv2d(8, 8, 3, padding=1)
    applied = fake.plan_module(m, (4, 8, 5, 5), {"F": [4], "BD": [4], "BF": [4]}, "tf32", "NCHW", compute=True)
    with pytest.warns(UserWarning, match=r"conv: input \(2, 8, 5, 5\).*running stock PyTorch"):
        y = m(torch.randn(2, 8, 5, 5))
    m(torch.randn(3, 8, 5, 5))  # warned once per layer
    assert y.shape == (2, 8, 5, 5) and applied.fallbacks == {"conv": 2}
    torch.set_autocast_enabled("cuda", True)  # a tf32 plan under autocast: planned in its own precision
    try:
        x = torch.randn(4, 8, 5, 5)
        assert torch.equal(m(x), conv.planned_conv(x, m.weight, m.bias, m._handle))
    finally:
        torch.set_autocast_enabled("cuda", False)
    assert applied.fallbacks == {"conv": 2}


@pytest.fixture(scope="module")
def cpu_kernels(ops):
    """The registered ops with CPU kernels too (the op bodies over the fake frontend), so torch.compile's
    graph can run here; kept for the process (a Library registration of this test module only)."""
    _, conv = ops
    lib = torch.library.Library("ucudnn", "IMPL")
    for name, fn in (
        ("conv_forward", conv._forward),
        ("conv_backward_data", conv._backward_data),
        ("conv_backward_filter", conv._backward_filter),
    ):
        lib.impl(name, fn, "CPU")
    yield lib


@pytest.mark.parametrize("amp", [False, True])
def test_compiled_fullgraph_equals_eager(ops, cpu_kernels, amp):
    """torch.compile(fullgraph=True) traces a PlannedConv2d (its checks, the autocast cast inside
    PlannedConvFunction, the registered ops opaque) and its output and gradients equal the eager path's."""
    precision, layout = ("fp16", "NHWC") if amp else ("tf32", "NCHW")
    fmt = torch.channels_last if amp else torch.contiguous_format
    torch.manual_seed(2)
    m = torch.nn.Conv2d(8, 8, 3, padding=1).to(memory_format=fmt)  # fp32 master weights under AMP
    fake.plan_module(m, (4, 8, 5, 5), {"F": [2, 2], "BD": [4], "BF": [2, 2]}, precision, layout, compute=True)
    dtype = torch.float16 if amp else torch.float32
    x = torch.randn(4, 8, 5, 5).to(dtype=dtype, memory_format=fmt).requires_grad_()
    gy = torch.randn(4, 8, 5, 5).to(dtype=dtype, memory_format=fmt)

    def grads(fn):
        x.grad = m.weight.grad = m.bias.grad = None
        torch.set_autocast_enabled("cuda", amp)
        try:
            y = fn(x)
        finally:
            torch.set_autocast_enabled("cuda", False)
        y.backward(gy)
        return [y, x.grad, m.weight.grad, m.bias.grad]

    eager, compiled = grads(m), grads(torch.compile(m, fullgraph=True, backend="aot_eager"))
    for e, c in zip(eager, compiled):
        assert e.dtype == c.dtype and torch.equal(e, c)
    assert [t.dtype for t in eager] == [dtype, dtype, torch.float32, torch.float32]
    assert not m._applied.fallbacks
