"""engine.gpu.timing.time_pass and engine.gpu.profiler.time_graph on a SYNTHETIC simulated GPU: a host clock and a
GPU queue, so whether the GPU waited for the host inside a timed region is known exactly. CuPy and cuDNN are
stood in for by small fake modules for the import only (restored afterwards); nothing runs on a GPU."""

from __future__ import annotations

import importlib
import sys
import types

import pytest


class Sim:
    """Host time advances by each call's cost; the GPU runs queued work in order, never before it is queued."""

    def __init__(self, launch_us: float):
        self.host = self.gpu_free = 0.0
        self.launch_us = launch_us
        self.waited: list[tuple[float, float]] = []  # GPU idle spans (from, to)

    def enqueue(self, us: float, cost: float) -> tuple[float, float]:
        self.host += cost
        start = max(self.host, self.gpu_free)
        if start > self.gpu_free:
            self.waited.append((self.gpu_free, start))
        self.gpu_free = start + us
        return start, self.gpu_free


class Event:
    sim: Sim

    def __init__(self):
        self.at = None

    def record(self, stream=None):
        self.at = self.sim.enqueue(0.0, 1.0)[1]

    @property
    def done(self) -> bool:
        self.sim.host += 0.5
        return self.at <= self.sim.host

    def synchronize(self):
        self.sim.host = max(self.sim.host, self.at)


class Stream:
    def synchronize(self):
        Event.sim.host = max(Event.sim.host, Event.sim.gpu_free)


class Ctx:
    def __init__(self):
        self.stream, self.retimed = Stream(), 0

    def spin(self, grid, block, args, stream=None):
        Event.sim.enqueue(float(args[0]) / 2000.0, 3.0)  # cycles at 2 GHz


def forget(before: set[str]) -> None:
    """Drop the engine modules imported against the fake CuPy and cuDNN, and their names on their packages."""
    for name in set(sys.modules) - before:
        if name.startswith("engine."):
            parent, _, attr = name.rpartition(".")
            if getattr(sys.modules.get(parent), attr, None) is sys.modules[name]:
                delattr(sys.modules[parent], attr)
            del sys.modules[name]


@pytest.fixture
def timing(monkeypatch):
    cp = types.ModuleType("cupy")
    cp.int64 = int
    cp.cuda = types.SimpleNamespace(
        Event=Event,
        get_elapsed_time=lambda a, b: (b.at - a.at) / 1000.0,
        runtime=types.SimpleNamespace(CUDARuntimeError=type("CUDARuntimeError", (RuntimeError,), {})),
    )
    monkeypatch.setitem(sys.modules, "cupy", cp)
    monkeypatch.setitem(sys.modules, "cudnn", types.ModuleType("cudnn"))
    before = set(sys.modules) - {"engine.gpu.runtime", "engine.gpu.timing", "engine.gpu.profiler"}
    forget(before)
    mod = importlib.import_module("engine.gpu.timing")
    mod.clock = lambda: Event.sim.host / 1e6  # the simulated host's seconds
    yield mod
    forget(before)


def regions(sim: Sim, kernel_us: list[float]):
    def region(k):
        return lambda r: sim.enqueue(kernel_us[k], sim.launch_us)

    return [region(k) for k in range(len(kernel_us))]


@pytest.mark.parametrize("launch_us", [2.0, 20.0, 200.0])
def test_every_time_is_the_kernel_alone_whether_the_host_is_faster_or_slower_than_the_gpu(timing, launch_us):
    sim = Event.sim = Sim(launch_us)
    kernels = [5.0, 40.0, 3.0, 1000.0, 8.0, 2.0, 60.0] * 6  # SYNTHETIC microseconds
    ctx = Ctx()
    out = timing.time_pass(ctx, regions(sim, kernels), runs=2)
    assert [t[1] for t in out] == pytest.approx([k / 1000 for k in kernels])
    out = timing.time_pass(ctx, regions(sim, kernels), runs=4)
    assert [t for ts in out for t in ts] == pytest.approx([k / 1000 for k in kernels for _ in range(4)])
    if launch_us <= 2.0:
        assert ctx.retimed == 0  # a host ahead of the GPU needs no second pass


def test_one_synchronization_and_few_spins_per_pass_when_the_gpu_is_the_bottleneck(timing):
    sim = Event.sim = Sim(10.0)
    kernels = [200.0] * 50
    spins = []
    ctx = Ctx()
    real = ctx.spin
    ctx.spin = lambda *a, **kw: (spins.append(a[2][0]), real(*a, **kw))
    timing.time_pass(ctx, regions(sim, kernels), runs=2)
    assert len(spins) == 1 and ctx.retimed == 0
    idle = sum(b - a for a, b in sim.waited)
    assert idle < 50  # us: the GPU waited for the host only before the first spin


