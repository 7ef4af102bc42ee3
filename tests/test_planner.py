"""The planner on SYNTHETIC profiles: results against brute force on tiny cases, and every plan validates."""

from __future__ import annotations

import itertools
import re
import json

import pandas as pd
import pytest

from engine.errors import EngineError, InfeasibleBudgetError, ProfileFormatError
from engine.kernels import KernelSignature
from engine.network import NetBuilder
from engine.plan import Plan, align
from engine.kernel_sets import kernel_sets, network_variant
from engine.planner import arena_layout, make_plan
from engine.summary import plan_summary
from engine.policies import batch_sizes
from engine.profile import RTC_NOT_PROFILED, Profile
from engine.units import MiB
from engine.zoo import get_network
from engine.testing.reference import partitions
from engine.testing.synthetic import engine_set_profile, synthetic_profile, synthetic_rows

PROV = {"synthetic": True, "gpu": "SYNTHETIC", "cudnn_version": "-", "command": "tests/test_planner.py"}


def tiny_net(batch: int):
    """Two convolutions: kernels conv1:F, conv1:BF, conv2:F, conv2:BD, conv2:BF."""
    b = NetBuilder("tiny", batch, (3, 29, 29))  # 29x29: workspaces are not multiples of 256
    b.conv(64, 3, pad=1, name="conv1")
    b.relu(name="relu1")
    b.conv(121, 3, pad=1, name="conv2")
    return b.build()


def make_profile(net, sizes, plans=None, precision="tf32", layout="NCHW", networks=True) -> Profile:
    """SYNTHETIC profile of ``net``'s kernels; ``plans`` keeps only those plan names (whose knobs they spell)."""
    rows = []
    for key in net.unique_kernels(precision, layout):
        for r in synthetic_rows(KernelSignature.from_key(key, net.batch), sizes):
            if plans is None or r["plan"] in plans:
                rows.append(r)
    nets = [dict(name=net.name, batch=net.batch, precision=precision, layout=layout)] if networks else []
    return Profile.from_records(rows, PROV, nets)


def brute_force_wr(profile: Profile, key: str, batch: int, sizes: list[int], limit: int | None) -> float | None:
    """Fastest time over every partition of ``batch`` and every plan per piece, all pieces within ``limit``."""
    cands = profile.candidates(key, sizes)
    best = None
    for parts in partitions(batch, [s for s in sizes if s in cands]):
        options = [[m for m in cands[s] if limit is None or m.workspace <= limit] for s in parts]
        for combo in itertools.product(*options):
            t = sum(m.time_ms for m in combo)
            best = t if best is None or t < best else best
    return best


@pytest.fixture(scope="module")
def alexnet_profile():
    return synthetic_profile()  # AlexNet, B=256, powerOfTwo


# --- kernel_sets --------------------------------------------------------------------------


def test_kernel_sets_order_shape_and_cache(alexnet_profile):
    net = get_network("alexnet", 32)
    sets = kernel_sets(alexnet_profile, net, "powerOfTwo")
    assert [k.id for k, _ in sets] == [k.id for k in net.kernels()]
    for _, confs in sets:
        assert confs and all(c.batch == 32 for c in confs)
        assert all(a.workspace < b.workspace and a.time_ms > b.time_ms for a, b in zip(confs, confs[1:]))
    again = kernel_sets(alexnet_profile, net, "powerOfTwo")
    assert all(a is b for (_, a), (_, b) in zip(sets, again))  # cached per profile and signature


def test_kernel_missing_from_profile_names_kernel_and_profile(tmp_path):
    net = tiny_net(4)
    full = make_profile(net, [1, 2, 4])
    conv2_bd = next(k for k in net.kernels() if k.id == "conv2:BD").signature.key
    rows = full.table[full.table.signature != conv2_bd]
    path = Profile(rows, PROV, full.networks).save(tmp_path / "SYNTHETIC-partial.profile.json")
    with pytest.raises(
        EngineError,
        match=r"'SYNTHETIC-partial.profile.json' lacks 1 of the 5 convolution kernels of "
        r"tiny b4 tf32/NCHW \(first: conv2:BD\); measure them on a GPU with: "
        r"python -m engine profile --network tiny --batch 4 --dtype tf32 "
        r"--layout NCHW --policy powerOfTwo$",
    ):
        kernel_sets(Profile.load(path), net, "powerOfTwo")


