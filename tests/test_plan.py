"""The plan format: round trips, and one PlanFormatError naming the field for every class of defect."""

from __future__ import annotations

import copy
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from engine.errors import PlanFormatError, ProfileFormatError
from engine.kernels import KernelKind, KernelSignature
from engine.network import NetBuilder
from engine.profile import Profile, resolve_profile
from engine.plan import (
    ALIGNMENT,
    FORMAT,
    VERSION,
    Plan,
    PlanKernel,
    PlanMicro,
    PlanTotals,
    _check_segments,
    align,
    load_plan,
)

B = 8
KIB = 1024
TC, GEMM = "eng7_k2=1_k13=0", "eng1"
NAMED = {TC: (7, {"2": 1, "13": 0}), GEMM: (1, {})}


def _sig(kind: KernelKind, c: int) -> str:
    return KernelSignature(kind, B, c, 16, 16, 32, 3, 3, 1, 1).key


def tiny_net():
    """The network of ``tiny_plan``: two 3x3 convolutions on 16x16 feature maps."""
    b = NetBuilder("tiny", B, (3, 16, 16))
    b.conv(32, 3, pad=1, name="conv1")
    b.relu(name="relu1")
    b.conv(32, 3, pad=1, name="conv2")
    return b.build()


def _kernel(layer, kind, c, pieces, und, offset=None) -> PlanKernel:
    """pieces: [(batch, plan, time_ms, workspace)]; engine id and knobs are those the plan name spells."""
    micro = [PlanMicro(b, p, *NAMED[p], t, w) for b, p, t, w in pieces]
    return PlanKernel(
        f"{layer}:{kind.short}",
        layer,
        kind,
        _sig(kind, c),
        micro,
        max(m.workspace for m in micro),
        sum(m.time_ms for m in micro),
        und,
        offset,
    )


def tiny_plan(mode: str) -> Plan:
    """A small hand-made plan (SYNTHETIC numbers) with consistent arithmetic: B=8, powerOfTwo."""
    wd = mode == "wd"
    kernels = [
        _kernel("conv1", KernelKind.FORWARD, 3, [(4, TC, 0.5, 3000), (4, TC, 0.5, 3000)], 1.5),
        _kernel("conv1", KernelKind.BACKWARD_FILTER, 3, [(8, GEMM, 2.0, 0)], 2.0),
        _kernel("conv2", KernelKind.FORWARD, 32, [(4, TC, 0.25, 1000), (2, GEMM, 0.2, 0), (2, GEMM, 0.2, 0)], 1.0),
        _kernel("conv2", KernelKind.BACKWARD_DATA, 32, [(8, GEMM, 0.5, 0)], 0.5),
        _kernel("conv2", KernelKind.BACKWARD_FILTER, 32, [(8, GEMM, 0.5, 0)], 0.5),
    ]
    arena = None
    if wd:
        pos = 0
        for k in kernels:
            k.offset = pos
            pos += align(k.workspace)
        arena = pos
    t = sum(k.time_ms for k in kernels)
    und = sum(k.undivided_time_ms for k in kernels)
    totals = PlanTotals(
        t, sum(k.workspace for k in kernels), max(k.workspace for k in kernels), und, 3.0, 10 * KIB * KIB, und / t
    )
    prov = {
        "profile": {"synthetic": True, "gpu": "SYNTHETIC"},
        "profile_source": "x.profile.json.gz",
        "created": "2026-01-01T00:00:00+00:00",
        "engine_version": "0.1.0",
        "command": "test",
    }
    solver = {"name": "highs", "status": "optimal", "n_variables": 9} if wd else None
    return Plan(mode, "powerOfTwo", 8 * KIB, "tiny", B, "tf32", "NCHW", kernels, totals, prov, arena, solver, [])


@pytest.mark.parametrize("mode", ["wr", "wd"])
def test_round_trip_dict_json_and_files(mode, tmp_path):
    plan = tiny_plan(mode)
    doc = plan.to_dict()
    assert doc["format"] == FORMAT and doc["version"] == VERSION
    again = Plan.from_dict(json.loads(plan.to_json()))
    assert again == plan
    for name in ("p.json", "p.json.gz"):
        path = plan.save(tmp_path / name)
        assert load_plan(path, tiny_net()) == plan
    assert ("offset" in doc["kernels"][0]) == (mode == "wd")
    assert ("arena_size" in doc) == (mode == "wd")


def test_kernel_configuration_view():
    k = tiny_plan("wr").kernels[2]
    assert k.configuration.batch == B
    assert k.division == "4+2+2"
    assert k.configuration.workspace == k.workspace == 1000