def test_without_a_spin_a_host_bound_region_is_timed_as_one_call_and_a_fast_one_again_behind_a_spin(timing):
    sim = Event.sim = Sim(20.0)
    cost = [3000.0, 20.0]  # SYNTHETIC host microseconds per enqueue: region 0 is host-bound, region 1 is not

    def region(k):
        return lambda r: sim.enqueue(5.0, cost[k])

    ctx = Ctx()
    out = timing.time_pass(ctx, [region(0), region(1)], runs=1, spin=False)
    assert out[0][0] == pytest.approx(3.005, rel=1e-3) and out[1][0] == pytest.approx(0.005)
    assert ctx.retimed == 1  # region 1, whose GPU time the host's enqueue had been part of


def test_a_failing_region_is_reported_and_the_others_are_timed(timing):
    sim = Event.sim = Sim(5.0)
    rs = regions(sim, [10.0, 10.0, 10.0])

    def bad(r):
        raise ValueError("SYNTHETIC execute failure")

    out = timing.time_pass(Ctx(), [rs[0], bad, rs[2]], runs=3)
    assert out[1] == "execute: ValueError: SYNTHETIC execute failure"
    assert out[0] == out[2] == pytest.approx([0.01] * 3)


@pytest.fixture
def profiler(timing):
    return importlib.import_module("engine.gpu.profiler")


class Plans:
    """A built graph's stand-in: plan i runs ``us[i][r]`` microseconds at repeat r (SYNTHETIC), its enqueue
    taking ``launch_us[i]`` of host time (default: the simulator's); ``calls[i]``: the repeats it was run at."""

    def __init__(self, sim: Sim, us, launch_us=None):
        self.sim, self.us, self.b, self.launch_us = sim, us, 4, launch_us
        self.calls: dict[int, list[int]] = {i: [] for i in range(len(us))}

    def executor(self, i, ctx):
        def run(ptrs, ws):
            self.calls[i].append(ptrs["r"])
            self.sim.enqueue(self.us[i][ptrs["r"]], self.launch_us[i] if self.launch_us else self.sim.launch_us)

        return run


class Buffers:
    def workspace(self, nbytes):
        return 1

    def pointers(self, b, r):
        return {"r": r}


def time_plans(profiler, plans: Plans, workspaces, signature="Forward/tf32/NCHW/c3h8w8/k4r3s3/p1x1/s1x1/d1x1/g1"):
    """(built graph, rows) of ``plans`` (none from cuDNN's heuristic list) timed with 5 repeats."""
    rows = [
        dict(
            signature=signature,
            plan=f"p{i}",
            heuristic_rank=-1,
            workspace=ws,
            numerical_notes="",
            status="failed",
            reason="",
        )
        for i, ws in enumerate(workspaces)
    ]
    built = profiler.BuiltGraph(plans, rows, list(enumerate(rows)))
    return built, profiler.time_graph(built, Buffers(), Ctx(), repeats=5)


def test_time_graph_repeats_only_plans_that_can_be_desirable_and_names_each_dominator(profiler):
    sim = Event.sim = Sim(20.0)
    # (workspace, heuristic rank, microseconds per run r = 0 warm-up, 1 single run, 2.. repeats), SYNTHETIC
    plans = [
        (0, 0, [60, 50, 50, 50, 50, 50, 50]),  # the framework's choice at any limit: repeated
        (0, -1, [30, 20, 20, 20, 20, 20, 20]),  # fastest at no workspace
        (1 << 20, -1, [40, 40, 40, 40, 40, 40, 40]),  # 4x p3's time at the same workspace: dominated by p3
        (1 << 20, -1, [12, 10, 10, 10, 10, 10, 10]),  # faster with workspace: on the front
        (1 << 21, -1, [11, 10.5, 10.5, 10.5, 10.5, 10.5, 10.5]),  # within 10 % of p3: repeated
        (1 << 21, -1, [90, 80, 9, 9, 9, 9, 9]),  # both first runs far off (outside the noise): dominated
        (1 << 22, 1, [70, 70, 70, 70, 70, 70, 70]),  # heuristic: only p0 stands for it, and beats it
    ]
    rows = [
        dict(
            signature="Forward/tf32/NCHW/c3h8w8/k4r3s3/p1x1/s1x1/d1x1/g1",
            micro_batch=4,
            plan=f"p{i}",
            heuristic_rank=rank,
            workspace=ws,
            numerical_notes="",
            status="failed",
            reason="",
            time_ms=float("nan"),
            repeats=0,
        )
        for i, (ws, rank, _) in enumerate(plans)
    ]
    built = profiler.BuiltGraph(Plans(sim, [us for *_, us in plans]), rows, list(enumerate(rows)))
    out = profiler.time_graph(built, Buffers(), Ctx(), repeats=5)
    got = {r["plan"]: (r["repeats"], r["reason"], round(r["time_ms"] * 1000, 3)) for r in out}
    assert got == {
        "p0": (5, "", 50.0),
        "p1": (5, "", 20.0),
        "p2": (1, "dominated by plan p3 at first timing", 40.0),
        "p3": (5, "", 10.0),
        "p4": (5, "", 10.5),
        "p5": (1, "dominated by plan p3 at first timing", 80.0),
        "p6": (1, "dominated by plan p0 at first timing", 70.0),
    }
    assert built.split["first_runs"] == {
        "plans": 7,
        "warm-up over 5 % slower": 4,
        "warm-up over 5 % faster": 0,
        "warm-up over 1.5x slower": 0,
        **{f"over 10 ms: {k}": 0 for k in ("plans", "warm-up over 5 % slower", "warm-up over 5 % faster")},
        "over 10 ms: warm-up over 1.5x slower": 0,
        "over 10 ms: left at the warm-up": 0,
    }