def test_sizes_that_cannot_make_the_batch():
    net = tiny_net(4)
    profile = make_profile(net, [4])
    with pytest.raises(EngineError, match="cannot make mini-batch 3 for kernel conv1:F"):
        kernel_sets(profile, tiny_net(3), "powerOfTwo")


def test_precision_and_layout_defaults():
    net = tiny_net(4)
    a, b = make_profile(net, [1, 2, 4]), make_profile(net, [1, 2, 4], precision="fp16", layout="NHWC")
    both = Profile(pd.concat([a.table, b.table]), PROV, a.networks + b.networks)
    assert network_variant(a, "tiny") == ("tf32", "NCHW")
    assert network_variant(b, "tiny") == ("fp16", "NHWC")
    with pytest.raises(EngineError, match="records tiny at fp16/NHWC, tf32/NCHW; choose one with --precision"):
        network_variant(both, "tiny")
    assert network_variant(both, "tiny", precision="fp16") == ("fp16", "NHWC")
    sets = kernel_sets(both, net, "powerOfTwo", layout="NHWC")
    assert all(k.signature.precision == "fp16" for k, _ in sets)
    unrecorded = make_profile(net, [1, 2, 4], networks=False)  # falls back to the signatures' variants
    assert network_variant(unrecorded, "tiny") == ("tf32", "NCHW")
    with pytest.raises(EngineError, match="holds no bf16/\\* measurements for tiny; it has tf32/NCHW"):
        network_variant(a, "tiny", precision="bf16")


# --- WR ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("batch", [4, 6])
@pytest.mark.parametrize("limit_kib", [0, 1024, 2000, 6000, 1 << 22])
def test_wr_equals_brute_force(batch, limit_kib):
    net = tiny_net(batch)
    profile = make_profile(net, batch_sizes("powerOfTwo", batch))
    limit = limit_kib * 1024
    plan = make_plan(profile, net, mode="wr", budget=limit)
    sizes = batch_sizes("powerOfTwo", batch)
    for k in plan.kernels:
        assert k.time_ms == pytest.approx(brute_force_wr(profile, k.signature, batch, sizes, limit), rel=1e-12)
        assert k.workspace <= limit
        assert k.undivided_time_ms == pytest.approx(brute_force_wr(profile, k.signature, batch, [batch], limit))
        for m in k.micro:  # engine id and knobs come from the profile row of that very plan
            row = profile.plan_row(k.signature, m.batch, m.plan)
            assert (m.engine_id, m.knobs) == (row["engine_id"], json.loads(row["knobs"]))
    unlimited = sum(brute_force_wr(profile, k.signature, batch, sizes, None) for k in plan.kernels)
    assert plan.totals.unlimited_time_ms == pytest.approx(unlimited)
    assert plan.totals.speedup == pytest.approx(plan.totals.undivided_time_ms / plan.totals.time_ms)
    assert plan.totals.speedup >= 1 - 1e-12  # undivided is one of WR's options
    assert Plan.from_dict(json.loads(plan.to_json())) == plan


def test_wr_picks_the_desirable_element_at_the_limit(alexnet_profile):
    net = get_network("alexnet", 256)
    for limit in (1 * MiB, 8 * MiB, 64 * MiB, 512 * MiB):
        plan = make_plan(alexnet_profile, net, mode="wr", budget=limit)
        for k, (_, confs) in zip(plan.kernels, kernel_sets(alexnet_profile, net, "powerOfTwo")):
            best = [c for c in confs if c.workspace <= limit][-1]
            assert k.time_ms == pytest.approx(best.time_ms, rel=1e-12)


