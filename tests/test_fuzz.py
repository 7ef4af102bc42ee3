"""Fuzz: malformed plans, profiles, specs and command lines, each through the real CLI entry point.

Every input here is malformed by construction (each mutation breaks a rule of the format: a wrong type, a
missing or foreign field, a kernel list that is not the network's, a number out of range, corrupt bytes, a
bomb). Every one must end in exactly one ``error:`` line and exit status 2: no traceback, no silent
acceptance, and none may take 10 s. The corpus (engine/testing/fuzz.py) is generated from a seed, so a failure
names an input that reproduces. The plans and the profile slice come from the bundled H100 measurements.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import random
import signal
import time
from pathlib import Path

import pytest
import yaml

from engine.cli import main
from engine.profile import Profile, bundled_profiles
from engine.spec import to_spec
from engine.testing.fuzz import (
    SEED,
    YAML_BOMBS,
    argument_cases,
    byte_cases,
    plan_mutations,
    profile_mutations,
    spec_mutations,
)
from engine.zoo import get_network

HANG_S = 10
PROFILE = "h100-alexnet-b256-tf32-nchw-powerOfTwo"
pytestmark = [
    pytest.mark.slow,  # hundreds of inputs a test
    pytest.mark.skipif(PROFILE not in bundled_profiles(), reason="needs the bundled AlexNet profile"),
]


class Hung(Exception):
    pass


def _alarm(signum, frame):
    raise Hung(f"no answer within {HANG_S} s")


def run_cli(argv: list[str]) -> tuple[int, str, float]:
    """``python -m engine ARGV`` in this process: (exit status, stderr, seconds); a hang raises Hung."""
    err, out = io.StringIO(), io.StringIO()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_S)
    t0 = time.perf_counter()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(out):
            try:
                rc = main(argv)
            except SystemExit as exit_:  # argparse
                rc = exit_.code
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
    return rc, err.getvalue(), time.perf_counter() - t0


def check_rejected(label: str, argv: list[str], stats: dict) -> None:
    try:
        rc, err, dt = run_cli(argv)
    except Hung:
        pytest.fail(f"{label}: hung past {HANG_S} s")
    except Exception as exc:  # noqa: BLE001 - a traceback is exactly what this test exists to catch
        pytest.fail(f"{label}: raised {type(exc).__name__}: {str(exc)[:300]}")
    lines = err.strip().splitlines()
    assert rc == 2, f"{label}: exit status {rc} (accepted?), stderr {err[:300]!r}"
    assert len(lines) == 1 and lines[0].startswith("error: ") and len(lines[0]) < 1000, f"{label}: {err[:500]!r}"
    stats["n"] += 1
    stats["slowest"] = max(stats["slowest"], (dt, label))


# ----------------------------------------------------------------------------------------- bases


@pytest.fixture(scope="module")
def bases(tmp_path_factory):
    """A WR and a WD plan of AlexNet b256 made from the bundled profile, a 2-kernel slice of that profile,
    and AlexNet's spec."""
    from engine.planner import make_plan

    profile = Profile.load(bundled_profiles()[PROFILE])
    net = get_network("alexnet", 256)
    wr = make_plan(profile, net, mode="wr", budget="64MiB", policy="powerOfTwo").to_dict()
    wd = make_plan(profile, net, mode="wd", budget="120MiB", policy="powerOfTwo").to_dict()
    assert any(len(k["micro"]) > 1 for k in wr["kernels"])  # some kernel is divided: `undivided` cannot hold
    keep = profile.table.signature.unique()[:2]
    doc = Profile(profile.table[profile.table.signature.isin(keep)], profile.provenance, profile.networks).to_document()
    return {"wr": wr, "wd": wd, "profile": doc, "spec": to_spec(net), "dir": tmp_path_factory.mktemp("fuzz")}


def _write(folder: Path, name: str, data: bytes) -> Path:
    path = folder / name
    path.write_bytes(data)
    return path