def test_time_graph_counts_the_warm_ups_of_slow_plans_apart(profiler):
    """SYNTHETIC: run 0 is the warm-up, run 1 the single run; plans of 10 ms or more a run are counted apart."""
    sim = Event.sim = Sim(20.0)
    us = [[12_000, 10_000], [9_000, 10_000], [10_100, 10_000], [9_000, 9_990], [20, 10], [30] * 2]
    built, _ = time_plans(profiler, Plans(sim, [u + u[1:] * 4 for u in us]), [0, 0, 0, 0, 1 << 20, 1 << 21])
    assert built.split["first_runs"] == {
        "plans": 6,
        "warm-up over 5 % slower": 2,
        "warm-up over 5 % faster": 2,  # the fourth runs 9.99 ms: faster, but not slow enough to count apart
        "warm-up over 1.5x slower": 1,  # the fifth, 20 us against 10
        "over 10 ms: plans": 3,
        "over 10 ms: warm-up over 5 % slower": 1,
        "over 10 ms: warm-up over 5 % faster": 1,
        "over 10 ms: warm-up over 1.5x slower": 0,
        "over 10 ms: left at the warm-up": 0,  # none is twice as slow as another at no more workspace
    }


def test_a_slow_plan_far_behind_one_that_stands_for_it_is_left_at_its_warm_up(profiler):
    """SYNTHETIC microseconds per run (r = 0 the warm-up, 1 the timed run, 2.. repeats): a plan is left at its
    warm-up only when that took 10 ms or more and over twice the warm-up of a plan with no more workspace."""
    sim = Event.sim = Sim(20.0)
    us = [
        [1_200, 1_000, 1_000, 1_000, 1_000, 1_000],  # p0: a small workspace
        [30_000] * 6,  # 25x p0's warm-up, at more workspace: left
        [9_000, 3_000, 3_000, 3_000, 3_000, 3_000],  # far behind p0, but its warm-up is under 10 ms: timed again
        [2_300, 2_000, 2_000, 2_000, 2_000, 2_000],  # under 10 ms: timed again
        [20_000, 500, 500, 500, 500, 500],  # no plan needs less workspace: timed again, and the fastest
        [12_000] * 6,  # over 10 ms and over twice p0's warm-up: left
    ]
    plans = Plans(sim, us)
    built, out = time_plans(profiler, plans, [1 << 10, 1 << 20, 1 << 20, 1 << 20, 0, 1 << 21])
    got = {r["plan"]: (r["repeats"], r["reason"], round(r["time_ms"] * 1000)) for r in out}
    assert got["p1"] == (1, "dominated by plan p0 at its warm-up, over 2x slower: not run again", 30_000)
    assert got["p5"] == (1, "dominated by plan p0 at its warm-up, over 2x slower: not run again", 12_000)
    assert plans.calls[1] == plans.calls[5] == [0]  # their warm-ups alone ran
    assert plans.calls[2][:2] == plans.calls[3][:2] == plans.calls[4][:2] == [0, 1]
    assert got["p2"] == (1, "dominated by plan p4 at first timing", 3_000)
    assert got["p4"] == (5, "", 500)
    assert built.split["first_runs"]["over 10 ms: left at the warm-up"] == sum(
        r["reason"].endswith("not run again") for r in out
    )


def test_a_warm_up_the_gpu_spent_waiting_for_the_host_leaves_no_plan(profiler):
    """SYNTHETIC: p1's kernel runs 8 us but enqueueing it keeps the host 15 ms (a first launch loading its kernels
    takes that long): its warm-up reads 15 ms on the GPU, over 10 ms and 15x p0's, yet its kernel took 8 us."""
    sim = Event.sim = Sim(20.0)
    plans = Plans(sim, [[1_000] * 6, [8] * 6], launch_us=(20.0, 15_000.0))
    _, out = time_plans(profiler, plans, (0, 1 << 20))
    assert plans.calls[1][:2] == [0, 1] and "at its warm-up" not in out[1]["reason"]


