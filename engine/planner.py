"""Glue between profiles, networks and the optimizers: what the CLI and the dashboard call.

``kernel_sets`` gives each kernel's desirable set (computed once per unique signature and cached per
profile, since it does not depend on the budget); ``make_plan`` runs WR or WD under a budget and
packs the result, its undivided baseline at the same memory and the unlimited optimum into a Plan.
"""

from __future__ import annotations

import json
import weakref
from datetime import datetime, timezone
from pathlib import Path

from . import __version__
from .errors import EngineError, InfeasibleBudgetError, ProfileFormatError
from .kernels import LAYOUTS, PRECISIONS
from .network import Kernel, Network
from .optimize.desirable import desirable_set
from .configuration import Configuration, MicroConfig
from .optimize.wd import wd
from .optimize.wr import wr
from .plan import ALIGNMENT, MODES, Plan, PlanKernel, PlanMicro, PlanTotals, align
from .policies import batch_sizes, policy_name
from .profile import Profile
from .units import format_size, parse_size

KernelSets = list[tuple[Kernel, list[Configuration]]]

# per profile: {(signature key, batch, sizes): desirable set}; weak so a dropped profile frees its sets
_SETS: "weakref.WeakKeyDictionary[Profile, dict]" = weakref.WeakKeyDictionary()
# per profile: {(signature key, micro_batch, plan name): (engine_id, knobs)}
_PLAN_IDS: "weakref.WeakKeyDictionary[Profile, dict]" = weakref.WeakKeyDictionary()


def profile_label(profile: Profile) -> str:
    return repr(Path(profile.source).name) if profile.source else "(in-memory profile)"


def network_variant(profile: Profile, network: str, precision: str | None = None,
                    layout: str | None = None) -> tuple[str, str]:
    """The (precision, layout) to plan ``network`` at: the given ones, else the profile's record of it."""
    if precision is not None and precision not in PRECISIONS:
        raise EngineError(f"unknown precision {precision!r}; expected one of {', '.join(sorted(PRECISIONS))}")
    if layout is not None and layout not in LAYOUTS:
        raise EngineError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    recorded = {(n.get("precision"), n.get("layout")) for n in profile.networks if n.get("name") == network}
    if not recorded:  # no record of this network: whatever variants the profile's signatures hold
        recorded = {tuple(key.split("/")[1:3]) for key in profile.signatures()}
    options = sorted(v for v in recorded
                     if (precision is None or v[0] == precision) and (layout is None or v[1] == layout))
    if precision is not None and layout is not None:
        return precision, layout
    if len(options) == 1:
        return options[0]
    if not options:
        raise EngineError(f"profile {profile_label(profile)} holds no {precision or '*'}/{layout or '*'} "
                          f"measurements for {network}; it has "
                          f"{', '.join('/'.join(v) for v in sorted(recorded)) or 'none'}")
    raise EngineError(f"profile {profile_label(profile)} records {network} at "
                      f"{', '.join('/'.join(v) for v in options)}; choose one with --precision and --layout")


def default_batch(profile: Profile, network: str) -> int | None:
    """The mini-batch size the profile was made for, when it records exactly one for ``network``."""
    sizes = {n.get("batch") for n in profile.networks if n.get("name") == network}
    return sizes.pop() if len(sizes) == 1 else None


def _desirable(profile: Profile, kernel: Kernel, sizes: list[int], batch: int) -> list[Configuration]:
    key = kernel.signature.key
    cache = _SETS.setdefault(profile, {})
    ck = (key, batch, tuple(sizes))
    if ck not in cache:
        if not profile.has(key):
            recorded = ", ".join(f"{n.get('name')} b{n.get('batch')} {n.get('precision')}/{n.get('layout')}"
                                 for n in profile.networks) or "no networks"
            raise EngineError(f"profile {profile_label(profile)} has no measurements for kernel {kernel.id} "
                              f"(signature {key}); it records {recorded}: profile this network first")
        try:
            sets = desirable_set(profile.candidates(key, sizes), batch)
        except InfeasibleBudgetError:  # the measured sizes cannot partition the mini-batch
            sets = []
        if not sets:
            raise EngineError(f"profile {profile_label(profile)} cannot make mini-batch {batch} for kernel "
                              f"{kernel.id} from micro-batch sizes {sizes}: it measured only "
                              f"{profile.sizes(key)}")
        cache[ck] = sets
    return cache[ck]


