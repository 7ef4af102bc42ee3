"""The precision record (engine.precision) and the places that read it.

Each record's library names must name real types of the right size, the rules it carries (deselected notes,
default layout, itemsize) must be what profiles, the memory planner and the CLI apply, and NaN poisoning by
all-ones bytes must hold for every storage type. Profiles here are SYNTHETIC.
"""

from __future__ import annotations

import argparse
import json

import numpy as np
import pytest

from engine.cli import main
from engine.commands import profile as profile_command
from engine.commands import torch_plan
from engine.errors import EngineError
from engine.kernels import KernelKind, KernelSignature
from engine.memory.iteration import plan_memory
from engine.precision import DEFAULT_PRECISION, LAYOUTS, PRECISIONS, Precision, get_precision
from engine.profile import Profile, resolve_profile
from engine.testing.synthetic import synthetic_profile
from engine.zoo import get_network


@pytest.mark.parametrize("name", list(PRECISIONS))
def test_library_names_are_real_types_of_the_itemsize(name):
    p = PRECISIONS[name]
    assert p.name == name and p.layout in LAYOUTS and p.tolerance > 0 and p.label
    assert np.dtype(p.array_dtype).itemsize == p.itemsize
    torch = pytest.importorskip("torch")
    assert getattr(torch, p.torch_dtype).itemsize == p.itemsize
    assert p.reduced == (p.itemsize < 4)


def test_a_record_with_an_unknown_layout_is_refused():
    with pytest.raises(ValueError, match="layout 'NCWH'"):
        Precision("fp8", "x", 1, "float8_e4m3fn", "uint8", "FP8_E4M3", "NCWH", (), 0.1, True)


def test_unknown_precision_is_one_line_naming_the_choices():
    assert get_precision("fp16").itemsize == 2
    with pytest.raises(EngineError, match="unknown precision 'fp64'; expected one of tf32, fp32, fp16, bf16"):
        get_precision("fp64")
    with pytest.raises(ValueError, match="unknown precision"):
        KernelSignature(KernelKind.FORWARD, 1, 3, 8, 8, 4, 3, 3, precision="fp64")


@pytest.mark.parametrize("name", list(PRECISIONS))
def test_signature_itemsize_is_the_records(name):
    sig = KernelSignature(KernelKind.FORWARD, 2, 3, 8, 8, 4, 3, 3, precision=name)
    assert sig.itemsize == PRECISIONS[name].itemsize


@pytest.mark.parametrize("name", list(PRECISIONS))
def test_all_ones_bytes_are_nan_in_every_storage(name):
    """engine.gpu.verify poisons outputs with 0xFF bytes; verification decodes them as the executor does
    (bf16: the top half of a float32) and must find NaN."""
    raw = np.full(8, 0xFF, dtype=np.uint8)
    stored = raw.view(PRECISIONS[name].array_dtype)
    decoded = (
        (stored.astype(np.uint32) << 16).view(np.float32) if stored.dtype == np.uint16 else stored.astype(np.float32)
    )
    assert np.isnan(decoded).all()


@pytest.mark.parametrize("name", list(PRECISIONS))
def test_a_profile_drops_the_plans_its_precision_deselects(name):
    """Every numerical note a precision deselects removes a plan of that precision, and only of it."""
    p = synthetic_profile("alexnet", 8, "undivided", name)
    t = p.table.copy()
    notes = ["TENSOR_CORE", "DOWN_CONVERT_INPUTS", "FFT|DOWN_CONVERT_INPUTS", "TENSOR_CORE|NONDETERMINISTIC"]
    t["numerical_notes"] = [notes[i % len(notes)] for i in range(len(t))]
    kept = Profile(t, p.provenance, p.networks).table
    dropped = set(PRECISIONS[name].deselect_notes)
    expect = t[[not dropped & set(n.split("|")) for n in t.numerical_notes]]
    assert len(kept) == len(expect) and list(kept.index) == list(expect.index)
    assert (len(kept) < len(t)) == bool(dropped)