def test_wr_undivided_infeasible_at_that_memory():
    """fft/tc plans need workspace proportional to b: a small limit leaves only micro-batched configurations."""
    net = tiny_net(8)
    profile = make_profile(net, batch_sizes("powerOfTwo", 8), plans={"eng2_k2=2", "eng3_k2=3"})
    fft_at_1 = min(m.workspace for m in profile.candidates(net.kernels()[0].signature.key, [1])[1])
    plan = make_plan(
        profile,
        net,
        mode="wr",
        budget=max(min(m.workspace for m in profile.candidates(k.signature.key, [1])[1]) for k in net.kernels()),
    )
    assert fft_at_1 > 0
    assert plan.totals.undivided_time_ms is None and plan.totals.speedup is None
    assert any("no single cuDNN plan at micro-batch 8 fits" in n for n in plan.notes)
    assert "none (undivided is infeasible there" in plan_summary(plan)
    Plan.from_dict(plan.to_dict())


def test_wr_budget_below_minimum_names_it():
    net = tiny_net(4)
    profile = make_profile(net, [1, 2, 4], plans={"eng2_k2=2", "eng3_k2=3"})
    need = max(kernel_sets(profile, net, "powerOfTwo")[i][1][0].workspace for i in range(5))
    with pytest.raises(InfeasibleBudgetError, match=f"below .* \\({need} bytes\\)") as info:
        make_plan(profile, net, mode="wr", budget=need - 1)
    assert info.value.minimum == need
    make_plan(profile, net, mode="wr", budget=need)


def test_unmeasured_undivided_size_is_noted(alexnet_profile):
    plan = make_plan(alexnet_profile, get_network("alexnet", 384), mode="wr", budget="64MiB")
    assert plan.totals.speedup is None
    assert any("no measurement at micro-batch 384 (all 14 kernels)" in n for n in plan.notes)
    assert any("offers 10 micro-batch sizes but the profile measured as few as 9" in n for n in plan.notes)
    assert all(sum(m.batch for m in k.micro) == 384 for k in plan.kernels)


def test_a_profile_without_cudnns_first_plan_says_the_plan_may_be_slower_than_stock(alexnet_profile):
    """SYNTHETIC: where a profile left cuDNN's first heuristic plan (what stock PyTorch runs) unbuilt as
    runtime-compiled, the plan cannot choose it, and its notes say which kernels and what to do."""
    net = get_network("alexnet", 256)
    assert not any("runtime-compiled" in n for n in make_plan(alexnet_profile, net, mode="wr", budget="64MiB").notes)
    t = alexnet_profile.table.copy()
    key = kernel_sets(alexnet_profile, net, "powerOfTwo", "tf32", "NCHW")[2][0].signature.key
    first = (t.signature == key) & (t.heuristic_rank == 0)
    t.loc[first, ["status", "reason", "time_ms"]] = ["skipped", RTC_NOT_PROFILED, float("nan")]
    plan = make_plan(Profile(t, alexnet_profile.provenance, alexnet_profile.networks), net, mode="wr", budget="64MiB")
    ids = [k.id for k in plan.kernels if k.signature == key]
    note = next(n for n in plan.notes if "runtime-compiled" in n)
    assert ids and all(i in note for i in ids) and "profile again" in note
    skipped = set(t[first].plan)
    assert not any(m.plan in skipped for k in plan.kernels if k.signature == key for m in k.micro)


def test_malformed_knobs_in_profile():
    net = tiny_net(2)
    profile = make_profile(net, [1, 2])
    profile.table.loc[:, "knobs"] = "{bad"
    with pytest.raises(ProfileFormatError, match="malformed knobs '{bad'"):
        make_plan(profile, net, mode="wr", budget="1GiB")


# --- WD ---------------------------------------------------------------------------------------


