"""The per-page model: what the controls chose and everything the views show. Imports no Panel.

``PlannerState`` is one ``param.Parameterized`` per page (or notebook). Changing a control recomputes
only what depends on it: the profile -> the scopes it offers; a scope (network, mini-batch, dtype,
layout) -> the ``Analysis`` (desirable sets and fronts, the expensive part, cached per process); the
policy, mode, budget or selected kernel -> ``Result`` (engine.planner.make_plan's plans, cached per page, and
small frames: the slider path).
"""

from __future__ import annotations

import contextlib
import math
from pathlib import Path

import param

from engine.errors import EngineError
from engine.memory import MEMORY_POLICIES
from engine.policies import POLICIES
from engine.profile import ENGINE_SETS, Profile
from engine.units import GiB, MiB, format_size
from engine.zoo import DEFAULT_BATCH

from .analysis import MODES, Analysis, analyse, budget_range, budget_steps, equivalent_budget
from .compare import Comparison, compare, compare_options
from .errors import describe_error
from .gpu import measured_times
from .memory import memory_frames
from .memory_runs import RESULTS_ENV, Measured, measured, results_path
from .plans import PlanCache, plan_choice
from .profiles import PROFILE_ENV, discover_profiles, load_profile, requested_profiles
from .result import Result, build_result
from .scopes import Scope, complete_policies, profile_scopes, zoo_scopes

NO_PROFILE = (f"No bundled profile: assets/profiles/ holds none yet. Profile a network on a GPU host "
              f"(Profile button), or point {PROFILE_ENV} at a profile file.")
DEFAULT_LIMIT = 8 * MiB  # Caffe's default per-kernel workspace, the paper's WR 8 MiB / WD 120 MiB pairing


