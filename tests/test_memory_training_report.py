"""benchmarks/memory_training.py without a GPU: ``report`` on a small SYNTHETIC results file writes the tables
from the data, the capacity search finds the largest fitting batch, and a per-step plan is made for the
imported torchvision network the GPU cases run. Every number in the results file here is SYNTHETIC."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # benchmarks/ is a folder of the repository, not an installed package
    sys.path.insert(0, str(ROOT))

from benchmarks import memory_training as mt  # noqa: E402
from benchmarks import memory_training_measure as meas  # noqa: E402
from benchmarks import memory_training_predict as pred  # noqa: E402
from benchmarks import memory_training_report as rep  # noqa: E402
from benchmarks import memory_training_search as search  # noqa: E402
from engine.memory.reserve import RESERVE, planning_capacity  # noqa: E402
from benchmarks.readme import markers, read_block  # noqa: E402

GiB = 1 << 30


def step(policy, batch, peak_pred, peak, ms_pred, ms, capacity=None, stats=None, **extra):
    return dict(
        {
            "kind": "step",
            "model": "alexnet",
            "variant": policy,
            "batch": batch,
            "capacity": capacity,
            "ok": True,
            "predicted": {
                "peak": peak_pred,
                "iteration_ms": ms_pred,
                "offload_bytes": 512 << 20,
                "recompute_count": 3,
                "time_model": "time model: SYNTHETIC",
            },
            "peak": peak,
            "step_ms": ms,
            "step_ms_p10": ms * 0.9,
            "step_ms_p90": ms * 1.2,
            "steps": 4,
            "stats": stats or [],
        },
        **extra,
    )


def synthetic_results() -> dict:
    """SYNTHETIC: made-up measurements in the format ``measure`` writes."""
    cum = [{"offloaded_bytes": (i + 1) * (256 << 20), "recomputed_layers": 5} for i in range(4)]  # cumulative
    return {
        "provenance": {
            "gpu": "SYNTHETIC GPU",
            "cudnn_version": "-",
            "torch": "0.0",
            "date": "2000-01-01T00:00:00Z",
            "command": "SYNTHETIC",
            "synthetic": True,
        },
        "results": [
            {
                "kind": "calibrate-host",
                "model": "host",
                "variant": "",
                "batch": 0,
                "capacity": None,
                "doc": {
                    "copy": {"h2d": 50e9, "d2h": 52e9, "duplex_h2d": 45e9, "duplex_d2h": 46e9},
                    "hbm": {"rate": 2.8e12},
                    "fc": {"flops": 3.5e14},
                },
            },
            step("liveness", 256, 1.5 * GiB, 1.6 * GiB, 13.0, 14.0),
            step("vdnn-all-p", 256, 1.2 * GiB, 1.25 * GiB, 30.0, 33.0, stats=cum),
            {
                "kind": "step",
                "model": "alexnet",
                "variant": "superneurons",
                "batch": 256,
                "capacity": None,
                "ok": False,
                "error": "RuntimeError: SYNTHETIC failure",
                "predicted": {"peak": GiB, "iteration_ms": 15},
            },
            step("liveness", 3000, 11 * GiB, 11.5 * GiB, 150.0, 160.0, capacity=12 * GiB),
            step("vdnn-all-p", 3500, 11 * GiB, 11.2 * GiB, 400.0, 420.0, capacity=12 * GiB),
            step("vdnn-all-p+steps", 3500, 11.3 * GiB, 11.6 * GiB, 300.0, 310.0, capacity=12 * GiB),
            {
                "kind": "try",
                "model": "alexnet",
                "variant": "vdnn-all-p",
                "batch": 3570,
                "capacity": 12 * GiB,
                "ok": False,
                "oom": True,
                "error": "out of memory: SYNTHETIC",
            },
        ],
        "capacity": {
            "alexnet/12": {
                "predicted": {
                    "liveness": 3232,
                    "vdnn-all-p": 3600,
                    "vdnn-conv-p": 3300,
                    "sn-recompute": 3400,
                    "vdnn-all-p+steps": 3550,
                },
                "best": "vdnn-all-p",
                "found": {"liveness": 3000, "vdnn-all-p": 3500, "vdnn-conv-p": 3100},
                "skipped": {"sn-recompute": "would pin SYNTHETIC GiB"},
                "stepped": {"liveness": 3000, "vdnn-all-p": 3500, "vdnn-all-p+steps": 3500},
            }
        },
    }


@pytest.mark.slow
def test_report_writes_the_tables_from_the_data(tmp_path):
    results = tmp_path / "SYNTHETIC-memory_training.json"
    results.write_text(json.dumps(synthetic_results()))
    readme = tmp_path / "README.md"
    begin, end = markers("memory_training")
    readme.write_text(f"intro\n{begin}\n{end}\nrest\n")
    md = tmp_path / "out.md"
    assert mt.main(["report", str(results), "-o", str(md), "--readme", str(readme)]) == 0
    text = md.read_text()
    assert "SYNTHETIC" in text.splitlines()[0]
    # peak 1.20 predicted / 1.25 measured GiB, step 30.0 / 33.0 ms, 256 MiB offloaded per step (cumulative counter)
    assert "| vdnn-all-p | 1.20 | 1.25 | 0.96 | 30.0 | 33.0 (29.7-39.6) | 0.91 | 512 / 256 | 3 / 5 |" in text
    assert "| liveness (stock PyTorch) | 1.50 | 1.60 | 0.94 | 13.0 | 14.0 (12.6-16.8) |" in text
    assert "| superneurons | 1.00 | RuntimeError: SYNTHETIC failure |" in text
    assert "| sn-recompute | not run |" in text
    assert (
        "| 12 GiB | stock PyTorch | 3232 | 3000 | 0.928 | 3000 | 150.0 / 160.0 (144.0-192.0) | 18,750 | 11.00 / 11.50 |"
    ) in text
    assert (
        "| 12 GiB | vdnn-all-p | 3600 | 3500 (3570 fails) | 0.972 | 3500 | 400.0 / 420.0 (378.0-504.0) | 8,333 | "
        "11.00 / 11.20 |"
    ) in text
    assert (
        "| 12 GiB | vdnn-all-p + per-step WR workspace | 3550 | 3500 (paper policy's) |  | 3500 | 300.0 / 310.0" in text
    )
    assert "| 12 GiB | vdnn-conv-p | 3300 | 3100 | 0.939 | - | not timed | | |" in text
    assert "| 12 GiB | sn-recompute | 3400 | not searched |  | - | not timed | | |" in text
    assert "- alexnet/12 GiB, sn-recompute: not searched (would pin SYNTHETIC GiB)" in text
    assert (
        "- alexnet/12 GiB, vdnn-all-p + per-step WR workspace at batch 3500: 310.0 ms against 420.0 ms with stock "
        "convolutions (faster by 35.5%; target: faster)"
    ) in text
    assert "- measured peak within 10 % of predicted: 2 of 2 cases" in text
    assert "- measured step time within 15 % of predicted (calibrated): 2 of 2 cases" in text
    assert "- alexnet/12 GiB, liveness: largest batch found 3000, predicted 3232 (-7.2%; target within 5 %)" in text
    assert "| 16 GiB | not run |" in text
    assert "50.0 GB/s host->device" in text and "FC GEMM 350.0 TFLOP/s" in text
    block = read_block(readme.read_text(), "memory_training")
    assert block == rep.readme_block(synthetic_results())
    assert "SYNTHETIC data" in block and "| alexnet b256 | 1.50 / 1.60 GiB, 13 / 14 ms |" in block and "failed" in block
    assert readme.read_text().startswith("intro\n") and readme.read_text().endswith("rest\n")
    assert md.with_suffix(".png").read_bytes()[:4] == b"\x89PNG"


@pytest.mark.parametrize("width", [1, 2, 5])
@pytest.mark.parametrize(
    "largest,guess", [(1000, 1000), (1000, 700), (1000, 1500), (5, 4000), (0, 64), (8192, 64), (1, 1), (3000, 2900)]
)
def test_capacity_search_finds_the_largest_fitting_batch(largest, guess, width):
    tries, rounds = [], []

    def fits_many(batches):
        assert 0 < len(batches) <= width
        rounds.append(batches)
        tries.extend(batches)
        return {b: b <= largest for b in batches}

    got = search.search(fits_many, guess, width)
    assert got <= largest and (largest == 0 or got >= largest - max(1, largest // 50))
    assert len(tries) == len(set(tries)) and len(rounds) <= 30 // width + 6


@pytest.mark.parametrize("width", [1, 5])
def test_capacity_search_survives_a_non_monotone_answer(width):
    """A try that fits above one that failed (allocator luck): the search still ends, on a batch seen fitting."""
    seen = set()

    def fits_many(batches):
        seen.update(batches)
        return {b: b <= 1000 and b != 900 for b in batches}

    got = search.search(fits_many, 1000, width)
    assert got in seen and got <= 1000 and got >= 880


def test_a_timed_step_that_runs_out_of_memory_at_the_found_batch_runs_again_below_it():
    ran = []

    def run(kind, net, variant, batch, cap):
        ran.append(batch)
        return {"ok": batch < 100, **({} if batch < 100 else {"oom": True, "error": "out of memory: SYNTHETIC"})}

    assert search.timed_step(run, "alexnet", "liveness", 100, GiB) == 97 and ran == [100, 97]
    ran.clear()
    assert search.timed_step(run, "alexnet", "liveness", 50, GiB) == 50 and ran == [50]


def test_tries_at_once_hold_the_gpu_and_host_memory_together_and_an_oversized_try_runs_alone():
    """SYNTHETIC tries in threads: caps together under the GPU budget, pinned buffers under the host budget, and a
    try that pins more than the whole host budget still runs, while no other pinning try does."""
    import threading

    slots = search.Slots(gpu=30, host=100)
    live, seen, lock = [], [], threading.Lock()

    def one(gpu, host):
        with slots.hold(gpu, host):
            with lock:
                live.append((gpu, host))
                seen.append(list(live))
            meas.time.sleep(0.01)
            with lock:
                live.remove((gpu, host))

    tries = [(12, 0), (12, 60), (12, 60), (12, 150), (12, 0), (16, 40), (16, 0)]
    threads = [threading.Thread(target=one, args=t) for t in tries]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=10)
    assert not any(t.is_alive() for t in threads) and len(seen) == len(tries)
    for now in seen:
        assert sum(g for g, _ in now) <= 30
        pinning = [h for _, h in now if h]
        assert sum(pinning) <= 100 or len(pinning) == 1
    assert any((12, 150) in now for now in seen)


def _cases(kept=None, oom=lambda variant, batch: False):
    """SYNTHETIC: the driver's ``run`` over fake cases: a kept result is returned unless ``again``; ``ran`` lists
    the cases that ran here (host "here")."""
    done, ran = dict(kept or {}), []

    def run(kind, net, variant, batch, cap, again=False):
        if again or (variant, batch) not in done:
            ran.append((variant, batch))
            bad = oom(variant, batch)
            done[variant, batch] = {
                "ok": not bad,
                "gpu_uuid": "here",
                **({"oom": True, "error": "out of memory: SYNTHETIC"} if bad else {}),
            }
        return done[variant, batch]

    return run, ran


def test_the_per_step_plan_and_its_paper_policy_are_timed_at_one_batch_on_one_host():
    """SYNTHETIC: where the per-step plan does not fit at the paper policy's batch, both run lower: at the largest
    batch the per-step plan predicts, at most 97 % of the first; where the paper policy does not fit there, both
    run at 97 % of it; kept results from two hosts run again, both, here."""
    sn, steps = "superneurons", "superneurons+steps"
    mine_big = lambda variant, batch: variant == steps and batch >= 100  # noqa: E731
    paper_at = {(sn, 100): {"ok": True, "gpu_uuid": "here"}, (sn, 90): {"ok": True, "gpu_uuid": "here"}}
    run, ran = _cases(paper_at, mine_big)
    assert search.timed_pair(run, "vgg16", sn, 100, GiB) == 97
    assert ran == [(steps, 100), (steps, 97), (sn, 97)]
    run, ran = _cases(paper_at, mine_big)
    assert search.timed_pair(run, "vgg16", sn, 90, GiB) == 90 and ran == [(steps, 90)]
    run, ran = _cases(paper_at, mine_big)  # the per-step plan predicts 80 at most: both run there
    assert search.timed_pair(run, "vgg16", sn, 100, GiB, predicted=80) == 80
    assert ran == [(steps, 100), (steps, 80), (sn, 80)]

    paper_oom = {(sn, 100): {"ok": False, "oom": True, "gpu_uuid": "here", "error": "out of memory: SYNTHETIC"}}
    run, ran = _cases(paper_oom, lambda variant, batch: variant == sn and batch >= 100)
    assert search.timed_pair(run, "vgg16", sn, 100, GiB) == 97
    assert ran == [(steps, 100), (steps, 97), (sn, 97)]

    two_hosts = {(sn, 100): {"ok": True, "gpu_uuid": "A"}, (steps, 100): {"ok": True, "gpu_uuid": "B"}}
    run, ran = _cases(two_hosts)
    assert search.timed_pair(run, "vgg16", sn, 100, GiB) == 100 and ran == [(steps, 100), (sn, 100)]
    run, ran = _cases({(sn, 100): {"ok": True, "gpu_uuid": "A"}, (steps, 100): {"ok": True, "gpu_uuid": "A"}})
    assert search.timed_pair(run, "vgg16", sn, 100, GiB) == 100 and ran == []
    # run again here, the paper policy does not fit: both at 97 %, where a kept result of another host runs again
    kept = {**two_hosts, (sn, 97): {"ok": True, "gpu_uuid": "A"}}
    run, ran = _cases(kept, lambda variant, batch: variant == sn and batch >= 100)
    assert search.timed_pair(run, "vgg16", sn, 100, GiB) == 97
    assert ran == [(steps, 100), (sn, 100), (steps, 97), (steps, 97), (sn, 97)]


@pytest.mark.slow
def test_the_per_step_line_says_one_host_two_hosts_or_every_batch_the_pair_tried(tmp_path):
    """SYNTHETIC: the comparison counts only at one batch on one host; where the two never both trained, each
    batch tried is listed; replaced results stay in the report."""
    doc = synthetic_results()
    e = doc["capacity"]["alexnet/12"]
    for r in doc["results"]:
        if r["variant"] in ("vdnn-all-p", "vdnn-all-p+steps") and r["capacity"]:
            r["gpu_uuid"] = "A" if r["variant"] == "vdnn-all-p" else "B"
    assert rep.per_step_comparison(doc, "alexnet/12", e).endswith("on two hosts: not a comparison the target accepts")
    pred._r(doc, "step", "alexnet", "vdnn-all-p+steps", 3500, 12 * GiB)["predicted"]["stall_ms"] = 250.0
    assert rep.per_step_comparison(doc, "alexnet/12", e).endswith(
        "; its plan predicts 250 ms of the 300 ms step waiting on host copies, which no convolution speed shortens"
    )
    oom = {"ok": False, "oom": True, "error": "out of memory: SYNTHETIC"}
    doc["results"] = [r for r in doc["results"] if not (r["variant"] == "vdnn-all-p" and r["capacity"])] + [
        dict(step("vdnn-all-p+steps", 3395, GiB, GiB, 1.0, 290.0, capacity=12 * GiB)),
        {"kind": "step", "model": "alexnet", "variant": "vdnn-all-p", "batch": 3500, "capacity": 12 * GiB, **oom},
        {"kind": "step", "model": "alexnet", "variant": "vdnn-all-p", "batch": 3395, "capacity": 12 * GiB, **oom},
    ]
    e["stepped"]["vdnn-all-p+steps"] = 3395
    assert rep.per_step_comparison(doc, "alexnet/12", e) == (
        "- alexnet/12 GiB, vdnn-all-p + per-step WR workspace: no batch where both trained (batch 3500: 310.0 ms "
        "per-step, out of memory stock; batch 3395: 290.0 ms per-step, out of memory stock)"
    )
    doc["results"].append(step("vdnn-all-p", 3000, GiB, GiB, 1.0, 400.0, capacity=12 * GiB))
    doc["results"].append(step("vdnn-all-p+steps", 3000, GiB, GiB, 1.0, 300.0, capacity=12 * GiB))
    e["stepped"]["vdnn-all-p+steps"] = 3000  # the two at one batch (--pair-at), above it the per-step plan alone
    assert rep.per_step_comparison(doc, "alexnet/12", e).endswith(
        "(faster by 33.3%; target: faster), on one host; at batch 3500, 3395 only the per-step plan trained (stock "
        "convolutions ran out of memory)"
    )
    doc["replaced"] = [
        dict(
            step("vdnn-all-p", 3500, GiB, 11.2 * GiB, 1.0, 420.0, capacity=12 * GiB),
            gpu_uuid="A",
            replaced_in_call=2,
            why="its pair ran again on one host",
        )
    ]
    doc["replaced"] += [
        {
            "kind": "try",
            "model": "alexnet",
            "variant": "superneurons",
            "batch": b,
            "capacity": 12 * GiB,
            "why": "planned for the whole cap",
            **({"ok": True} if b < 3000 else oom),
        }
        for b in (2000, 2900, 3000, 4000)
    ]
    results = tmp_path / "SYNTHETIC-memory_training.json"
    results.write_text(json.dumps(doc))
    md = tmp_path / "out.md"
    readme = tmp_path / "README.md"
    begin, end = markers("memory_training")
    readme.write_text(f"{begin}\n{end}\n")
    assert mt.main(["report", str(results), "-o", str(md), "--readme", str(readme)]) == 0
    assert (
        "| alexnet vdnn-all-p b3500, 12 GiB | A | 420.0 ms | 11.20 | 2 | its pair ran again on one host |"
        in md.read_text()
    )
    assert (
        "- alexnet superneurons under 12 GiB, its search (4 tries): trained up to batch 2900, out of memory from "
        "3000; planned for the whole cap"
    ) in md.read_text()


@pytest.mark.slow
def test_per_step_plan_is_made_for_the_imported_torchvision_network():
    """What a capacity case applies: the per-step plan of the imported torchvision AlexNet at a batch the
    bundled profile did not measure (micro-batches of its sizes), under 12 GiB."""
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    from engine.memory import step_plan

    res = pred.memory_result("alexnet", 512, "vdnn-all-p" + pred.STEP, 12 * GiB)
    plan = step_plan(res, pred._profile("alexnet"))
    assert plan.network == "torchvision:alexnet" and plan.batch == 512
    assert plan.kernels[0].id == "features.0:F" and all(k.workspace <= plan.limit(k.id) for k in plan.kernels)
    assert all(m.batch <= 256 for k in plan.kernels for m in k.micro)
    assert res.capacity == int(12 * GiB * (1 - RESERVE))
    p = pred.predicted(res)
    assert p["workspace_rule"] == "wr" and p["convention"] == "pytorch" and json.dumps(p)


@pytest.mark.slow
def test_a_plan_that_fills_the_capacity_leaves_the_reserve_to_the_allocator():
    """SuperNeurons keeps tensors resident up to the capacity it plans for: planned for the whole 16 GiB, ResNet-50's
    peak came within 34 MB of the cap and the allocator's unallocated blocks made batch 214 and up run out of
    memory. Planned for (1 - RESERVE) of it, the peak leaves the reserve; a policy that does not fill keeps the cap."""
    pytest.importorskip("torch")
    pytest.importorskip("torchvision")
    cap = 16 * GiB
    res = pred.memory_result("resnet50", 204, "superneurons", cap)
    assert res.capacity == int(cap * (1 - RESERVE)) and res.summary["peak"] <= res.capacity
    assert pred.memory_result("resnet50", 64, "vdnn-conv-p", cap).capacity == cap
    assert planning_capacity(None, RESERVE) is None


class _Prediction:
    """A finished SYNTHETIC ``predict-capacity`` process."""

    returncode = 0

    def __init__(self, net, gib, time_params=None):
        self.out = {
            "predicted": {
                "liveness": 100 * gib,
                "vdnn-all-p": 150 * gib,
                "vdnn-conv-p": 120 * gib,
                "sn-recompute": 110 * gib,
                "superneurons": 100 * gib,
                "vdnn-all-p+steps": 140 * gib,
            },
            "best": "vdnn-all-p",
        }

    def communicate(self, timeout=None):
        return json.dumps(self.out) + "\n", ""

    def poll(self):
        return self.returncode

    def kill(self):
        pass


def _synthetic_cases(monkeypatch, largest: dict, tick=lambda: None) -> list:
    """SYNTHETIC: the GPU driver with every case process replaced: a try fits up to ``largest[policy]``, a step
    gives made-up numbers, a calibration a made-up host. Returns the list of cases run, (kind, net, variant,
    batch, capacity), as they run."""
    calls = []

    def fake_child(args, kind, net, variant="", batch=0, capacity=None, timeout=300):
        calls.append((kind, net, variant, batch, capacity))
        tick()
        base = {"kind": kind, "model": net, "variant": variant, "batch": batch, "capacity": capacity}
        if kind.startswith("calibrate"):
            layers = (
                {}
                if kind == "calibrate-host"
                else {"layers": {f"torchvision:{net}/b{batch}": {"SYNTHETIC.relu": {"F": 1.0, "B": 1.0}}}}
            )
            return dict(
                base,
                gpu_uuid=meas.gpu_uuid(),
                doc={
                    "format": "ucudnn-explorer-time-params",
                    "version": 1,
                    "provenance": {"synthetic": True},
                    "hbm": {"rate": 1e12},
                    **layers,
                },
            )
        if kind == "try":
            ok = batch <= largest[variant.removesuffix(pred.STEP)]
            return dict(base, ok=ok, **({} if ok else {"oom": True, "error": "out of memory: SYNTHETIC"}))
        return step(variant, batch, GiB, GiB, 10.0, 11.0, capacity=capacity)

    monkeypatch.setattr(meas, "child", fake_child)
    monkeypatch.setattr(meas, "gpu_uuid", lambda: "SYNTHETIC-GPU")
    monkeypatch.setattr(
        meas,
        "provenance",
        lambda command: {"gpu": "SYNTHETIC", "date": "2000-01-01", "command": command, "synthetic": True},
    )
    monkeypatch.setattr(meas, "start_prediction", _Prediction)
    return calls


@pytest.mark.slow
def test_measure_driver_resumes_and_searches_with_synthetic_cases(tmp_path, monkeypatch):
    """The GPU driver with every case process replaced by SYNTHETIC answers: a try fits up to a made-up largest
    batch; --budget-s stops it, --resume goes on without repeating a case, and the capacity search lands on the
    largest fitting batch."""
    largest = {"liveness": 1111, "vdnn-all-p": 1999, "vdnn-conv-p": 1500, "sn-recompute": 1400, "superneurons": 1300}
    clock = [0.0]
    monkeypatch.setattr(meas.time, "time", lambda: clock[0])

    def tick():
        clock[0] += 1.0  # every case takes a SYNTHETIC second

    calls = _synthetic_cases(monkeypatch, largest, tick)
    out = tmp_path / "SYNTHETIC-memory_training.json"
    argv = ["measure", "-o", str(out), "--configs", "alexnet", "--budget-s", "4.5"]
    assert mt.main(argv) == 0  # budget spent after five cases
    assert len(calls) == 5 and len(json.loads(out.read_text())["results"]) == 5
    assert mt.main(argv[:-2] + ["--budget-s", "1e9", "--resume"]) == 0
    doc = json.loads(out.read_text())
    assert len(calls) == len(set(calls))  # nothing measured twice
    assert pred.time_params_path(out).exists()
    for gib in pred.CAPACITIES_GIB:
        e = doc["capacity"][f"alexnet/{gib}"]
        assert set(e["found"]) == (set(largest) if gib == 12 else {"liveness", "vdnn-all-p"})  # --search-all 12
        for variant, top in largest.items():
            if variant in e["found"]:
                assert top - max(1, top // 50) <= e["found"][variant] <= top
        assert pred._r(doc, "step", "alexnet", "vdnn-all-p" + pred.STEP, e["found"]["vdnn-all-p"], gib * GiB)
    assert {c[2] for c in calls if c[0] == "step" and c[4] is None} == set(pred.POLICIES)
    md = tmp_path / "r.md"
    readme = tmp_path / "README.md"
    readme.write_text("\n".join(markers("memory_training")) + "\n")
    assert mt.main(["report", str(out), "-o", str(md), "--readme", str(readme)]) == 0
    # another lent machine: its calibration runs again (copy rates are the host's), nothing else does
    monkeypatch.setattr(meas, "gpu_uuid", lambda: "SYNTHETIC-OTHER-GPU")
    before = len(calls)
    assert mt.main(argv[:-2] + ["--budget-s", "1e9", "--resume"]) == 0
    assert {c[0] for c in calls[before:]} == {"calibrate-host", "calibrate-layers"}
    kept = json.loads(out.read_text())["calibrations"]  # each host's, for `predict` of its own cases
    assert set(kept) == {"SYNTHETIC-GPU", "SYNTHETIC-OTHER-GPU"}
    assert json.loads(pred.time_params_path(out).read_text())["provenance"]["gpu_uuid"] == "SYNTHETIC-OTHER-GPU"
    # --pair-at: the best policy and its per-step plan timed at the user's batch, nothing else
    before = len(calls)
    timed = ["--budget-s", "1e9", "--resume", "--parts", "timed", "--pair-at", "alexnet/12=1000"]
    assert mt.main(argv[:-2] + timed) == 0
    assert sorted(calls[before:]) == [
        ("step", "alexnet", v, 1000, 12 * GiB) for v in ("vdnn-all-p", "vdnn-all-p+steps")
    ]
    assert json.loads(out.read_text())["capacity"]["alexnet/12"]["stepped"]["vdnn-all-p+steps"] == 1000
    for bad in ("alexnet/13=5", "lenet/12=5", "alexnet/12=0", "alexnet12"):
        with pytest.raises(SystemExit):
            mt.main(argv + ["--pair-at", bad])


@pytest.mark.slow
def test_a_network_new_to_this_host_gets_its_layer_times_before_its_cases(tmp_path, monkeypatch):
    """SYNTHETIC: a call for a network whose layers this host's calibration lacks measures them first (not the
    host's copy rates again) and keeps the layers measured before; ResNet-50's 16 GiB cases once ran, after a
    VGG-16 call on the same host, with every non-conv layer modelled."""
    ran = _synthetic_cases(monkeypatch, {p: 1000 for p in pred.POLICIES})

    def calls():  # the calibrations, in order (the one liveness step per call aside)
        return [c[:2] for c in ran if c[0].startswith("calibrate")]

    out = tmp_path / "SYNTHETIC-memory_training.json"
    # a part that is not the calibration (a capacity part would also start the CPU-heavy capacity predictions)
    only = ["--parts", "policies", "--policies", "liveness"]
    assert mt.main(["measure", "-o", str(out), "--configs", "vgg16"] + only) == 0
    assert calls() == [("calibrate-host", "host"), ("calibrate-layers", "vgg16")]
    assert ran.index(next(c for c in ran if c[0] == "step")) == 2  # the case after its calibration
    assert mt.main(["measure", "-o", str(out), "--configs", "vgg16", "resnet50", "--resume"] + only) == 0
    assert calls()[2:] == [("calibrate-layers", "resnet50")]
    layers = json.loads(pred.time_params_path(out).read_text())["layers"]
    assert set(layers) == {"torchvision:vgg16/b64", "torchvision:resnet50/b64"}
    assert mt.main(["measure", "-o", str(out), "--configs", "resnet50", "--resume"] + only) == 0
    assert len(calls()) == 3  # both measured here: nothing runs again


@pytest.mark.slow
def test_a_best_policy_the_host_cannot_pin_gives_way_to_the_best_it_can(tmp_path, monkeypatch):
    """SYNTHETIC: where the predicted best paper policy would pin more host memory than the host may give, the
    capacity run searches, times and pairs the best policy it can run, and says so."""
    ran = _synthetic_cases(monkeypatch, {p: 1000 for p in pred.POLICIES})
    monkeypatch.setattr(search, "host_memory", lambda: 100 * GiB)
    monkeypatch.setattr(
        search,
        "pinned_per_sample",  # SYNTHETIC: vdnn-all-p (the predicted best) pins 1 GiB a sample
        lambda net, variant, batch, cap: GiB if variant == "vdnn-all-p" else 0.0,
    )
    out = tmp_path / "SYNTHETIC-memory_training.json"
    assert (
        mt.main(
            [
                "measure",
                "-o",
                str(out),
                "--configs",
                "alexnet",
                "--capacities",
                "16",
                "--parts",
                "calibrate",
                "search",
                "timed",
                "--search-all",
            ]
        )
        == 0
    )
    e = json.loads(out.read_text())["capacity"]["alexnet/16"]
    assert (e["host_limited"], e["best"]) == ("vdnn-all-p", "vdnn-conv-p")  # 120 x 16 predicted, the next best
    assert "vdnn-all-p" in e["skipped"] and "vdnn-all-p" not in e["found"]
    calls = [(kind, variant, batch) for kind, _net, variant, batch, _cap in ran]
    assert {v for k, v, _ in calls if k == "step"} == {"liveness", "vdnn-conv-p", "vdnn-conv-p+steps"}
    assert (
        "- alexnet/16 GiB: vdnn-conv-p is timed, the best paper policy this host can run (vdnn-all-p is predicted best)"
    ) in rep.accuracy_lines(json.loads(out.read_text()))


@pytest.mark.slow
def test_predict_recomputes_the_predictions_and_keeps_the_measurements(tmp_path):
    """``predict`` on a results file: SYNTHETIC measurements stay, the prediction becomes this checkout's (the
    imported torchvision AlexNet b256 under liveness, no calibration file: assumed time constants)."""
    pytest.importorskip("torchvision")
    doc = synthetic_results()
    doc["results"] = [step("liveness", 256, 1.0, 1.6 * GiB, 1.0, 14.0)]
    doc["capacity"] = {}
    path = tmp_path / "SYNTHETIC-memory_training.json"
    path.write_text(json.dumps(doc))
    assert mt.main(["predict", str(path)]) == 0
    got = json.loads(path.read_text())
    r = got["results"][0]
    want = pred.memory_result("alexnet", 256, "liveness", None)
    assert r["predicted"]["peak"] == want.peak and len(r["predicted_ticks"]) == len(want.ticks)
    assert (r["peak"], r["step_ms"]) == (1.6 * GiB, 14.0)
    assert got["predicted_at"]["command"].startswith("python benchmarks/memory_training.py predict")


def test_an_earlier_run_without_timed_batches_shows_its_steps_at_the_found_batches():
    """Runs kept from an earlier format (no ``stepped``: every variant timed at the found batch), and this run's
    entries the timed part did not reach (no ``stepped`` either: not timed); SYNTHETIC."""
    doc = synthetic_results()
    e = dict(doc["capacity"]["alexnet/12"])
    e.pop("stepped")
    e["found"] = {"liveness": 3000, "vdnn-all-p": 3500}
    rows = rep.capacity_entry_rows(doc, "alexnet", 12, e, doc["results"])
    assert any(
        r.startswith(
            "| 12 GiB | vdnn-all-p + per-step WR workspace | 3550 | 3500 (paper policy's) |  | 3500 | 300.0 / 310.0"
        )
        for r in rows
    )
    assert any(r.startswith("| 12 GiB | stock PyTorch | 3232 | 3000 | 0.928 | 3000 | 150.0 / 160.0") for r in rows)
    # this run's entry that the timed part never reached: searched, not timed
    rows = rep.capacity_entry_rows(doc, "alexnet", 12, e)
    assert "| 12 GiB | stock PyTorch | 3232 | 3000 | 0.928 | - | not run | | |" in rows
