"""The predicted timeline exported as a PyTorch memory snapshot (engine/memory/snapshot.py)."""

from __future__ import annotations

import base64
import json
import pickle
import re

import pytest

from engine.cli import main
from engine.memory import MEMORY_POLICIES, plan_memory
from engine.memory.snapshot import memory_snapshot, snapshot_bytes, snapshot_path
from engine.testing.synthetic import synthetic_profile


def _replay(snapshot) -> list[int]:
    """Live bytes after every event of the trace, as memory_viz's Active Memory Timeline stacks them."""
    live, out = 0, []
    for e in snapshot["device_traces"][0]:
        live += e["size"] if e["action"] == "alloc" else -e["size"] if e["action"] == "free_completed" else 0
        out.append(live)
    return out


@pytest.mark.slow
@pytest.mark.parametrize("policy", list(MEMORY_POLICIES))
def test_trace_peak_is_the_predicted_peak(policy):
    result = plan_memory("alexnet", policy, batch=16, profile=synthetic_profile("alexnet", 16), capacity=2**33)
    snap = pickle.loads(snapshot_bytes(result))
    live = _replay(snap)
    assert max(live) == result.peak and live[-1] >= 0
    frees = [e for e in snap["device_traces"][0] if e["action"] == "free_completed"]
    allocs = {e["addr"] for e in snap["device_traces"][0] if e["action"] == "alloc"}
    assert all(e["addr"] in allocs for e in frees)
    times = [e["time_us"] for e in snap["device_traces"][0]]
    assert times == sorted(times)


def test_addresses_never_overlap_while_live():
    snap = memory_snapshot(plan_memory("alexnet", "vdnn-all-p", batch=16, profile=synthetic_profile("alexnet", 16)))
    live: dict[int, int] = {}
    for e in snap["device_traces"][0]:
        if e["action"] == "alloc":
            assert all(e["addr"] + e["size"] <= a or a + s <= e["addr"] for a, s in live.items())
            live[e["addr"]] = e["size"]
        elif e["action"] == "free_completed":
            del live[e["addr"]]
    (seg,) = snap["segments"]
    assert sum(b["size"] for b in seg["blocks"]) == seg["total_size"]
    assert seg["allocated_size"] == sum(live.values())  # what stays resident at the end


def test_memory_viz_renders_it():
    mv = pytest.importorskip("torch.cuda._memory_viz")
    result = plan_memory("alexnet", "vdnn-all-p", batch=16, profile=synthetic_profile("alexnet", 16))
    snap = pickle.loads(snapshot_bytes(result))
    html = mv.trace_plot(snap)
    blob = json.loads(re.search(r"const local_files = (\[.*?\])\n", html).group(1))[0]["base64"]
    shown = pickle.loads(base64.b64decode(blob))
    names = {f["name"] for e in shown["device_traces"][0] for f in e["frames"]}
    assert "conv1 workspace [workspace]" in names and any("[activations, offloaded" in n for n in names)
    assert "Device 0" in mv.trace(snap) and "segments: 1" in mv.segsum(snap)
    assert "'Allocator State History'" in mv.segment_plot(snap) and "'Active Memory Timeline'" in html


def test_snapshot_path_per_policy():
    assert snapshot_path("out.pickle", "liveness", False) == "out.pickle"
    assert snapshot_path("d/out.pickle", "vdnn-all-m", True) == "d/out.vdnn-all-m.pickle"
    assert snapshot_path("a.b/out", "liveness", True) == "a.b/out.liveness.pickle"
    assert snapshot_path("out.pkl", "liveness", True) == "out.pkl.liveness.pickle"


@pytest.mark.parametrize("bad", ["/dev/null", "FOLDER", "FOLDER/", "new/"])
def test_several_policies_refuse_a_snapshot_name_that_is_no_file_name(bad, tmp_path, capsys):
    """With several policies each snapshot's name is made from the one given: a device or folder cannot be
    split so (``/dev/null.liveness`` was written as root; a folder got hidden ``.liveness`` files)."""
    (tmp_path / "FOLDER").mkdir()
    path = bad.replace("FOLDER", str(tmp_path / "FOLDER")).replace("new/", str(tmp_path / "new") + "/")
    args = ["memory", "--network", "alexnet", "--batch", "16", "--policy", "liveness,vdnn-all-p", "--snapshot", path]
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "give a file name" in err[0], err
    assert list((tmp_path / "FOLDER").iterdir()) == []


def test_cli_round_trip(tmp_path, capsys):
    path = tmp_path / "out.pickle"
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--batch",
                "16",
                "--policy",
                "sn-recompute",
                "--snapshot",
                str(path),
                "--json",
                str(tmp_path / "m.json"),
            ]
        )
        == 0
    )
    peak = json.loads((tmp_path / "m.json").read_text())["summary"]["peak"]
    assert max(_replay(pickle.loads(path.read_bytes()))) == peak
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--batch",
                "16",
                "--policy",
                "liveness,vdnn-all-m",
                "--snapshot",
                str(path),
            ]
        )
        == 0
    )
    assert (tmp_path / "out.liveness.pickle").exists() and (tmp_path / "out.vdnn-all-m.pickle").exists()


def test_cli_bad_snapshot_path(tmp_path, capsys):
    bad = tmp_path / "missing" / "out.pickle"
    assert main(["memory", "--network", "alexnet", "--batch", "16", "--snapshot", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "memory snapshot" in err[0] and "missing" in err[0]
    assert (
        main(
            [
                "memory",
                "--network",
                "alexnet",
                "--policy",
                "liveness",
                "--capacity",
                "12GiB",
                "--max-batch",
                "--snapshot",
                str(tmp_path / "x.pickle"),
            ]
        )
        == 2
    )
    assert "--snapshot" in capsys.readouterr().err