def test_the_default_precision_is_tf32():
    """cuDNN's and PyTorch's default: fp32 data on TF32 tensor cores."""
    assert DEFAULT_PRECISION == "tf32" and PRECISIONS["tf32"].allow_tf32 and not PRECISIONS["fp32"].allow_tf32
    assert KernelSignature(KernelKind.FORWARD, 1, 3, 8, 8, 4, 3, 3).precision == DEFAULT_PRECISION


@pytest.mark.parametrize("module", [profile_command, torch_plan])
def test_cli_offers_every_precision_with_its_default_layout(module):
    parser = argparse.ArgumentParser()
    module.add_arguments(parser)
    for name, p in PRECISIONS.items():
        args = parser.parse_args(["--network", "alexnet", "--dtype", name])
        assert profile_command.layout_of(args) == p.layout
        args = parser.parse_args(["--network", "alexnet", "--dtype", name, "--layout", "NCHW"])
        assert profile_command.layout_of(args) == "NCHW"
    assert parser.parse_args(["--network", "alexnet"]).precision == DEFAULT_PRECISION
    with pytest.raises(SystemExit):
        parser.parse_args(["--network", "alexnet", "--dtype", "fp64"])


def test_memory_planner_takes_itemsize_and_layout_from_the_precision():
    """Tensors are sized by the precision's itemsize, and a profile's kernels are looked up in the precision's
    default layout unless another is given."""
    net = get_network("alexnet", 64)
    for name, p in PRECISIONS.items():
        given = plan_memory(net, "liveness", precision=DEFAULT_PRECISION, itemsize=p.itemsize).summary
        got = plan_memory(net, "liveness", precision=name).summary
        assert (got["peak"], got["persistent"]) == (given["peak"], given["persistent"])
    assert (
        plan_memory(net, "liveness", precision="fp16").summary["peak"]
        < plan_memory(net, "liveness", precision="fp32").summary["peak"]
    )
    prof = synthetic_profile("alexnet", 64, "powerOfTwo", "fp16")  # NHWC, fp16's default layout
    assert prof.networks[0]["layout"] == "NHWC"
    res = plan_memory(net, "liveness", profile=prof, precision="fp16")
    assert res.kernels.signature.str.contains("/fp16/NHWC/").all() and len(res.kernels)
    with pytest.raises(EngineError, match="fp16/NCHW"):
        plan_memory(net, "liveness", profile=prof, precision="fp16", layout="NCHW")
    with pytest.raises(EngineError, match="unknown layout"):
        plan_memory(net, "liveness", precision="fp16", layout="CHWN")


def test_memory_command_plans_at_the_profiles_precision(capsys):
    """An fp16 NHWC profile is read at fp16/NHWC (it holds no tf32 kernels), with 2-byte tensors: the same
    peak as plan_memory at that precision."""
    name = "h100-alexnet-b256-fp16-nhwc-powerOfTwo"
    assert (
        main(["memory", "--network", "alexnet", "--batch", "256", "--policy", "liveness", "--profile", name, "--json"])
        == 0
    )
    got = json.loads(capsys.readouterr().out)["summary"]["peak"]
    want = plan_memory(
        "alexnet", "liveness", batch=256, profile=Profile.load(resolve_profile(name)), precision="fp16"
    ).summary["peak"]
    assert got == want < plan_memory("alexnet", "liveness", batch=256, precision="tf32").summary["peak"]


def test_dashboard_memory_tab_reads_an_fp16_nhwc_profile():
    """The memory tab plans at the scope's precision and layout (it asked for fp16/NCHW kernels before)."""
    from dashboard.memory import memory_frames
    from dashboard.scopes import Scope

    prof = Profile.load(resolve_profile("h100-alexnet-b256-fp16-nhwc-powerOfTwo"))
    frames = memory_frames(prof, Scope("alexnet", 256, "fp16", "NHWC"), "vdnn-all-p", 8 << 30)
    assert len(frames["kernels"]) and frames["kernels"].signature.str.contains("/fp16/NHWC/").all()
