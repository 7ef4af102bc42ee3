"""engine.gpu.pieces without a GPU: a fake frontend records every pre-indexed launch, so the pointer arithmetic,
the operand order, the BackwardFilter accumulation rule and the refusals are checked on any host. (The GPU
tests run the same core against cuDNN: tests/test_gpu.py through the CuPy executor, tests/test_gpu_torch.py
through the PyTorch ops.)"""

from __future__ import annotations

import ctypes
import importlib
import sys
import types

import pytest

from engine.errors import EngineError
from engine.kernels import KernelKind, KernelSignature

_FAKED = ("engine.gpu.graphs", "engine.gpu.pieces")


@pytest.fixture
def pieces(monkeypatch):
    """engine.gpu.pieces imported against a bare ``cudnn`` module (graphs.py uses it only inside functions);
    afterwards the modules bound to it are dropped and whatever was imported before is put back."""
    import engine.gpu as package

    saved = {name: sys.modules.pop(name, None) for name in _FAKED}
    attrs = {name: getattr(package, name.rsplit(".", 1)[1], None) for name in _FAKED}
    monkeypatch.setitem(sys.modules, "cudnn", types.ModuleType("cudnn"))
    yield importlib.import_module("engine.gpu.pieces")
    for name in _FAKED:
        sys.modules.pop(name, None)
        if saved[name] is not None:
            sys.modules[name] = saved[name]
        short = name.rsplit(".", 1)[1]
        if attrs[name] is None:
            package.__dict__.pop(short, None)
        else:
            setattr(package, short, attrs[name])


class FakeGraph:
    """A built graph whose execute records (micro-batch, {role: pointer}, workspace, handle, plan index)."""

    def __init__(self, b: int, order: tuple[str, str, str], log: list):
        self.b, self.order, self.log = b, order, log

    def raw_execute(self, index: int):
        def execute(address, n, ws, handle, cpp_index):
            ptrs = (ctypes.c_uint64 * n).from_address(address)
            self.log.append((self.b, dict(zip(self.order, ptrs)), ws, handle, cpp_index))

        return execute, 100 + index, self.order


class FakePlans:
    """ExecutionPlans' interface: plan "eng<i>" builds as index i with 1000 B of workspace per sample."""

    ORDERS = (("x", "w", "y"), ("y", "x", "w"), ("w", "y", "x"))

    def __init__(self):
        self.ctx, self.log, self.built = types.SimpleNamespace(backend_handle=7), [], 0

    def build(self, sig, b, name):
        self.built += 1
        return FakeGraph(b, self.ORDERS[self.built % 3], self.log), int(name[3:]), 1000 * b


def sig(kind=KernelKind.FORWARD, n=200, precision="tf32", c=32, h=14, w=14):
    return KernelSignature(kind, n, c, h, w, 64, 3, 3, 1, 1, precision=precision)


def test_one_launch_runs_every_piece_at_its_offsets_in_each_graphs_operand_order(pieces):
    plans = FakePlans()
    k = pieces.Pieces("c:F", sig(), [(128, "eng1"), (64, "eng2"), (8, "eng3")], plans)
    assert len(k) == 3 and k.workspace == 128_000 and k.micro == [(0, 128, "eng1"), (128, 64, "eng2"), (192, 8, "eng3")]
    px, py = 32 * 14 * 14 * 4, 64 * 14 * 14 * 4  # bytes per sample of X and Y (TF32 is stored as fp32)
    x, w, y = 1 << 40, 2 << 40, 3 << 40
    for _ in range(2):  # the pointer arrays are reused call after call
        plans.log.clear()
        k.launch(x, w, y, 4096)
        assert plans.log == [
            (b, {"x": x + start * px, "w": w, "y": y + start * py}, 4096, 7, 100 + i)
            for i, (start, b) in enumerate(((0, 128), (128, 64), (192, 8)), 1)
        ]


def test_backward_filter_writes_the_first_piece_into_dw_and_the_others_into_scratch(pieces):
    plans = FakePlans()
    k = pieces.Pieces("c:BF", sig(KernelKind.BACKWARD_FILTER), [(128, "eng1"), (64, "eng2"), (8, "eng3")], plans)
    dw, scratch = 5 << 40, 6 << 40
    for accumulate, direct in ((False, 1), (True, 0)):
        plans.log.clear()
        yielded = []
        for i in k.filter_pieces(1 << 40, dw, 3 << 40, 0, scratch, accumulate):
            yielded.append(i)
            assert len(plans.log) == i + 1  # piece i is enqueued before the caller adds it
        assert [entry[1]["w"] for entry in plans.log] == [dw] * direct + [scratch] * (3 - direct)
        assert yielded == list(range(direct, 3))


def test_refused_configurations(pieces):
    with pytest.raises(EngineError, match=r"do not sum to 200"):
        pieces.Pieces("c:F", sig(), [(128, "eng1"), (64, "eng2")], FakePlans())
    # fp16, one channel of 3x3: 18 bytes per sample, so the second micro-batch starts off the 16-byte grid
    with pytest.raises(EngineError, match=r"sample 1 is not 16-byte aligned"):
        pieces.Pieces("c:F", sig(n=2, precision="fp16", c=1, h=3, w=3), [(1, "eng1"), (1, "eng2")], FakePlans())
