"""Engine objects -> plain data and tidy frames for the views. Imports no Panel.

The expensive part of the dashboard is computing, once per (profile, network, mini-batch, precision,
layout), every kernel's desirable set and the network Pareto front for each batch-size policy
(mu-cuDNN §III-C: the WD problem is a multiple-choice knapsack over desirable sets). ``Analysis``
holds those; every budget change is then an index into sorted arrays (``choose``), which keeps the
budget slider cheap (issue "Dashboard", item 5).
"""

from __future__ import annotations

import importlib
import os
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from functools import cached_property, lru_cache
from pathlib import Path

import numpy as np
import pandas as pd
from bokeh.palettes import Category20_20, Category20b_20, Category20c_20

from engine.errors import EngineError, InfeasibleBudgetError, ProfileFormatError
from engine.kernels import LAYOUTS, PRECISIONS, KernelKind
from engine.memory import memory_frames as _memory_frames
from engine.memory import plan_memory
from engine.network import Kernel, Network
from engine.optimize.front import network_front
from engine.configuration import Configuration
from engine.plan import load_plan as _load_plan
from engine.kernel_sets import kernel_sets
from engine.planner import aligned_set
from engine.policies import POLICIES, batch_sizes
from engine.profile import Profile, bundled_profiles
from engine.pytorch.loader import is_torch_name
from engine.units import MiB, format_size
from engine.zoo import DEFAULT_BATCH, NETWORKS, get_network

# Extra profile files for the app and notebook (tests point these at SYNTHETIC profiles explicitly):
PROFILE_ENV = "UCUDNN_PROFILE"          # one or more files, separated by os.pathsep
PROFILE_DIR_ENV = "UCUDNN_PROFILE_DIR"  # one or more folders of *.profile.json[.gz]
MODES = ("WR", "WD")
KIND_ORDER = ("F", "BD", "BF")
KIND_NAMES = {k.short: k.value for k in KernelKind}


# --- profiles -----------------------------------------------------------------------------------

def profile_name(path: Path) -> str:
    """``SYNTHETIC-alexnet.profile.json.gz`` -> ``SYNTHETIC-alexnet``."""
    name = path.name
    return name.split(".profile")[0] if ".profile" in name else name.split(".json")[0]


def discover_profiles(environ=None) -> tuple[dict[str, Path], list[str]]:
    """Bundled profiles plus those named by the environment, and one warning per bad entry.

    Extra profiles override bundled ones of the same name, so a test can serve exactly what it chose.
    """
    environ = os.environ if environ is None else environ
    found: dict[str, Path] = dict(bundled_profiles())
    warnings: list[str] = []
    for folder in filter(None, environ.get(PROFILE_DIR_ENV, "").split(os.pathsep)):
        d = Path(folder)
        if not d.is_dir():
            warnings.append(f"{PROFILE_DIR_ENV}: {folder!r} is not a folder")
            continue
        for p in sorted(d.glob("*.profile.json*")):
            found[profile_name(p)] = p
    for file in filter(None, environ.get(PROFILE_ENV, "").split(os.pathsep)):
        p = Path(file)
        if not p.is_file():
            warnings.append(f"{PROFILE_ENV}: {file!r} does not exist")
            continue
        found[profile_name(p)] = p
    return found, warnings


def requested_profiles(environ=None) -> list[str]:
    """Names of the profiles ${PROFILE_ENV} names: the page opens on the first (someone asked for it)."""
    environ = os.environ if environ is None else environ
    return [profile_name(Path(f)) for f in environ.get(PROFILE_ENV, "").split(os.pathsep) if f and Path(f).is_file()]


@lru_cache(maxsize=16)
def _load(path: str, mtime: float) -> Profile:
    return Profile.load(path)


def load_profile(path: str | Path) -> Profile:
    """Load once per process (profiles are read-only); a changed file is read again."""
    path = Path(path)
    try:
        mtime = path.stat().st_mtime
    except OSError:
        raise ProfileFormatError(f"profile {str(path)!r} does not exist") from None
    return _load(str(path), mtime)


@lru_cache(maxsize=64)
def _engines(profile: Profile) -> dict[str, str]:
    t = profile.table[["plan", "engine_id"]].drop_duplicates("plan")
    return {p: f"eng{int(e)}" for p, e in zip(t.plan, t.engine_id)}


