"""The dashboard's data modules: profile discovery, scopes, the analysis, the plans the page shows and the
views' frames (no Panel, no browser).

All numbers come from engine/testing/synthetic.py (SYNTHETIC); the checks are properties that hold for any
profile: WR picks each kernel's fastest configuration within the limit, WD meets the front the page draws,
the baseline mark is the plan's own baseline, frames add up to the plan's totals.
"""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from dashboard import analysis as AN
from dashboard import frames as F
from dashboard import gpu as G
from dashboard import palette as PAL
from dashboard import profiles as PR
from dashboard import scopes as SC
from dashboard.plans import CHOICES, Choice, choose, configurations, plan_choice
from engine.configuration import Configuration, MicroConfig
from engine.errors import ProfileFormatError
from engine.plan import align
from engine.profile import Profile
from engine.testing import synthetic
from engine.testing.synthetic import synthetic_profile
from engine.units import MiB

SCOPE = SC.Scope("alexnet", 32, "tf32", "NCHW")


@pytest.fixture(scope="module")
def profile():
    return synthetic_profile("alexnet", 32, "powerOfTwo")  # SYNTHETIC


@pytest.fixture(scope="module")
def analysis(profile):
    return AN.analyse(profile, SCOPE)


def test_discover_profiles_reads_environment(tmp_path, profile):
    f = profile.save(tmp_path / "SYNTHETIC-a.profile.json.gz")
    d = tmp_path / "more"
    d.mkdir()
    profile.save(d / "SYNTHETIC-b.profile.json")
    env = {PR.PROFILE_ENV: f"{f}:{tmp_path / 'missing.profile.json'}", PR.PROFILE_DIR_ENV: f"{d}:{tmp_path / 'nodir'}"}
    found, warnings = PR.discover_profiles(env)
    assert found["SYNTHETIC-a"] == f and found["SYNTHETIC-b"] == d / "SYNTHETIC-b.profile.json"
    assert len(warnings) == 2 and "missing.profile.json" in warnings[0] + warnings[1]
    assert "nodir" in " ".join(warnings)


def test_load_profile_is_cached_and_errors_are_clear(tmp_path, profile):
    f = profile.save(tmp_path / "p.profile.json.gz")
    assert PR.load_profile(f) is PR.load_profile(f)
    with pytest.raises(ProfileFormatError, match="does not exist"):
        PR.load_profile(tmp_path / "nope.json")


def test_scopes_offer_smaller_batches_measured_for_every_kernel(profile):
    scopes = SC.profile_scopes(profile)
    assert {s.batch for s in scopes} == {2, 4, 8, 16, 32}
    assert all((s.network, s.precision, s.layout) == ("alexnet", "tf32", "NCHW") for s in scopes)


def test_complete_policies_never_stand_in_for_unmeasured_sizes(profile):
    assert SC.complete_policies(profile, SCOPE) == ["undivided", "powerOfTwo"]
    full = synthetic_profile("alexnet", 6, "all")  # SYNTHETIC
    assert SC.complete_policies(full, SC.Scope("alexnet", 6, "tf32", "NCHW")) == ["undivided", "powerOfTwo", "all"]


def test_analysis_sets_are_sorted_pareto_sets(analysis):
    assert set(analysis.policies) == {"undivided", "powerOfTwo"}
    for ps in analysis.policies.values():
        assert len(ps.sets) == len(ps.kernels) == 14
        for ws, t in zip(ps.ws, ps.t):
            assert np.all(np.diff(ws) > 0) and np.all(np.diff(t) < 0)
        assert np.all(np.diff(ps.front.workspace) > 0) and np.all(np.diff(ps.front.time_ms) < 0)


def test_analysis_is_cached_per_process(profile, analysis):
    assert AN.analyse(profile, SCOPE) is analysis