def test_arena_layout_is_the_one_segment_rule():
    """Segments in kernel order, each on a 256-byte boundary; zero-size segments take no bytes."""
    assert arena_layout([]) == ([], 0)
    assert arena_layout([1, 0, 256, 257, 3]) == ([0, 256, 256, 512, 1024], 1280)
    plan = make_plan(synthetic_profile("alexnet", 32), get_network("alexnet", 32), mode="wd", budget=64 * MiB)
    assert arena_layout([k.workspace for k in plan.kernels]) == ([k.offset for k in plan.kernels], plan.arena_size)


def brute_force_wd(sets, budget):
    best = None
    for combo in itertools.product(*sets):
        if sum(align(c.workspace) for c in combo) <= budget:
            t = sum(c.time_ms for c in combo)
            best = t if best is None or t < best else best
    return best


@pytest.mark.parametrize("fraction", [0.0, 0.03, 0.1, 0.25, 0.5, 0.9, 1.0, "raw"])
def test_wd_optimal_within_budget_and_arena(fraction):
    net = tiny_net(4)
    profile = make_profile(net, [1, 2, 4])
    sets = [confs for _, confs in kernel_sets(profile, net, "powerOfTwo")]
    und = [confs for _, confs in kernel_sets(profile, net, "undivided")]
    low, high = (sum(align(s[i].workspace) for s in sets) for i in (0, -1))
    if fraction == "raw":  # the fastest choice fits unaligned but not as an aligned arena
        budget = sum(s[-1].workspace for s in sets)
        assert budget < high
    else:
        budget = low + int(fraction * (high - low)) + 1
    plan = make_plan(profile, net, mode="wd", budget=budget)
    assert plan.totals.time_ms == pytest.approx(brute_force_wd(sets, budget), rel=1e-9)
    assert plan.totals.undivided_time_ms == pytest.approx(brute_force_wd(und, budget), rel=1e-9)
    assert plan.totals.workspace <= plan.arena_size <= budget
    spans = sorted((k.offset, k.offset + k.workspace) for k in plan.kernels if k.workspace)
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert all(k.offset % 256 == 0 for k in plan.kernels)
    assert Plan.from_dict(json.loads(plan.to_json())) == plan


def test_wd_alexnet_and_summary(alexnet_profile):
    net = get_network("alexnet", 256)
    plan = make_plan(alexnet_profile, net, mode="wd", budget="120MiB", command="test")
    assert plan.arena_size <= 120 * MiB
    assert plan.totals.speedup >= 1 - 1e-12
    assert plan.totals.unlimited_time_ms <= plan.totals.time_ms
    text = plan_summary(plan)
    for k in plan.kernels:
        assert k.id in text
    assert "speed-up over undivided cuDNN at the same memory" in text and "[SYNTHETIC profile]" in text
    assert plan.provenance["command"] == "test" and plan.provenance["profile"]["synthetic"] is True


def test_wd_budget_below_minimum_names_it():
    net = tiny_net(4)
    profile = make_profile(net, [1, 2, 4], plans={"eng1_k2=1", "eng3_k2=3"})
    need = sum(align(confs[0].workspace) for _, confs in kernel_sets(profile, net, "powerOfTwo"))
    with pytest.raises(InfeasibleBudgetError, match=f"total workspace budget .* below .* \\({need} bytes\\)") as info:
        make_plan(profile, net, mode="wd", budget=need - 1)
    assert info.value.minimum == need
    assert make_plan(profile, net, mode="wd", budget=need).arena_size == need


def test_bad_mode_and_budget(alexnet_profile):
    net = get_network("alexnet", 8)
    with pytest.raises(EngineError, match="unknown mode 'ww'"):
        make_plan(alexnet_profile, net, mode="ww", budget="64MiB")
    with pytest.raises(EngineError, match="unknown unit 'MiQ'"):
        make_plan(alexnet_profile, net, mode="wr", budget="64MiQ")