def _set(doc, path, value):
    """Set doc[path] where path is like ``kernels.0.micro.1.batch``; value ``DELETE`` removes it."""
    *parents, last = path.split(".")
    obj = doc
    for p in parents:
        obj = obj[int(p)] if isinstance(obj, list) else obj[p]
    key = int(last) if isinstance(obj, list) else last
    if value is DELETE:
        del obj[key]
    else:
        obj[key] = value


DELETE = object()

# (mode, path to change, new value, text the error must contain)
DEFECTS = [
    ("wr", "format", "ucudnn-explorer-profile", "field format"),
    ("wr", "version", 2, "field version is 2"),
    ("wr", "mode", DELETE, "field mode is missing"),
    ("wr", "mode", "wx", "field mode"),
    ("wd", "mode", "WD", "field mode must be one of ('wr', 'wd'), got 'WD'"),  # not "arena_size is not part of"
    ("wr", "extra", 1, "field extra is not part of the plan format"),
    ("wr", "budget", "64MiB", "field budget must be an integer"),
    ("wr", "budget", -1, "field budget must be >= 0"),
    ("wr", "budget", True, "field budget must be an integer"),
    ("wr", "network", "tiny", "field network must be an object"),
    ("wr", "network.batch", 0, "field network.batch"),
    ("wr", "network.name", "", "field network.name"),
    ("wr", "policy", "most", "field policy"),
    ("wr", "precision", "fp64", "field precision"),
    ("wr", "precision", [], "field precision must be one of"),  # was a TypeError (unhashable)
    ("wr", "precision", {}, "field precision must be one of"),
    ("wr", "layout", [], "field layout must be one of"),
    ("wr", "layout", "CHWN", "field layout"),
    ("wr", "kernels", [], "field kernels must be a non-empty list"),
    ("wr", "kernels.1.id", "conv1:F", "field kernels[1].id"),
    ("wr", "kernels.0.layer", "conv9", "field kernels[0].id is 'conv1:F' but layer and kind make conv9:F"),
    ("wr", "kernels.0.kind", "Sideways", "field kernels[0].kind"),
    ("wr", "kernels.0.signature", "Forward/tf32/garbage", "field kernels[0].signature is not a kernel signature"),
    ("wr", "kernels.0.signature", _sig(KernelKind.BACKWARD_DATA, 3), "field kernels[0].signature is a BackwardData"),
    (
        "wr",
        "kernels.0.signature",
        _sig(KernelKind.FORWARD, 3).replace("tf32", "fp16"),
        "field kernels[0].signature is fp16/NCHW",
    ),
    ("wr", "kernels.0.micro", [], "field kernels[0].micro must be a non-empty list"),
    ("wr", "kernels.0.micro.0.batch", -4, "field kernels[0].micro[0].batch must be >= 1"),
    ("wr", "kernels.0.micro.0.batch", 3, "field kernels[0].micro[0].batch is 3, which the plan's policy"),
    ("wr", "kernels.0.micro.0.batch", 2, "field kernels[0].micro has micro-batch sizes 2+4 = 6, not the mini-batch 8"),
    ("wr", "kernels.0.micro.1", DELETE, "field kernels[0].micro has micro-batch sizes 4 = 4"),
    ("wr", "kernels.0.micro.0.plan", "", "field kernels[0].micro[0].plan"),
    ("wr", "kernels.0.micro.0.engine_id", -1, "field kernels[0].micro[0].engine_id"),
    ("wr", "kernels.0.micro.0.engine_id", DELETE, "field kernels[0].micro[0].engine_id is missing"),
    ("wr", "kernels.0.micro.0.knobs", "{}", "field kernels[0].micro[0].knobs must be an object"),
    ("wr", "kernels.0.micro.0.knobs", {"tile": 1}, "field kernels[0].micro[0].knobs has key 'tile'"),
    ("wr", "kernels.0.micro.0.knobs", {"2": "one"}, "field kernels[0].micro[0].knobs.2"),
    ("wr", "kernels.0.micro.0.time_ms", 0, "field kernels[0].micro[0].time_ms must be positive"),
    ("wr", "kernels.0.micro.0.time_ms", "fast", "field kernels[0].micro[0].time_ms must be a finite number"),
    ("wr", "kernels.0.micro.0.workspace", 1.5, "field kernels[0].micro[0].workspace must be an integer"),
    ("wr", "kernels.0.micro.0.algo", 1, "field kernels[0].micro[0].algo is not part"),
    ("wr", "kernels.0.workspace", 2999, "field kernels[0].workspace is 2999 but its largest"),
    ("wr", "kernels.0.time_ms", 1.1, "field kernels[0].time_ms is 1.1 but its micro-configurations sum to 1.0"),
    ("wr", "kernels.0.undivided_time_ms", -1.0, "field kernels[0].undivided_time_ms"),
    ("wr", "kernels.0.offset", 0, "field kernels[0].offset is not part"),
    ("wr", "budget", 2048, "field kernels[0].workspace is 3000 bytes, above the per-kernel budget 2048"),
    ("wr", "totals.time_ms", 5.0, "field totals.time_ms"),
    ("wr", "totals.workspace", 1, "field totals.workspace"),
    ("wr", "totals.max_workspace", 1, "field totals.max_workspace"),
    ("wr", "totals.undivided_time_ms", 4.0, "field totals.undivided_time_ms is 4.0 but the kernels sum to 5.5"),
    ("wr", "totals.speedup", None, "field totals.speedup must be null exactly when"),
    ("wr", "totals.speedup", 2.0, "field totals.speedup is 2.0"),
    ("wr", "totals.unlimited_time_ms", None, "field totals.unlimited_time_ms"),
    ("wr", "kernels.1.undivided_time_ms", None, "field totals.undivided_time_ms is a number but kernels[1]"),
    ("wr", "notes", "none", "field notes"),
    ("wr", "provenance.created", DELETE, "field provenance.created is missing"),
    ("wr", "provenance.profile", "x", "field provenance.profile"),
    ("wr", "provenance.command", None, "field provenance.command"),
    ("wd", "arena_size", DELETE, "field arena_size is missing"),
    ("wd", "solver", DELETE, "field solver is missing"),
    ("wd", "solver.status", "", "field solver.status"),
    ("wd", "kernels.1.offset", DELETE, "field kernels[1].offset is missing"),
    ("wd", "kernels.2.offset", 3100, "field kernels[2].offset is 3100, not a multiple of 256"),
    (
        "wd",
        "kernels.2.offset",
        2816,
        "field kernels[2].offset segment [2816, 3816) overlaps kernels[0]'s segment [0, 3000)",
    ),
    ("wd", "kernels.2.offset", 4096, "field kernels[2].offset puts segment [4096, 5096) past the arena size"),
    ("wd", "arena_size", 16 * KIB, "field arena_size is 16384 bytes, above the budget 8192"),
]