@pytest.mark.parametrize("limit", [0, 300 * 1024, 1 * MiB, 3 * MiB, 20 * MiB, 10**12])
def test_wr_takes_each_kernels_fastest_configuration_within_the_limit(analysis, limit):
    ps = analysis.policies["powerOfTwo"]
    c = plan_choice(analysis, "powerOfTwo", "WR", limit)
    if limit < ps.min_workspace:
        assert not c.feasible and "is below" in c.reason and c.plan is None
        return
    for k, conf in enumerate(configurations(ps, c)):
        fits = [x for x in ps.sets[k] if x.workspace <= limit]
        assert conf.workspace <= limit
        assert conf.time_ms == min(x.time_ms for x in fits)
    assert math.isclose(c.time_ms, sum(x.time_ms for x in configurations(ps, c)))
    assert c.workspace == sum(x.workspace for x in configurations(ps, c))
    assert [k.configuration for k in c.plan.kernels] == configurations(ps, c)


@pytest.mark.parametrize("budget_mib", [1, 4, 16, 64, 512, 10**6])
def test_wd_plan_meets_the_front_the_page_draws(analysis, budget_mib):
    ps = analysis.policies["powerOfTwo"]
    budget = budget_mib * MiB
    c = plan_choice(analysis, "powerOfTwo", "WD", budget)
    assert c.feasible and c.workspace <= c.arena <= budget and c.arena == c.plan.arena_size
    confs = configurations(ps, c)
    assert math.isclose(c.time_ms, sum(x.time_ms for x in confs))
    assert c.workspace == sum(x.workspace for x in confs)
    # the WD front's optimum at this budget is the plan's time: the star sits on the curve
    fits = ps.front.workspace <= budget
    assert math.isclose(c.time_ms, ps.front.time_ms[fits].min(), rel_tol=1e-9)


@pytest.mark.parametrize(
    "mode,budget",
    [("WR", 300 * 1024), ("WR", 2 * MiB), ("WR", 1 << 40), ("WD", 3 * MiB), ("WD", 40 * MiB), ("WD", 1 << 40)],
)
def test_baseline_mark_is_the_plans_own_baseline(analysis, mode, budget):
    """The undivided mark and the plan's speed-up come from the same engine plans."""
    c = plan_choice(analysis, "powerOfTwo", mode, budget)
    base = plan_choice(analysis, "undivided", mode, budget)
    if c.plan.totals.undivided_time_ms is None:
        assert not base.feasible
    else:
        assert base.time_ms == c.plan.totals.undivided_time_ms
    t_opt, ws_opt = analysis.policies["powerOfTwo"].unlimited()
    assert math.isclose(t_opt, c.plan.totals.unlimited_time_ms) and ws_opt == c.plan.totals.unlimited_workspace


def test_choices_are_shared_per_process_and_bounded(analysis, monkeypatch):
    from dashboard.cache import LRU

    monkeypatch.setattr("dashboard.plans.CHOICES", LRU(2))
    first = choose(analysis, "powerOfTwo", "WD", 8 * MiB)
    assert choose(analysis, "powerOfTwo", "WD", 8 * MiB).plan is first.plan
    choose(analysis, "powerOfTwo", "WD", 9 * MiB)
    choose(analysis, "powerOfTwo", "WD", 10 * MiB)  # evicts the 8 MiB plan
    assert choose(analysis, "powerOfTwo", "WD", 8 * MiB).plan is not first.plan
    assert CHOICES.size > 2  # the module's own cache was untouched


def test_a_plan_configuration_is_found_by_its_pieces_not_its_times(analysis):
    """index_of matches (micro-batch, engine plan) per piece: a copy with other (rounded) times still maps."""
    ps = analysis.policies["powerOfTwo"]
    conf = ps.sets[3][-1]
    moved = Configuration(tuple(MicroConfig(m.batch, m.plan, m.time_ms * (1 + 1e-12), m.workspace) for m in conf.micro))
    assert moved != conf and ps.index_of(3, moved) == len(ps.sets[3]) - 1


def test_front_is_optimal_on_a_small_case_by_brute_force(profile):
    """Three kernels: enumerate every combination of desirable configurations under aligned segments."""
    an = AN.analyse(profile, SC.Scope("alexnet", 4, "tf32", "NCHW"))
    ps = an.policies["powerOfTwo"]
    sub = AN.make_policy_sets("powerOfTwo", ps.kernels[:3], ps.sets[:3])
    for budget in [0, 50_000, 200_000, 1 * MiB, 5 * MiB]:
        best = min(
            (
                sum(c.time_ms for c in combo)
                for combo in itertools.product(*sub.sets)
                if sum(align(c.workspace) for c in combo) <= budget
            ),
            default=None,
        )
        fits = sub.front.workspace <= budget
        assert (best is None) == (not fits.any())
        if best is not None:
            assert math.isclose(sub.front.time_ms[fits].min(), best, rel_tol=1e-12)