def engine_label(profile: Profile, plan: str) -> str:
    """cuDNN engine of a plan (the colour in Fig. 3/8 views); several knob settings share one engine."""
    return _engines(profile).get(plan, plan)


# distinct hues first (Category20's dark halves), then their light halves, then two more sets of 20
_PALETTE = Category20_20[::2] + Category20_20[1::2] + Category20b_20 + Category20c_20


def engine_colors(engines) -> dict[str, str]:
    """Stable colours per engine, in the given order of importance (the most distinct colours first)."""
    ordered = list(dict.fromkeys(engines))
    return {e: _PALETTE[i % len(_PALETTE)] for i, e in enumerate(ordered)}


def engines_by_wins(profile: Profile) -> list[str]:
    """Engine labels ordered by how often the engine is the fastest plan of a (kernel, micro-batch) in the
    profile: the engines that plans actually pick get the most distinct colours."""
    ok = profile.table[profile.table.status == "ok"]
    labels = _engines(profile)
    if ok.empty:
        return list(dict.fromkeys(labels.values()))
    best = ok.loc[ok.groupby(["signature", "micro_batch"]).time_ms.idxmin(), "plan"].map(labels)
    wins = best.value_counts()
    rest = sorted(set(labels.values()) - set(wins.index), key=lambda e: (len(e), e))
    return list(wins.index) + rest


def compact_division(conf: Configuration) -> str:
    """Micro-batch division with runs grouped: ``2x128``, ``23x11+3`` (n x size, in execution order)."""
    runs: list[list[int]] = []
    for m in conf.micro:
        if runs and runs[-1][1] == m.batch:
            runs[-1][0] += 1
        else:
            runs.append([1, m.batch])
    return "+".join(f"{n}x{b}" if n > 1 else str(b) for n, b in runs)


@lru_cache(maxsize=64)
def network(name: str, batch: int) -> Network:
    return get_network(name, batch)


@dataclass(frozen=True)
class Scope:
    """What the controls fix before the budget: one network at one mini-batch, dtype and layout."""

    network: str
    batch: int
    precision: str
    layout: str


def profile_scopes(profile: Profile) -> list[Scope]:
    """Every (network, mini-batch, precision, layout) this profile can plan.

    Networks come from the profile's ``networks`` list (zoo names and PyTorch model names such as
    ``torchvision:resnet50``). Besides the profiled mini-batch, any smaller size measured for every kernel is
    offered too: measurements are per micro-batch size, so a profile taken at B=256 under powerOfTwo also
    covers B=128 (engine/kernels.py docstring).
    """
    out: list[Scope] = []
    for entry in profile.networks:
        name = entry.get("name")
        if name not in NETWORKS and not is_torch_name(name):
            continue
        prec, layout, batch = entry.get("precision", "tf32"), entry.get("layout", "NCHW"), int(entry.get("batch", 0))
        if batch < 1:
            continue
        keys = network(name, batch).unique_kernels(prec, layout)
        if not keys or not all(profile.has(k) for k in keys):
            continue
        common = set.intersection(*(set(profile.sizes(k)) for k in keys))
        for b in sorted(s for s in common if 2 <= s <= batch):
            scope = Scope(name, b, prec, layout)
            if scope not in out:
                out.append(scope)
    return out


def zoo_scopes() -> list[Scope]:
    """Without any profile: every zoo network at a few mini-batch sizes, for profiling from scratch."""
    out = []
    for name in NETWORKS:
        for batch in sorted({32, 64, 128, 256, DEFAULT_BATCH[name]}):
            for precision in PRECISIONS:
                for layout in LAYOUTS:
                    out.append(Scope(name, batch, precision, layout))
    return out


def complete_policies(profile: Profile, scope: Scope) -> list[str]:
    """Policies whose every micro-batch size was measured for every kernel of the scope.

    A powerOfTwo profile cannot stand in for ``all``: that would silently plan with fewer sizes.
    """
    keys = network(scope.network, scope.batch).unique_kernels(scope.precision, scope.layout)
    ok = []
    for policy in POLICIES:
        need = set(batch_sizes(policy, scope.batch))
        if all(need <= set(profile.sizes(k)) for k in keys):
            ok.append(policy)
    return ok


# --- analysis: desirable sets and fronts, once per scope ----------------------------------------