def kernel_sets(profile: Profile, network: Network, policy, precision: str | None = None,
                layout: str | None = None) -> KernelSets:
    """Each kernel of ``network`` (execution order) with its desirable set under ``policy``
    (mu-cuDNN §III-C1): ascending workspace, strictly decreasing time."""
    precision, layout = network_variant(profile, network.name, precision, layout)
    sizes = batch_sizes(policy, network.batch)
    return [(k, _desirable(profile, k, sizes, network.batch)) for k in network.kernels(precision, layout)]


def _plan_ids(profile: Profile) -> dict:
    ids = _PLAN_IDS.get(profile)
    if ids is None:
        t = profile.table[profile.table.status == "ok"]
        ids = {(s, int(b), p): (int(e), kn) for s, b, p, e, kn in
               zip(t.signature, t.micro_batch, t.plan, t.engine_id, t.knobs)}
        _PLAN_IDS[profile] = ids
    return ids


def _micro(profile: Profile, key: str, m: MicroConfig) -> PlanMicro:
    engine_id, knobs = _plan_ids(profile)[(key, m.batch, m.plan)]
    try:
        parsed = json.loads(knobs)
        if not isinstance(parsed, dict):
            raise ValueError("not an object")
    except ValueError as err:
        raise ProfileFormatError(f"profile {profile_label(profile)}: plan {m.plan!r} of {key} at b={m.batch} has "
                                 f"malformed knobs {knobs!r} ({err})") from None
    return PlanMicro(m.batch, m.plan, engine_id, {str(k): v for k, v in parsed.items()}, m.time_ms, m.workspace)


def aligned_sets(sets: list[list[Configuration]]) -> tuple[list[list[Configuration]], list[list[int]]]:
    """Desirable sets with every workspace rounded up to the arena alignment, re-pruned so workspace
    still strictly ascends; plus, per kernel, the index in the original set of each kept entry.
    Solving WD over these makes "sum of segments <= budget" exactly "the aligned arena fits"."""
    out, index = [], []
    for confs in sets:
        kept, idx = [], []
        for i, c in enumerate(confs):
            r = Configuration(tuple(m._replace(workspace=align(m.workspace)) for m in c.micro))
            if kept and kept[-1].workspace == r.workspace:  # same aligned size, and c is faster: replace
                kept[-1], idx[-1] = r, i
            else:
                kept.append(r)
                idx.append(i)
        out.append(kept)
        index.append(idx)
    return out, index


def _solve_wd(sets: list[list[Configuration]], budget: int, solver: str, time_limit_s: float):
    """WD over aligned sets; returns (the chosen original configurations, WDResult)."""
    aligned, index = aligned_sets(sets)
    res = wd(aligned, budget, solver=solver, time_limit_s=time_limit_s)
    return [confs[idx[i]] for confs, idx, i in zip(sets, index, res.choice)], res


def _which(n: int, total: int, ids: list[str] | None = None) -> str:
    if n == total:
        return f"all {total} kernels"
    return ", ".join(ids) if ids else f"{n} of {total} kernels"