def test_budgets_below_the_minimum_are_infeasible_with_a_reason(profile):
    """Without the zero-workspace plans every kernel needs some workspace: both modes must say so."""
    t = profile.table
    keep = t[~t.plan.isin([synthetic.GEMM, synthetic.FFT])]  # SYNTHETIC: only plans with a fixed workspace
    an = AN.analyse(Profile(keep, profile.provenance, profile.networks), SCOPE)
    ps = an.policies["powerOfTwo"]
    lowest = int(ps.front.workspace[0])
    assert lowest == sum(align(int(w[0])) for w in ps.ws) > 0
    c = plan_choice(an, "powerOfTwo", "WD", lowest - 1)
    assert not c.feasible and "is below" in c.reason
    assert plan_choice(an, "powerOfTwo", "WD", lowest).feasible
    c = plan_choice(an, "powerOfTwo", "WR", ps.min_workspace - 1)
    assert not c.feasible and "is below" in c.reason
    assert plan_choice(an, "powerOfTwo", "WR", ps.min_workspace).feasible


def test_equivalent_budget_pairs_wr_and_wd_by_total():
    assert AN.equivalent_budget("WR", 8 * MiB, 15) == (8 * MiB, 120 * MiB)
    assert AN.equivalent_budget("WD", 120 * MiB, 15) == (8 * MiB, 120 * MiB)


@pytest.mark.parametrize("mode", ["WR", "WD"])
def test_budget_steps_are_log_spaced_and_cover_the_range(analysis, mode):
    lo, hi = AN.budget_range(analysis, mode)
    steps = AN.budget_steps(lo, hi)
    assert steps[0] == 0 and steps[1] <= lo and steps[-1] >= hi
    ratios = np.array(steps[2:]) / np.array(steps[1:-1])
    assert np.all(ratios > 1.1) and np.all(ratios < 1.3)
    # no run of steps where nothing changes: below the second step every budget gives the 0 B plan
    plans = {plan_choice(analysis, "powerOfTwo", mode, b).index for b in steps[:2]}
    first_change = min(
        int(w)
        for ps in analysis.policies.values()
        for w in (np.concatenate(ps.ws) if mode == "WR" else ps.front.workspace)
        if w > 0
    )
    assert steps[1] <= first_change < steps[1] * 1.2 + 1 and len(plans) == 1


def test_execution_order_is_forward_then_backward_in_reverse(analysis):
    kernels = analysis.kernels
    order = [kernels[i].id for i in AN.execution_order(kernels)]
    assert order[:5] == ["conv1:F", "conv2:F", "conv3:F", "conv4:F", "conv5:F"]
    assert order[5:] == [
        "conv5:BD",
        "conv5:BF",
        "conv4:BD",
        "conv4:BF",
        "conv3:BD",
        "conv3:BF",
        "conv2:BD",
        "conv2:BF",
        "conv1:BF",
    ]


def test_timeline_pieces_are_back_to_back_and_add_up(analysis):
    ps = analysis.policies["powerOfTwo"]
    c = plan_choice(analysis, "powerOfTwo", "WD", 8 * MiB)
    tl = F.timeline_frame(ps, c)
    assert np.allclose(tl.start_ms.to_numpy()[1:], tl.end_ms.to_numpy()[:-1])
    assert math.isclose(tl.end_ms.iloc[-1], c.time_ms)
    per_kernel = tl.groupby("kernel").batch.sum()
    assert (per_kernel == 32).all()
    assert set(tl.row) == {"predicted"}
    measured = {k.id: 1.0 for k in ps.kernels}
    tl2 = F.timeline_frame(ps, c, measured)
    m = tl2[tl2.row == "measured"]
    assert len(m) == len(ps.kernels) and math.isclose(m.end_ms.iloc[-1], len(ps.kernels))
    assert m.lane.iloc[0] == "conv1 (measured)"


