"""Profile validation by meaning: every value the optimizers read is checked, never coerced (SYNTHETIC rows)."""

from __future__ import annotations

import json

import pytest

from engine.errors import EngineError, ProfileFormatError
from engine.kernels import KernelKind, KernelSignature
from engine.profile import COLUMNS, Profile
from engine.zoo import get_network
from engine.testing.synthetic import TC, synthetic_rows

SIG = KernelSignature(KernelKind.FORWARD, 8, 3, 8, 8, 4, 3, 3, 1, 1)
PROV = {"synthetic": True, "gpu": "SYNTHETIC"}


def _doc(tmp_path, change) -> str:
    """A profile file of SYNTHETIC rows after ``change(doc)``; returns its path."""
    doc = Profile.from_records(synthetic_rows(SIG, [1, 2, 4, 8]), PROV).to_document()
    change(doc)
    path = tmp_path / "SYNTHETIC.profile.json"
    path.write_text(json.dumps(doc))
    return str(path)


def _row(doc, plan=TC, b=2):
    col = list(COLUMNS)
    return next(r for r in doc["rows"] if r[col.index("plan")] == plan and r[col.index("micro_batch")] == b)


def _set(name, value, plan=TC, b=2):
    return lambda doc: _row(doc, plan, b).__setitem__(list(COLUMNS).index(name), value)


@pytest.mark.parametrize(
    "change,message",
    [
        (_set("micro_batch", 1.5), "column 'micro_batch' must hold integers, got 1.5"),
        (_set("micro_batch", True), "column 'micro_batch' must hold integers, got True"),
        (_set("micro_batch", None), "column 'micro_batch' must hold integers, got None"),
        (_set("workspace", 2**64), "column 'workspace' must hold integers below 2^63, got 18446744073709551616"),
        (_set("time_ms", 1e400), "is not valid JSON: Infinity is not a number JSON allows"),
        (_set("time_ms", -1.0), "is 'ok' but its time_ms is not a positive finite number"),
        (_set("micro_batch", 2.0), "column 'micro_batch' must hold integers, got 2.0"),
        (_set("time_min_ms", 99.0), "is 'ok' but its times are not time_min_ms <= time_ms <= time_max_ms"),
        (_set("time_min_ms", 0.0), "is 'ok' but its time_min_ms or time_max_ms is not a positive finite number"),
        (_set("time_min_ms", -1.0), "is 'ok' but its time_min_ms or time_max_ms is not a positive finite number"),
        (_set("time_ms", "fast"), "column 'time_ms' must hold numbers or null, got 'fast'"),
        (_set("reason", 5), "column 'reason' must hold strings, got 5"),
        (_set("engine_id", 4), "plan 'eng3_k2=3' has engine id 4 and knobs '{\"2\": 3}', but its name says engine 3"),
        (_set("knobs", '{"2.0": 3}'), 'but its name says engine 3 with knobs {"2": 3}'),
        (_set("plan", "fast"), "plan 'fast' is not a cuDNN plan name"),
        (lambda d: d["rows"].append(list(_row(d))), "appears in more than one row"),
        (lambda d: d.update(provenance=["H100"]), "field 'provenance' must be an object, got ['H100']"),
        (lambda d: d["provenance"].update(synthetic="yes"), "field 'provenance.synthetic' must be true or false"),
        (
            lambda d: d.update(networks=[{"name": "alexnet", "batch": 1.5}]),
            "field 'networks[0].batch' must be a positive",
        ),
        (lambda d: d.update(version=True), "field 'version' is True, this engine reads version 1 (an integer)"),
        (lambda d: d.update(version=1.0), "field 'version' is 1.0"),
    ],
)
def test_each_defect_is_named(tmp_path, change, message):
    with pytest.raises(ProfileFormatError) as info:
        Profile.load(_doc(tmp_path, change))
    assert message in str(info.value) and "\n" not in str(info.value)


def test_infinite_times_in_memory():
    """What JSON cannot carry, a table built in memory can: an ok row timed at inf is refused too."""
    rows = synthetic_rows(SIG, [1])
    rows[0]["time_ms"] = rows[0]["time_max_ms"] = float("inf")
    with pytest.raises(ProfileFormatError, match="is 'ok' but its time_ms is not a positive finite number"):
        Profile.from_records(rows, PROV)


def test_duplicate_rows_cannot_mix_two_measurements(tmp_path):
    """Two rows for one (kernel, size, plan) would let a plan step take its time from one and its engine from
    the other: refused even when they differ only in time."""

    def twice(doc):
        r = list(_row(doc))
        r[list(COLUMNS).index("time_ms")] *= 1.01
        doc["rows"].append(r)

    with pytest.raises(ProfileFormatError, match=r"plan 'eng3_k2=3' of Forward/.* at b=2 appears in more than one"):
        Profile.load(_doc(tmp_path, twice))


def test_missing_kernels_are_counted_with_the_command_that_measures_them():
    net = get_network("alexnet", 32)
    first = net.kernels()[0].signature
    profile = Profile.from_records(synthetic_rows(first.with_batch(32), [32]), PROV)
    with pytest.raises(EngineError) as info:
        profile.require_kernels(net, "tf32", "NCHW", "all")
    assert str(info.value) == (
        "profile (in memory) lacks 13 of the 14 convolution kernels of alexnet b32 tf32/NCHW "
        "(first: conv1:BF); measure them on a GPU with: python -m engine profile --network "
        "alexnet --batch 32 --dtype tf32 --layout NCHW --policy all"
    )


def test_the_command_for_a_spec_file_network_names_the_file(tmp_path):
    """A spec's name is its own ("custom"), which `profile --network` does not know: the command names the file."""
    spec = tmp_path / "my net.yml"
    spec.write_text("name: custom\ninput: [3, 32, 32]\nlayers:\n  - {op: conv, k: 8, r: 3}\n")
    net = get_network(str(spec), 4)
    with pytest.raises(EngineError, match="measure them on a GPU with: python -m engine profile --network ") as info:
        Profile.from_records(
            synthetic_rows(get_network("alexnet", 4).kernels()[0].signature, [4]), PROV
        ).require_kernels(net, "tf32", "NCHW")
    assert f"--network '{spec}' --batch 4" in str(info.value)


def test_a_mini_batch_far_beyond_the_measured_sizes_is_refused_before_planning():
    """16 micro-batches of the largest measured size at most: beyond, the optimizers would take minutes."""
    from engine.profile import MAX_PIECES

    net = get_network("alexnet", 8 * MAX_PIECES + 1)
    rows = [r for key in net.unique_kernels() for r in synthetic_rows(KernelSignature.from_key(key), [1, 2, 4, 8])]
    profile = Profile.from_records(rows, PROV)
    profile.require_kernels(get_network("alexnet", 8 * MAX_PIECES), "tf32", "NCHW")
    with pytest.raises(
        EngineError,
        match=r"mini-batch 129 would take more than 16 micro-batches per kernel from "
        r"profile \(in memory\), whose largest measured micro-batch is 8; measure "
        r"larger ones on a GPU with: python -m engine profile --network alexnet "
        r"--batch 129",
    ):
        profile.require_kernels(net, "tf32", "NCHW")