@dataclass(frozen=True)
class ConfInfo:
    """What the views show of one configuration, computed once (the budget slider re-reads these)."""

    division: str
    plans: str
    engines: str
    batch: np.ndarray        # per piece, execution order
    plan: tuple[str, ...]
    engine: tuple[str, ...]
    piece: tuple[str, ...]   # "1/4", "2/4", ...
    ms: np.ndarray


@dataclass
class PolicySets:
    """One policy's desirable sets (ascending workspace, strictly decreasing time) and its network front.

    The front is computed over the sets with every workspace rounded up to the WD arena alignment, as
    ``engine.planner.make_plan`` solves WD, so the plan the slider shows is the plan Export writes.
    ``front_index[k][j]`` maps entry j of kernel k's aligned set back to its index in ``sets[k]``.
    """

    policy: str
    kernels: list[Kernel]
    sets: list[list[Configuration]]
    front: object                    # engine.optimize.front.NetworkFront over the aligned sets
    ws: list[np.ndarray] = field(repr=False)
    t: list[np.ndarray] = field(repr=False)
    front_index: list[list[int]] | None = field(default=None, repr=False)
    seconds: float = 0.0
    engines: dict[str, str] = field(default_factory=dict, repr=False)   # plan -> engine label
    _info: dict = field(default_factory=dict, repr=False)        # (k, j) -> ConfInfo
    _desirable: dict = field(default_factory=dict, repr=False)   # k -> (points, pieces) of Fig. 8

    def info(self, k: int, j: int) -> ConfInfo:
        """Labels and piece arrays of configuration ``j`` of kernel ``k`` (cached)."""
        hit = self._info.get((k, j))
        if hit is None:
            conf = self.sets[k][j]
            engines = tuple(self.engines.get(m.plan, m.plan) for m in conf.micro)
            n = len(conf.micro)
            hit = ConfInfo(compact_division(conf), plans_text(conf), " + ".join(dict.fromkeys(engines)),
                           np.array([m.batch for m in conf.micro]), tuple(m.plan for m in conf.micro), engines,
                           tuple(f"{i + 1}/{n}" for i in range(n)), np.array([m.time_ms for m in conf.micro]))
            self._info[(k, j)] = hit
        return hit

    @cached_property
    def order(self) -> list[int]:
        return execution_order(self.kernels)

    @property
    def min_workspace(self) -> int:
        """Smallest per-kernel limit every kernel can meet (WR feasibility)."""
        return int(max(w[0] for w in self.ws))

    @property
    def max_workspace(self) -> int:
        """Per-kernel limit beyond which WR gains nothing."""
        return int(max(w[-1] for w in self.ws))

    @cached_property
    def sweep(self) -> pd.DataFrame:
        return wr_sweep(self)


def make_policy_sets(policy: str, kernels: list[Kernel], sets: list[list[Configuration]],
                     seconds: float = 0.0, engines: dict[str, str] | None = None) -> PolicySets:
    sets = [sorted(s, key=lambda c: (c.workspace, c.time_ms)) for s in sets]
    ws = [np.fromiter((c.workspace for c in s), dtype=np.int64, count=len(s)) for s in sets]
    ts = [np.fromiter((c.time_ms for c in s), dtype=float, count=len(s)) for s in sets]
    pairs = [aligned_set(s) for s in sets]
    aligned, index = [a for a, _ in pairs], [i for _, i in pairs]
    return PolicySets(policy, kernels, sets, network_front(aligned), ws, ts, index, seconds, dict(engines or {}))


def _policy_sets(profile: Profile, net: Network, scope: Scope, policy: str) -> PolicySets:
    t0 = time.perf_counter()
    pairs = kernel_sets(profile, net, policy, precision=scope.precision, layout=scope.layout)
    kernels = [k for k, _ in pairs]
    sets = [list(s) for _, s in pairs]
    ps = make_policy_sets(policy, kernels, sets, engines=_engines(profile))
    ps.seconds = time.perf_counter() - t0
    return ps


@dataclass
class Analysis:
    profile: Profile
    scope: Scope
    net: Network
    policies: dict[str, PolicySets]

    @property
    def kernels(self) -> list[Kernel]:
        return next(iter(self.policies.values())).kernels

    @cached_property
    def fronts(self) -> pd.DataFrame:
        return front_frame(self)

    @cached_property
    def engine_colors(self) -> dict[str, str]:
        return engine_colors(engines_by_wins(self.profile))

    def kernel_index(self, kernel_id: str) -> int | None:
        return next((i for i, k in enumerate(self.kernels) if k.id == kernel_id), None)