def test_framework_baseline_never_picks_a_swept_plan():
    """Plans found by the engine sweep (heuristic_rank -1) are invisible to a framework's fallback."""
    s = tiny_net(8).kernels()[0].signature
    rows = synthetic_rows(s, [8])
    fastest = min(rows, key=lambda r: r["time_ms"])
    rows.append(
        {
            **fastest,
            "plan": "eng9_k2=9",
            "engine_id": 9,
            "knobs": '{"2": 9}',
            "heuristic_rank": -1,
            "time_ms": fastest["time_ms"] / 2,
            "time_min_ms": fastest["time_min_ms"] / 2,
            "time_max_ms": fastest["time_max_ms"] / 2,
            "workspace": 0,
        }
    )
    prof = Profile.from_records(rows, PROV, [])
    first = prof.heuristic_first(s.key, 8, None)
    assert first.plan == min((r for r in rows if r["heuristic_rank"] >= 0), key=lambda r: r["heuristic_rank"])["plan"]
    assert prof.candidates(s.key)[8][0].plan == "eng9_k2=9"  # the optimizers do see it


def test_engine_sets_restrict_what_the_optimizers_see():
    prof = engine_set_profile()
    assert prof.restrict("all") is prof and prof.swept
    heur, det = prof.restrict("heuristics"), prof.restrict("deterministic")
    assert "eng3_k2=3" not in set(heur.table.plan) and "eng2_k2=2" in set(heur.table.plan) and not heur.swept
    assert "eng2_k2=2" not in set(det.table.plan) and "eng3_k2=3" in set(det.table.plan)
    assert heur.provenance["engines"] == "heuristics"
    net = get_network("alexnet", 32)
    times = {}
    for name, p in (("all", prof), ("heuristics", heur), ("deterministic", det)):
        plan = make_plan(p, net, mode="wd", budget=64 * MiB, policy="powerOfTwo")
        used = {m.plan for k in plan.kernels for m in k.micro}
        assert not used & {"heuristics": {"eng3_k2=3"}, "deterministic": {"eng2_k2=2"}}.get(name, set())
        times[name] = plan.totals.time_ms
    assert times["all"] <= min(times["heuristics"], times["deterministic"])
    with pytest.raises(EngineError, match="engine set must be one of all, heuristics, deterministic"):
        prof.restrict("fastest")


@pytest.mark.parametrize(
    "args,message",
    [
        ((None, "net"), "make_plan needs a Profile, got NoneType None"),
        (("h100-alexnet-b256-tf32-nchw-powerOfTwo", "net"), "make_plan needs a Profile, got str 'h100-alexnet"),
        (("profile", "alexnet"), "make_plan needs a Network, got str 'alexnet': engine.zoo.get_network"),
        (("profile", "net", -1), "time_limit_s must be a positive number of seconds, got -1"),
        (("profile", "net", float("nan")), "time_limit_s must be a positive number of seconds, got nan"),
        (("profile", "net", True), "time_limit_s must be a positive number of seconds, got True"),
    ],
)
def test_make_plan_names_a_wrong_argument_and_how_to_get_the_right_one(args, message):
    """The public planning function is called from notebooks too: a name where an object belongs is one line."""
    net = get_network("alexnet", 8)
    known = {"profile": synthetic_profile("alexnet", 8), "net": net}
    profile, network, *limit = [known.get(a, a) if isinstance(a, str) else a for a in args]
    with pytest.raises(EngineError, match=re.escape(message)):
        make_plan(profile, network, mode="wd", budget="64MiB", time_limit_s=limit[0] if limit else 10.0)


@pytest.mark.parametrize("policy", ["bogus", "4,x", "1,,2", "4,", [0, 4], [True, 4], ["a", 4], 123, None, 2.5])
def test_a_bad_policy_is_one_engine_error_naming_it(alexnet_profile, policy):
    """make_plan's ``policy`` is checked like its other arguments: one EngineError (still a ValueError) naming
    what is wrong, not a TypeError from deep inside (SYNTHETIC profile)."""
    with pytest.raises(EngineError, match="policy|micro-batch size") as err:
        make_plan(alexnet_profile, get_network("alexnet", 256), mode="wr", budget="64MiB", policy=policy)
    assert isinstance(err.value, ValueError) and "\n" not in str(err.value)
