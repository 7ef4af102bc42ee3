"""Issue 23's GPU benchmarks on the modern torchvision models, checked without a GPU: the batch each
memory_training case runs (the planner's own choice), its prediction from a profile measured by the run, the
drivers of memory_training and torch_training with every case process replaced (profile first, budget,
``--resume``), and both reports from results files. Every measurement here is SYNTHETIC."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks import memory_training as mt  # noqa: E402
from benchmarks import memory_training_case as case  # noqa: E402
from benchmarks import memory_training_measure as meas  # noqa: E402
from benchmarks import memory_training_predict as pred  # noqa: E402
from benchmarks import memory_training_report as rep  # noqa: E402
from benchmarks import torch_training as tt  # noqa: E402
from benchmarks.readme import markers, read_block  # noqa: E402
from engine.errors import EngineError  # noqa: E402

GiB = 1 << 30
NET = "efficientnet_b0"  # the cheapest modern model to import


def synthetic_profile(net: str, folder: Path) -> Path:
    """SYNTHETIC: a profile of the imported network at its benchmark batch where the run keeps its own."""
    from engine.pytorch.loader import load_network
    from engine.testing.synthetic import synthetic_profile_of

    prof = synthetic_profile_of(load_network(pred.torch_name(net), pred.MODELS[net]), policy="undivided")
    return prof.save(pred.profile_path(net, folder))


@pytest.mark.slow
@pytest.mark.parametrize("net", list(pred.MODERN))
def test_each_modern_batch_is_the_smallest_the_planner_predicts_to_use_8_gib(net):
    """The batches in MODERN are batch_for's: the smallest multiple of 16 whose stock step plan_memory predicts
    to hold 8 GiB + 10 % in tensors alone (a lower bound: no workspace), so the measured step uses 8 GiB."""
    from engine.memory import plan_memory
    from engine.pytorch.loader import load_network

    assert pred.batch_for(net) == pred.MODERN[net]
    b = pred.MODERN[net]

    def peak(batch):
        return plan_memory(load_network(pred.torch_name(net), batch), "liveness", convention="pytorch").summary["peak"]

    assert peak(b) >= 1.1 * pred.MIN_PEAK > peak(b - pred.BATCH_STEP)


def test_a_modern_case_is_predicted_from_the_profile_the_run_measured(tmp_path):
    """With the run's profile (SYNTHETIC here) the prediction has convolution times and workspace; without it one
    line says what to run."""
    with pytest.raises(EngineError, match=f"no profile of {NET}.*measure --configs {NET}"):
        pred.memory_result(NET, pred.MODELS[NET], "liveness", None, profiles=tmp_path)
    synthetic_profile(NET, tmp_path)
    res = pred.memory_result(NET, pred.MODELS[NET], "liveness", None, profiles=tmp_path)
    p = pred.predicted(res)
    assert p["peak"] >= 1.1 * pred.MIN_PEAK and p["iteration_ms"] > p["conv_ms"] > 0
    assert p["workspace_rule"] == "heuristic"
    off = pred.predicted(pred.memory_result(NET, pred.MODELS[NET], "vdnn-all-p", None, profiles=tmp_path))
    assert off["peak"] < p["peak"] and off["offload_bytes"] > 0


def test_the_case_process_predicts_then_records_a_failure_as_one_line(tmp_path, monkeypatch):
    """The case runs up to the model on the GPU: its prediction is kept, and what stops it (here a SYNTHETIC
    refusal in place of the GPU) is the case's one-line error, not a crash."""
    synthetic_profile(NET, tmp_path)
    monkeypatch.setattr(case, "gpu_uuid", lambda: "SYNTHETIC-GPU")

    def refuse(*a):
        raise EngineError("memory runtime: SYNTHETIC refusal of layer features.1.0.block.1.fc1\nsecond line")

    monkeypatch.setattr(case, "_setup", refuse)
    out = case.run_case("step", NET, "sn-recompute", pred.MODELS[NET], None, None, 1, 1, tmp_path)
    assert out["ok"] is False and out["error"] == (
        "EngineError: memory runtime: SYNTHETIC refusal of layer features.1.0.block.1.fc1"
    )
    assert out["predicted"]["peak"] > 0 and out["predicted_ticks"]


