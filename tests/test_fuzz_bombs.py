"""Crafted files under 10 MB (a plan whose policy would list a billion micro-batch sizes, gzip bombs, nesting
and YAML alias bombs, the largest tables the limits allow): loading each, accepted or refused, takes under
4 s and 1 GB (64 MiB of profile rows, the most the limits allow, take about 2 s of a 2-core CI machine).
Measured in a fresh process (CPU time, which other work on a shared machine does not inflate as it does wall
time, and peak resident memory, both from resource.getrusage)."""

from __future__ import annotations

import copy
import gzip
import json
import subprocess
import sys
import zlib
from pathlib import Path

import pytest

from engine.fileio import MAX_JSON_BYTES
from engine.profile import COLUMNS, Profile, bundled_profiles
from engine.spec import MAX_LAYERS

ROOT = Path(__file__).resolve().parent.parent
PROFILE = "h100-alexnet-b256-tf32-nchw-powerOfTwo"
TEN_MB = 10 * 1000**2
LIMIT_S, LIMIT_BYTES = 4.0, 1 << 30
pytestmark = pytest.mark.slow  # every bomb in a child process

_CHILD = """
import json, resource, sys, time
sys.path.insert(0, {root!r})
from engine.errors import EngineError
from engine.plan import load_plan
from engine.profile import Profile
from engine.spec import load_spec
LOAD = {{"plan": load_plan, "profile": Profile.load, "spec": load_spec}}
def cpu():
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime
def peak():  # this process's own peak: Linux's ru_maxrss keeps the parent's peak across fork and exec
    try:
        with open("/proc/self/status") as f:
            return next(int(l.split()[1]) for l in f if l.startswith("VmHWM")) * 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
for kind, path in json.loads(sys.argv[1]):
    t0, c0 = time.perf_counter(), cpu()
    try:
        LOAD[kind](path)
        outcome = "accepted"
    except EngineError as err:
        outcome = "error: " + str(err)[:200]
    print(json.dumps({{"outcome": outcome, "seconds": time.perf_counter() - t0, "cpu": cpu() - c0,
                      "peak": peak()}}), flush=True)
"""


