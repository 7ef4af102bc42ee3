"""``make_plan``: the one place plans are made. The CLI, the dashboard, verify and the benchmarks call it,
so the same profile, network, policy, mode and budget give the same plan everywhere.

WR (mu-cuDNN §III-B) gives every kernel the fastest configuration of its desirable set within the
per-kernel limit: the desirable set is the Pareto set of all configurations, so that element is the
WR optimum (engine/optimize/desirable.py proves its time equals the WR program's), and of exact ties
it is the one needing least workspace (``kernel_sets.fastest_within``, the rule the memory planner's
``wr`` workspace uses too). The limit is ``budget`` for every kernel, or per kernel where ``limits``
names one (a memory plan's free(s) at each kernel's step: engine.memory.steps.step_plan). WD (§III-C)
solves the 0-1 ILP over the desirable sets with every workspace aligned, and lays the chosen segments out by
the one arena rule, ``arena_layout``.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from datetime import datetime, timezone

from . import __version__
from .configuration import Configuration, MicroConfig
from .errors import EngineError, InfeasibleBudgetError, ProfileFormatError
from .fileio import short
from .kernel_sets import fastest_within, kernel_set, kernel_sets, network_variant, profile_label
from .network import Network
from .optimize.front import NetworkFront, network_front
from .optimize.wd import wd
from .plan import ALIGNMENT, MODES, Plan, PlanKernel, PlanMicro, PlanTotals, align
from .policies import batch_sizes, policy_name
from .profile import Profile, parse_knobs
from .stock import stock_estimate
from .units import format_size, parse_size

# per profile: {(signature key, micro_batch, plan name): (engine_id, knobs)}
_PLAN_IDS: "weakref.WeakKeyDictionary[Profile, dict]" = weakref.WeakKeyDictionary()
# per profile: {id(desirable set): (the set, its aligned set, index map)}; the set is kept so its id stays valid
_ALIGNED: "weakref.WeakKeyDictionary[Profile, dict]" = weakref.WeakKeyDictionary()
# per profile: the most recent WD answers (_solve_wd)
_WD: "weakref.WeakKeyDictionary[Profile, OrderedDict]" = weakref.WeakKeyDictionary()


def arena_layout(workspaces: list[int]) -> tuple[list[int], int]:
    """The arena rule of WD plans: segments in kernel order, each starting at an ``ALIGNMENT``-byte
    boundary. Returns (offset of each segment, arena size)."""
    offsets, pos = [], 0
    for w in workspaces:
        offsets.append(pos)
        pos += align(w)
    return offsets, pos


def aligned_set(confs: list[Configuration]) -> tuple[list[Configuration], list[int]]:
    """A desirable set with every workspace rounded up to the arena alignment, re-pruned so workspace
    still strictly ascends; plus the index in ``confs`` of each kept entry. Solving WD over these makes
    "sum of segments <= budget" exactly "the aligned arena fits"."""
    kept, idx = [], []
    for i, c in enumerate(confs):
        r = Configuration(tuple(m._replace(workspace=align(m.workspace)) for m in c.micro))
        if kept and kept[-1].workspace == r.workspace:  # same aligned size, and c is faster: replace
            kept[-1], idx[-1] = r, i
        else:
            kept.append(r)
            idx.append(i)
    return kept, idx


def wd_front(sets: list[list[Configuration]]) -> NetworkFront:
    """The network front of WD plans (total time vs arena size): over the aligned sets, so each point's
    workspace is the arena a WD plan at that budget needs, and its time that plan's."""
    return network_front([aligned_set(confs)[0] for confs in sets])


def _aligned(profile: Profile, confs: list[Configuration]) -> tuple[list[Configuration], list[int]]:
    cache = _ALIGNED.setdefault(profile, {})
    hit = cache.get(id(confs))
    if hit is None:
        hit = cache[id(confs)] = (confs, *aligned_set(confs))
    return hit[1], hit[2]


def _solve_wd(profile: Profile, sets: list[list[Configuration]], budget: int, solver: str, time_limit_s: float):
    """WD over the aligned sets; returns (the chosen configurations of ``sets``, WDResult). The last few
    answers are kept per profile: a plan and its undivided baseline, or the dashboard's plan and its
    undivided mark, ask the same question."""
    memo = _WD.setdefault(profile, OrderedDict())
    key = (tuple(id(confs) for confs in sets), budget, solver, time_limit_s)
    hit = memo.pop(key, None)
    if hit is None:
        pairs = [_aligned(profile, confs) for confs in sets]
        res = wd([a for a, _ in pairs], budget, solver=solver, time_limit_s=time_limit_s)
        hit = ([confs[idx[i]] for confs, (_, idx), i in zip(sets, pairs, res.choice)], res, sets)
    memo[key] = hit  # holds the sets, so their ids stay valid
    while len(memo) > 16:
        memo.popitem(last=False)
    return hit[0], hit[1]