def make_plan(profile: Profile, network: Network, *, mode: str, budget, policy="powerOfTwo",
              precision: str | None = None, layout: str | None = None, command: str = "",
              solver: str = "auto", time_limit_s: float = 10.0) -> Plan:
    """A WR plan (``budget`` = per-kernel workspace limit, mu-cuDNN §III-B) or a WD plan (``budget`` =
    total workspace, one ILP over the network, §III-C), with the undivided baseline at the same memory."""
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
            und_sets.append(_desirable(profile, kernel, [B], B))
        except EngineError:
            und_sets.append(None)
    sizes = batch_sizes(policy, B)
    measured = [len(set(profile.sizes(k.signature.key)) & set(sizes)) for k, _ in sets]
    short = sum(m < len(sizes) for m in measured)
    if short:
        notes.append(f"policy {pname} offers {len(sizes)} micro-batch sizes but the profile measured as few as "
                     f"{min(measured)} of them ({_which(short, len(sets))}); the optimizer used the measured ones")
    missing = [k.id for (k, _), u in zip(sets, und_sets) if u is None]
    if missing:
        notes.append(f"no undivided baseline: the profile has no measurement at micro-batch {B} "
                     f"({_which(len(missing), len(sets), missing)})")

    solver_info, arena_size, offsets = None, None, [None] * len(sets)
    if mode == "wr":
        need = [confs[0].workspace for _, confs in sets]
        if budget < max(need):
            worst = sets[need.index(max(need))][0]
            raise InfeasibleBudgetError(
                f"per-kernel workspace budget {format_size(budget)} is below {format_size(max(need))} "
                f"({max(need)} bytes), the least kernel {worst.id} can run in under policy {pname} (WR)", max(need))
        by_key = {}
        for k, _ in sets:  # repeated signatures (ResNet blocks) share one DP
            if k.signature.key not in by_key:
                by_key[k.signature.key] = wr(profile.candidates(k.signature.key, sizes), B, budget)
        chosen = [by_key[k.signature.key] for k, _ in sets]
        und_times = []
        for (k, _), u in zip(sets, und_sets):
            try:
                und_times.append(None if u is None else wr(profile.candidates(k.signature.key, [B]), B, budget).time_ms)
            except InfeasibleBudgetError:
                und_times.append(None)
        if not missing and None in und_times:
            notes.append("no undivided baseline at this memory: no single cuDNN plan at micro-batch "
                         f"{B} fits {format_size(budget)} for "
                         f"{', '.join(k.id for (k, _), t in zip(sets, und_times) if t is None)}")
    else:
        need = sum(align(confs[0].workspace) for _, confs in sets)
        if budget < need:
            raise InfeasibleBudgetError(
                f"total workspace budget {format_size(budget)} is below {format_size(need)} ({need} bytes), the "
                f"least all {len(sets)} kernels of {network.name} fit in together under policy {pname} (WD, "
                f"{ALIGNMENT}-byte aligned segments)", need)
        chosen, res = _solve_wd([confs for _, confs in sets], budget, solver, time_limit_s)
        solver_info = {"name": res.solver, "status": res.status, "n_variables": res.n_variables,
                       "solve_time_s": res.solve_time_s, "build_time_s": res.build_time_s}
        if res.status != "optimal":
            notes.append(f"the ILP solver stopped with status {res.status!r}: the plan fits the budget but may "
                         f"not be optimal")
        offsets, pos = [], 0
        for c in chosen:
            offsets.append(pos)
            pos += align(c.workspace)
        arena_size = pos
        und_times = [None] * len(sets)
        if not missing:
            try:
                und_chosen, _ = _solve_wd(und_sets, budget, solver, time_limit_s)
                und_times = [c.time_ms for c in und_chosen]
            except InfeasibleBudgetError as err:
                notes.append(f"no undivided baseline at this memory: undivided cuDNN needs at least "
                             f"{format_size(err.minimum)} in total")

    kernels = [PlanKernel(k.id, k.layer, k.kind, k.signature.key,
                          [_micro(profile, k.signature.key, m) for m in conf.micro],
                          conf.workspace, conf.time_ms, ut, off)
               for (k, _), conf, ut, off in zip(sets, chosen, und_times, offsets)]
    time_ms = sum(k.time_ms for k in kernels)
    undivided = None if None in und_times else sum(und_times)
    totals = PlanTotals(time_ms, sum(k.workspace for k in kernels), max(k.workspace for k in kernels), undivided,
                        sum(confs[-1].time_ms for _, confs in sets), sum(confs[-1].workspace for _, confs in sets),
                        None if undivided is None else undivided / time_ms)
    provenance = {"profile": profile.provenance, "profile_source": profile.source,
                  "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
                  "engine_version": __version__, "command": command}
    return Plan(mode, pname, budget, network.name, B, precision, layout, kernels, totals, provenance,
                arena_size, solver_info, notes)


