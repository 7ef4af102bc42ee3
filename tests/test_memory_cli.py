"""``python -m engine memory``, dashboard frames and capacity questions."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine.cli import main
from engine.errors import EngineError
from engine.memory import max_batch, memory_frames, plan_memory, smallest_capacity
from engine.memory.capacity import _bisect
from engine.memory.tensors import CLASSES
from engine.units import parse_size
from engine.testing.synthetic import synthetic_profile
from engine.testing.networks import fork_join


def test_table(capsys):
    assert main(["memory", "--network", "alexnet", "--batch", "32", "--policy", "sn-recompute"]) == 0
    out = capsys.readouterr().out
    assert "policy sn-recompute" in out and "peak" in out and "re-forwards" in out
    assert out.count("\n") > 42  # one row per step


def test_json(capsys, tmp_path):
    path = tmp_path / "m.json"
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--batch",
                "16",
                "--policy",
                "vdnn-all-m",
                "--capacity",
                "8GiB",
                "--json",
                str(path),
            ]
        )
        == 0
    )
    doc = json.loads(path.read_text())
    assert doc["policy"] == "vdnn-all-m" and doc["capacity"] == 8 * 2**30
    assert doc["summary"]["fits"] is True and len(doc["ticks"]) == 2 * 21
    assert {c["direction"] for c in doc["copies"]} == {"offload", "prefetch"}


def test_json_with_profile_is_strict(capsys, tmp_path):
    prof = synthetic_profile("alexnet", 16)
    path = prof.save(tmp_path / "SYNTHETIC.profile.json.gz")
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--batch",
                "16",
                "--policy",
                "superneurons",
                "--capacity",
                "1GiB",
                "--profile",
                str(path),
                "--workspace",
                "fit",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out, parse_constant=lambda c: pytest.fail(f"non-JSON constant {c}"))
    assert doc["summary"]["iteration_ms"] > 0 and doc["kernels"] and "SYNTHETIC" in doc["profile"]


def test_compare_all(capsys):
    assert main(["memory", "--network", "alexnet", "--batch", "32", "--policy", "all", "--capacity", "2GiB"]) == 0
    out = capsys.readouterr().out
    for name in ("baseline-vdnn-m", "vdnn-dyn", "layrub-hybrid", "superneurons"):
        assert name in out


def test_unknown_policy(capsys):
    assert main(["memory", "--network", "alexnet", "--policy", "magic"]) == 2
    err = capsys.readouterr().err
    assert "unknown memory policy 'magic'" in err and "sn-recompute" in err


def test_capacity_too_small_names_smallest(capsys):
    assert main(["memory", "--network", "alexnet", "--batch", "64", "--policy", "liveness", "--capacity", "64MiB"]) == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    mins = smallest_capacity("alexnet", 64)
    best = min(mins, key=mins.get)
    assert "too small for every policy" in err and f"(policy {best})" in err and "needs at least" in err


def test_too_small_for_this_policy_but_not_others(capsys):
    live = plan_memory("alexnet", "liveness", batch=64).summary["peak"]
    least = min(smallest_capacity("alexnet", 64).values())
    assert least < live
    cap = f"{int((least + live) / 2)}B"
    assert main(["memory", "--network", "alexnet", "--batch", "64", "--policy", "liveness", "--capacity", cap]) == 1
    assert "policies that fit" in capsys.readouterr().err


def test_frames_are_tidy():
    prof = synthetic_profile("alexnet", 32)
    res = plan_memory("alexnet", "sn-recompute", batch=32, capacity=parse_size("2GiB"), profile=prof)
    f = memory_frames(res)
    assert set(f) == {"memory", "lines", "copies", "recompute", "kernels", "summary"}
    mem = f["memory"]
    assert set(mem.cls) <= set(CLASSES)
    stacked = mem.groupby("tick").bytes.sum()
    assert np.allclose(stacked.values, f["lines"].total.values)
    lines = f["lines"]
    assert np.allclose(lines.free_for_workspace, 2 * 2**30 - lines.live)
    assert len(f["recompute"]) == res.summary["recompute_count"] > 0
    assert set(f["copies"].lane) == {"offload", "prefetch"}
    assert (f["copies"].end_ms >= f["copies"].start_ms).all()


@given(st.integers(1, 300), st.integers(1, 400))
def test_bisect_finds_the_edge(edge, limit):
    got = _bisect(lambda k: k <= edge, 1, limit)
    assert got == min(edge, limit)


def test_max_batch_edge():
    cap = parse_size("1GiB")
    b = max_batch("alexnet", "vdnn-conv-m", cap)
    assert b > 0
    assert plan_memory("alexnet", "vdnn-conv-m", batch=b, capacity=cap).fits
    assert not plan_memory("alexnet", "vdnn-conv-m", batch=b + 1, capacity=cap).fits


def test_deepest_vgg():
    from engine.memory import deepest

    cap = int(plan_memory("vgg-216", "baseline-vdnn-m", batch=2).peak) + 1
    assert deepest("vgg", "baseline-vdnn-m", cap, 2) == 216
    assert deepest("vgg", "baseline-vdnn-m", 1 << 20, 2) == 0


def test_smallest_capacity_is_tight():
    net = fork_join(16)
    mins = smallest_capacity(net)
    for policy in ("liveness", "vdnn-all-m", "layrub-hybrid", "sn-recompute", "superneurons"):
        cap = int(mins[policy])
        assert plan_memory(net, policy, capacity=cap + 1).fits, policy
        assert not plan_memory(net, policy, capacity=int(cap * 0.97)).fits, policy


def test_bad_capacity():
    with pytest.raises(Exception, match="capacity must be positive"):
        plan_memory("alexnet", "liveness", batch=2, capacity=0)


def test_policy_options_are_strict():
    """A misspelt or foreign switch is an error naming the switches the policy takes, never silently ignored."""
    from engine.errors import EngineError

    with pytest.raises(
        EngineError,
        match=r"memory policy 'sn-recompute' has no option 'stratgy'; it takes "
        r"strategy, rule, offload, workspace",
    ):
        plan_memory("alexnet", "sn-recompute", batch=8, stratgy="memory")
    with pytest.raises(EngineError, match="memory policy 'vdnn-all-m' has no option 'algo'"):
        plan_memory("alexnet", "vdnn-all-m", batch=8, algo="p")  # fixed by the policy's name
    with pytest.raises(EngineError, match="memory policy 'vdnn-dyn' has no option 'strategy'; it takes none"):
        plan_memory("alexnet", "vdnn-dyn", batch=8, strategy="speed")
    assert plan_memory("alexnet", "sn-recompute", batch=8, strategy="memory").options["strategy"] == "memory"
    with pytest.raises(EngineError, match=r"plan_memory\(\) takes no keyword 'capcity' \(did you mean 'capacity'\?\)"):
        plan_memory("resnet18", "liveness", capcity="12GiB")  # not "policy 'liveness' has no option"


def test_plan_memory_time_params_and_a_conv_plan_of_another_precision(tmp_path):
    """time_params takes a measurements file as --time-params does, anything else but a TimeParams is one line;
    a conv plan's precision is the step's (an fp16 request with a TF32 plan was planned as given)."""
    from engine.errors import EngineError
    from engine.planner import make_plan
    from engine.testing.synthetic import synthetic_profile
    from engine.zoo import get_network

    with pytest.raises(EngineError, match="time_params must be a TimeParams or the path of a measurements file"):
        plan_memory("alexnet", "liveness", batch=8, time_params=5)
    with pytest.raises(EngineError, match="does not exist"):
        plan_memory("alexnet", "liveness", batch=8, time_params=str(tmp_path / "tp.json"))
    profile = synthetic_profile()
    plan = make_plan(profile, get_network("alexnet", 256), mode="wr", budget="64MiB")
    with pytest.raises(EngineError, match=r"conv_plan is a tf32 NCHW plan, but precision='fp16'"):
        plan_memory("alexnet", "liveness", batch=256, precision="fp16", conv_plan=plan)
    with pytest.raises(EngineError, match=r"but layout='NHWC'"):
        plan_memory("alexnet", "liveness", batch=256, layout="NHWC", conv_plan=plan)
    assert plan_memory("alexnet", "liveness", batch=256, conv_plan=plan, profile=profile).peak > 0


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--strategy", "memory"], "--strategy applies to sn-recompute, superneurons; none of the policies given"),
        (["--reserve", "0.5", "--convention", "pytorch"], "--reserve is a share of --capacity"),
        (["--capacity", "4GiB", "--max-batch", "--deepest", "vgg"], "--max-batch and --deepest ask different"),
    ],
)
def test_options_that_would_be_ignored_are_refused(capsys, argv, message):
    assert main(["memory", "--network", "alexnet", "--policy", "liveness", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


def test_a_policy_table_without_a_profile_says_its_peaks_are_lower_bounds(capsys):
    assert main(["memory", "--network", "alexnet", "--batch", "8", "--policy", "liveness,vdnn-all-m"]) == 0
    assert "the peak is a lower bound" in capsys.readouterr().out
    name = "h100-alexnet-b256-tf32-nchw-powerOfTwo"
    assert main(["memory", "--network", "alexnet", "--policy", "liveness,vdnn-all-m", "--profile", name]) == 0
    assert "lower bound" not in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--capacity", "2048TiB", "--max-batch"], "capacity 2097152 GiB is not a GPU memory size"),
        (["--capacity", "1e30B", "--max-batch"], "invalid size '1e30B': more than"),
        (
            ["--network", "resnet-9999998", "--capacity", "12GiB", "--max-batch"],
            "resnet-9999998: N may be at most 3002",
        ),
    ],
)
def test_absurd_sizes_fail_before_work(capsys, argv, message):
    import time

    t0 = time.perf_counter()
    assert main(["memory", "--network", "alexnet", "--policy", "liveness", *argv]) == 2
    assert time.perf_counter() - t0 < 5
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0], err


@pytest.mark.slow
def test_deepest_stops_at_the_zoo_limit():
    """With room for anything, the deepest ResNet is the deepest the zoo generates, found in seconds."""
    from engine.memory.capacity import MAX_CAPACITY, deepest
    from engine.zoo import MAX_DEPTH

    assert deepest("resnet", "liveness", MAX_CAPACITY, 1) == MAX_DEPTH


def test_memory_profile_takes_a_mini_batch_the_profile_did_not_measure(capsys, tmp_path):
    """As `plan` does: batch 200 from a powerOfTwo b256 profile runs each kernel as measured micro-batches."""
    path = synthetic_profile("alexnet", 256).save(tmp_path / "SYNTHETIC.profile.json.gz")
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--batch",
                "200",
                "--policy",
                "liveness",
                "--profile",
                str(path),
                "--capacity",
                "12GiB",
                "--json",
            ]
        )
        == 0
    )
    doc = json.loads(capsys.readouterr().out)
    assert doc["batch"] == 200 and doc["kernels"]

    def samples(division: str) -> int:  # "2x64+32+16+8" -> 200
        return sum(int(a) * int(b) for a, b in (p.split("x") if "x" in p else (1, p) for p in division.split("+")))

    assert {samples(k["division"]) for k in doc["kernels"]} == {200}
    assert any("no measurement at mini-batch 200 for 14 of 14 kernel runs" in n for n in doc["notes"]), doc["notes"]


def test_plan_memory_reads_sizes_and_profiles_as_the_cli_does():
    """``capacity="12GiB"`` and a bundled profile's name work in Python as on the command line; wrong ones: one line."""
    name = "h100-alexnet-b256-tf32-nchw-powerOfTwo"
    by_name = plan_memory("alexnet", "vdnn-all-p", batch=256, capacity="12GiB", profile=name)
    assert by_name.summary == plan_memory("alexnet", "vdnn-all-p", batch=256, capacity=12 << 30, profile=name).summary
    for kwargs, message in [
        (dict(capacity="12"), "'12' has no unit"),
        (dict(capacity=True), "invalid size True"),
        (dict(framework_bytes=-1), "must not be negative"),
        (dict(profile=5), "a profile is a bundled profile's name or a file's path, got int 5"),
        (dict(profile="no-such-profile"), "no profile 'no-such-profile'"),
        (dict(itemsize=-4), "itemsize must be 1, 2, 4 or 8 bytes"),
        (dict(itemsize=0), "itemsize must be 1, 2, 4 or 8 bytes"),
        (dict(itemsize=3.5), "itemsize must be 1, 2, 4 or 8 bytes"),
        (dict(optimizer_copies=-100), "optimizer_copies must be from 0 to 16"),
        (dict(optimizer_copies=10**6), "optimizer_copies must be from 0 to 16"),
        (dict(optimizer_copies="2"), "optimizer_copies must be an integer"),
    ]:
        with pytest.raises(EngineError, match=message):
            plan_memory("alexnet", "liveness", batch=8, **kwargs)
    for batch in (0, "32", True):
        with pytest.raises(EngineError, match="mini-batch size must be a positive integer"):
            plan_memory("alexnet", "liveness", batch=batch)


def test_plan_memory_of_a_model_object_says_how_to_name_it():
    """A PyTorch user's natural ``plan_memory(model)`` got "unknown network Sequential(" and the module's repr over
    several lines; it is one line saying how to name the model."""
    torch = pytest.importorskip("torch")
    for network in (torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU()), 5, None):
        with pytest.raises(EngineError, match="plan_memory needs a network name or a Network") as info:
            plan_memory(network)
        assert "package.module:callable" in str(info.value) and "\n" not in str(info.value)