def _plan_ids(profile: Profile) -> dict:
    ids = _PLAN_IDS.get(profile)
    if ids is None:
        t = profile.table[profile.table.status == "ok"]
        ids = {
            (s, int(b), p): (int(e), kn)
            for s, b, p, e, kn in zip(t.signature, t.micro_batch, t.plan, t.engine_id, t.knobs)
        }
        _PLAN_IDS[profile] = ids
    return ids


def _micro(profile: Profile, key: str, m: MicroConfig) -> PlanMicro:
    engine_id, knobs = _plan_ids(profile)[(key, m.batch, m.plan)]
    parsed = parse_knobs(knobs)
    if parsed is None:
        raise ProfileFormatError(
            f"profile {profile_label(profile)}: plan {m.plan!r} of {key} at b={m.batch} has malformed knobs "
            f"{short(knobs)} (not a flat JSON object)"
        )
    return PlanMicro(m.batch, m.plan, engine_id, {str(k): v for k, v in parsed.items()}, m.time_ms, m.workspace)


def _which(n: int, total: int, ids: list[str] | None = None) -> str:
    if n == total:
        return f"all {total} kernels"
    return ", ".join(ids) if ids else f"{n} of {total} kernels"


def _kernel_limits(limits, sets, budget: int, mode: str, network: Network) -> list[int]:
    """Each kernel's WR limit: ``limits[kernel id]`` where given, else ``budget``."""
    if not limits:
        return [budget] * len(sets)
    if mode != "wr":
        raise EngineError("per-kernel limits are for WR plans (mode wr); WD divides one total budget")
    if not hasattr(limits, "items"):
        raise EngineError(f"limits must map kernel ids (such as conv1:F) to sizes, got {type(limits).__name__}")
    ids = [k.id for k, _ in sets]
    unknown = [str(k) for k in limits if k not in ids]
    if unknown:
        raise EngineError(
            f"limits name {len(unknown)} kernel(s) {network.name} does not have "
            f"({', '.join(unknown[:5])}{', ...' if len(unknown) > 5 else ''}); its kernels are "
            f"{', '.join(ids[:3])}, ..."
        )
    return [parse_size(limits[i]) if i in limits else budget for i in ids]


def _check_inputs(profile, network, time_limit_s) -> None:
    """make_plan's inputs are objects, not names: one line saying how to get each (the CLI resolves names)."""
    if not isinstance(profile, Profile):
        raise EngineError(
            f"make_plan needs a Profile, got {type(profile).__name__} {short(profile)}: "
            f"engine.profile.Profile.load(engine.profile.resolve_profile(NAME_OR_PATH))"
        )
    if not isinstance(network, Network):
        raise EngineError(
            f"make_plan needs a Network, got {type(network).__name__} {short(network)}: "
            f"engine.zoo.get_network(NAME, BATCH), or engine.pytorch.loader.load_network for a PyTorch model"
        )
    if isinstance(time_limit_s, bool) or not isinstance(time_limit_s, (int, float)) or not 0 < time_limit_s < 1e6:
        raise EngineError(f"time_limit_s must be a positive number of seconds, got {short(time_limit_s)}")