def test_a_plan_left_at_its_warm_up_whose_dominator_got_slower_is_repeated_behind_that_warm_up(profiler):
    sim = Event.sim = Sim(20.0)
    us = [[1_000, 1_000, *[30_000] * 4], [12_000, 12_000, *[11_000] * 4]]  # SYNTHETIC: p0's first runs were lucky
    plans = Plans(sim, us)
    _, out = time_plans(profiler, plans, (0, 1 << 20))
    assert plans.calls[1] == [0, 2, 3, 4, 5]  # never the timed run r = 1: its repeats follow its warm-up
    assert [(r["repeats"], r["reason"], round(r["time_ms"] * 1000)) for r in out] == [(5, "", 30_000), (4, "", 11_000)]


def test_a_plan_whose_dominator_got_slower_in_its_repeats_is_repeated_too(profiler):
    sim = Event.sim = Sim(20.0)
    us = [[10, 10, 20, 20, 20, 20, 20], [12] * 7]  # SYNTHETIC: p0's single run was lucky
    _, out = time_plans(profiler, Plans(sim, us), (0, 1 << 20))
    assert [(r["repeats"], r["reason"], round(r["time_ms"] * 1000, 3)) for r in out] == [(5, "", 20.0), (5, "", 12.0)]


def test_a_host_bound_region_is_timed_back_to_back_at_once_and_the_others_exactly(timing):
    """A region whose enqueue keeps the host 5 ms a run (SYNTHETIC: one launch per group, say) is not retimed behind
    ever longer spins: its time is its back-to-back time, the host's. A region with one preempted run is no bound."""
    sim = Event.sim = Sim(20.0)
    kernels = [50.0, 5.0, 40.0, 50.0, 8.0]
    cost = {0: [5000.0, 5000.0], 3: [20.0, 20_000.0]}  # host microseconds per run; region 3's second run preempted

    def region(k):
        return lambda r: sim.enqueue(kernels[k], cost.get(k, [20.0, 20.0])[r])

    ctx, host = Ctx(), {}
    out = timing.time_pass(ctx, [region(k) for k in range(len(kernels))], runs=2, host_ms=host)
    assert out[0][1] == pytest.approx(5.0, rel=0.01)  # ms: the GPU waited on the host between the launches
    assert [out[k][1] for k in (1, 2, 3, 4)] == pytest.approx([k / 1000 for k in kernels[1:]])  # GPU time alone
    assert host[0] == pytest.approx(5.0, rel=0.01) and host[3] < timing.HOST_BOUND_MS  # the least run of its pass


def test_time_graph_names_host_bound_plans_and_a_faster_plan_dominates_them(profiler):
    sim = Event.sim = Sim(20.0)
    plans = Plans(sim, [[50.0] * 7, [30.0] * 7], launch_us=(3000.0, 20.0))
    built, out = time_plans(profiler, plans, (0, 0), "Forward/tf32/NCHW/c8h8w8/k8r3s3/p1x1/s1x1/d1x1/g8")
    # p0 timed with the GPU idle ahead of it: its 3 ms enqueue and its kernel's 0.05 ms, as one call costs
    assert [(r["repeats"], round(r["time_ms"], 2)) for r in out] == [(1, 3.05), (5, 0.03)]
    assert plans.calls[0] == [0, 1]  # its warm-up and one timed run: no spin-covered retries
    assert (
        out[0]["reason"]
        == "dominated by plan p1 at first timing; host-bound: 3.0 ms of host time per execution, timed back to back"
    )
    assert built.split["host_bound"] == {"plans": 1}


def test_a_repeated_plan_runs_once_per_repeat_after_its_warm_up_and_its_first_run_counts(profiler):
    """Five repeats are the first timed run and four more: the warm-up and five runs, not six (the bundled ResNet-50
    b64 profile's repeats were 9.2 of its 33 s of timed kernels). SYNTHETIC microseconds per run r."""
    sim = Event.sim = Sim(20.0)
    plans = Plans(sim, [[99, 7, 10, 10, 10, 10, 10, 10], [99, 30, 30, 30, 30, 30, 30, 30]])
    _, out = time_plans(profiler, plans, (0, 1 << 20))
    assert plans.calls == {0: [0, 1, 2, 3, 4, 5], 1: [0, 1]}  # p1: slower, more workspace: dominated
    assert (out[0]["repeats"], out[0]["time_min_ms"], out[0]["time_ms"]) == (5, 0.007, 0.01)