def fake_cases(monkeypatch, refuse: str = "") -> list:
    """SYNTHETIC: memory_training's case processes replaced; a profile case writes its file, a step case
    answers made-up numbers (``refuse``: this policy's cases fail with a runtime's refusal)."""
    calls = []

    def fake_child(args, kind, net, variant="", batch=0, capacity=None, timeout=300):
        calls.append((kind, net, variant, batch))
        base = {"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity}
        if kind == "profile":
            folder = pred.profiles_dir(Path(args.output))
            folder.mkdir(exist_ok=True)
            pred.profile_path(net, folder).write_text("SYNTHETIC")
            return dict(
                base, profile="SYNTHETIC", rows=10, seconds=1.0, gpu_uuid="SYNTHETIC-GPU", convolutions=62, depthwise=15
            )
        if kind.startswith("calibrate"):
            layers = {} if kind == "calibrate-host" else {"layers": {f"torchvision:{net}/b{batch}": {}}}
            doc = {
                "format": "ucudnn-explorer-time-params",
                "version": 1,
                "provenance": {"synthetic": True},
                "hbm": {"rate": 1e12},
            }
            return dict(base, gpu_uuid="SYNTHETIC-GPU", doc=dict(doc, **layers))
        if variant == refuse:
            return dict(base, ok=False, error="EngineError: SYNTHETIC: recompute refuses layer x", predicted={})
        peak = 9 * GiB if variant == "liveness" else 5 * GiB
        return dict(
            base,
            ok=True,
            predicted={"peak": peak, "iteration_ms": 100.0, "offload_bytes": 0, "recompute_count": 0},
            peak=int(peak * 1.05),
            step_ms=120.0,
            step_ms_p10=118.0,
            step_ms_p90=125.0,
            stats=[],
            **(
                {"trace_error": "EngineError: SYNTHETIC: no trace"}
                if net == "vit_b_16" and variant == "liveness"
                else {}
            ),
        )

    monkeypatch.setattr(meas, "child", fake_child)
    monkeypatch.setattr(meas, "gpu_uuid", lambda: "SYNTHETIC-GPU")
    monkeypatch.setattr(meas, "provenance", lambda c: {"gpu": "SYNTHETIC", "date": "2000-01-01", "command": c})
    return calls


def test_memory_training_runs_just_the_modern_cases_and_resumes(tmp_path, monkeypatch):
    """``--configs`` modern ``--parts calibrate policies --policies ...``: each model's profile, the host and
    layer calibration, then the chosen policies; no capacity run; a budget stops it between cases and
    ``--resume`` goes on without measuring anything twice; a refusal is the case's result."""
    calls = fake_cases(monkeypatch, refuse="sn-recompute")
    out = tmp_path / "SYNTHETIC-memory_training.json"
    clock = [0.0]
    monkeypatch.setattr(meas.time, "time", lambda: clock[0])
    nets = ["mobilenet_v3_large", "vit_b_16"]
    argv = ["measure", "-o", str(out), "--configs", *nets, "--parts", "calibrate", "policies"]
    argv += ["--policies", "liveness", "vdnn-all-p", "sn-recompute"]
    assert mt.main(argv + ["--budget-s", "-1"]) == 0  # budget spent before the first case
    assert calls == []
    assert mt.main(argv + ["--budget-s", "100", "--resume"]) == 0
    kinds = [c[0] for c in calls]
    assert kinds[:2] == ["profile", "profile"] and kinds[2:5] == ["calibrate-host"] + ["calibrate-layers"] * 2
    assert [(c[1], c[2], c[3]) for c in calls if c[0] == "step"] == [
        (n, p, pred.MODELS[n]) for n in nets for p in ("liveness", "vdnn-all-p", "sn-recompute")
    ]
    doc = json.loads(out.read_text())
    assert doc["capacity"] == {} and set(doc["profiles"]) == set(nets)
    before = len(calls)
    assert mt.main(argv + ["--budget-s", "100", "--resume"]) == 0
    assert [c for c in calls[before:] if c[2] != "sn-recompute"] == []  # only the failures try again
    md, readme = tmp_path / "r.md", tmp_path / "README.md"
    readme.write_text("\n".join(markers("memory_training")) + "\n")
    assert mt.main(["report", str(out), "-o", str(md), "--readme", str(readme)]) == 0
    text = md.read_text()
    assert "## mobilenet_v3_large b224" in text and "## vit_b_16 b80" in text
    assert "peak +5.0% met, step +20.0% NOT met" in text
    assert "SYNTHETIC: recompute refuses layer x" in text
    assert "- liveness: measured, but no per-tick trace (EngineError: SYNTHETIC: no trace)" in text
    assert "15 of its 62 convolutions are depthwise: stock PyTorch runs them in TF32 NCHW with its own" in text
    assert "0 of 6 cases meet both targets" in text and "at least 8 GiB measured: 2 of 2" in text
    assert "issue 23, modern models" in read_block(readme.read_text(), "memory_training")


def test_memory_training_refuses_a_bad_policy_or_model():
    for bad in (["--policies", "lru"], ["--configs", "resnet18"]):
        with pytest.raises(SystemExit):
            mt.main(["measure", *bad])


def test_the_report_keeps_the_older_models_rows(tmp_path):
    """The committed results (the older models) report as before beside the new columns."""
    committed = ROOT / "benchmarks" / "reports" / "memory_training.json"
    md, readme = tmp_path / "r.md", tmp_path / "README.md"
    readme.write_text("\n".join(markers("memory_training")) + "\n")
    assert mt.main(["report", str(committed), "-o", str(md), "--readme", str(readme)]) == 0
    text = md.read_text()
    for net in pred.BUNDLED:
        assert f"## {net} b{pred.MODELS[net]}" in text
    doc = json.loads(committed.read_text())
    modern = any(r["kind"] == "step" and r["model"] in pred.MODERN for r in doc["results"])
    assert "targets: peak 10 %, step 15 %" in text
    assert ("issue 23" in text) == modern == bool(rep.modern_lines(doc))  # the modern lines only with modern cases


# --- torch_training ------------------------------------------------------------------------------


def test_torch_training_profiles_a_measured_model_first_then_its_cases(tmp_path, monkeypatch):
    """A MEASURED model: its profile case first (with the cache folder and the engines), then issue 23's four
    cases, each given the cache; ``--resume`` runs nothing twice, and a second call profiles only while a
    planned case is still to run."""
    calls = []

    def fake_child(net, precision, case_, steps, own, args=None, timeout=300):
        calls.append((net, precision, case_, str(args.profile_cache) if args else None, args and args.engines))
        base = {"model": net, "precision": precision, "case": case_, "measured_at": "2000-01-01T00:00:00Z"}
        if case_ == "profile":
            return dict(base, batch=64, engines="heuristics", graphs=9, measured=9, profile_s=1.0, predicted_conv_ms=5)
        return dict(base, step_ms=10.0, step_ms_p10=9.0, step_ms_p90=11.0, conv_ms=4.0, gpu_busy=0.9, peak=GiB, arena=0)

    monkeypatch.setattr(tt, "child", fake_child)
    monkeypatch.setattr(tt, "provenance", lambda c: {"gpu": "SYNTHETIC", "date": "2000-01-01", "command": c})
    out = tmp_path / "SYNTHETIC-torch_training.json"
    argv = ["measure", "-o", str(out), "--configs", "mobilenet_v3_large:tf32"]
    assert tt.main(argv) == 0
    cache = str(tmp_path / "SYNTHETIC-torch_training_profile_cache")
    assert calls == [("mobilenet_v3_large", "tf32", c, cache, "heuristics") for c in ("profile", *tt.MEASURED_CASES)]
    assert tt.main(argv + ["--resume"]) == 0 and len(calls) == 5
    doc = json.loads(out.read_text())
    assert [r["case"] for r in doc["results"]] == list(tt.MEASURED_CASES)
    assert doc["profiles"]["mobilenet_v3_large:tf32"][0]["measured"] == 9
    assert tt.main(argv + ["--budget-s", "-1", "--profile-cache", str(tmp_path / "c")]) == 0  # nothing launched
    assert len(calls) == 5


def test_torch_training_rounds_run_the_cases_in_turn_and_report_the_median_of_paired_ratios(tmp_path, monkeypatch):
    """SYNTHETIC: --rounds 3 runs stock-free and wr-256-free one after the other three times; each case's step
    time is its rounds' median, and the eager line judges the median of the per-round ratios."""
    calls, steps = [], iter([20.0, 20.2, 30.0, 30.9, 21.0, 21.0])  # round 2: a slow spell hits both cases

    def fake_child(net, precision, case_, steps_, own, args=None, timeout=300):
        calls.append(case_)
        ms = next(steps)
        return {
            "model": net,
            "precision": precision,
            "case": case_,
            "measured_at": "2000-01-01T00:00:00Z",
            **dict(step_ms=ms, step_ms_p10=ms, step_ms_p90=ms, conv_ms=4.0, gpu_busy=0.5, peak=GiB, arena=0),
        }

    monkeypatch.setattr(tt, "child", fake_child)
    monkeypatch.setattr(tt, "provenance", lambda c: {"gpu": "SYNTHETIC", "date": "2000-01-01", "command": c})
    out = tmp_path / "SYNTHETIC-rounds.json"
    argv = ["measure", "-o", str(out), "--configs", "resnet50:fp16", "--cases", "stock-free", "wr-256-free"]
    assert tt.main([*argv, "--rounds", "3"]) == 0
    assert calls == ["stock-free", "wr-256-free"] * 3
    rows = {r["case"]: r for r in json.loads(out.read_text())["results"]}
    assert [x["step_ms"] for x in rows["wr-256-free"]["rounds"]] == [20.2, 30.9, 21.0]
    assert rows["stock-free"]["step_ms"] == 21.0 and rows["wr-256-free"]["step_ms"] == 21.0
    assert tt.paired(rows["wr-256-free"], rows["stock-free"]) == pytest.approx([1.01, 1.03, 1.0])
    line = next(x for x in tt.comparisons(list(rows.values()), rows["stock-free"]) if x.startswith("- eager"))
    assert "step 1.010x stock-free's" in line and "median of 3 rounds' ratios, 1.000-1.030" in line
    assert "too wide" not in line and "target <= 1.03: met" in line  # the slow round moved both: paired, 3 %
    assert tt.step_text(rows["stock-free"]) == "21.00 (3 rounds: 20.00-30.00)"
    assert tt.applied_lines(list(rows.values())) == []  # no case recorded apply_plan's time
    once = {"case": "wr-256-free", "apply_s": 2.345}  # a case run in one round
    assert tt.applied_lines([rows["stock-free"], once]) == [
        "- apply_plan (every piece's plan built, runtime compiles included): wr-256-free 2.3 s"
    ]
    for x, took in zip(rows["wr-256-free"]["rounds"], (None, 3.0, 2.0)):  # the first round ran before it was kept
        x["apply_s"] = took
    assert tt.applied_lines([rows["wr-256-free"]]) == [
        "- apply_plan (every piece's plan built, runtime compiles included): wr-256-free 3.0 s, 2.0 s"
    ]
    runs = [
        {"date": "2000-01-01T00:00:00Z", "commit": "abc1234"},
        {"date": "2000-01-02T00:00:00Z", "commit": "def5678"},
    ]
    rows["wr-256-free"]["rounds"][2]["measured_at"] = "2000-01-02T00:01:00Z"  # measured by the second run
    assert tt.applied_lines([rows["wr-256-free"]], runs) == [
        "- apply_plan (every piece's plan built, runtime compiles included): wr-256-free 3.0 s at abc1234, "
        "2.0 s at def5678"
    ]
    rows["wr-256-free"]["rounds"][1]["step_ms"] = 24.0  # a round faster than stock's: ratios 0.80-1.01
    line = next(x for x in tt.comparisons(list(rows.values()), rows["stock-free"]) if x.startswith("- eager"))
    assert "target <= 1.03: not judged" in line and "too wide to judge 3% on this host" in line


def test_torch_training_reports_a_measured_model_beside_the_others(tmp_path, monkeypatch):
    """SYNTHETIC results: the modern rows get their table, the profile line and the legacy-64 comparison with
    the eager plan; the README block has their row."""
    doc = json.loads((ROOT / "benchmarks" / "reports" / "torch_training.json").read_text())
    cases = {
        "stock-free": (30.0, 12.0),
        "legacy-64": (40.0, 20.0),
        "wr-64-free": (31.0, 10.0),
        "wr-256-free": (30.5, 9),
    }
    for c, (step_ms, conv) in cases.items():
        doc["results"].append(
            dict(
                model="convnext_tiny",
                precision="tf32",
                case=c,
                step_ms=step_ms,
                step_ms_p10=step_ms,
                step_ms_p90=step_ms,
                conv_ms=conv,
                gpu_busy=0.8,
                peak=GiB,
                arena=0,
                conv_profile={},
            )
        )
    doc["profiles"] = {
        "convnext_tiny:tf32": [
            dict(batch=64, engines="heuristics", graphs=40, measured=40, profile_s=90, predicted_conv_ms=9.5)
        ]
    }
    results = tmp_path / "SYNTHETIC.json"
    results.write_text(json.dumps(doc))
    readme = tmp_path / "README.md"
    readme.write_text("\n".join(markers("torch_training")) + "\n")
    monkeypatch.setattr(tt, "README", readme)
    assert tt.main(["report", str(results), "-o", str(tmp_path / "r.md")]) == 0
    assert read_block(readme.read_text(), "torch_training") == ""  # another run's results leave the README alone
    monkeypatch.setattr(tt, "README_RESULTS", results.resolve())  # the README's own results rewrite its block
    assert tt.main(["report", str(results), "-o", str(tmp_path / "r.md")]) == 0
    text = (tmp_path / "r.md").read_text()
    assert "## convnext_tiny b64 tf32 NCHW" in text
    assert "- wr-64-free vs legacy-64 (PyTorch's own workspace cap at X MiB): convolutions 2.00x faster" in text
    assert "convnext_tiny:tf32 b64: planned from a profile measured in the run" in text
    assert "| convnext_tiny b64 TF32 NCHW |" in read_block(readme.read_text(), "torch_training")


def test_torch_training_refuses_an_unknown_model_in_a_case():
    with pytest.raises(SystemExit):
        tt.main(["case", "lenet", "tf32", "stock-free"])


def test_the_profile_case_measures_undivided_heuristics_into_the_run_folder(tmp_path, monkeypatch):
    """``measure_profile`` asks the profiler (replaced here: no GPU) for the network at its batch, undivided,
    cuDNN's heuristic list, TF32 NCHW, through a cache in the profiles folder, and saves the profile where the
    cases read it."""
    import types

    from engine.testing.synthetic import synthetic_profile_of

    seen = {}

    def fake_profile_network(net, **kw):
        seen.update(kw, name=net.name, batch=net.batch)
        return synthetic_profile_of(net, policy="undivided")

    monkeypatch.setitem(sys.modules, "engine.gpu.profiler", types.SimpleNamespace(profile_network=fake_profile_network))
    got = case.measure_profile("vit_b_16", pred.MODELS["vit_b_16"], tmp_path / "p")
    assert (seen["name"], seen["batch"]) == ("torchvision:vit_b_16", 80)
    assert (seen["policy"], seen["engines"], seen["precision"], seen["layout"]) == (
        "undivided",
        "heuristics",
        "tf32",
        "NCHW",
    )
    assert seen["cache_path"] == str(tmp_path / "p" / "profile-cache.sqlite")
    assert Path(got["profile"]) == pred.profile_path("vit_b_16", tmp_path / "p") and got["rows"] > 0
    assert (got["convolutions"], got["depthwise"]) == (1, 0)  # the patch embedding
    assert pred._profile("vit_b_16", tmp_path / "p").table.micro_batch.unique().tolist() == [80]


@pytest.mark.parametrize("precision, layout", [("tf32", "NCHW"), ("fp16", "NHWC")])
def test_a_measured_model_is_planned_through_profile_and_plan_on_the_cache(precision, layout, monkeypatch):
    """torch_training's plan of a MEASURED model: the one-line API's profile_and_plan (replaced here: no GPU) on
    the imported network, the cache given and the precision's layout; a BUNDLED model keeps its bundled profile."""
    import types

    seen = {}

    def fake(net, **kw):
        seen.update(kw, name=net.name, batch=net.batch)
        plan = types.SimpleNamespace(totals=types.SimpleNamespace(time_ms=1.0))
        return types.SimpleNamespace(plan=plan, graphs=7, measured=0, seconds=0.01)

    monkeypatch.setitem(sys.modules, "engine.gpu.planning", types.SimpleNamespace(profile_and_plan=fake))
    plan, done = tt.plan_for("convnext_tiny", 64, precision, "wr", 64 << 20, "/c/profiles.sqlite", "heuristics")
    assert (seen["name"], seen["batch"], seen["mode"], seen["budget"]) == (
        "torchvision:convnext_tiny",
        64,
        "wr",
        64 << 20,
    )
    assert (seen["precision"], seen["layout"], seen["cache"], seen["engines"]) == (
        precision,
        layout,
        "/c/profiles.sqlite",
        "heuristics",
    )
    assert done == {"graphs": 7, "measured": 0, "profile_s": 0.0}
    plan, done = tt.plan_for("alexnet", 256, "tf32", "wr", 64 << 20, None, "heuristics")
    assert done == {"profile": "h100-alexnet-b256-tf32-nchw-powerOfTwo"} and plan.totals.time_ms > 0  # no GPU here


def test_the_example_switches_random_ops_off_so_its_three_models_compute_one_function(monkeypatch):
    """examples/optimize_user_model.py on a torchvision model: dropout and stochastic depth at p=0 (a float64
    copy would draw other masks), so two forwards under other seeds agree and the check is of the convolutions."""
    import importlib.util

    import torch
    import torchvision

    monkeypatch.syspath_prepend(str(ROOT / "examples"))
    spec = importlib.util.spec_from_file_location("optimize_user_model", ROOT / "examples" / "optimize_user_model.py")
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    model = torchvision.models.get_model("efficientnet_b0", weights=None).train()
    assert example.without_random_ops(model) == 17  # the classifier's dropout and 16 stochastic depths
    x = torch.randn(2, 3, 64, 64)
    outs = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        with torch.no_grad():
            outs.append(model(x))
    assert torch.equal(*outs)


def test_redo_runs_kept_cases_again_and_lists_what_they_replaced(tmp_path, monkeypatch):
    """``--resume --redo NET/VARIANT``: those cases run again though kept (a fix to re-measure), nothing else does,
    and once per code commit (a call its budget cut short goes on with the same arguments); the results they
    replace stay in the file's ``replaced``. A malformed case is refused by the parser."""
    calls = fake_cases(monkeypatch)
    out = tmp_path / "SYNTHETIC-memory_training.json"
    argv = ["measure", "-o", str(out), "--configs", "efficientnet_b0", "convnext_tiny", "--parts", "calibrate"]
    argv += ["policies", "--policies", "liveness", "vdnn-all-p", "sn-recompute", "--resume"]
    assert mt.main(argv) == 0
    first = json.loads(out.read_text())
    before = len(calls)
    redo = ["convnext_tiny/calibrate-layers", "efficientnet_b0/vdnn-all-p", "convnext_tiny/sn-recompute"]
    assert mt.main(argv + ["--redo", *redo]) == 0
    assert [c[:3] for c in calls[before:]] == [
        ("calibrate-layers", "convnext_tiny", ""),
        ("step", "efficientnet_b0", "vdnn-all-p"),
        ("step", "convnext_tiny", "sn-recompute"),
    ]
    doc = json.loads(out.read_text())
    assert len(doc["results"]) == len(first["results"])
    assert [(r["kind"], r["model"], r["why"]) for r in doc["replaced"]] == [
        ("calibrate-layers", "convnext_tiny", "asked to run again (--redo)"),
        ("step", "efficientnet_b0", "asked to run again (--redo)"),
        ("step", "convnext_tiny", "asked to run again (--redo)"),
    ]
    before = len(calls)
    assert mt.main(argv) == 0 and len(calls) == before  # kept again
    assert mt.main(argv + ["--redo", *redo]) == 0 and len(calls) == before  # redone once per code commit
    for bad in ("resnet18/liveness", "convnext_tiny"):
        with pytest.raises(SystemExit):
            mt.main(argv + ["--redo", bad])