def test_workspace_frame_adds_up_to_each_modes_total(analysis):
    ps = analysis.policies["powerOfTwo"]
    wr = plan_choice(analysis, "powerOfTwo", "WR", 1 * MiB)
    wd = plan_choice(analysis, "powerOfTwo", "WD", 14 * MiB)
    f = F.workspace_frame(ps, wr, wd)
    for c in (wr, wd):
        part = f[f["mode"] == c.mode]
        assert math.isclose(part[list(F.KIND_ORDER)].to_numpy().sum() * MiB, c.workspace, rel_tol=1e-9)
    assert f[(f.layer == "conv1")].BD.eq(0).all()  # the first conv has no BackwardData


def test_desirable_frame_marks_the_chosen_configuration(analysis):
    ps = analysis.policies["powerOfTwo"]
    c = plan_choice(analysis, "powerOfTwo", "WD", 8 * MiB)
    k = analysis.kernel_index("conv2:F")
    points, pieces = F.desirable_frame(ps, k, c.index[k])
    assert points.chosen.sum() == 1 and points[points.chosen]["index"].iloc[0] == c.index[k]
    assert len(points) == len(ps.sets[k])
    widths = (pieces.end - pieces.start).groupby(pieces["index"]).sum()
    assert np.allclose(widths, 1.0)
    assert set(pieces.engine) <= {f"eng{i}" for i in range(4)}


def test_plan_frame_has_one_row_per_kernel_with_baseline(analysis):
    ps = analysis.policies["powerOfTwo"]
    c = plan_choice(analysis, "powerOfTwo", "WD", 8 * MiB)
    base = plan_choice(analysis, "undivided", "WD", 8 * MiB)
    f = F.plan_frame(ps, c)
    assert list(f.kernel) == [k.id for k in ps.kernels]
    assert math.isclose(f.time_ms.sum(), c.time_ms) and math.isclose(f.baseline_ms.sum(), base.time_ms)
    assert F.plan_frame(ps, Choice("powerOfTwo", "WR", 0, None, math.nan, 0, "no plan")).empty


def test_plans_text_and_division_group_equal_pieces():
    conf = Configuration((MicroConfig(32, "a", 1.0, 0), MicroConfig(32, "a", 1.0, 0), MicroConfig(16, "b", 0.5, 0)))
    assert AN.plans_text(conf) == "2x32 a + 16 b"
    assert AN.compact_division(conf) == "2x32+16"
    assert AN.compact_division(Configuration((MicroConfig(64, "a", 1.0, 0),))) == "64"


def test_engine_colours_favour_the_engines_that_win(profile):
    order = PAL.engines_by_wins(profile)
    colors = PAL.engine_colors(order)
    assert len(set(colors.values())) == len(colors) == len(set(order))
    # SYNTHETIC: the tensor-core stand-in is fastest at every size, so it gets the first colour
    assert order[0] == "eng3" and colors["eng3"] == PAL._PALETTE[0]


def test_measured_times_reads_verify_reports():
    report = {
        "kernels": [{"id": "conv1:F", "measured_ms": 1.5}, {"id": "conv2:F", "measured_ms": 2.0}],
        "totals": {"all_passed": True},
    }
    assert G.measured_times(report) == {"conv1:F": 1.5, "conv2:F": 2.0}


def test_gpu_status_says_why_not_without_a_gpu():
    ok, reason = G.gpu_status()
    if not ok:
        assert reason  # e.g. "CuPy is not installed ..."


def test_gpu_entry_points_take_what_the_dashboard_passes():
    """engine.gpu imports CuPy at module level, so read its signatures from the source: the GPU view calls
    profile_network(network, policy=, precision=, layout=, progress=, should_stop=, command=) and
    verify_plan(plan, progress=, should_stop=)."""
    import ast
    from pathlib import Path

    root = Path(G.__file__).resolve().parents[1] / "engine" / "gpu"
    wanted = {
        "profiler.py": ("profile_network", {"policy", "precision", "layout", "progress", "should_stop", "command"}),
        "verify.py": ("verify_plan", {"progress", "should_stop"}),
    }
    for file, (name, kwargs) in wanted.items():
        tree = ast.parse((root / file).read_text())
        fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == name)
        names = {a.arg for a in fn.args.args + fn.args.kwonlyargs}
        assert kwargs <= names, (file, kwargs - names)