def test_malformed_plans(bases, record_property):
    rng = random.Random(SEED)
    stats = {"n": 0, "slowest": (0.0, "")}
    folder = bases["dir"]
    for mode in ("wr", "wd"):
        doc = bases[mode]
        assert run_cli(["plan", "--show", str(_write(folder, "good.json", json.dumps(doc).encode()))])[0] == 0
        for i, (label, bad) in enumerate(plan_mutations(doc, rng)):
            path = _write(folder, f"{mode}{i}.json", json.dumps(bad).encode())
            check_rejected(f"{mode} plan: {label}", ["plan", "--show", str(path)], stats)
        for i, (label, data, suffix) in enumerate(byte_cases(json.dumps(doc, indent=1) + "\n", rng)):
            path = _write(folder, f"{mode}-bytes{i}{suffix}", data)
            check_rejected(f"{mode} plan file: {label}", ["plan", "--show", str(path)], stats)
    for label, target in (("a folder", folder), ("missing", folder / "missing.json"), ("/dev/zero", "/dev/zero")):
        check_rejected(f"plan {label}", ["plan", "--show", str(target)], stats)
        check_rejected(f"verify {label}", ["verify", str(target)], stats)
    _report(record_property, "plans", stats)


def test_malformed_profiles(bases, record_property):
    rng = random.Random(SEED)
    stats = {"n": 0, "slowest": (0.0, "")}
    folder, doc = bases["dir"], bases["profile"]
    assert run_cli(["profiles", str(_write(folder, "good.profile.json", json.dumps(doc).encode()))])[0] == 0
    for i, (label, bad) in enumerate(profile_mutations(doc, rng)):
        path = _write(folder, f"p{i}.profile.json", json.dumps(bad).encode())
        check_rejected(f"profile: {label}", ["profiles", str(path)], stats)
    for i, (label, data, suffix) in enumerate(byte_cases(json.dumps(doc), rng)):
        path = _write(folder, f"p-bytes{i}{suffix}", data)
        check_rejected(f"profile file: {label}", ["profiles", str(path)], stats)
        if i % 4 == 0:  # the same files through plan and memory
            check_rejected(
                f"plan --profile: {label}",
                ["plan", "--profile", str(path), "--network", "alexnet", "--mode", "wr", "--budget", "64MiB"],
                stats,
            )
            check_rejected(
                f"memory --profile: {label}", ["memory", "--network", "alexnet", "--profile", str(path)], stats
            )
    _report(record_property, "profiles", stats)


def test_malformed_specs(bases, record_property):
    rng = random.Random(SEED)
    stats = {"n": 0, "slowest": (0.0, "")}
    folder, doc = bases["dir"], bases["spec"]
    good = _write(folder, "good.yaml", yaml.safe_dump(doc).encode())
    assert run_cli(["networks", "--network", str(good)])[0] == 0
    for i, (label, bad) in enumerate(spec_mutations(doc, rng)):
        path = _write(folder, f"s{i}.json", json.dumps(bad).encode())
        check_rejected(f"spec: {label}", ["networks", "--network", str(path)], stats)
        if i % 3 == 0:
            path = _write(folder, f"s{i}.yaml", yaml.safe_dump(bad).encode())
            check_rejected(f"spec (YAML): {label}", ["networks", "--network", str(path)], stats)
    for i, (label, text) in enumerate(YAML_BOMBS):
        path = _write(folder, f"bomb{i}.yaml", text.encode())
        check_rejected(f"spec: {label}", ["networks", "--network", str(path)], stats)
        check_rejected(f"memory spec: {label}", ["memory", "--network", str(path)], stats)
    for i, (label, data, suffix) in enumerate(byte_cases(json.dumps(doc), rng)):
        if suffix == ".json":
            path = _write(folder, f"s-bytes{i}.json", data)
            check_rejected(f"spec file: {label}", ["networks", "--network", str(path)], stats)
    _report(record_property, "specs", stats)


def test_malformed_command_lines(record_property):
    stats = {"n": 0, "slowest": (0.0, "")}
    path = str(bundled_profiles()[PROFILE])
    for argv in argument_cases(path):
        check_rejected(" ".join(a[:40] for a in argv), argv, stats)
    _report(record_property, "command lines", stats)


def _report(record_property, what: str, stats: dict) -> None:
    dt, label = stats["slowest"]
    record_property(f"fuzz_{what.replace(' ', '_')}", stats["n"])
    print(
        f"\nfuzz: {stats['n']} malformed {what}, each one error line and exit status 2; slowest {dt:.2f} s "
        f"({label[:80]})"
    )