def _plans(k: PlanKernel) -> str:
    names = []
    for m in k.micro:
        if not names or names[-1] != m.plan:
            names.append(m.plan)
    return "+".join(names)


def plan_summary(plan: Plan) -> str:
    """A readable per-kernel table plus totals and the speed-up over undivided at the same memory."""
    wd_mode = plan.mode == "wd"
    synthetic = " [SYNTHETIC profile]" if plan.provenance.get("profile", {}).get("synthetic") else ""
    rule = (f"total workspace budget {format_size(plan.budget)} (WD)" if wd_mode
            else f"per-kernel workspace limit {format_size(plan.budget)} (WR)")
    lines = [f"{plan.network} b{plan.batch} {plan.precision} {plan.layout}, policy {plan.policy}, {rule}{synthetic}"]
    head = ["kernel", "division", "plans", "time ms", "workspace"] + (["offset"] if wd_mode else []) + \
           ["undivided ms", "speed-up"]
    rows = []
    for k in plan.kernels:
        row = [k.id, k.division, _plans(k), f"{k.time_ms:.4f}", format_size(k.workspace)]
        if wd_mode:
            row.append(format_size(k.offset) if k.offset else "0")
        und = k.undivided_time_ms
        row += ["-" if und is None else f"{und:.4f}", "-" if und is None else f"{und / k.time_ms:.2f}x"]
        rows.append(row)
    t = plan.totals
    total = ["total", "", "", f"{t.time_ms:.4f}", format_size(t.workspace)] + ([format_size(plan.arena_size)]
                                                                              if wd_mode else [])
    total += ["-" if t.undivided_time_ms is None else f"{t.undivided_time_ms:.4f}",
              "-" if t.speedup is None else f"{t.speedup:.2f}x"]
    rows.append(total)
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    left = {0, 1, 2}
    fmt = lambda r: "  ".join(c.ljust(w) if i in left else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths)))
    lines += [fmt(head), fmt(["-" * w for w in widths])] + [fmt(r) for r in rows[:-1]]
    lines += [fmt(["-" * w for w in widths]), fmt(rows[-1]), ""]
    if wd_mode:
        lines.append(f"workspace: one arena of {format_size(plan.arena_size)} ({plan.arena_size} bytes), "
                     f"{ALIGNMENT}-byte aligned segments; solver {plan.solver.get('name')} "
                     f"({plan.solver.get('status')})")
    else:
        lines.append(f"workspace: {format_size(t.workspace)} if every kernel has its own (as Caffe), "
                     f"{format_size(t.max_workspace)} if all kernels share one")
    if t.speedup is None:
        lines.append("speed-up over undivided cuDNN at the same memory: none (undivided is infeasible there; "
                     "see notes)")
    else:
        lines.append(f"speed-up over undivided cuDNN at the same memory: {t.speedup:.3f}x "
                     f"({t.undivided_time_ms:.4f} ms -> {t.time_ms:.4f} ms)")
    lines.append(f"unlimited-workspace optimum: {t.unlimited_time_ms:.4f} ms using "
                 f"{format_size(t.unlimited_workspace)} in total")
    lines += [f"note: {n}" for n in plan.notes]
    return "\n".join(lines)