_ANALYSES: OrderedDict = OrderedDict()
_ANALYSES_LOCK = threading.Lock()


def analyse(profile: Profile, scope: Scope, policies: list[str] | None = None) -> Analysis:
    """Desirable sets and fronts for every complete policy of a scope; an LRU of 8 per process.

    Results are read-only and shared by all sessions of the server, so a second visitor's page (or the
    same controls picked again) costs nothing.
    """
    policies = complete_policies(profile, scope) if policies is None else policies
    if not policies:
        raise ProfileFormatError(f"profile lacks micro-batch {scope.batch} for some kernel of {scope.network}")
    key = (id(profile), scope, tuple(policies))
    with _ANALYSES_LOCK:
        if key in _ANALYSES:
            _ANALYSES.move_to_end(key)
            return _ANALYSES[key][1]
    net = network(scope.network, scope.batch)
    result = Analysis(profile, scope, net, {p: _policy_sets(profile, net, scope, p) for p in policies})
    with _ANALYSES_LOCK:
        _ANALYSES[key] = (profile, result)  # keep the profile alive so its id stays unique
        while len(_ANALYSES) > 8:
            _ANALYSES.popitem(last=False)
    return result


# --- choosing configurations at a budget (the per-slider work) ----------------------------------

@dataclass(frozen=True)
class Choice:
    """Each kernel's configuration under one (policy, mode, budget); indices into the policy's sets.

    ``budget`` is the per-kernel limit in WR and the network total in WD (mu-cuDNN §III-A).
    ``workspace`` is the sum of the chosen configurations' workspaces, the network total in both modes;
    ``arena`` (WD) is that sum with every segment aligned, the size of the one WD workspace.
    """

    policy: str
    mode: str
    budget: int
    index: tuple[int, ...] | None
    time_ms: float
    workspace: int
    reason: str = ""
    arena: int | None = None

    @property
    def feasible(self) -> bool:
        return self.index is not None


def choose(ps: PolicySets, mode: str, budget: int) -> Choice:
    """WR: every kernel takes its fastest configuration within ``budget`` (the WR optimum is an element
    of the desirable set, ucudnn-reference.md §6). WD: the network front's optimum at total ``budget``."""
    budget = int(budget)
    if mode == "WR":
        idx = []
        for k, w in enumerate(ps.ws):
            i = int(np.searchsorted(w, budget, side="right")) - 1
            if i < 0:
                return Choice(ps.policy, mode, budget, None, float("nan"), 0,
                              f"per-kernel limit {format_size(budget)} is below the {format_size(int(w[0]))} "
                              f"that {ps.kernels[k].id} needs at least")
            idx.append(i)
        time_ms = float(sum(t[i] for t, i in zip(ps.t, idx)))
        ws = int(sum(int(w[i]) for w, i in zip(ps.ws, idx)))
        return Choice(ps.policy, mode, budget, tuple(idx), time_ms, ws)
    if mode != "WD":
        raise ValueError(f"unknown mode {mode!r}; expected WR or WD")
    front = ps.front
    lowest = int(front.workspace[0])
    if budget < lowest:
        return Choice(ps.policy, mode, budget, None, float("nan"), 0,
                      f"total budget {format_size(budget)} is below the {format_size(lowest)} the network needs "
                      f"at least under {ps.policy}")
    try:
        i = int(front.at_budget(budget))
    except InfeasibleBudgetError as err:
        return Choice(ps.policy, mode, budget, None, float("nan"), 0, str(err))
    idx = tuple(ps.front_index[k][int(j)] for k, j in enumerate(front.choice(i)))
    ws = int(sum(int(w[j]) for w, j in zip(ps.ws, idx)))
    return Choice(ps.policy, mode, budget, idx, float(front.time_ms[i]), ws, arena=int(front.workspace[i]))


def configurations(ps: PolicySets, choice: Choice) -> list[Configuration]:
    return [s[i] for s, i in zip(ps.sets, choice.index)]


def equivalent_budget(mode: str, budget: int, n_kernels: int) -> tuple[int, int]:
    """(WR per-kernel limit, WD total) with the same total, as Fig. 13/14 pair them: total = limit x kernels."""
    if mode == "WR":
        return budget, budget * n_kernels
    return budget // n_kernels, budget