def test_issue_25_inputs(bases, record_property):
    """The inputs issue 25 found accepted: physically impossible time-model numbers (which printed
    ``iteration inf ms ... stalls nan`` and exit 0), a negative optimizer state, empty output names, a plan
    whose unlimited optimum is slower than itself or whose ``synthetic`` is a string, specs with a pool padded
    past half its window or an infinite LRN alpha."""
    stats = {"n": 0, "slowest": (0.0, "")}
    folder = bases["dir"]
    memory = ["memory", "--network", "alexnet", "--batch", "256", "--policy", "vdnn-all-p"]
    head = {"format": "ucudnn-explorer-time-params", "version": 1}
    for label, body in (
        ("copy rates of 1e-300 B/s", {"copy": {"h2d": 1e-300, "d2h": 1e-300}}),
        ("a copy rate of 1e300 B/s", {"copy": {"h2d": 1e300}}),
        ("an HBM rate of 1e-300 B/s", {"hbm": {"rate": 1e-300}}),
        ("an FC rate of 1e308 flop/s", {"fc": {"flops": 1e308}}),
        ("a layer of 1e308 ms", {"layers": {"alexnet/b256": {"relu1": {"F": 1e308, "B": 1.0}}}}),
    ):
        path = _write(folder, "tp.json", json.dumps({**head, **body}).encode())
        check_rejected(f"--time-params with {label}", memory + ["--time-params", str(path)], stats)
    for value in ("1B", "1e-300GB", "1e30GB"):
        check_rejected(f"--bandwidth {value}", memory + ["--bandwidth", value], stats)
    for value in ("-5", "17", "-1"):
        check_rejected(f"--optimizer-copies {value}", memory + ["--optimizer-copies", value], stats)
    profile = str(bundled_profiles()[PROFILE])
    plan = ["plan", "--profile", profile, "--network", "alexnet", "--mode", "wr", "--budget", "64MiB"]
    for label, argv in (
        ("--snapshot ''", memory + ["--snapshot", ""]),
        ("--json ''", memory + ["--json", ""]),
        ("--time-params ''", memory + ["--time-params", ""]),
        ("plan -o ''", plan + ["-o", ""]),
        ("plan --show ''", ["plan", "--show", ""]),
        ("front -o ''", ["front"] + plan[1:5] + ["-o", ""]),
    ):
        check_rejected(label, argv, stats)
    for mode in ("wr", "wd"):
        slow = json.loads(json.dumps(bases[mode]))
        slow["totals"]["unlimited_time_ms"] = slow["totals"]["time_ms"] * 1.5
        fake = json.loads(json.dumps(bases[mode]))
        fake["provenance"]["profile"]["synthetic"] = "no"
        for label, doc in (("unlimited optimum slower than the plan", slow), ("synthetic: 'no'", fake)):
            path = _write(folder, f"{mode}-gap.json", json.dumps(doc).encode())
            check_rejected(f"{mode} plan: {label}", ["plan", "--show", str(path)], stats)
    spec = {"name": "gaps", "input": [3, 32, 32], "layers": [{"op": "conv", "k": 8, "r": 3}]}
    for label, layer in (
        ("pool pad 5 at size 2", {"op": "pool", "size": 2, "pad": 5}),
        ("pool pad 2 at size [2, 8]", {"op": "pool", "size": [2, 8], "pad": 2}),
        ("global pool with pad 1", {"op": "pool", "size": "global", "mode": "avg", "pad": 1}),
        ("LRN alpha Infinity", {"op": "lrn", "alpha": math.inf}),
        ("BN eps Infinity", {"op": "bn", "eps": math.inf}),
    ):
        doc = {**spec, "layers": spec["layers"] + [layer]}
        for suffix, text in ((".json", json.dumps(doc)), (".yaml", yaml.safe_dump(doc))):
            path = _write(folder, f"gap{suffix}", text.encode())
            check_rejected(f"spec{suffix}: {label}", ["networks", "--network", str(path)], stats)
    assert stats["n"] == 5 + 3 + 3 + 6 + 4 + 10
    _report(record_property, "issue 25 inputs", stats)