class PlannerState(param.Parameterized):
    """Controls and derived results of one page. Set params from code or widgets; read ``result``."""

    profile = param.Selector(default=None, objects=[], allow_None=True, doc="Profile name")
    network = param.Selector(default=None, objects=[], allow_None=True)
    batch = param.Selector(default=None, objects=[], allow_None=True, label="Mini-batch size")
    precision = param.Selector(default=None, objects=[], allow_None=True, label="Data type")
    layout = param.Selector(default=None, objects=[], allow_None=True)
    policy = param.Selector(default="powerOfTwo", objects=list(POLICIES), label="Batch-size policy")
    engines = param.Selector(default="all", objects=list(ENGINE_SETS), label="Engines",
                             doc="Plans the optimizers may use: all measured, only cuDNN's heuristic list (what a "
                                 "framework sees), or no NONDETERMINISTIC plans")
    mode = param.Selector(default="WD", objects=list(MODES),
                          doc="WR: per-kernel workspace limit; WD: one total budget for the network")
    budget = param.Integer(default=DEFAULT_LIMIT, bounds=(0, None),
                           doc="Bytes: the per-kernel limit in WR, the network total in WD")
    kernel = param.String(default="", doc="Kernel id (layer:F|BD|BF) whose desirable set is shown")
    compare = param.Selector(default="", objects={"(none)": ""}, label="Compare with",
                             doc="A profile of the same network on another GPU, whose front is drawn beside this one")

    analysis = param.ClassSelector(class_=Analysis, default=None, allow_None=True, constant=True)
    result = param.ClassSelector(class_=Result, default=None, allow_None=True, constant=True)
    comparison = param.ClassSelector(class_=Comparison, default=None, allow_None=True, constant=True)
    compare_error = param.String(default="", constant=True, doc="Why the chosen comparison cannot be shown")
    measured = param.Dict(default=None, allow_None=True,
                          doc="Per-kernel measured times (ms) from verifying the current plan on a GPU")
    verified = param.Dict(default=None, allow_None=True,
                          doc="Totals of the verification report (all_passed, failed, measured_ms, ...)")
    memory_policy = param.Selector(default="superneurons", objects=[], label="Memory policy",
                                   doc="engine.memory policy (vDNN, Layrub, SuperNeurons, baselines)")
    capacity = param.Integer(default=12 * GiB, bounds=(1, None), allow_None=True,
                             doc="GPU memory capacity in bytes for the memory planner (None: unbounded); the "
                                 "default is the memory papers' 12 GB GPUs (K40, TITAN X)")
    memory_results = param.String(default="", doc=f"The memory benchmark's results JSON (benchmarks/memory_training"
                                  f".py), whose measured runs the memory tab sets beside its prediction; default "
                                  f"${{{RESULTS_ENV}}}, else benchmarks/reports/memory_training.json")
    messages = param.List(default=[], constant=True, doc="(level, text) notes for the page")
    error = param.String(default="", constant=True, doc="Why there is no result, in one line")

    def __init__(self, profiles: dict | None = None, environ=None, **params):
        """``profiles``: name -> path or Profile; default: bundled plus the environment's (profiles.py).
        Other keywords set controls (profile, network, batch, precision, layout, policy, mode, budget, kernel)."""
        wanted = {k: params.pop(k) for k in ("profile", "network", "batch", "precision", "layout") if k in params}
        self._budget_given = "budget" in params
        if not params.get("memory_results"):
            params["memory_results"] = str(results_path(environ))
        self._policy_given = "policy" in params
        super().__init__(**params)
        warnings: list[str] = []
        self._requested: list[str] = []
        if profiles is None:
            profiles, warnings = discover_profiles(environ)
            self._requested = requested_profiles(environ)
        self._profiles: dict[str, Path | Profile] = dict(profiles)
        self._scopes: list[Scope] = []
        self._plans = PlanCache()
        self._busy = False
        self._notes = [("warning", w) for w in warnings]
        # Set by the page (Dashboard) to batch every view's update into one message, e.g. panel's io.hold.
        self.hold_updates = contextlib.nullcontext
        self._restricted: dict[tuple[str, str], tuple[Profile, Profile]] = {}
        self.param.watch(self._on_profile, ["profile", "engines"])
        self.param.watch(self._on_scope, ["network", "batch", "precision", "layout"])
        self.param.watch(self._on_mode, ["mode"])
        self.param.watch(self._on_result, ["policy", "mode", "budget", "kernel", "measured", "compare"])
        self.param.memory_policy.objects = list(MEMORY_POLICIES)
        self.param.profile.objects = list(self._profiles)
        if not self._profiles:
            # Still offer the zoo, so a GPU host can profile a network from scratch.
            self._scopes = zoo_scopes()
            with param.edit_constant(self):
                self.messages = self._notes + [("info", NO_PROFILE)]
            self._update_scope_options(wanted)
            return
        first = wanted.pop("profile", None) or self._default_profile()
        with param.parameterized.discard_events(self):
            self.profile = first
        self._load_profile(**wanted)

    # --- profiles ----------------------------------------------------------------------------
    def add_profile(self, name: str, profile: Profile, select: bool = True) -> None:
        """Offer a profile measured live on this host (the GPU "Profile" job)."""
        self._profiles[name] = profile
        self.param.profile.objects = list(self._profiles)
        if select:
            self.profile = name

    def _default_profile(self) -> str:
        """The first profile named by ${UCUDNN_PROFILE}; else the first measured (non-SYNTHETIC) one, preferring
        tf32/NCHW (cuDNN's and PyTorch's default) and a powerOfTwo profile (the bundled ones hold the engine
        sweep; the bundled ``all`` profile predates it), ranked by file name so that only the chosen one is
        loaded."""
        if self._requested and self._requested[0] in self._profiles:
            return self._requested[0]

        def rank(name: str):
            n = name.lower()
            return ("tf32-nchw" not in n, n.endswith("-all"), "synthetic" in n, name)
        names = sorted(self._profiles, key=rank)
        for name in names:
            try:
                if not self._get_profile(name).synthetic:
                    return name
            except EngineError:
                continue
        return names[0]

    def _get_profile(self, name: str, engines: str = "all") -> Profile:
        src = self._profiles[name]
        profile = src if isinstance(src, Profile) else load_profile(src)
        if engines == "all":
            return profile
        base, restricted = self._restricted.get((name, engines), (None, None))
        if base is not profile:  # kept, so the optimizers' caches (keyed by profile) keep working
            restricted = profile.restrict(engines)
            self._restricted[(name, engines)] = (profile, restricted)
        return restricted

    @property
    def current_profile(self) -> Profile | None:
        return self.analysis.profile if self.analysis else None

    def _on_profile(self, *_events) -> None:
        self._load_profile()

    def _load_profile(self, **wanted) -> None:
        """Profile -> offered scopes; keep the current network/batch/dtype/layout where still offered."""
        try:
            profile = self._get_profile(self.profile)
        except EngineError as err:
            self._set_error(describe_error(err))
            return
        self._scopes = profile_scopes(profile)
        if not self._scopes:
            self._set_error(f"profile {self.profile!r} covers no network of the zoo completely")
            return
        notes = list(self._notes)
        if profile.synthetic:
            notes.append(("warning", "SYNTHETIC profile: made-up numbers from the unit-test model, not measurements."))
        with param.edit_constant(self):
            self.messages = notes
        self.param.compare.objects = options = compare_options(self.profile, list(self._profiles))
        if self.compare not in options.values():
            with param.parameterized.discard_events(self):
                self.compare = ""
        pick = {k: wanted.get(k, getattr(self, k)) for k in ("network", "batch", "precision", "layout")}
        self._update_scope_options(pick)

    def _update_scope_options(self, pick: dict) -> None:
        """Cascade network -> batch -> precision -> layout, each constrained by the ones before."""
        scopes = self._scopes
        values = {}
        for name, attr in (("network", "network"), ("batch", "batch"), ("precision", "precision"),
                           ("layout", "layout")):
            options = list(dict.fromkeys(getattr(s, attr) for s in scopes))
            if name == "batch":
                options = sorted(options)
            value = pick.get(name)
            if value not in options:
                value = self._preferred(name, options, values)
            values[name] = value
            self.param[name].objects = options
            scopes = [s for s in scopes if getattr(s, attr) == value]
        self._busy = True
        try:
            self.param.update(**values)
        finally:
            self._busy = False
        self._compute_analysis()

    def _preferred(self, name: str, options: list, chosen: dict):
        """Defaults: the profiled (largest) mini-batch, or the zoo's default when profiling from scratch."""
        if name == "batch":
            default = DEFAULT_BATCH.get(chosen.get("network"))
            return default if not self._profiles and default in options else max(options)
        return options[0]

    # --- analysis ----------------------------------------------------------------------------
    def _on_scope(self, *_events) -> None:
        if self._busy:
            return
        pick = {k: getattr(self, k) for k in ("network", "batch", "precision", "layout")}
        self._update_scope_options(pick)

    @property
    def scope(self) -> Scope | None:
        if None in (self.network, self.batch, self.precision, self.layout):
            return None
        return Scope(self.network, int(self.batch), self.precision, self.layout)

    def _compute_analysis(self) -> None:
        if not self._profiles:
            self._set_error(NO_PROFILE)
            return
        try:
            profile = self._get_profile(self.profile, self.engines)
            analysis = analyse(profile, self.scope)
        except (EngineError, ValueError, KeyError) as err:
            self._set_error(describe_error(err))
            return
        policies = list(analysis.policies)
        new_profile = self.analysis is None or self.analysis.profile is not profile
        recorded = next((n.get("policy") for n in profile.networks if n.get("name") == self.network), None)
        self._busy = True
        try:
            self.param.policy.objects = policies
            updates = {"measured": None, "verified": None}
            if new_profile and not self._policy_given and recorded in policies:
                updates["policy"] = recorded  # what the profile was measured for, e.g. "all"
            elif self.policy not in policies:
                updates["policy"] = "powerOfTwo" if "powerOfTwo" in policies else policies[-1]
            self._policy_given = False
            lo, hi = budget_range(analysis, self.mode)
            if not self._budget_given or not lo <= self.budget <= hi:
                n = len(analysis.kernels)
                default = min(max(DEFAULT_LIMIT * (n if self.mode == "WD" else 1), lo), hi)
                steps = budget_steps(lo, hi)  # start on a slider step, so slider and summary agree
                updates["budget"] = int(min(steps, key=lambda b: abs(math.log2(b + 1) - math.log2(default + 1))))
            if analysis.kernel_index(self.kernel) is None:
                updates["kernel"] = ""
            with param.edit_constant(self):
                self.analysis = analysis
            self.param.update(**updates)
            self._budget_given = True  # from now on keep the user's budget while it stays in range
        finally:
            self._busy = False
        self._compute_result()

    # --- per-budget result -------------------------------------------------------------------
    def _on_mode(self, event) -> None:
        """Switching mode keeps the same total, as Fig. 13 pairs WR and WD bars."""
        if self._busy or self.analysis is None:
            return
        limit, total = equivalent_budget(event.old, self.budget, len(self.analysis.kernels))
        self._busy = True
        try:
            self.budget = total if event.new == "WD" else limit
        finally:
            self._busy = False

    def _on_result(self, *events) -> None:
        if self._busy:
            return
        if self.measured and any(e.name != "measured" for e in events):
            self._busy = True  # a measurement belongs to the plan it verified
            try:
                self.param.update(measured=None, verified=None)
            finally:
                self._busy = False
        self._compute_result()

    def _compute_result(self) -> None:
        if self.analysis is None:
            return
        try:
            result = build_result(self.analysis, self._plans, self.policy, self.mode, self.budget, self.kernel,
                                  self.measured, self.verified)
        except (EngineError, ValueError, KeyError) as err:
            self._set_error(describe_error(err))
            return
        comparison, why = self._comparison()
        with self.hold_updates(), param.edit_constant(self):
            self.param.update(result=result, error="" if result.choice.feasible else result.choice.reason,
                              comparison=comparison, compare_error=why)

    def _comparison(self) -> tuple[Comparison | None, str]:
        """The chosen other GPU's front beside this one's, at this policy and the plan's total budget."""
        if not self.compare:
            return None, ""
        try:
            there = analyse(self._get_profile(self.compare, self.engines), self.scope)
            total = equivalent_budget(self.mode, self.budget, len(self.analysis.kernels))[1]
            return compare(self.analysis, there, self.policy, total), ""
        except (EngineError, ValueError, KeyError) as err:
            return None, f"cannot compare with {self.compare}: {describe_error(err)}"

    def _set_error(self, text: str) -> None:
        with param.edit_constant(self):
            self.param.update(error=text, result=None)

    def set_verification(self, report: dict) -> None:
        """Show a verification report of the current plan (engine.gpu.verify_plan): measured times in the
        timeline and summary, correctness in the summary."""
        totals = dict(report.get("totals", {}))
        self._busy = True
        try:
            self.verified = totals
        finally:
            self._busy = False
        self.measured = measured_times(report)

    # --- memory planner ------------------------------------------------------------------------
    def memory(self) -> dict:
        """Frames of the memory timeline for the current network and memory controls (dashboard/memory.py);
        computed on demand (the memory tab), not on every budget change."""
        if self.scope is None:
            raise EngineError(self.error or "choose a network first")
        profile = self.analysis.profile if self.analysis is not None else None
        return memory_frames(profile, self.scope, self.memory_policy, self.capacity)

    def memory_measured(self) -> Measured:
        """The memory benchmark's measured run for the memory tab's network, mini-batch, policy and capacity
        (dashboard/memory_runs.py); a bad results file is a one-line ``error``, never an exception."""
        scope = self.scope
        if scope is None:
            return measured(self.memory_results, None, None, self.memory_policy, self.capacity)
        return measured(self.memory_results, scope.network, scope.batch, self.memory_policy, self.capacity,
                        scope.precision, scope.layout)

    # --- plans ---------------------------------------------------------------------------------
    def budget_steps(self) -> list[int]:
        if self.analysis is None:
            return [0]
        return budget_steps(*budget_range(self.analysis, self.mode))

    def make_plan(self):
        """The engine's plan for the current controls: the one the page shows, Export writes and Verify runs."""
        if self.analysis is None:
            raise EngineError(self.error or "no profile loaded")
        choice = self.result.choice if self.result is not None else plan_choice(
            self.analysis, self.policy, self.mode, self.budget)
        if not choice.feasible:
            raise EngineError(choice.reason)
        return choice.plan

    def plan_json(self) -> str:
        return self.make_plan().to_json()

    def apply_plan(self, plan) -> str:
        """Show a loaded plan (engine.plan.Plan): move the controls to its network, mini-batch, dtype, layout,
        policy, mode and budget, and say how its prediction compares with this profile's. Raises EngineError
        when the current profile cannot plan that network."""
        scope = Scope(plan.network, int(plan.batch), plan.precision, plan.layout)
        if scope not in self._scopes or not self._profiles:
            raise EngineError(f"profile {self.profile!r} has no measurements for {plan.network} at mini-batch "
                              f"{plan.batch}, {plan.precision} {plan.layout}")
        policies = complete_policies(self._get_profile(self.profile), scope)
        if plan.policy not in policies:
            raise EngineError(f"profile {self.profile!r} cannot plan policy {plan.policy!r} for {plan.network} "
                              f"b{plan.batch} (it offers {', '.join(policies)})")
        self._busy = True
        try:
            self.param.update(network=scope.network, batch=scope.batch, precision=scope.precision,
                              layout=scope.layout)
        finally:
            self._busy = False
        self._update_scope_options({"network": scope.network, "batch": scope.batch, "precision": scope.precision,
                                    "layout": scope.layout})
        self._busy = True
        try:
            self.param.update(policy=plan.policy, mode=plan.mode.upper(), budget=int(plan.budget))
        finally:
            self._busy = False
        self._compute_result()
        c = self.result.choice
        what = (f"{plan.network} b{plan.batch} {plan.precision} {plan.layout}, {plan.mode.upper()} {plan.policy}, "
                f"budget {format_size(plan.budget)}; the file predicts {plan.totals.time_ms:.3f} ms")
        if c.feasible:
            return what + f", this profile predicts {c.time_ms:.3f} ms for the same controls"
        return what + f"; this profile finds no plan there: {c.reason}"
