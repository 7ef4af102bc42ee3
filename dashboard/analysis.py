"""Per scope, computed once: every policy's desirable sets and network Pareto front. Imports no Panel.

The expensive part of the dashboard is computing, once per (profile, network, mini-batch, precision,
layout), every kernel's desirable set (engine.kernel_sets, cached per profile) and the network front for
each batch-size policy (mu-cuDNN §III-C: the WD problem is a multiple-choice knapsack over desirable
sets). ``Analysis`` holds those; the plans themselves come from ``engine.planner.make_plan``
(dashboard/plans.py), and the front only draws the curve and bounds the budget slider.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np
import pandas as pd

from engine.configuration import Configuration
from engine.errors import ProfileFormatError
from engine.kernel_sets import kernel_sets
from engine.network import Kernel, Network
from engine.optimize.front import NetworkFront
from engine.planner import wd_front
from engine.profile import Profile
from engine.units import MiB

from .cache import LRU
from .palette import engine_colors, engine_labels, engines_by_wins
from .scopes import Scope, complete_policies, network

MODES = ("WR", "WD")


def compact_division(conf: Configuration) -> str:
    """Micro-batch division with runs grouped: ``2x128``, ``23x11+3`` (n x size, in execution order)."""
    runs: list[list[int]] = []
    for m in conf.micro:
        if runs and runs[-1][1] == m.batch:
            runs[-1][0] += 1
        else:
            runs.append([1, m.batch])
    return "+".join(f"{n}x{b}" if n > 1 else str(b) for n, b in runs)


def plans_text(conf: Configuration) -> str:
    """Pieces as "2x32 eng_plan + 64 other_plan": consecutive equal pieces grouped, in execution order."""
    groups: list[list] = []
    for m in conf.micro:
        if groups and groups[-1][1:] == [m.batch, m.plan]:
            groups[-1][0] += 1
        else:
            groups.append([1, m.batch, m.plan])
    return " + ".join(f"{n}x{b} {p}" if n > 1 else f"{b} {p}" for n, b, p in groups)


def execution_order(kernels: list[Kernel]) -> list[int]:
    """Kernel indices in training order: Forward through the layers, then backward through them in
    reverse, BackwardData before BackwardFilter within a layer (as PyTorch's convolution_backward)."""
    layers = list(dict.fromkeys(k.layer for k in kernels))
    pos = {(k.layer, k.kind.short): i for i, k in enumerate(kernels)}
    fwd = [pos[(layer, "F")] for layer in layers if (layer, "F") in pos]
    bwd = [pos[(layer, kind)] for layer in reversed(layers) for kind in ("BD", "BF") if (layer, kind) in pos]
    return fwd + bwd


def pieces(conf: Configuration) -> tuple[tuple[int, str], ...]:
    """What identifies a configuration within one kernel's set: (micro-batch size, engine plan) per piece."""
    return tuple((m.batch, m.plan) for m in conf.micro)


@dataclass(frozen=True)
class ConfInfo:
    """What the views show of one configuration, computed once (the budget slider re-reads these)."""

    division: str
    plans: str
    engines: str
    batch: np.ndarray  # per piece, execution order
    plan: tuple[str, ...]
    engine: tuple[str, ...]
    piece: tuple[str, ...]  # "1/4", "2/4", ...
    ms: np.ndarray


@dataclass
class PolicySets:
    """One policy's desirable sets (ascending workspace, strictly decreasing time) and its network front.

    The front is computed over the sets with every workspace rounded up to the WD arena alignment, as
    ``engine.planner.make_plan`` solves WD, so the curve passes through the WD plans the page shows.
    """

    policy: str
    kernels: list[Kernel]
    sets: list[list[Configuration]]
    front: NetworkFront  # engine.planner.wd_front: over the aligned sets
    ws: list[np.ndarray] = field(repr=False)
    t: list[np.ndarray] = field(repr=False)
    seconds: float = 0.0
    engines: dict[str, str] = field(default_factory=dict, repr=False)  # plan -> engine label
    _info: dict = field(default_factory=dict, repr=False)  # (k, j) -> ConfInfo
    _desirable: dict = field(default_factory=dict, repr=False)  # k -> (points, pieces) of Fig. 8
    _index: list = field(default_factory=list, repr=False)  # k -> {division and plans: j}

    def info(self, k: int, j: int) -> ConfInfo:
        """Labels and piece arrays of configuration ``j`` of kernel ``k`` (cached)."""
        hit = self._info.get((k, j))
        if hit is None:
            conf = self.sets[k][j]
            engines = tuple(self.engines.get(m.plan, m.plan) for m in conf.micro)
            n = len(conf.micro)
            hit = ConfInfo(
                compact_division(conf),
                plans_text(conf),
                " + ".join(dict.fromkeys(engines)),
                np.array([m.batch for m in conf.micro]),
                tuple(m.plan for m in conf.micro),
                engines,
                tuple(f"{i + 1}/{n}" for i in range(n)),
                np.array([m.time_ms for m in conf.micro]),
            )
            self._info[(k, j)] = hit
        return hit

    def index_of(self, k: int, conf: Configuration) -> int:
        """Position of ``conf`` (a plan's configuration) in kernel ``k``'s desirable set, found by its pieces'
        micro-batch sizes and engine plans: a desirable set holds at most one configuration per such
        division, so nothing is matched on measured times (floats)."""
        if not self._index:
            self._index = [{pieces(c): j for j, c in enumerate(s)} for s in self.sets]
        return self._index[k][pieces(conf)]

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

    def unlimited(self) -> tuple[float, int]:
        """(time, workspace) of the unlimited-workspace optimum: every kernel's fastest configuration."""
        return float(sum(t[-1] for t in self.t)), int(sum(int(w[-1]) for w in self.ws))

    @cached_property
    def sweep(self) -> pd.DataFrame:
        return wr_sweep(self)


def make_policy_sets(
    policy: str,
    kernels: list[Kernel],
    sets: list[list[Configuration]],
    seconds: float = 0.0,
    engines: dict[str, str] | None = None,
) -> PolicySets:
    ws = [np.fromiter((c.workspace for c in s), dtype=np.int64, count=len(s)) for s in sets]
    ts = [np.fromiter((c.time_ms for c in s), dtype=float, count=len(s)) for s in sets]
    return PolicySets(policy, kernels, sets, wd_front(sets), ws, ts, seconds, dict(engines or {}))


def _policy_sets(profile: Profile, net: Network, scope: Scope, policy: str) -> PolicySets:
    t0 = time.perf_counter()
    pairs = kernel_sets(profile, net, policy, precision=scope.precision, layout=scope.layout)
    ps = make_policy_sets(policy, [k for k, _ in pairs], [s for _, s in pairs], engines=engine_labels(profile))
    ps.seconds = time.perf_counter() - t0
    return ps


@dataclass(eq=False)  # compared and hashed by identity: caches (dashboard/cache.py) key on it
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


ANALYSES = LRU(16)


def analyse(profile: Profile, scope: Scope, policies: list[str] | None = None) -> Analysis:
    """Desirable sets and fronts for every complete policy of a scope; an LRU of 16 per process.

    Results are read-only and shared by all sessions of the server, so a second visitor's page (or the
    same controls picked again) costs nothing.
    """
    policies = complete_policies(profile, scope) if policies is None else policies
    if not policies:
        raise ProfileFormatError(f"profile lacks micro-batch {scope.batch} for some kernel of {scope.network}")

    def make() -> Analysis:
        net = network(scope.network, scope.batch)
        return Analysis(profile, scope, net, {p: _policy_sets(profile, net, scope, p) for p in policies})

    return ANALYSES.get((profile, scope, tuple(policies)), make)


# --- budgets --------------------------------------------------------------------------------------


def equivalent_budget(mode: str, budget: int, n_kernels: int) -> tuple[int, int]:
    """(WR per-kernel limit, WD total) with the same total, as Fig. 13/14 pair them: total = limit x kernels."""
    if mode == "WR":
        return budget, budget * n_kernels
    return budget // n_kernels, budget


BUDGET_RANGES = LRU(64)  # (analysis, mode) -> slider bounds: every page and mode switch reads them


def budget_range(analysis: Analysis, mode: str) -> tuple[int, int]:
    """Slider bounds: from the smallest nonzero budget at which some plan changes (below it every budget
    gives the 0 B plan, so the slider has no steps there) to twice what the fastest plan needs. Computed once
    per process (a sort of every configuration's workspace: 0.16 s for ResNet-50, twice per page load)."""
    return BUDGET_RANGES.get((analysis, mode), lambda: _budget_range(analysis, mode))


def _budget_range(analysis: Analysis, mode: str) -> tuple[int, int]:
    sets = analysis.policies.values()
    if mode == "WR":
        need = min(ps.min_workspace for ps in sets)
        values = np.unique(np.concatenate([w for ps in sets for w in ps.ws]))
        hi = max(ps.max_workspace for ps in sets)
    else:
        need = min(int(ps.front.workspace[0]) for ps in sets)
        values = np.unique(np.concatenate([np.asarray(ps.front.workspace, dtype=np.int64) for ps in sets]))
        hi = max(int(ps.front.workspace[-1]) for ps in sets)
    changes = values[(values > 0) & (values >= need)]
    lo = int(changes[0]) if len(changes) else max(need, 1)
    return lo, max(2 * hi, 4 * lo)


def budget_steps(lo: int, hi: int, per_octave: int = 4) -> list[int]:
    """Log-spaced budgets (``per_octave`` steps per doubling, whole bytes), plus 0 B."""
    k0 = int(np.floor(np.log2(max(lo, 1)) * per_octave))
    k1 = int(np.ceil(np.log2(max(hi, 2)) * per_octave))
    steps = sorted({int(round(2 ** (k / per_octave))) for k in range(k0, k1 + 1)} - {0})
    return [0] + steps


# --- the curves of the Pareto view ------------------------------------------------------------------


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
    return pd.DataFrame(
        {
            "limit": limits[keep],
            "workspace": total_w[keep],
            "workspace_mib": total_w[keep] / MiB,
            "time_ms": total_t[keep],
        }
    )