def unlimited(ps: PolicySets) -> tuple[float, int]:
    """(time, workspace) of the unlimited-workspace optimum: every kernel's fastest configuration."""
    return float(sum(t[-1] for t in ps.t)), int(sum(int(w[-1]) for w in ps.ws))


def budget_range(analysis: Analysis, mode: str) -> tuple[int, int]:
    """Slider bounds: from the smallest feasible budget to twice what the fastest plan needs."""
    sets = analysis.policies.values()
    if mode == "WR":
        lo = max(1024, min(ps.min_workspace for ps in sets))
        hi = max(ps.max_workspace for ps in sets)
    else:
        lo = max(1024, min(int(ps.front.workspace[0]) for ps in sets))
        hi = max(int(ps.front.workspace[-1]) for ps in sets)
    return lo, max(2 * hi, 4 * lo)


def budget_steps(lo: int, hi: int, per_octave: int = 4) -> list[int]:
    """Log-spaced budgets (``per_octave`` steps per doubling, whole bytes), plus 0 B."""
    k0 = int(np.floor(np.log2(max(lo, 1)) * per_octave))
    k1 = int(np.ceil(np.log2(max(hi, 2)) * per_octave))
    steps = sorted({int(round(2 ** (k / per_octave))) for k in range(k0, k1 + 1)} - {0})
    return [0] + steps


# --- frames for the views -----------------------------------------------------------------------

def _thin(n: int, limit: int = 400) -> np.ndarray:
    """Indices of at most ``limit`` of ``n`` front points, evenly spread, both ends kept: the browser repaints
    every point on each budget change, and a step line of 400 points looks the same as the full front."""
    if n <= limit:
        return np.arange(n)
    return np.unique(np.linspace(0, n - 1, limit).round().astype(int))


def front_frame(analysis: Analysis) -> pd.DataFrame:
    """Network fronts of every policy: policy, workspace (bytes), workspace_mib, time_ms."""
    parts = []
    for name, ps in analysis.policies.items():
        ws, t = np.asarray(ps.front.workspace, dtype=np.int64), np.asarray(ps.front.time_ms, dtype=float)
        keep = _thin(len(ws))
        ws, t = ws[keep], t[keep]
        parts.append(pd.DataFrame({"policy": name, "workspace": ws, "workspace_mib": ws / MiB, "time_ms": t}))
    return pd.concat(parts, ignore_index=True)


def wr_sweep(ps: PolicySets) -> pd.DataFrame:
    """Totals of WR plans as the per-kernel limit sweeps every distinct workspace value: WR's curve in the
    same (total workspace, total time) plane as the WD front, so the gap between them is visible."""
    limits = np.unique(np.concatenate(ps.ws))
    limits = limits[limits >= ps.min_workspace]
    total_t = np.zeros(len(limits))
    total_w = np.zeros(len(limits), dtype=np.int64)
    for w, t in zip(ps.ws, ps.t):
        i = np.searchsorted(w, limits, side="right") - 1
        total_t += t[i]
        total_w += w[i]
    keep = _thin(len(limits))
    return pd.DataFrame({"limit": limits[keep], "workspace": total_w[keep], "workspace_mib": total_w[keep] / MiB,
                         "time_ms": total_t[keep]})


PLAN_COLUMNS = ["kernel", "layer", "kind", "division", "engines", "time_ms", "baseline_ms", "workspace_mib", "plans"]


def plans_text(conf: Configuration) -> str:
    """Pieces as "2x32 eng_plan + 64 other_plan": consecutive equal pieces grouped, in execution order."""
    groups: list[list] = []
    for m in conf.micro:
        if groups and groups[-1][1:] == [m.batch, m.plan]:
            groups[-1][0] += 1
        else:
            groups.append([1, m.batch, m.plan])
    return " + ".join(f"{n}x{b} {p}" if n > 1 else f"{b} {p}" for n, b, p in groups)


def plan_frame_columns() -> pd.DataFrame:
    return pd.DataFrame(columns=PLAN_COLUMNS)