def _zeros_gzip(n: int, unit: bytes) -> bytes:
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    return b"".join([*(z.compress(unit * (1 << 16)) for _ in range(n // (len(unit) << 16) + 1)), z.flush()])


@pytest.fixture(scope="module")
def bombs(tmp_path_factory):
    """(kind, name) -> path of every crafted file."""
    from engine.planner import make_plan
    from engine.zoo import get_network

    folder = tmp_path_factory.mktemp("bombs")
    profile = Profile.load(bundled_profiles()[PROFILE])
    plan = make_plan(profile, get_network("alexnet", 256), mode="wr", budget="64MiB").to_dict()
    out = {}

    def put(kind, name, data):
        path = folder / name
        path.write_bytes(data if isinstance(data, bytes) else data.encode())
        assert path.stat().st_size < TEN_MB, name
        out[kind, name] = path

    huge = copy.deepcopy(plan)
    huge.update(policy="all")
    huge["network"]["batch"] = 10**9
    put("plan", "all-policy-batch-1e9.json", json.dumps(huge))
    huge["network"]["batch"] = 1 << 20
    for k in huge["kernels"]:
        k["micro"] = [dict(k["micro"][0], batch=1 << 20)]
    put("plan", "all-policy-batch-2^20.json", json.dumps(huge))
    many = copy.deepcopy(plan)
    many["network"]["batch"] = 1 << 20
    many["policy"] = "all"
    micro = dict(plan["kernels"][0]["micro"][0], batch=1)
    many["kernels"][0]["micro"] = [micro] * (9 * TEN_MB // 10 // len(json.dumps(micro)))
    put("plan", "80k-micro-configurations.json", json.dumps(many))
    wide = copy.deepcopy(plan)
    wide["kernels"] = plan["kernels"] * (9 * TEN_MB // 10 // len(json.dumps(plan["kernels"])))
    put("plan", "kernels-repeated.json", json.dumps(wide))
    put("plan", "gzip-bomb.json.gz", _zeros_gzip(MAX_JSON_BYTES + (1 << 20), b" "))
    put("plan", "nested-plan.json", "[" * (TEN_MB // 2 - 1) + "]" * (TEN_MB // 2 - 1))

    doc = profile.to_document()
    status, b = list(COLUMNS).index("status"), list(COLUMNS).index("micro_batch")
    row = next(r for r in doc["rows"] if r[status] == "ok")
    head = json.dumps(dict(doc, rows=[]))

    def with_rows(n: int) -> str:  # n measurements of one plan at micro-batch sizes 1..n: valid, all distinct
        rows = ",".join(json.dumps(row[:b] + [i] + row[b + 1 :]) for i in range(1, n + 1))
        return head.replace('"rows": []', f'"rows": [{rows}]')

    per_row = len(json.dumps(row)) + 8  # the sizes add digits
    put("profile", "10MB-of-rows.profile.json", with_rows((TEN_MB - len(head) - 1000) // per_row))
    put(
        "profile",
        "rows-up-to-the-limit.profile.json.gz",
        gzip.compress(with_rows((MAX_JSON_BYTES - len(head) - 1000) // (per_row + 2)).encode()),
    )
    put("profile", "gzip-bomb.profile.json.gz", _zeros_gzip(1 << 30, b"[[[["))
    put(
        "profile",
        "nested-provenance.profile.json",
        json.dumps(dict(doc, rows=[])).replace(
            '"provenance": {', '"provenance": {"x": ' + "[" * 400_000 + "]" * 400_000 + ", "
        ),
    )

    knobs = list(COLUMNS).index("knobs")
    deep = row[:knobs] + ["[" * 10_000 + "]" * 10_000] + row[knobs + 1 :]
    put("profile", "nested-knobs.profile.json", head.replace('"rows": []', f'"rows": [{json.dumps(deep)}]'))

    laughs = (
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
        + "layers: *i\n"
    )
    put("spec", "billion-laughs.yaml", laughs)
    layers = [{"op": "conv", "k": 4, "r": 1}, {"op": "relu"}] * (MAX_LAYERS // 2)
    put("spec", "most-layers.json", json.dumps({"input": [4, 8, 8], "layers": layers}))
    put(
        "spec",
        "most-layers.yaml",
        "input: [4, 8, 8]\nlayers:\n" + "- {op: conv, k: 4, r: 1}\n- {op: relu}\n" * (MAX_LAYERS // 2),
    )
    put("spec", "too-many-layers.yaml", "input: [4, 8, 8]\nlayers:\n" + "- {op: relu}\n" * (2 * MAX_LAYERS))
    put("spec", "nested-spec.yaml", "layers: " + "[" * 1_000_000 + "]" * 1_000_000)
    put("spec", "nested-spec.json", "[" * (TEN_MB // 2 - 1) + "]" * (TEN_MB // 2 - 1))
    return out


def test_every_bomb_loads_or_fails_within_4s_and_1GB(bombs):
    """One process loads them one after another: its peak memory after each load bounds that load's."""
    todo = [(kind, str(path)) for (kind, _), path in bombs.items()]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD.format(root=str(ROOT)), json.dumps(todo)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    results = dict(zip((name for _, name in bombs), map(json.loads, proc.stdout.splitlines())))
    lines = [
        f"{kind:8} {name:38} {r['cpu']:5.2f} s CPU ({r['seconds']:5.2f} s wall), peak {r['peak'] / 2**20:4.0f} MiB"
        f"  {r['outcome'][:70]}"
        for (kind, name), r in zip(bombs, results.values())
    ]
    print("\n" + "\n".join(lines))
    assert len(results) == len(bombs)
    for line, r in zip(lines, results.values()):
        assert r["cpu"] < LIMIT_S and r["peak"] < LIMIT_BYTES, line
    accepted = {name for name, r in results.items() if r["outcome"] == "accepted"}
    assert accepted == {
        "most-layers.json",
        "most-layers.yaml",
        "10MB-of-rows.profile.json",
        "rows-up-to-the-limit.profile.json.gz",
    }, lines