@pytest.mark.parametrize(
    "mode,path,value,message",
    DEFECTS,
    ids=[f"{d[1]}={'DELETE' if d[2] is DELETE else repr(d[2])}"[:60] for d in DEFECTS],
)
def test_each_defect_names_its_field(mode, path, value, message):
    doc = copy.deepcopy(tiny_plan(mode).to_dict())
    _set(doc, path, value)
    with pytest.raises(PlanFormatError) as info:
        Plan.from_dict(doc)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_zero_workspace_segments_may_share_an_offset():
    plan = tiny_plan("wd")
    doc = plan.to_dict()
    doc["kernels"][1]["offset"] = 0  # conv1:BF needs no workspace: an empty segment overlaps nothing
    assert Plan.from_dict(doc).kernels[1].offset == 0


@pytest.mark.parametrize("doc", [[], "plan", None, {"format": "ucudnn-explorer-plan"}])
def test_foreign_documents(doc):
    with pytest.raises(PlanFormatError, match="field (format|version)"):
        Plan.from_dict(doc)


def test_load_plan_file_errors(tmp_path):
    with pytest.raises(PlanFormatError, match="does not exist"):
        load_plan(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(PlanFormatError, match="bad.json' is not valid JSON"):
        load_plan(bad)
    doc = tiny_plan("wr").to_dict()
    doc["kernels"][0]["micro"][0]["batch"] = 2
    wrong = tmp_path / "wrong.json"
    wrong.write_text(json.dumps(doc))
    with pytest.raises(PlanFormatError, match=r"wrong.json': field kernels\[0\].micro has"):
        load_plan(wrong)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 40), st.integers(0, 3 * ALIGNMENT)), min_size=1, max_size=6))
def test_segment_check_equals_pairwise_intersection(segments):
    """_check_segments raises iff two non-empty segments [o, o+w) intersect (offsets on the 256 grid)."""
    kernels = [
        _kernel(f"c{i}", KernelKind.FORWARD, 3, [(B, GEMM, 1.0, w)], 1.0, slot * ALIGNMENT)
        for i, (slot, w) in enumerate(segments)
    ]
    arena = max(k.offset + k.workspace for k in kernels)
    spans = [(k.offset, k.offset + k.workspace) for k in kernels if k.workspace]
    overlap = any(a0 < b1 and b0 < a1 for i, (a0, a1) in enumerate(spans) for (b0, b1) in spans[i + 1 :])
    if overlap:
        with pytest.raises(PlanFormatError, match="overlaps"):
            _check_segments(kernels, arena)
    else:
        _check_segments(kernels, arena)