def plan_frame(analysis: Analysis, ps: PolicySets, choice: Choice, baseline: Choice | None = None) -> pd.DataFrame:
    """One row per kernel (network order): division, plans, engines, time, workspace, and the undivided
    baseline's time at the same memory when given."""
    if not choice.feasible:
        return plan_frame_columns()
    und = analysis.policies["undivided"]
    infos = [ps.info(k, j) for k, j in enumerate(choice.index)]
    return pd.DataFrame({
        "kernel": [k.id for k in ps.kernels], "layer": [k.layer for k in ps.kernels],
        "kind": [k.kind.short for k in ps.kernels], "division": [i.division for i in infos],
        "plans": [i.plans for i in infos], "engines": [i.engines for i in infos],
        "time_ms": np.array([t[j] for t, j in zip(ps.t, choice.index)], dtype=float),
        "workspace_mib": np.array([w[j] for w, j in zip(ps.ws, choice.index)], dtype=float) / MiB,
        "baseline_ms": (np.array([t[j] for t, j in zip(und.t, baseline.index)], dtype=float)
                        if baseline is not None and baseline.feasible else np.full(len(infos), np.nan)),
    }, columns=PLAN_COLUMNS)


def execution_order(kernels: list[Kernel]) -> list[int]:
    """Kernel indices in training order: Forward through the layers, then backward through them in
    reverse, BackwardData before BackwardFilter within a layer (as PyTorch's convolution_backward)."""
    layers = list(dict.fromkeys(k.layer for k in kernels))
    pos = {(k.layer, k.kind.short): i for i, k in enumerate(kernels)}
    fwd = [pos[(layer, "F")] for layer in layers if (layer, "F") in pos]
    bwd = [pos[(layer, kind)] for layer in reversed(layers) for kind in ("BD", "BF") if (layer, kind) in pos]
    return fwd + bwd


TIMELINE_COLUMNS = ["lane", "layer", "row", "kernel", "kind", "piece", "batch", "plan", "engine", "start_ms",
                    "end_ms", "duration_ms"]


def timeline_frame(analysis: Analysis, ps: PolicySets, choice: Choice,
                   measured: dict[str, float] | None = None) -> pd.DataFrame:
    """Micro-batch pieces in execution order on per-layer lanes (Fig. 3): predicted pieces back to back;
    with a verification report, one measured bar per kernel on the layer's "measured" lane."""
    if not choice.feasible:
        return pd.DataFrame(columns=TIMELINE_COLUMNS)
    order = ps.order
    infos = [ps.info(k, choice.index[k]) for k in order]
    counts = [len(i.ms) for i in infos]
    ms = np.concatenate([i.ms for i in infos])
    end = np.cumsum(ms)

    def rep(values):
        return [v for v, c in zip(values, counts) for _ in range(c)]
    kernels = [ps.kernels[k] for k in order]
    layers = rep([k.layer for k in kernels])
    cols = {
        "lane": layers, "layer": layers, "row": ["predicted"] * len(ms), "kernel": rep([k.id for k in kernels]),
        "kind": rep([k.kind.short for k in kernels]), "piece": [p for i in infos for p in i.piece],
        "batch": np.concatenate([i.batch for i in infos]), "plan": [p for i in infos for p in i.plan],
        "engine": [e for i in infos for e in i.engine], "start_ms": end - ms, "end_ms": end, "duration_ms": ms,
    }
    frame = pd.DataFrame(cols, columns=TIMELINE_COLUMNS)
    if not measured:
        return frame
    rows, clock = [], 0.0
    for k, info in zip(kernels, infos):
        dt = float(measured.get(k.id, np.nan))
        if np.isnan(dt):
            continue
        rows.append((f"{k.layer} (measured)", k.layer, "measured", k.id, k.kind.short, "whole kernel",
                     int(info.batch.sum()), info.plans, "measured", clock, clock + dt, dt))
        clock += dt
    return pd.concat([frame, pd.DataFrame(rows, columns=TIMELINE_COLUMNS)], ignore_index=True)


def workspace_frame(analysis: Analysis, ps: PolicySets, wr: Choice, wd: Choice) -> pd.DataFrame:
    """Fig. 14: every kernel's workspace (MiB) per layer and direction, WR and WD at the same total."""
    layers = list(dict.fromkeys(k.layer for k in ps.kernels))
    rows = []
    for choice in (wr, wd):
        ws = {k.id: 0.0 for k in ps.kernels}
        if choice.feasible:
            for kernel, conf in zip(ps.kernels, configurations(ps, choice)):
                ws[kernel.id] = conf.workspace / MiB
        for layer in layers:
            rows.append({"layer": layer, "mode": choice.mode, "feasible": choice.feasible,
                         **{kind: ws.get(f"{layer}:{kind}", 0.0) for kind in KIND_ORDER}})
    return pd.DataFrame(rows, columns=["layer", "mode", "feasible", *KIND_ORDER])