def make_plan(
    profile: Profile,
    network: Network,
    *,
    mode: str,
    budget,
    policy="powerOfTwo",
    precision: str | None = None,
    layout: str | None = None,
    command: str = "",
    solver: str = "auto",
    time_limit_s: float = 10.0,
    limits=None,
) -> Plan:
    """A WR plan (``budget`` = per-kernel workspace limit, mu-cuDNN §III-B) or a WD plan (``budget`` =
    total workspace, one ILP over the network, §III-C), with the undivided baseline at the same memory.

    ``limits`` (WR only): {kernel id such as ``conv1:F``: size} overriding ``budget`` for those kernels; the
    plan records the ones that differ from ``budget`` (``Plan.limits``), so limits all equal to ``budget``
    give exactly the plain WR plan.

    ``command`` is recorded in the provenance (with the creation time): the only fields that differ
    between two calls with the same inputs, besides a WD plan's solver timings.
    """
    _check_inputs(profile, network, time_limit_s)
    if mode not in MODES:
        raise EngineError(f"unknown mode {mode!r}; expected wr (per-kernel limit) or wd (total budget)")
    budget = parse_size(budget)
    precision, layout = network_variant(profile, network.name, precision, layout)
    sets = kernel_sets(profile, network, policy, precision, layout)
    B, pname = network.batch, policy_name(policy)
    notes: list[str] = []

    # the undivided baseline needs a measurement at B; without one it is infeasible at any memory
    und_sets: list[list[Configuration] | None] = []
    for kernel, _ in sets:
        try:
            und_sets.append(kernel_set(profile, kernel, [B], B))
        except EngineError:
            und_sets.append(None)
    sizes = batch_sizes(policy, B)
    measured = [len(set(profile.sizes(k.signature.key)) & set(sizes)) for k, _ in sets]
    short = sum(m < len(sizes) for m in measured)
    if short:
        notes.append(
            f"policy {pname} offers {len(sizes)} micro-batch sizes but the profile measured as few as "
            f"{min(measured)} of them ({_which(short, len(sets))}); the optimizer used the measured ones"
        )
    ids = [k.id for k, _ in sets if k.signature.key in profile.first_plan_left_out]
    if ids:
        notes.append(
            f"cuDNN's first plan, the one stock PyTorch runs, was not profiled for {_which(len(ids), len(sets), ids)} "
            "(the profile calls it runtime-compiled): the plan could not choose it and may be slower than stock "
            "PyTorch there; profile again (the profiler now times it, and its cache measures those graphs again)"
        )
    missing = [k.id for (k, _), u in zip(sets, und_sets) if u is None]
    if missing:
        notes.append(
            f"no undivided baseline: the profile has no measurement at micro-batch {B} "
            f"({_which(len(missing), len(sets), missing)})"
        )

    solver_info, arena_size, offsets = None, None, [None] * len(sets)
    lims = _kernel_limits(limits, sets, budget, mode, network)
    own = {k.id: lim for (k, _), lim in zip(sets, lims) if lim != budget}  # what the plan records
    if mode == "wr":
        need = [confs[0].workspace for _, confs in sets]
        plain = [n for n, (k, _) in zip(need, sets) if k.id not in own]
        if plain and budget < max(plain):
            worst = next(k for n, (k, _) in zip(need, sets) if k.id not in own and n == max(plain))
            raise InfeasibleBudgetError(
                f"per-kernel workspace budget {format_size(budget)} is below {format_size(max(plain))} "
                f"({max(plain)} bytes), the least kernel {worst.id} can run in under policy {pname} (WR)",
                max(plain),
            )
        tight = [(k, n, lim) for n, lim, (k, _) in zip(need, lims, sets) if n > lim]
        if tight:
            k, n, lim = tight[0]
            more = f"; {len(tight) - 1} more kernel(s) do not fit theirs" if len(tight) > 1 else ""
            raise InfeasibleBudgetError(
                f"workspace limit {format_size(lim)} of kernel {k.id} is below {format_size(n)} ({n} bytes), the "
                f"least it can run in under policy {pname} (WR){more}",
                n,
            )
        chosen = [fastest_within(confs, lim) for (_, confs), lim in zip(sets, lims)]
        und = [None if u is None else fastest_within(u, lim) for u, lim in zip(und_sets, lims)]
        und_times = [None if c is None else c.time_ms for c in und]
        if not missing and None in und_times:
            where = f"fits {format_size(budget)}" if not own else "fits its limit"
            notes.append(
                "no undivided baseline at this memory: no single cuDNN plan at micro-batch "
                f"{B} {where} for "
                f"{', '.join(k.id for (k, _), t in zip(sets, und_times) if t is None)}"
            )
    else:
        need = sum(align(confs[0].workspace) for _, confs in sets)
        if budget < need:
            raise InfeasibleBudgetError(
                f"total workspace budget {format_size(budget)} is below {format_size(need)} ({need} bytes), the "
                f"least all {len(sets)} kernels of {network.name} fit in together under policy {pname} (WD, "
                f"{ALIGNMENT}-byte aligned segments)",
                need,
            )
        chosen, res = _solve_wd(profile, [confs for _, confs in sets], budget, solver, time_limit_s)
        solver_info = {
            "name": res.solver,
            "status": res.status,
            "n_variables": res.n_variables,
            "solve_time_s": res.solve_time_s,
            "build_time_s": res.build_time_s,
        }
        if res.status != "optimal":
            notes.append(
                f"the ILP solver stopped with status {res.status!r}: the plan fits the budget but may not be optimal"
            )
        offsets, arena_size = arena_layout([c.workspace for c in chosen])
        und_times = [None] * len(sets)
        if not missing:
            try:
                und_chosen, _ = _solve_wd(profile, und_sets, budget, solver, time_limit_s)
                und_times = [c.time_ms for c in und_chosen]
            except InfeasibleBudgetError as err:
                notes.append(
                    f"no undivided baseline at this memory: undivided cuDNN needs at least "
                    f"{format_size(err.minimum)} in total"
                )

    kernels = [
        PlanKernel(
            k.id,
            k.layer,
            k.kind,
            k.signature.key,
            [_micro(profile, k.signature.key, m) for m in conf.micro],
            conf.workspace,
            conf.time_ms,
            ut,
            off,
            stock_estimate(profile, k.signature.key, B) if mode == "wr" else None,
        )
        for (k, _), conf, ut, off in zip(sets, chosen, und_times, offsets)
    ]
    time_ms = sum(k.time_ms for k in kernels)
    undivided = None if None in und_times else sum(und_times)
    totals = PlanTotals(
        time_ms,
        sum(k.workspace for k in kernels),
        max(k.workspace for k in kernels),
        undivided,
        sum(confs[-1].time_ms for _, confs in sets),
        sum(confs[-1].workspace for _, confs in sets),
        None if undivided is None else undivided / time_ms,
    )
    provenance = {
        "profile": profile.provenance,
        "profile_source": profile.source,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "engine_version": __version__,
        "command": command,
    }
    return Plan(
        mode,
        pname,
        budget,
        network.name,
        B,
        precision,
        layout,
        kernels,
        totals,
        provenance,
        arena_size,
        solver_info,
        notes,
        own or None,
    )
