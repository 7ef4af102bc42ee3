"""Generators of malformed inputs for the fuzz tests (tests/test_fuzz*.py): plans, profiles, specs and
command lines, each broken by construction (a wrong type, a missing or foreign field, kernels that are not
the network's, a number out of range, corrupt bytes, a bomb). Seeded, so a failure names an input that
reproduces.
"""

from __future__ import annotations

import copy
import gzip
import json
import random
import zlib

from ..profile import COLUMNS

SEED = 10


def byte_cases(text: str, rng: random.Random) -> list[tuple[str, bytes, str]]:
    """(label, content, suffix) of corrupt files, whatever the format."""
    data = text.encode()
    gz = gzip.compress(data)
    cases = [
        ("empty", b"", ".json"),
        ("not UTF-8", b"\xff\xfe\x00{", ".json"),
        ("NaN literal", b"NaN", ".json"),
        ("deep nesting", b"[" * 200_000 + b"]" * 200_000, ".json"),
        ("deep objects", b'{"a":' * 50_000 + b"1" + b"}" * 50_000, ".json"),
        ("huge integer", b"1" * 100_000, ".json"),
        ("gzip, corrupt payload", gz[:20] + bytes(b ^ 0x5A for b in gz[20:60]) + gz[60:], ".json.gz"),
        ("gzip, truncated", gz[: len(gz) // 2], ".json.gz"),
        ("gzip header only", gz[:10], ".json.gz"),
        ("not gzip", data, ".json.gz"),
    ]
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    cases.append(("gzip bomb", b"".join([*(z.compress(bytes(1 << 20)) for _ in range(80)), z.flush()]), ".json.gz"))
    for k in sorted(rng.sample(range(1, len(data) - 2), 12)):  # the document's last brace is always cut off
        cases.append((f"truncated at {k}", data[:k], ".json"))
    for k in sorted(rng.sample(range(20, len(gz) - 8), 6)):
        cases.append((f"gzip byte {k} flipped", gz[:k] + bytes([gz[k] ^ 0xFF]) + gz[k + 1 :], ".json.gz"))
    return cases


_PLAN_FREE = ("provenance.profile",)  # the profile's provenance: free-form, copied as measured
_PLAN_OPTIONAL = {
    "provenance.profile_source",
    "solver.n_variables",
    "solver.solve_time_s",
    "solver.build_time_s",
    "kernels.stock",  # absent from plans made before it and from WD plans
}
_INT_KEYS = {
    "budget",
    "batch",
    "workspace",
    "engine_id",
    "offset",
    "arena_size",
    "max_workspace",
    "unlimited_workspace",
    "n_variables",
}
_NULLABLE = {"undivided_time_ms", "speedup", "heuristic_ms", "benchmark_ms"}


def _nodes(doc, path=""):
    """(path, parent, key, value) of every value below ``doc``."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc)
    for key, value in items:
        p = f"{path}.{key}" if path else str(key)
        yield p, doc, key, value
        if isinstance(value, (dict, list)):
            yield from _nodes(value, p)


def _free(path: str, free: tuple[str, ...]) -> bool:
    return any(path == f or path.startswith(f + ".") for f in free)


def _generic(doc: dict, rng: random.Random, free: tuple[str, ...], optional: set[str], n: int):
    """Delete a required field, add a foreign one, give a value another JSON type: each breaks any format
    whose every field is typed (the free-form subtrees excepted)."""
    nodes = [x for x in _nodes(doc) if not _free(x[0], free)]
    generic = lambda p: ".".join(s for s in p.split(".") if not s.isdigit())  # noqa: E731
    out = []
    objects = [x for x in nodes if isinstance(x[1], dict) and generic(x[0]) not in optional]
    for path, _parent, key, _ in rng.sample(objects, min(n, len(objects))):
        d = copy.deepcopy(doc)
        _locate(d, path)[0].pop(key)
        out.append((f"delete {path}", d))
    dicts = [("", doc)] + [(p, v) for p, _, _, v in nodes if isinstance(v, dict)]
    for path, _ in rng.sample(dicts, min(n, len(dicts))):
        d = copy.deepcopy(doc)
        (_locate(d, path + ".x")[0] if path else d)["zz_unknown"] = 1
        out.append((f"add {path}.zz_unknown", d))
    leaves = [x for x in nodes if not isinstance(x[3], (dict, list))]
    for path, _parent, key, value in rng.sample(leaves, min(3 * n, len(leaves))):
        if isinstance(value, bool):
            choices = [1, "yes", [], {}]
        elif isinstance(value, (int, float)):
            choices = ["7", True, [], {}] + ([] if key in _NULLABLE else [None])
        elif isinstance(value, str):
            choices = [7, True, [], {}, None]
        else:  # null
            choices = ["x", True, [], {}]
        bad = rng.choice(choices)
        d = copy.deepcopy(doc)
        c, k = _locate(d, path)
        c[k] = bad
        out.append((f"{path} = {bad!r}", d))
        if isinstance(value, int) and not isinstance(value, bool) and (key in _INT_KEYS or ".knobs." in path):
            for bad in (1.5, -1 - abs(value), 2**64, 10**40):
                d = copy.deepcopy(doc)
                c, k = _locate(d, path)
                c[k] = bad
                out.append((f"{path} = {bad!r}", d))
    return out


def _locate(doc, path: str):
    """(container, key) of the value at ``path``."""
    *parents, last = path.split(".")
    obj = doc
    for p in parents:
        obj = obj[int(p)] if isinstance(obj, list) else obj[p]
    return obj, (int(last) if isinstance(obj, list) else last)


def plan_mutations(doc: dict, rng: random.Random) -> list[tuple[str, dict]]:
    out = _generic(doc, rng, _PLAN_FREE, _PLAN_OPTIONAL, 12)

    def mutate(label, fn):
        d = copy.deepcopy(doc)
        fn(d)
        out.append((label, d))

    ks = doc["kernels"]
    for v in (True, 1.0, "1", 2, 0, None, [1]):
        mutate(f"version {v!r}", lambda d, v=v: d.update(version=v))
    mutate("format of a profile", lambda d: d.update(format="ucudnn-explorer-profile"))
    mutate("1 of 14 kernels", lambda d: d.update(kernels=d["kernels"][:1]))
    mutate("no kernels", lambda d: d.update(kernels=[]))
    mutate("kernels reversed", lambda d: d["kernels"].reverse())
    for i in rng.sample(range(len(ks)), 3):
        mutate(f"drop kernel {i}", lambda d, i=i: d["kernels"].pop(i))
        mutate(f"repeat kernel {i}", lambda d, i=i: d["kernels"].insert(i, copy.deepcopy(d["kernels"][i])))
    for i in range(len(ks) - 1):
        if ks[i]["id"] != ks[i + 1]["id"]:
            mutate(
                f"swap kernels {i}, {i + 1}",
                lambda d, i=i: d["kernels"].__setitem__(slice(i, i + 2), [d["kernels"][i + 1], d["kernels"][i]]),
            )
    for name in (
        "vgg16",
        "resnet50",
        "alexnet-caffe",
        "resnet-50",
        "nonexistent",
        "x" * 100_000,
        "a\x00b",
        "/dev/zero.json",
        "../../etc/passwd.yaml",
    ):
        mutate(f"network {name[:20]!r}", lambda d, name=name: d["network"].update(name=name))
    for batch in (128, 255, 257, 512, 10**9, 2**64):
        mutate(f"batch {batch}", lambda d, b=batch: d["network"].update(batch=b))
    mutate("policy all, batch 1e9", lambda d: (d.update(policy="all"), d["network"].update(batch=10**9)))
    mutate("policy undivided", lambda d: d.update(policy="undivided"))
    for policy in ("0,0", "1,2,x", "-4", "powerOfThree", "", "1," * 100_000):
        mutate(f"policy {policy[:12]!r}", lambda d, p=policy: d.update(policy=p))
    for i in rng.sample(range(len(ks)), 4):
        k = ks[i]
        j = rng.randrange(len(k["micro"]))
        m = k["micro"][j]
        at = f"kernels[{i}].micro[{j}]"
        mutate(
            f"{at} engine id + 1",
            lambda d, i=i, j=j: d["kernels"][i]["micro"][j].update(
                engine_id=d["kernels"][i]["micro"][j]["engine_id"] + 1
            ),
        )
        mutate(f"{at} plan renamed", lambda d, i=i, j=j: d["kernels"][i]["micro"][j].update(plan="eng999999"))
        mutate(f"{at} plan name not cuDNN's", lambda d, i=i, j=j: d["kernels"][i]["micro"][j].update(plan="fast"))
        mutate(f"{at} knob added", lambda d, i=i, j=j: d["kernels"][i]["micro"][j]["knobs"].update({"99": 1}))
        mutate(
            f"{at} knob key not an integer", lambda d, i=i, j=j: d["kernels"][i]["micro"][j]["knobs"].update({"1.5": 1})
        )
        if m["knobs"]:
            kt = rng.choice(sorted(m["knobs"]))
            mutate(
                f"{at} knob {kt} changed",
                lambda d, i=i, j=j, kt=kt: d["kernels"][i]["micro"][j]["knobs"].update(
                    {kt: d["kernels"][i]["micro"][j]["knobs"][kt] + 1}
                ),
            )
        mutate(f"{at} batch 3", lambda d, i=i, j=j: d["kernels"][i]["micro"][j].update(batch=3))
        mutate(
            f"{at} time x2",
            lambda d, i=i, j=j: d["kernels"][i]["micro"][j].update(time_ms=d["kernels"][i]["micro"][j]["time_ms"] * 2),
        )
        mutate(
            f"kernels[{i}].signature of another kernel",
            lambda d, i=i: d["kernels"][i].update(signature=d["kernels"][(i + 3) % len(ks)]["signature"]),
        )
        mutate(f"kernels[{i}] workspace 2^64+1", lambda d, i=i: d["kernels"][i].update(workspace=2**64 + 1))
    mutate("totals time x2", lambda d: d["totals"].update(time_ms=d["totals"]["time_ms"] * 2))
    mutate(
        "budget below a kernel",
        lambda d: (
            d.update(budget=max(k["workspace"] for k in d["kernels"]) - 1)
            if d["mode"] == "wr"
            else d.update(budget=d["arena_size"] - 1)
        ),
    )
    return out


def profile_mutations(doc: dict, rng: random.Random) -> list[tuple[str, dict]]:
    out = []

    def mutate(label, fn):
        d = copy.deepcopy(doc)
        fn(d)
        out.append((label, d))

    col = {c: i for i, c in enumerate(COLUMNS)}
    rows = doc["rows"]
    ok = [i for i, r in enumerate(rows) if r[col["status"]] == "ok"]
    for v in (True, 1.0, "1", 2, None):
        mutate(f"version {v!r}", lambda d, v=v: d.update(version=v))
    mutate("format of a plan", lambda d: d.update(format="ucudnn-explorer-plan"))
    mutate("foreign field", lambda d: d.update(zz=1))
    for key in ("provenance", "columns", "rows"):
        mutate(f"no {key}", lambda d, k=key: d.pop(k))
    for prov in ([], "H100", 7, None, True, [{"gpu": "H100"}]):
        mutate(f"provenance {prov!r}", lambda d, p=prov: d.update(provenance=p))
    for syn in ("yes", 1, None):
        mutate(f"provenance.synthetic {syn!r}", lambda d, s=syn: d["provenance"].update(synthetic=s))
    mutate("provenance nested 100 deep", lambda d: d["provenance"].update(deep=json.loads("[" * 100 + "]" * 100)))
    for nets in (
        {},
        "alexnet",
        [1],
        [{"batch": 256}],
        [{"name": 1}],
        [{"name": "alexnet", "batch": "256"}],
        [{"name": "alexnet", "batch": 1.5}],
        [{"name": "alexnet", "batch": 0}],
        [{"name": "alexnet", "zz": 1}],
        [{"name": "alexnet", "precision": "fp64"}],
        [{"name": "alexnet", "layout": 3}],
    ):
        mutate(f"networks {nets!r}", lambda d, n=nets: d.update(networks=n))
    mutate("columns reordered", lambda d: d["columns"].reverse())
    mutate("a column missing", lambda d: d["columns"].pop(3))
    mutate("columns not a list", lambda d: d.update(columns="signature"))
    mutate("rows not a list", lambda d: d.update(rows={}))

    def cell(name, value, pool=None):
        for i in rng.sample(pool or range(len(rows)), 2):
            mutate(f"row {i} {name} = {value!r}", lambda d, i=i: d["rows"][i].__setitem__(col[name], value))

    for v in (1.5, "8", True, None, 0, -2, 2**64, 2**21, [8]):
        cell("micro_batch", v)
    for v in (-1, 2**64, 1.5, "big", None):
        cell("workspace", v)
    for v in (-1.0, 0, 1e400, "fast", None, True, [1.0]):
        cell("time_ms", v, ok)
    for v in (None, "x", 1e400):
        cell("time_max_ms", v, ok)
    cell("repeats", 0, ok)
    for v in ("maybe", "", 1, None):
        cell("status", v)
    for v in ("garbage", "Forward/tf32/NCHW/c03h224w224/k64r11s11/p2x2/s4x4/d1x1/g1", 7):
        cell("signature", v)
    for v in ("fast", "eng", 5, None, "eng99999"):
        cell("plan", v)
    for v in ("not json", '{"x": 1}', "[]", '{"2": "a"}', 5):
        cell("knobs", v)
    for v in (-5, 1.5, "0"):
        cell("heuristic_rank", v)
    for v in (5, ["a"], {"a": 1}, True):
        cell("reason", v)
        cell("numerical_notes", v)
    for i in rng.sample(ok, 3):
        mutate(
            f"row {i} min > max",
            lambda d, i=i: d["rows"][i].__setitem__(col["time_min_ms"], d["rows"][i][col["time_max_ms"]] * 2 + 1),
        )
        mutate(
            f"row {i} median above max",
            lambda d, i=i: d["rows"][i].__setitem__(col["time_ms"], d["rows"][i][col["time_max_ms"]] * 2 + 1),
        )
        mutate(
            f"row {i} engine id + 1",
            lambda d, i=i: d["rows"][i].__setitem__(col["engine_id"], d["rows"][i][col["engine_id"]] + 1),
        )
        mutate(f"row {i} repeated", lambda d, i=i: d["rows"].append(list(d["rows"][i])))
        mutate(
            f"row {i} repeated with another time",
            lambda d, i=i: d["rows"].append(
                [v * 2 if c in ("time_ms", "time_max_ms") else v for c, v in zip(COLUMNS, d["rows"][i])]
            ),
        )
        mutate(f"row {i} too short", lambda d, i=i: d["rows"][i].pop())
        mutate(f"row {i} not a list", lambda d, i=i: d["rows"].__setitem__(i, {"plan": "x"}))
    return out


def spec_mutations(doc: dict, rng: random.Random) -> list[tuple[str, dict]]:
    out = []

    def mutate(label, fn):
        d = copy.deepcopy(doc)
        fn(d)
        out.append((label, d))

    for shape in ([3, 224], [0, 224, 224], [3, 2**30, 224], "x", [1.5, 2, 2], [True, 2, 2], None):
        mutate(f"input {shape!r}", lambda d, s=shape: d.update(input=s))
    for batch in (0, 1.5, True, 2**30, "32", -1):
        mutate(f"batch {batch!r}", lambda d, b=batch: d.update(batch=b))
    for name in ("", 5, None):
        mutate(f"name {name!r}", lambda d, n=name: d.update(name=n))
    for layers in ([], {}, "conv", [[]], [None], [{"op": "relu"}] * 25_000):
        mutate(f"layers {str(layers)[:30]}", lambda d, v=layers: d.update(layers=v))
    mutate("foreign field", lambda d: d.update(zz=1))
    convs = [i for i, layer in enumerate(doc["layers"]) if layer["op"] == "conv"]
    for i in rng.sample(convs, 3):
        at = f"layer {i}"
        for k in (0, -1, 1.5, True, 2**30, "64", None):
            mutate(f"{at} k = {k!r}", lambda d, i=i, k=k: d["layers"][i].update(k=k))
        for field, v in (
            ("stride", [1, 2, 3]),
            ("pad", -1),
            ("dilation", 0),
            ("groups", 7),
            ("bias", "yes"),
            ("r", 10_000),
            ("zz", 1),
        ):
            mutate(f"{at} {field} = {v!r}", lambda d, i=i, f=field, v=v: d["layers"][i].update({f: v}))
        mutate(f"{at} without k", lambda d, i=i: d["layers"][i].pop("k"))
        mutate(f"{at} op unknown", lambda d, i=i: d["layers"][i].update(op="deconv"))
        mutate(f"{at} reads a later layer", lambda d, i=i: d["layers"][i].update(inputs=[d["layers"][-1]["name"]]))
        mutate(f"{at} reads nothing known", lambda d, i=i: d["layers"][i].update(inputs=["nowhere"]))
        mutate(
            f"{at} name repeated",
            lambda d, i=i: (
                d["layers"][i].update(name=d["layers"][i - 1]["name"]) if i else d["layers"][i].update(name="data")
            ),
        )
    pools = [i for i, layer in enumerate(doc["layers"]) if layer["op"] == "pool"]
    for i in pools[:1]:
        for field, v in (("size", "x"), ("mode", "min"), ("stride", 0), ("ceil_mode", 1)):
            mutate(f"pool {i} {field} = {v!r}", lambda d, i=i, f=field, v=v: d["layers"][i].update({f: v}))
    mutate("conv after fc", lambda d: d["layers"].append({"op": "conv", "k": 8, "r": 3}))
    mutate("dropout p 1.5", lambda d: d["layers"].append({"op": "dropout", "p": 1.5}))
    mutate("add of one input", lambda d: d["layers"].append({"op": "add", "inputs": [d["layers"][-1]["name"]]}))
    return out


YAML_BOMBS = [
    (
        "billion laughs",
        "a: &a [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"{c}: &{c} [{', '.join(['*' + p] * 10)}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
        + "layers: *i\n",
    ),
    ("recursive alias", "layers: &a [*a]\n"),
    ("deep flow nesting", "layers: " + "[" * 5000 + "]" * 5000 + "\n"),
    ("deep block nesting", "".join(" " * i + "- \n" for i in range(0, 400, 1))),
    ("invalid YAML", "input: [3, 8, 8\nlayers: x\n"),
    ("a tab", "input:\t[3, 8, 8]\n"),
    ("python tag", "input: !!python/object/apply:os.system ['true']\n"),
    ("not a mapping", "- 1\n- 2\n"),
    ("over 4 MiB", "description: '" + "x" * (5 << 20) + "'\n"),
]


def argument_cases(profile: str) -> list[list[str]]:
    plan = ["plan", "--profile", profile, "--network", "alexnet", "--mode", "wr", "--budget", "64MiB"]
    memory = ["memory", "--network", "alexnet"]
    front = ["front"] + plan[1:5]

    def with_(base, flag, value):
        out = list(base)
        if flag in out:
            out[out.index(flag) + 1] = value
        else:
            out += [flag, value]
        return out

    cases = []
    for v in ("-1", "0", "abc", "1e9", "99999999999999999999", "2.5", "", "5000000"):
        cases += [with_(plan, "--batch", v), with_(memory, "--batch", v)]
    for v in ("-5MiB", "1e400", "NaN", "64XB", "", "inf", "1" * 100, "0x40", "8EiB", "1e30"):
        cases.append(with_(plan, "--budget", v))
        cases.append(with_(memory, "--capacity", v))
    for v in ("0,0", "1,2,x", "powerOfThree", "-4", ""):
        cases.append(with_(plan, "--policy", v))
    for v in ("xx", "", "WRX"):
        cases.append(with_(plan, "--mode", v))
    for v in ("nan", "x", "-1e400"):
        cases.append(with_(with_(plan, "--mode", "wd"), "--time-limit", v))
    for v in ("fp64", ""):
        cases.append(with_(plan, "--precision", v))
    for flag, v in (
        ("--engines", "bogus"),
        ("--layout", "CHWN"),
        ("--output", "/nonexistent-dir/p.json"),
        ("--profile", "/dev/zero"),
        ("--profile", "nonexistent"),
        ("--network", "resnet-99999999"),
        ("--network", "vgg-17"),
        ("--network", "lenet"),
        ("--network", "x" * 5000),
        ("--network", "/nonexistent/n.yaml"),
        ("--network", "vgg16"),
    ):
        cases.append(with_(plan, flag, v))
    cases.append(with_(plan, "--batch", "200") + ["--policy", "undivided"])
    cases += [
        with_(plan, "--batch", "100000"),
        with_(plan, "--batch", "8192") + ["--policy", "all"],
        memory + ["--batch", "100000", "--profile", profile],
        front + ["--batch", "5000"],
    ]
    cases += [front + ["--format", "xml"], front + ["-o", "/nonexistent-dir/f.csv"], front + ["--network", "vgg16"]]
    cases += [memory + ["--policy", p] for p in ("nonsense", "all,bogus", "")]
    cases += [
        memory + ["--capacity", "12GiB", "--max-batch", "--policy", "liveness", "--network", "x.txt"],
        memory + ["--max-batch"],
        memory + ["--deepest", "resnet"],
        memory + ["--deepest", "lenet"],
        memory + ["--capacity", "2048TiB", "--max-batch", "--policy", "liveness"],
        memory + ["--workspace", "huge"],
        memory + ["--convention", "tf"],
        memory + ["--strategy", "fast"],
        memory + ["--bandwidth", "-1GB"],
        memory + ["--bandwidth", "fast"],
        memory + ["--optimizer-copies", "x"],
        memory + ["--json", "/nonexistent-dir/m.json"],
        memory + ["--network", "resnet-6005"],
        ["memory", "--network", "resnet-9999997", "--capacity", "1GiB", "--max-batch"],
    ]
    cases += [["networks", "--network", v] for v in ("lenet", "resnet-49", "vgg-1000016", "x" * 300)]
    cases += [["networks", "--network", "alexnet", "--batch", v] for v in ("0", "x", "-3", "2000000")]
    cases += [
        ["bogus"],
        ["plan", "--bogus"],
        ["verify"],
        ["verify", "a.json", "--repeats", "x"],
        ["profile", "--network", "alexnet", "--dtype", "fp64"],
        ["profiles", "/nonexistent.profile.json"],
    ]
    return cases