@pytest.mark.parametrize("version", [True, 1.0, "1", [1]])
def test_version_is_an_integer(version):
    doc = tiny_plan("wr").to_dict()
    doc["version"] = version
    with pytest.raises(PlanFormatError, match=r"field version is .*; this engine reads version 1 \(an integer\)"):
        Plan.from_dict(doc)


@pytest.fixture(scope="module")
def alexnet_plan(tmp_path_factory):
    """A WR plan of AlexNet b32 from a SYNTHETIC profile, as a document."""
    from engine.planner import make_plan
    from engine.zoo import get_network
    from engine.testing.synthetic import synthetic_profile

    return make_plan(synthetic_profile("alexnet", 32), get_network("alexnet", 32), mode="wr", budget="4MiB").to_dict()


def _retotal(doc):
    """Totals made consistent with the kernels again, so that only the change under test is wrong."""
    ks, t = doc["kernels"], doc["totals"]
    t.update(
        time_ms=sum(k["time_ms"] for k in ks),
        workspace=sum(k["workspace"] for k in ks),
        max_workspace=max(k["workspace"] for k in ks),
    )
    if t["undivided_time_ms"] is not None:
        t.update(undivided_time_ms=sum(k["undivided_time_ms"] for k in ks))
        t.update(speedup=t["undivided_time_ms"] / t["time_ms"])


def _first_tc(doc):
    return next(m for k in doc["kernels"] for m in k["micro"] if m["knobs"])


@pytest.mark.parametrize(
    "change,message",
    [
        (lambda d: d.update(kernels=d["kernels"][:1]), "field kernels lists 1 kernels but alexnet has 14"),
        (
            lambda d: d["kernels"].__setitem__(slice(0, 2), d["kernels"][1::-1]),
            "field kernels[0].id is 'conv1:BF' but kernel 0 of alexnet in execution order is 'conv1:F'",
        ),
        (lambda d: d["network"].update(name="vgg16"), "field kernels lists 14 kernels but vgg16 has 38"),
        (lambda d: d["network"].update(name="lenet"), "field network names 'lenet', which cannot be built here"),
        (lambda d: _first_tc(d).update(engine_id=_first_tc(d)["engine_id"] + 1), "but the plan name eng"),
        (lambda d: _first_tc(d)["knobs"].update({"2": 99}), "knobs are {'2': 99} but the plan name"),
        (
            lambda d: d["kernels"][0].update(workspace=2**64 + 1),
            "field kernels[0].workspace must be <= 9223372036854775807",
        ),
        (
            lambda d: d.update(policy="all") or d["network"].update(batch=10**9),
            "field policy is not a batch-size policy for mini-batch 1000000000",
        ),
    ],
)
def test_plan_checked_against_its_network(alexnet_plan, tmp_path, change, message):
    doc = copy.deepcopy(alexnet_plan)
    path = tmp_path / "p.json"
    path.write_text(json.dumps(doc))
    assert load_plan(path).network == "alexnet"
    change(doc)
    _retotal(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(PlanFormatError) as info:
        load_plan(path)
    assert message in str(info.value) and "\n" not in str(info.value)


def test_verify_checks_the_plan_before_the_gpu(alexnet_plan, tmp_path, capsys):
    from engine.cli import main
    from engine.gpu import available

    bad = copy.deepcopy(alexnet_plan)
    bad["kernels"] = bad["kernels"][:1]
    _retotal(bad)
    path = tmp_path / "bad.json"
    path.write_text(json.dumps(bad))
    assert main(["verify", str(path)]) == 2
    assert "field kernels lists 1 kernels but alexnet has 14" in capsys.readouterr().err
    if available()[0]:
        pytest.skip("a GPU is here: a valid plan would be verified, not refused")
    path.write_text(json.dumps(alexnet_plan))
    assert main(["verify", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: cannot verify {path}: ") and err.endswith("(the plan itself is valid)")


@pytest.mark.parametrize("path", [5, None, b"plan.json", ["plan.json"]])
def test_a_plan_or_profile_path_that_is_no_path_is_one_line(path):
    with pytest.raises(PlanFormatError, match="is not a path: give a file's path as a str or pathlib.Path"):
        load_plan(path)
    with pytest.raises(ProfileFormatError, match="is not a path"):
        Profile.load(path)
    with pytest.raises(ProfileFormatError, match="a profile is a bundled profile's name or a file's path"):
        resolve_profile(path)