DESIRABLE_COLUMNS = (["index", "workspace_mib", "time_ms", "division", "plans", "engines", "chosen"],
                     ["index", "start", "end", "batch", "plan", "engine"])


def desirable_frame(analysis: Analysis, ps: PolicySets, k: int, chosen: int | None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Fig. 8 for kernel ``k``: (points, pieces). Points: workspace, time, division, plans, chosen flag.
    Pieces: one row per micro-configuration with its share of the mini-batch (for the small stacked bars)."""
    if k not in ps._desirable:
        infos = [ps.info(k, j) for j in range(len(ps.sets[k]))]
        points = pd.DataFrame({
            "index": np.arange(len(infos)), "workspace_mib": ps.ws[k] / MiB, "time_ms": ps.t[k],
            "division": [i.division for i in infos], "plans": [i.plans for i in infos],
            "engines": [i.engines for i in infos], "chosen": False}, columns=DESIRABLE_COLUMNS[0])
        rows = []
        for j, info in enumerate(infos):
            total, done = info.batch.sum(), 0
            for b, p, e in zip(info.batch, info.plan, info.engine):
                rows.append((j, done / total, (done + b) / total, int(b), p, e))
                done += b
        ps._desirable[k] = (points, pd.DataFrame(rows, columns=DESIRABLE_COLUMNS[1]))
    points, pieces = ps._desirable[k]
    points = points.copy()
    points["chosen"] = points["index"] == (-1 if chosen is None else chosen)
    return points, pieces


# --- memory planner (engine.memory: vDNN, Layrub, SuperNeurons) ---------------------------------

MEMORY_CACHE: OrderedDict = OrderedDict()


def memory_frames(profile: Profile | None, scope: Scope, policy: str, capacity: int | None) -> dict[str, pd.DataFrame]:
    """``engine.memory.memory_frames`` of one training iteration (cached: 16 most recent per process).

    The profile gives convolution times and workspaces; the capacity bounds dynamic workspace, drives the
    LRU cache and decides whether the plan fits."""
    key = (id(profile), scope, policy, capacity)
    with _ANALYSES_LOCK:
        if key in MEMORY_CACHE:
            MEMORY_CACHE.move_to_end(key)
            return MEMORY_CACHE[key][1]
    itemsize = 2 if scope.precision in ("fp16", "bf16") else 4
    result = plan_memory(network(scope.network, scope.batch), policy, capacity=capacity, profile=profile,
                         itemsize=itemsize, precision=scope.precision)
    out = _memory_frames(result)
    out["notes"] = pd.DataFrame({"note": list(result.notes)})
    with _ANALYSES_LOCK:
        MEMORY_CACHE[key] = (profile, out)
        while len(MEMORY_CACHE) > 16:
            MEMORY_CACHE.popitem(last=False)
    return out


# --- GPU entry points (engine.gpu is optional; imported lazily) ---------------------------------

def gpu_status() -> tuple[bool, str]:
    """(available, reason); a missing engine.gpu or missing CUDA stack reads as 'no GPU', never an error."""
    try:
        gpu = importlib.import_module("engine.gpu")
    except ImportError as err:
        return False, f"GPU support is not installed ({err})"
    try:
        ok, reason = gpu.available()
    except Exception as err:  # a broken driver must not take the dashboard down
        return False, f"GPU check failed: {err}"
    return bool(ok), str(reason)


def gpu_function(name: str):
    return getattr(importlib.import_module("engine.gpu"), name)


def measured_times(report: dict) -> dict[str, float]:
    """Per-kernel measured times (ms) from ``engine.gpu.verify_plan``'s report (``kernels[*].id/measured_ms``)."""
    return {str(k["id"]): float(k["measured_ms"]) for k in report.get("kernels", [])
            if k.get("measured_ms") is not None}


def load_plan(path: str | Path):
    """``engine.plan.load_plan``: raises PlanFormatError naming the bad field."""
    return _load_plan(path)


def describe_error(err: BaseException) -> str:
    """One line for the page: engine errors carry their own message; others get their type."""
    if isinstance(err, EngineError):
        return str(err)
    return f"{type(err).__name__}: {err}"

