"""``python -m engine profiles|plan|front`` as a user runs them (subprocesses, SYNTHETIC profiles).

Every bad input must end with a non-zero status and exactly one ``error:`` line on stderr, never a
traceback.
"""

from __future__ import annotations

import csv
import importlib
import io
import json
from pathlib import Path

import pytest

from engine.cli import COMMANDS, build_parser
from engine.plan import align, load_plan
from engine.policies import batch_sizes
from engine.profile import Profile, bundled_profiles
from engine.errors import BudgetError
from engine.units import MiB, format_size, parse_size
from engine.testing.cli import device_node, engine, one_error_line
from engine.testing.reference import partitions
from engine.testing.synthetic import engine_set_profile, synthetic_profile
from engine.zoo import get_network

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def no_free_plan_profile(tmp_path_factory):
    """SYNTHETIC AlexNet profile without the zero-workspace plan, so small budgets are impossible."""
    p = synthetic_profile()
    path = tmp_path_factory.mktemp("profiles") / "SYNTHETIC-alexnet-noGemm.profile.json"
    Profile(p.table[p.table.plan != "eng0"], p.provenance, p.networks).save(path)
    return path


# --- working commands ------------------------------------------------------------------------


@pytest.mark.slow
def test_plan_wr_writes_a_valid_plan(synthetic_profile_path, tmp_path):
    out = tmp_path / "wr.json"
    proc = engine(
        "plan",
        "--profile",
        synthetic_profile_path,
        "--network",
        "alexnet",
        "--mode",
        "wr",
        "--budget",
        "64MiB",
        "-o",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    assert "conv2:F" in proc.stdout and "speed-up over undivided cuDNN at the same memory" in proc.stdout
    plan = load_plan(out)
    assert (plan.mode, plan.budget, plan.batch, plan.policy) == ("wr", 64 * MiB, 256, "powerOfTwo")
    assert all(k.workspace <= 64 * MiB for k in plan.kernels)
    assert "--budget 64MiB" in plan.provenance["command"]
    shown = engine("plan", "--show", out)  # a saved plan prints the same table
    assert shown.returncode == 0 and shown.stdout.splitlines()[:17] == proc.stdout.splitlines()[:17]


@pytest.mark.slow
def test_plan_wd_small_batch(synthetic_profile_path, tmp_path):
    out = tmp_path / "wd.json.gz"
    proc = engine(
        "plan",
        "--profile",
        synthetic_profile_path,
        "--network",
        "alexnet",
        "--batch",
        "32",
        "--mode",
        "wd",
        "--budget",
        "40MiB",
        "--policy",
        "all",
        "-o",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    plan = load_plan(out)
    assert plan.batch == 32 and plan.arena_size <= 40 * MiB and plan.policy == "all"
    assert "one arena of" in proc.stdout


@pytest.mark.slow
def test_front_csv_and_json(synthetic_profile_path, tmp_path):
    proc = engine("front", "--profile", synthetic_profile_path, "--network", "alexnet", "--batch", "16")
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(io.StringIO(proc.stdout)))
    assert list(rows[0]) == ["workspace_bytes", "workspace_mib", "time_ms"] and len(rows) > 2
    ws = [int(r["workspace_bytes"]) for r in rows]
    ts = [float(r["time_ms"]) for r in rows]
    assert ws == sorted(set(ws)) and all(a > b for a, b in zip(ts, ts[1:]))
    out = tmp_path / "front.json"
    proc = engine(
        "front",
        "--profile",
        synthetic_profile_path,
        "--network",
        "alexnet",
        "--batch",
        "16",
        "--format",
        "json",
        "-o",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    doc = json.loads(out.read_text())
    assert [p["workspace"] for p in doc["points"]] == ws
    assert doc["network"] == {"name": "alexnet", "batch": 16} and doc["profile"]["synthetic"] is True
    # each point is the WD plan at that budget: its arena is the point's workspace, its time the point's time
    for w, t in [(ws[0], ts[0]), (ws[len(ws) // 2], ts[len(ts) // 2])]:
        proc = engine(
            "plan",
            "--profile",
            synthetic_profile_path,
            "--network",
            "alexnet",
            "--batch",
            "16",
            "--mode",
            "wd",
            "--budget",
            f"{w}B",
            "-o",
            tmp_path / "p.json",
        )
        assert proc.returncode == 0, proc.stderr
        plan = load_plan(tmp_path / "p.json")
        assert plan.arena_size == w and plan.totals.time_ms == pytest.approx(t, rel=1e-12)


@pytest.mark.slow
def test_profiles_listing(synthetic_profile_path):
    proc = engine("profiles")
    assert proc.returncode == 0, proc.stderr
    assert bundled_profiles() and all(name in proc.stdout for name in bundled_profiles())
    proc = engine("profiles", synthetic_profile_path)
    assert proc.returncode == 0, proc.stderr
    assert "[SYNTHETIC]" in proc.stdout and "network: alexnet b256 tf32 NCHW" in proc.stdout


# --- bad input: one line, non-zero, no traceback ------------------------------------------------


@pytest.mark.parametrize(
    "value,size", [("120B", 120), ("120MiB", 120 * MiB), ("0", 0), (" 0.0 ", 0), (120, 120), (1.5, 2), ("1.5 KB", 1500)]
)
def test_sizes_in_text_carry_their_unit(value, size):
    assert parse_size(value) == size


@pytest.mark.parametrize("text", ["120", "1e9", " 64 ", "0.5"])
def test_a_size_typed_without_a_unit_is_refused_everywhere(text):
    """The CLI, the Python API and the dashboard read sizes with parse_size: typed text needs a unit, ints are bytes."""
    with pytest.raises(BudgetError, match=f"'{text.strip()}' has no unit"):
        parse_size(text)


@pytest.mark.parametrize("value", ["0.3B", "0.0001KiB", 0.2])
def test_a_size_under_one_byte_is_refused_not_read_as_zero(value):
    """0 B means no workspace at all; a typed 0.3B was silently read as that."""
    with pytest.raises(BudgetError, match="less than one byte"):
        parse_size(value)


PLAN = ["plan", "--network", "alexnet", "--batch", "8", "--mode", "wr", "--budget", "64MiB"]


@pytest.mark.slow
@pytest.mark.parametrize(
    "change,fragments",
    [
        ({"--network": "vgg"}, ["unknown network 'vgg'"]),
        ({"--budget": "64MiQ"}, ["invalid size '64MiQ'", "unknown unit 'MiQ'"]),
        ({"--budget": "120"}, ["'120' has no unit: write e.g. 120MiB or 120GiB (or 120B for bytes)"]),
        ({"--mode": "wx"}, ["--mode must be wr or wd"]),
        ({"--batch": "many"}, ["--batch must be a positive integer"]),
        ({"--batch": "0"}, ["--batch must be a positive integer"]),
        ({"--policy": "most"}, ["unknown batch-size policy 'most'"]),
        ({"--precision": "fp16"}, ["holds no fp16/* measurements for alexnet"]),
        ({"--budget": None}, ["missing --budget"]),
        ({"-o": "/nonexistent-dir/p.json"}, ["cannot write plan to '/nonexistent-dir/p.json'"]),
        ({"--time-limit": "5"}, ["--time-limit tunes WD's ILP; WR (the default --mode) solves none"]),
    ],
)
def test_plan_bad_arguments(synthetic_profile_path, change, fragments):
    args = PLAN + ["--profile", str(synthetic_profile_path)]
    for flag, value in change.items():
        if flag in args:
            i = args.index(flag)
            del args[i : i + 2]
        if value is not None:
            args += [flag, value]
    one_error_line(engine(*args), *fragments)


def least_workspace(profile: Profile, key: str, batch: int) -> int:
    """Brute force: the smallest max-piece workspace over every partition of ``batch`` into measured sizes."""
    cands = profile.candidates(key, batch_sizes("powerOfTwo", batch))
    return min(max(min(m.workspace for m in cands[s]) for s in parts) for parts in partitions(batch, list(cands)))


@pytest.mark.slow
@pytest.mark.parametrize("mode", ["wr", "wd"])
def test_impossible_budget_names_the_minimum(no_free_plan_profile, mode):
    profile = Profile.load(no_free_plan_profile)
    least = [least_workspace(profile, k.signature.key, 8) for k in get_network("alexnet", 8).kernels()]
    minimum = max(least) if mode == "wr" else sum(align(w) for w in least)
    proc = engine(
        "plan",
        "--profile",
        no_free_plan_profile,
        "--network",
        "alexnet",
        "--batch",
        "8",
        "--mode",
        mode,
        "--budget",
        f"{minimum - 1}B",
    )
    one_error_line(proc, f"is below {format_size(minimum)} ({minimum} bytes)")
    ok = engine(
        "plan",
        "--profile",
        no_free_plan_profile,
        "--network",
        "alexnet",
        "--batch",
        "8",
        "--mode",
        mode,
        "--budget",
        f"{minimum}B",
    )
    assert ok.returncode == 0, ok.stderr


@pytest.mark.slow
def test_malformed_profiles(tmp_path):
    junk = tmp_path / "junk.profile.json"
    junk.write_text("{not json")
    one_error_line(engine(*PLAN, "--profile", junk), "junk.profile.json' is not valid JSON")
    foreign = tmp_path / "foreign.profile.json"
    foreign.write_text(json.dumps({"format": "something-else"}))
    one_error_line(engine(*PLAN, "--profile", foreign), "field 'format' must be 'ucudnn-explorer-profile'")
    one_error_line(engine(*PLAN, "--profile", tmp_path / "absent.json"), "not a file and not a bundled profile")
    one_error_line(engine("profiles", junk), "is not valid JSON")


@pytest.mark.slow
def test_malformed_plans(synthetic_profile_path, tmp_path):
    good = tmp_path / "good.json"
    assert engine(*PLAN, "--profile", synthetic_profile_path, "-o", good).returncode == 0
    doc = json.loads(good.read_text())
    doc["kernels"][3]["micro"][0]["batch"] = 3
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(doc))
    one_error_line(engine("plan", "--show", bad), "field kernels[3].micro[0].batch")
    bad.write_text("[1, 2]")
    one_error_line(engine("plan", "--show", bad), "not a ucudnn-explorer plan")


@pytest.mark.slow
def test_usage_errors_are_one_line(synthetic_profile_path):
    one_error_line(engine("front", "--network", "alexnet"), "required: --profile")
    one_error_line(
        engine("front", "--profile", synthetic_profile_path, "--network", "alexnet", "--format", "xml"),
        "--format must be csv or json",
    )


@pytest.mark.slow
def test_plan_from_a_bundled_profile(tmp_path):
    """A measured profile, by name: the plan validates and carries each piece's recorded engine id and knobs."""
    name = sorted(bundled_profiles())[0]
    profile = Profile.load(bundled_profiles()[name])
    net = profile.networks[0]
    out = tmp_path / "plan.json"
    proc = engine("plan", "--profile", name, "--network", net["name"], "--mode", "wd", "--budget", "256MiB", "-o", out)
    assert proc.returncode == 0, proc.stderr
    plan = load_plan(out)
    assert (plan.batch, plan.precision, plan.layout) == (net["batch"], net["precision"], net["layout"])
    assert plan.provenance["profile"] == profile.provenance and plan.arena_size <= 256 * MiB
    for k in plan.kernels:
        for m in k.micro:
            row = profile.plan_row(k.signature, m.batch, m.plan)
            assert (m.engine_id, m.knobs, m.workspace) == (row["engine_id"], json.loads(row["knobs"]), row["workspace"])


@pytest.mark.slow
def test_plan_engine_set_option(tmp_path):
    path = engine_set_profile().save(tmp_path / "SYNTHETIC-engines.profile.json.gz")
    out = tmp_path / "heur.json"
    proc = engine(
        "plan",
        "--profile",
        path,
        "--network",
        "alexnet",
        "--mode",
        "wr",
        "--budget",
        "64MiB",
        "--engines",
        "heuristics",
        "-o",
        out,
    )
    assert proc.returncode == 0, proc.stderr
    plans = {m["plan"] for k in json.loads(out.read_text())["kernels"] for m in k["micro"]}
    assert plans and "eng3_k2=3" not in plans
    one_error_line(
        engine(
            "plan",
            "--profile",
            path,
            "--network",
            "alexnet",
            "--mode",
            "wr",
            "--budget",
            "64MiB",
            "--engines",
            "fastest",
        ),
        "--engines",
    )


# --- quiet, helpful, and honest about limits (issue 25) ---------------------------------------


def test_help_is_for_users():
    proc = engine("--help")
    assert proc.returncode == 0 and proc.stdout.startswith("usage: python -m engine")
    assert "Plan micro-batched cuDNN convolutions" in proc.stdout and "examples:" in proc.stdout
    assert "engine/commands" not in proc.stdout and "``" not in proc.stdout  # not the module docstring
    assert "--verbose" in proc.stdout


@pytest.mark.parametrize("command", sorted(COMMANDS))
def test_every_command_prints_its_help(command):
    """argparse formats each help string with ``%``: an unescaped percent sign crashes --help (memory's did)."""
    parser, parsers = build_parser()
    importlib.import_module(COMMANDS[command][0]).add_arguments(parsers[command])
    text = parsers[command].format_help()
    assert text.startswith(f"usage: python -m engine {command}") and "%%" not in text


@pytest.mark.slow
def test_wd_solver_is_silent_unless_verbose(synthetic_profile_path):
    """HiGHS prints its banner from C on the process's stdout: a subprocess sees it where a redirect of
    sys.stdout would not."""
    argv = [
        "plan",
        "--profile",
        synthetic_profile_path,
        "--network",
        "alexnet",
        "--batch",
        "32",
        "--mode",
        "wd",
        "--budget",
        "40MiB",
    ]
    quiet = engine(*argv)
    assert quiet.returncode == 0, quiet.stderr
    assert "HiGHS" not in quiet.stdout + quiet.stderr and quiet.stdout.startswith("alexnet b32")
    for loud in (engine("--verbose", *argv), engine(*argv, "-v")):
        assert loud.returncode == 0 and "Running HiGHS" in loud.stdout, loud.stdout[:300]


@pytest.mark.slow
def test_a_search_that_hits_its_limit_says_so():
    """An answer at the search's limit (65536 mini-batch; resnet-3002, vgg-2916) is a lower bound, not the
    largest that fits: the table says "or more" and the JSON carries at_limit."""
    proc = engine("memory", "--network", "alexnet", "--policy", "liveness", "--capacity", "1000TiB", "--max-batch")
    assert proc.returncode == 0, proc.stderr
    assert "65536 or more (the search stops at 65536)" in proc.stdout
    proc = engine(
        "memory",
        "--network",
        "alexnet",
        "--batch",
        "1",
        "--policy",
        "liveness",
        "--capacity",
        "1000TiB",
        "--deepest",
        "vgg",
        "--json",
    )
    row = json.loads(proc.stdout)["rows"][0]
    assert (row["deepest"], row["search_limit"], row["at_limit"]) == (2916, 2916, True)
    proc = engine("memory", "--network", "alexnet", "--policy", "liveness", "--capacity", "4GiB", "--max-batch")
    assert proc.returncode == 0 and "or more" not in proc.stdout


@pytest.mark.slow
def test_outputs_to_devices(synthetic_profile_path, tmp_path):
    """-o to a null device and --snapshot to a full one (device nodes of our own, so a failure cannot replace
    the machine's /dev/null): the first writes and stays a device, the second is one error line, exit 2."""
    null, full = device_node(tmp_path, "null", 3), device_node(tmp_path, "full", 7)
    proc = engine(
        "plan",
        "--profile",
        synthetic_profile_path,
        "--network",
        "alexnet",
        "--mode",
        "wr",
        "--budget",
        "64MiB",
        "-o",
        null,
    )
    assert proc.returncode == 0 and f"wrote the plan to {null}" in proc.stdout, proc.stderr
    line = one_error_line(
        engine("memory", "--network", "alexnet", "--batch", "32", "--snapshot", full),
        "cannot write memory snapshot",
        "No space left on device",
    )
    assert engine("memory", "--network", "alexnet", "--batch", "32", "--snapshot", full).returncode == 2, line
    proc = engine("memory", "--network", "alexnet", "--batch", "32", "--json", "/dev/fd/1")
    assert proc.returncode == 0 and json.loads(proc.stdout)["network"] == "alexnet" and "wrote" in proc.stderr
    assert Path(null).is_char_device() and Path(full).is_char_device()


def test_dash_writes_the_file_to_stdout_and_the_messages_to_stderr(synthetic_profile_path, tmp_path):
    """``-o -`` wrote a file named ``-``; it is standard output, the file alone (``plan -o - | jq``), as memory's
    ``--json -`` already was. Two outputs cannot both be ``-``; a pickle snapshot is not written there."""
    plan = engine(
        "plan", "--profile", synthetic_profile_path, "--network", "alexnet", "--mode", "wr", "--budget", "64MiB",
        "-o", "-", cwd=tmp_path,
    )  # fmt: skip
    assert plan.returncode == 0, plan.stderr
    assert json.loads(plan.stdout)["network"]["name"] == "alexnet"
    assert "wrote the plan to standard output" in plan.stderr and "unlimited-workspace optimum" in plan.stderr
    front = engine("front", "--profile", synthetic_profile_path, "--network", "alexnet", "-o", "-", cwd=tmp_path)
    assert front.returncode == 0 and front.stdout.startswith("workspace_bytes,"), front.stderr
    assert not (tmp_path / "-").exists()
    one_error_line(
        engine("torch-plan", "--network", "alexnet", "-o", "-", "--profile-output", "-", cwd=tmp_path),
        "--output and --profile-output both go to standard output",
    )
    one_error_line(engine("memory", "--network", "alexnet", "--batch", "32", "--snapshot", "-"), "--snapshot -")
    stdout = engine("memory", "--network", "alexnet", "--batch", "32", "--snapshot", "/dev/stdout")
    one_error_line(stdout, "--snapshot /dev/stdout: a memory snapshot is a pickle")


def test_an_output_that_is_stdout_by_another_name_gets_the_file_alone(synthetic_profile_path, tmp_path):
    """``-o /dev/stdout > plan.json`` (the README offers /dev/stdout) wrote the summary table and the plan into
    one stream, a plan that did not load, with exit status 0: it is ``-o -`` by another name."""
    import subprocess
    import sys

    out = tmp_path / "plan.json"
    with out.open("w") as f:
        proc = subprocess.run(
            [sys.executable, "-m", "engine", "plan", "--profile", str(synthetic_profile_path), "--network",
             "alexnet", "--budget", "64MiB", "-o", "/dev/stdout"],
            stdout=f, stderr=subprocess.PIPE, text=True, cwd=ROOT, timeout=120, check=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    assert load_plan(out).network == "alexnet"
    assert "unlimited-workspace optimum" in proc.stderr


def test_an_output_never_replaces_a_file_the_command_reads_or_another_output(synthetic_profile_path, tmp_path):
    """``plan --profile p.gz -o p.gz`` replaced hours of measurements with a plan, exit status 0."""
    profile = tmp_path / "my.profile.json"
    profile.write_bytes(Path(synthetic_profile_path).read_bytes())
    before = profile.read_bytes()
    link = tmp_path / "link.json"
    link.symlink_to(profile)
    for cmd in (
        ("plan", "--profile", profile, "--network", "alexnet", "--budget", "64MiB", "-o", profile),
        ("plan", "--profile", profile, "--network", "alexnet", "--budget", "64MiB", "-o", link),
        ("front", "--profile", profile, "--network", "alexnet", "-o", profile),
        ("memory", "--network", "alexnet", "--batch", "16", "--profile", profile, "--json", profile),
    ):
        one_error_line(engine(*cmd, cwd=tmp_path), "reads: writing there would replace it")
    assert profile.read_bytes() == before
    both = engine("memory", "--network", "alexnet", "--batch", "16", "--json", "o.json", "--snapshot", "o.json",
                  cwd=tmp_path)  # fmt: skip
    one_error_line(both, "--json and --snapshot both name 'o.json'")
    assert not (tmp_path / "o.json").exists()


def test_small_mistakes_of_a_qa_walk(synthetic_profile_path, tmp_path):
    """A gzip plan renamed .json loads; --repeats 0 is refused by argparse before the GPU is looked for; a
    capacity nothing fits says so."""
    import gzip

    plan = tmp_path / "p.json.gz"
    made = engine("plan", "--profile", synthetic_profile_path, "--network", "alexnet", "--budget", "64MiB", "-o", plan)
    assert made.returncode == 0, made.stderr
    renamed = tmp_path / "p.json"
    renamed.write_bytes(plan.read_bytes())
    assert gzip.decompress(renamed.read_bytes())  # really gzip
    shown = engine("plan", "--show", renamed)
    assert shown.returncode == 0 and "speed-up over undivided" in shown.stdout, shown.stderr
    one_error_line(engine("verify", renamed, "--repeats", "0"), "--repeats: must be a positive integer, got '0'")
    tiny = engine("memory", "--network", "alexnet", "--capacity", "1KiB", "--max-batch")
    assert tiny.returncode == 0 and "0 (none fits: even the smallest needs more)" in tiny.stdout, tiny.stderr


def test_a_long_engine_sweep_names_the_faster_heuristic_list_once(capsys):
    """The status callback of profile, torch-plan and optimize(progress=True): silent before a tenth of the
    graphs, for an ETA under LONG_SWEEP_S and for --engines heuristics; one line otherwise, and only once."""
    from engine.gpu.progress import LONG_SWEEP_S, sweep_hint

    assert sweep_hint("heuristics") is None
    hint = sweep_hint("sweep")
    long = LONG_SWEEP_S + 240
    for status in (
        {"done": 9, "total": 100, "eta_s": long},  # before a tenth: the ETA is not settled
        {"done": 10, "total": 100, "eta_s": LONG_SWEEP_S},
        {"done": 10, "total": 100, "eta_s": None},
        {"done": 58, "total": 100, "from_cache": 55, "eta_s": long},  # 3 of the 45 left: not a tenth yet
    ):
        hint(status)
    assert capsys.readouterr().err == ""
    hint({"done": 10, "total": 100, "eta_s": long})
    hint({"done": 11, "total": 100, "eta_s": long})
    err = capsys.readouterr().err
    assert err.count("note: the engine sweep needs about 9 min more") == 1 and "--engines heuristics" in err
    said = []
    api = sweep_hint("sweep", said.append, option='engines="heuristics"')
    api({"done": 50, "total": 100, "eta_s": long})
    assert len(said) == 1 and 'engines="heuristics" times' in said[0] and capsys.readouterr().err == ""


@pytest.mark.parametrize("out", [[], ["-o", "/dev/stdout"]])
def test_a_reader_that_stops_early_ends_the_command_quietly(out):
    """``front ... | head -1``: the same quiet end whether the front goes to stdout or to ``-o /dev/stdout``
    (atomic_write once turned the broken pipe into an error line)."""
    import os
    import subprocess
    import sys

    from engine.testing.cli import ROOT

    cmd = [sys.executable, "-m", "engine", "front", "--profile", "h100-resnet50-b32-tf32-nchw-powerOfTwo"]
    cmd += ["--network", "resnet50", *out]
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=dict(os.environ, PYTHONPATH=str(ROOT))
    )
    assert proc.stdout.readline().startswith(b"workspace_bytes")
    proc.stdout.close()  # as head does after its line
    assert proc.wait(timeout=120) == 0
    assert proc.stderr.read() == b""


def test_ctrl_c_while_the_modules_load_is_one_line(tmp_path):
    """Ctrl-C before the command runs (here: while engine.cli loads) ends as it does later, not in a traceback."""
    import os
    import subprocess
    import sys

    from engine.testing.cli import ROOT

    (tmp_path / "sitecustomize.py").write_text(
        "import builtins\nreal = builtins.__import__\n"
        "def interrupting(name, *a, **k):\n"
        "    if name == 'engine.cli' or (name == 'cli' and a and a[0] and a[0].get('__package__') == 'engine'):\n"
        "        raise KeyboardInterrupt\n"
        "    return real(name, *a, **k)\n"
        "builtins.__import__ = interrupting\n"
    )
    env = dict(os.environ, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    cmd = [sys.executable, "-m", "engine", "networks"]
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert (proc.returncode, proc.stderr) == (130, "interrupted\n")


def test_running_out_of_memory_is_one_line(monkeypatch, capsys):
    from engine import cli

    module = importlib.import_module(COMMANDS["networks"][0])

    def hungry(args):
        raise MemoryError

    monkeypatch.setattr(module, "run", hungry)
    assert cli.main(["networks"]) == 2
    assert capsys.readouterr().err == "error: out of memory: this command needs more memory than this machine gave it\n"


def test_show_with_the_options_of_making_a_plan_is_refused(synthetic_profile_path, tmp_path, capsys):
    """``plan --show PLAN -o copy.json --network vgg16 ...`` printed PLAN and ignored the rest (no copy written)."""
    from engine import cli

    out = tmp_path / "p.json"
    assert (
        cli.main(
            ["plan", "--profile", str(synthetic_profile_path), "--network", "alexnet", "--mode", "wr"]
            + ["--budget", "64MiB", "-o", str(out)]
        )
        == 0
    )
    capsys.readouterr()
    argv = ["plan", "--show", str(out), "-o", str(tmp_path / "copy.json"), "--network", "vgg16"]
    assert cli.main(argv) == 2
    assert capsys.readouterr().err == (
        "error: --show prints a saved plan; --network, --output belong to making one: give one or the other\n"
    )
    assert not (tmp_path / "copy.json").exists()


def test_network_defaults_to_the_one_the_profile_records(synthetic_profile_path, tmp_path, capsys):
    """``plan --profile P --budget 64MiB`` needed --network (and --mode) although P names one network; a profile of
    several networks still asks for it, naming them (SYNTHETIC profiles)."""
    from engine import cli

    argv = ["plan", "--profile", str(synthetic_profile_path), "--budget", "64MiB"]  # --mode wr by default too
    assert cli.main(argv) == 0
    assert capsys.readouterr().out.startswith("alexnet b256 ") and cli.main([*argv, "--mode", "wr"]) == 0
    one = synthetic_profile()
    two = Profile(one.table, one.provenance, [*one.networks, dict(one.networks[0], name="vgg16")])
    path = tmp_path / "two.profile.json.gz"
    two.save(path)
    assert cli.main(["front", "--profile", str(path)]) == 2
    assert capsys.readouterr().err == "error: --network is needed: the profile records 2 networks (alexnet, vgg16)\n"
