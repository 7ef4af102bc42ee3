"""engine.pytorch.kernelgraph's bookkeeping on a CPU host: when an address set is captured, replayed, launched
directly; bounded; a failed capture falls back for good; a capture of the caller's own is never nested.
(CUDA graphs, the cuDNN handle and its pieces are stand-ins that record what was asked of them; the GPU tests
run the real thing.)"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from engine.pytorch import kernelgraph as kg  # noqa: E402


class Recorder:
    def __init__(self, fail_capture: bool = False):
        self.events: list = []
        self.fail_capture = fail_capture
        rec = self

        class Graph:
            def capture_begin(self, capture_error_mode):
                assert capture_error_mode == "thread_local"
                rec.events.append("begin")

            def capture_end(self):
                rec.events.append("end")
                if rec.fail_capture:
                    raise RuntimeError("operation not permitted when stream is capturing")

            def replay(self):
                rec.events.append("replay")

        self.Graph = Graph

    id = "k:F"  # the kernel's id, as Pieces has it

    def launch(self, *addresses):
        self.events.append(("launch", addresses))

    def capture_stream(self):
        return None  # torch.cuda.stream(None) does nothing

    def bind(self):
        self.events.append("bind")

    def take(self) -> list:
        out, self.events = self.events, []
        return out


@pytest.fixture
def setup(monkeypatch):
    def make(fail_capture=False):
        rec = Recorder(fail_capture)
        capturing = [False]
        monkeypatch.setattr(torch.cuda, "CUDAGraph", rec.Graph)
        monkeypatch.setattr(kg, "_capturing", lambda: capturing[0])
        return rec, capturing, kg.KernelGraphs(rec, rec)

    return make


def test_an_address_set_is_captured_at_its_second_use_and_replayed_after(setup):
    rec, capturing, graphs = setup()
    graphs.launch(1, 2, 3, 4)
    assert rec.take() == [("launch", (1, 2, 3, 4))]  # first use: the pieces themselves
    graphs.launch(1, 2, 3, 4)
    assert rec.take() == ["begin", "bind", ("launch", (1, 2, 3, 4)), "end", "bind", "replay"]
    for _ in range(3):
        graphs.launch(1, 2, 3, 4)
    assert rec.take() == ["replay"] * 3
    graphs.launch(1, 2, 3, 5)  # another workspace address: another set
    assert rec.take() == [("launch", (1, 2, 3, 5))]
    capturing[0] = True  # inside the caller's own capture: launched into it, never replayed or captured
    graphs.launch(1, 2, 3, 4)
    graphs.launch(1, 2, 3, 5)
    graphs.launch(1, 2, 3, 5)
    assert rec.take() == [("launch", (1, 2, 3, 4)), ("launch", (1, 2, 3, 5)), ("launch", (1, 2, 3, 5))]


def test_sets_counted_and_graphs_kept_are_bounded(setup):
    rec, _, graphs = setup()
    for n in range(3 * kg.MAX_SETS):
        for _ in range(kg.CAPTURE_AT):
            graphs.launch(n, 0, 0, 0)
        assert len(graphs.graphs) <= kg.MAX_SETS and len(graphs.seen) <= kg.MAX_SETS
    assert rec.take().count("replay") == 3 * kg.MAX_SETS  # each captured set replayed at its capture
    graphs.launch(3 * kg.MAX_SETS - 1, 0, 0, 0)  # the latest set is kept
    assert rec.take() == ["replay"]
    graphs.launch(3 * kg.MAX_SETS - 3, 0, 0, 0)  # the second oldest set kept, used again: now the most recent
    for n in range(kg.MAX_SETS - 1):  # new sets captured evict the least recently used, not it
        for _ in range(kg.CAPTURE_AT):
            graphs.launch(500 + n, 0, 0, 0)
    rec.take()
    graphs.launch(3 * kg.MAX_SETS - 3, 0, 0, 0)
    assert rec.take() == ["replay"]
    for n in range(100):  # sets that never come again cost no graph
        graphs.launch(1000 + n, 0, 0, 0)
    assert len(graphs.seen) <= kg.MAX_SETS and "begin" not in rec.take()


def test_a_failed_capture_launches_the_pieces_from_then_on(setup):
    rec, _, graphs = setup(fail_capture=True)
    graphs.launch(1, 2, 3, 4)
    with pytest.warns(RuntimeWarning, match="CUDA graph capture of planned kernel k:F failed .*graphs=False"):
        graphs.launch(1, 2, 3, 4)
    events = rec.take()
    assert events[-1] == ("launch", (1, 2, 3, 4)) and "replay" not in events and events[-2] == "bind"
    assert graphs.failed.startswith("operation not permitted")
    for _ in range(3):
        graphs.launch(1, 2, 3, 4)
    assert rec.take() == [("launch", (1, 2, 3, 4))] * 3


def test_run_captures_a_body_with_its_own_key(setup):
    """A multi-piece BackwardFilter: its launches and sums are one body, keyed by every address they touch."""
    rec, _, graphs = setup()
    body = lambda: rec.events.append("body")  # noqa: E731
    for _ in range(3):
        graphs.run((1, 2, 3, 4, 5, 6), body)
    assert rec.take() == ["body", "begin", "bind", "body", "end", "bind", "replay", "replay"]
