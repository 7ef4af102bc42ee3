"""One call from a network and a policy to the memory timeline, workspace choice and time.

``plan_memory`` builds the inventory under the policy's framework convention, applies the
policy, lets the workspace rule take what the plan leaves free at every conv tick, and (with a
profile) runs the time model. ``MemoryResult`` holds tidy tables for the CLI, the dashboard
(frames.py) and JSON.
"""

from __future__ import annotations

import inspect
import math
import os
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import ArgumentError, BudgetError, EngineError, nearest
from ..fileio import short
from ..network import Network
from ..precision import DEFAULT_PRECISION, check_layout, get_precision
from ..profile import Profile, resolve_profile
from ..units import format_size, parse_size
from ..zoo import get_network
from . import policies as P
from .calibrate import load_measured
from .reserve import check_reserve, default_reserve, planning_capacity
from .tensors import CLASSES, DATA_CLASSES, build_inventory, get_convention
from .timeline import MemoryPlan, memory_curve
from .timemodel import TimeParams, simulate, time_note
from .workspace import DYNAMIC, PLAN_RULES, RULES, choose_workspace, least_workspace, tick_kernels, unmeasured

PYTORCH_CONVENTIONS = ("pytorch",)  # tensors as PyTorch allocates them: a prediction of a PyTorch step


@dataclass
class MemoryResult:
    network: str
    batch: int
    policy: str
    paper: str
    convention: str
    capacity: int | None
    workspace_rule: str
    ticks: pd.DataFrame
    kernels: pd.DataFrame
    copies: pd.DataFrame
    summary: dict
    options: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    profile: str = ""
    plan: MemoryPlan | None = field(default=None, repr=False)  # the residency intervals (snapshot.py)
    time_params: TimeParams | None = field(default=None, repr=False)  # the time model's constants
    reserve: float = 0.0  # the share of the cap left to the allocator: ``capacity`` is (1 - reserve) x the cap

    @property
    def peak_is_lower_bound(self) -> bool:
        """True when some convolution's workspace is not counted (no profile, no conv plan): the peak is then
        what the tensors alone take, not a prediction of what runs."""
        return self.summary.get("workspace_unknown", 0) > 0

    @property
    def time_note(self) -> str:
        """Which time-model numbers are measured and which modelled ("" without a profile: no time)."""
        if self.time_params is None or math.isnan(self.summary["iteration_ms"]):
            return ""
        return time_note(self.time_params, self.summary["layer_runs_measured"], self.summary["layer_runs_modelled"])

    @property
    def peak(self) -> float:
        return self.summary["peak"]

    @property
    def fits(self) -> bool:
        return self.summary["fits"]

    def steps(self) -> pd.DataFrame:
        """Per step: the tick of largest total memory (a step's recompute ticks included)."""
        t = self.ticks
        idx = t.groupby("step")["total"].idxmax()
        return t.loc[idx].reset_index(drop=True)

    def to_dict(self, ticks: bool = True) -> dict:
        def clean(v):
            if isinstance(v, np.bool_):
                return bool(v)
            if isinstance(v, np.integer):
                return int(v)
            if isinstance(v, (np.floating, float)):
                return float(v) if math.isfinite(float(v)) else None  # JSON has no NaN or inf
            return v

        out = {
            "network": self.network,
            "batch": self.batch,
            "policy": self.policy,
            "paper": self.paper,
            "convention": self.convention,
            "capacity": self.capacity,
            "workspace_rule": self.workspace_rule,
            "profile": self.profile,
            "reserve": self.reserve,
            "options": {k: (list(v) if isinstance(v, (list, tuple)) else v) for k, v in self.options.items()},
            "notes": self.notes,
            "summary": {k: clean(v) for k, v in self.summary.items()},
            "time_model": self.time_note,
        }
        if ticks:
            out["ticks"] = [{k: clean(v) for k, v in r.items()} for r in self.ticks.to_dict("records")]
            out["kernels"] = [{k: clean(v) for k, v in r.items()} for r in self.kernels.to_dict("records")]
            out["copies"] = [{k: clean(v) for k, v in r.items()} for r in self.copies.to_dict("records")]
        return out


def _resolve_network(network: str | Network, batch: int | None) -> Network:
    if isinstance(network, Network):
        if batch is not None and batch != network.batch:
            raise EngineError(f"network {network.name!r} is built for batch {network.batch}, not {batch}")
        return network
    if not isinstance(network, (str, os.PathLike)):  # a model object's repr would fill the error over many lines
        raise EngineError(
            f"plan_memory needs a network name or a Network, got {type(network).__name__}: name a PyTorch model as "
            "'package.module:callable' (a function returning it, optionally @CxHxW) or 'torchvision:NAME', "
            "or pass engine.zoo.get_network(NAME, BATCH)"
        )
    return get_network(network, batch, trusted=True)  # named by the caller: a user's module:callable is imported


def plan_memory(
    network: str | Network,
    policy: str = "liveness",
    batch: int | None = None,
    capacity: int | None = None,
    profile: Profile | None = None,
    workspace: str | None = None,
    convention: str | None = None,
    time_params: TimeParams | str | os.PathLike | None = None,
    itemsize: int | None = None,
    precision: str | None = None,
    layout: str | None = None,
    optimizer_copies: int = 0,
    framework_bytes: int = 0,
    conv_plan=None,
    plan_workspace: str | None = None,
    reserve: float | None = None,
    **policy_options,
) -> MemoryResult:
    """Memory timeline of one training iteration of ``network`` under ``policy``.

    ``capacity`` (bytes, or a size such as ``"12GiB"``) bounds what the dynamic workspace rules may take, drives the
    LRU tensor cache and vDNN_dyn, and decides ``fits``; a plan that fills it (the policy declares so, or its
    workspace rule is dynamic) is made for (1 - ``reserve``) of it (reserve.py; default: 5 % in the ``pytorch``
    convention, else 0). ``profile`` (a Profile, or a bundled profile's name or a file) gives convolution times and
    workspaces; without one (and without ``conv_plan``) no workspace is counted, the result says so
    (``peak_is_lower_bound``) and no time is modelled. ``conv_plan``: the ``engine.plan.Plan`` applied to the model
    with ``apply_plan``: its kernels' workspaces are counted instead (``plan_workspace`` "arena", one buffer held
    all iteration, or "per-call", as ``apply_plan``'s ``workspace``; default as apply_plan picks), its other
    convolutions as stock PyTorch runs them (the ``heuristic`` rule, with a profile). ``workspace`` overrides the
    policy's rule (in the ``pytorch`` convention the default is ``heuristic``: stock PyTorch's, whatever the
    paper's); ``convention`` its framework's tensor rules; ``framework_bytes`` what the framework itself keeps
    allocated (PyTorch's cuBLAS and cuBLASLt workspaces: ``engine.pytorch.calibrate`` measures them; counted as
    workspace the whole iteration); ``time_params`` the time model's measurements (a TimeParams, or the file
    ``python -m engine.pytorch.calibrate`` writes, whose framework bytes count where ``framework_bytes`` is 0);
    remaining keywords are policy switches. ``precision`` and ``layout`` (default:
    the precision's) pick the profile's kernels (default: the conv plan's, which they must match, else tf32);
    ``itemsize`` (default: the precision's) sizes tensors.
    """
    info = P.get_policy(policy)
    _misspelt(policy_options, info.options())
    info.check_options(policy_options)
    precision, layout = _plan_variant(conv_plan, precision, layout)
    record = get_precision(precision)
    _check_counts(itemsize, optimizer_copies)
    variant = (precision, check_layout(layout or record.layout))
    if workspace is not None and workspace not in RULES:
        raise EngineError(f"unknown workspace rule {workspace!r}; expected one of {', '.join(RULES)}")
    capacity = None if capacity is None else _size("capacity", capacity)  # bytes, or a size such as "12GiB"
    if capacity is not None and capacity <= 0:
        raise EngineError(f"capacity must be positive, got {capacity}")
    if profile is not None and not isinstance(profile, Profile):
        profile = Profile.load(resolve_profile(profile))  # a bundled profile's name or a file, as the CLI takes
    net = _resolve_network(network, batch)
    conv = get_convention(convention or info.convention)
    if optimizer_copies:
        conv = conv.with_options(optimizer_copies=optimizer_copies)
    if isinstance(time_params, (str, os.PathLike)):  # a measurements file, as the CLI's --time-params
        time_params, measured_bytes = load_measured(time_params)
        framework_bytes = framework_bytes or measured_bytes
    elif time_params is not None and not isinstance(time_params, TimeParams):
        raise EngineError(
            f"time_params must be a TimeParams or the path of a measurements file (python -m "
            f"engine.pytorch.calibrate), got {short(time_params)}"
        )
    framework_bytes = _size("framework_bytes", framework_bytes)
    reserve = check_reserve(default_reserve(conv.name) if reserve is None else reserve)
    plan_rule = _plan_rule(conv_plan, plan_workspace, workspace, net)
    if plan_rule:
        workspace, variant = plan_rule, (conv_plan.precision, conv_plan.layout)
    elif workspace is None and conv.name in PYTORCH_CONVENTIONS:
        workspace = "heuristic"  # what stock PyTorch runs (cudnn.benchmark off), whatever the paper's rule
    inv = build_inventory(net, conv, itemsize or record.itemsize, int(framework_bytes))
    params = time_params or TimeParams()
    reserved = planning_capacity(capacity, reserve)

    def evaluate(plan: MemoryPlan, cap: int | None) -> MemoryResult:
        res = _evaluate(plan, cap, profile, params, variant, conv_plan)
        res.reserve = reserve if cap != capacity else 0.0
        if res.reserve:
            res.notes.append(
                f"planned for {1 - reserve:.0%} of the {format_size(capacity)} cap: the rest is left to "
                f"the caching allocator (engine/memory/reserve.py)"
            )
        return res

    if info.search is not None:
        cap = reserved if info.fills_capacity else capacity
        return _least_cap(info.search(inv, lambda plan: evaluate(plan, cap), cap, workspace))
    plan = info.make(inv, reserved if info.fills_capacity else capacity, **policy_options)
    plan.policy = policy
    if workspace:
        plan.workspace_rule = workspace
    cap = reserved if info.fills_capacity or plan.workspace_rule in DYNAMIC else capacity
    result = evaluate(plan, cap)
    if info.takes_capacity and cap is not None:
        floor = info.make(inv, 0, **policy_options)
        floor_curve = memory_curve(floor)
        least = least_workspace(floor, profile, floor.workspace_rule, *variant)
        result.summary["min_capacity"] = float(np.max(floor_curve.live + np.asarray(least)))
        result.summary["fits"] = bool(result.summary["peak"] <= cap)
    return _least_cap(result)


def _misspelt(options: dict, taken) -> None:
    """A keyword the policy does not take, close to one of plan_memory's own (``capcity``): named as such, not
    as a policy option the policy lacks (the policy's check names its own options)."""
    own = [k for k in inspect.signature(plan_memory).parameters if k != "policy_options"]
    for key in options:
        near = None if key in taken else nearest(key, own)
        if near:
            raise ArgumentError(f"plan_memory() takes no keyword {key!r} (did you mean {near!r}?)")


def _size(name: str, value) -> int:
    try:
        return parse_size(value)
    except BudgetError as err:
        raise BudgetError(f"{name}: {err}") from None


def _least_cap(result: MemoryResult) -> MemoryResult:
    """``min_capacity`` as the least cap, not the least capacity to plan for, where the plan left a reserve."""
    if result.reserve:
        result.summary["min_capacity"] /= 1 - result.reserve
    return result


MAX_OPTIMIZER_COPIES = 16  # SGD momentum 1, Adam 2; more is a typo


def _check_counts(itemsize, optimizer_copies) -> None:
    """``itemsize`` (bytes per element, or None for the precision's) and ``optimizer_copies`` (per parameter)."""
    if itemsize is not None and (type(itemsize) is not int or itemsize not in (1, 2, 4, 8)):
        raise EngineError(f"itemsize must be 1, 2, 4 or 8 bytes (or None: the precision's), got {short(itemsize)}")
    if isinstance(optimizer_copies, bool) or not isinstance(optimizer_copies, int):
        raise EngineError(
            f"optimizer_copies must be an integer (SGD momentum: 1, Adam: 2), got {short(optimizer_copies)}"
        )
    if not 0 <= optimizer_copies <= MAX_OPTIMIZER_COPIES:
        raise EngineError(
            f"optimizer_copies must be from 0 to {MAX_OPTIMIZER_COPIES} (SGD momentum: 1, Adam: 2), "
            f"got {optimizer_copies}"
        )


def _plan_variant(conv_plan, precision: str | None, layout: str | None) -> tuple[str, str | None]:
    """The precision and layout: as given, else the conv plan's; a plan of another precision or layout than the
    one given is refused (its kernels are not the ones the step would run, nor its tensors that size)."""
    from ..plan import Plan

    if not isinstance(conv_plan, Plan):
        return precision or DEFAULT_PRECISION, layout
    for name, given, planned in (("precision", precision, conv_plan.precision), ("layout", layout, conv_plan.layout)):
        if given is not None and (check_layout(given) if name == "layout" else given) != planned:
            raise EngineError(
                f"conv_plan is a {conv_plan.precision} {conv_plan.layout} plan, but {name}={given!r}: leave {name} "
                f"out (the plan's) or pass a plan made for {given}"
            )
    return conv_plan.precision, conv_plan.layout


def _plan_rule(conv_plan, plan_workspace: str | None, workspace: str | None, net: Network) -> str | None:
    """The workspace rule of a conv plan applied with ``apply_plan`` ("plan" per call, "plan-arena"), checked."""
    from ..plan import Plan

    if conv_plan is None:
        if plan_workspace is not None:
            raise EngineError("plan_workspace goes with conv_plan (the Plan applied with engine.pytorch.apply_plan)")
        return None
    if not isinstance(conv_plan, Plan):
        raise EngineError(
            f"conv_plan must be an engine.plan.Plan (engine.plan.load_plan), got {type(conv_plan).__name__}"
        )
    if workspace is not None:
        raise EngineError("give either conv_plan (its kernels' workspaces) or a workspace rule, not both")
    if conv_plan.batch != net.batch:
        raise EngineError(f"conv_plan is for mini-batch {conv_plan.batch}, the network is built for {net.batch}")
    ours = {k.id: k.signature.key for k in net.kernels(conv_plan.precision, conv_plan.layout)}
    if not any(k.id in ours for k in conv_plan.kernels):
        raise EngineError(f"conv_plan ({conv_plan.network}) plans none of {net.name}'s convolution kernels")
    for k in conv_plan.kernels:  # a kernel of the same name is another convolution in another network
        if k.id in ours and k.signature != ours[k.id]:
            raise EngineError(
                f"conv_plan ({conv_plan.network}) was made for other convolutions: its {k.id} is {k.signature}, "
                f"{net.name}'s is {ours[k.id]}; plan this network (python -m engine torch-plan) and pass that plan"
            )
    mode = plan_workspace or ("per-call" if conv_plan.limits else "arena")
    if mode not in ("arena", "per-call"):
        raise EngineError(f"plan_workspace must be 'arena' or 'per-call', got {mode!r}")
    return PLAN_RULES[mode]


def _evaluate(
    plan: MemoryPlan,
    capacity: int | None,
    profile: Profile | None,
    params: TimeParams,
    variant: tuple[str, str],
    conv_plan=None,
) -> MemoryResult:
    """The result of ``plan`` with its workspace chosen from the profile's (precision, layout) ``variant``."""
    inv = plan.inventory
    net = inv.net
    curve = memory_curve(plan)
    live = curve.live
    precision, layout = variant
    choices, ws = choose_workspace(plan, live, capacity, profile, plan.workspace_rule, precision, layout, conv_plan)
    ws = np.asarray(ws, dtype=float)
    total = live + ws
    timing = simulate(plan, choices, params) if profile is not None else None
    n = len(plan.ticks)
    rows = {
        "tick": np.arange(n),
        "step": [t.step for t in plan.ticks],
        "layer": [t.layer for t in plan.ticks],
        "op": [net.layer(t.layer).op for t in plan.ticks],
        "phase": [t.phase for t in plan.ticks],
    }
    for c in CLASSES:  # the workspace column: convolutions' plus the framework's own (a persistent tensor)
        rows[c] = ws + curve.by_class.get(c, 0) if c == "workspace" else curve.by_class.get(c, np.zeros(n))
    rows["live"] = live
    rows["total"] = total
    rows["live_tensors"] = curve.live_count
    rows["data"] = sum(curve.by_class[c] for c in DATA_CLASSES)
    rows["free"] = (capacity - live) if capacity is not None else np.full(n, np.nan)
    for key in ("start_ms", "end_ms", "stall_ms", "compute_ms"):
        rows[key] = np.asarray(getattr(timing, key)) if timing else np.full(n, np.nan)
    rows["time_source"] = timing.source if timing else [""] * n  # profile, measured or roofline
    ticks = pd.DataFrame(rows)
    kernels = pd.DataFrame(
        [
            {
                "tick": c.tick,
                "step": plan.ticks[c.tick].step,
                "layer": c.layer,
                "kind": c.kind.value,
                "signature": c.key,
                "free": c.free,
                "workspace": c.workspace,
                "time_ms": c.time_ms,
                "division": c.config.division,
                "plans": "+".join(m.plan for m in c.config.micro),
                "fits": c.fits,
            }
            for c in choices
        ],
        columns=[
            "tick",
            "step",
            "layer",
            "kind",
            "signature",
            "free",
            "workspace",
            "time_ms",
            "division",
            "plans",
            "fits",
        ],
    )
    storages_tensors: dict[str, list[str]] = {}
    for t in inv.tensors.values():
        storages_tensors.setdefault(t.storage, []).append(t.name)
    copies = pd.DataFrame(
        [
            {
                "storage": c.storage,
                "tensors": ",".join(storages_tensors.get(c.storage, [])),
                "direction": c.direction,
                "bytes": c.nbytes,
                "issue_tick": c.issue,
                "issue_step": plan.ticks[c.issue].step,
                "deadline_tick": c.deadline,
                "reason": c.reason,
                "start_ms": timing.copy_start_ms[i] if timing else math.nan,
                "end_ms": timing.copy_end_ms[i] if timing else math.nan,
            }
            for i, c in enumerate(plan.copies)
        ],
        columns=[
            "storage",
            "tensors",
            "direction",
            "bytes",
            "issue_tick",
            "issue_step",
            "deadline_tick",
            "reason",
            "start_ms",
            "end_ms",
        ],
    )
    k = int(np.argmax(total))
    peak = float(total[k])
    if timing:
        dur = np.diff(np.concatenate([[0.0], np.asarray(timing.end_ms)]))
        avg = float(np.sum(dur * total) / np.sum(dur)) if np.sum(dur) > 0 else float(np.mean(total))
    else:
        avg = math.nan
    step_max = ticks.groupby("step")["total"].max()
    if plan.workspace_rule in DYNAMIC:
        least = np.asarray(least_workspace(plan, profile, plan.workspace_rule, *variant))
        min_cap = float(np.max(live + least))
    else:
        min_cap = peak
    rec = ticks[ticks.phase == "R"]
    summary = {
        "peak": peak,
        "peak_tick": k,
        "peak_step": int(plan.ticks[k].step),
        "peak_layer": plan.ticks[k].layer,
        "peak_phase": "B" if plan.ticks[k].phase == "R" else plan.ticks[k].phase,
        "peak_live": float(np.max(live)),
        "peak_data": float(np.max(rows["data"])),
        "peak_workspace": float(np.max(ws)) if n else 0.0,
        "persistent": float(sum(curve.by_class[c][0] for c in ("weights", "optimizer"))),
        "avg_time_weighted": avg,
        "avg_per_step": float(step_max.mean()),
        "iteration_ms": timing.iteration_ms if timing else math.nan,
        "compute_ms": float(np.sum(timing.compute_ms)) if timing else math.nan,
        "stall_ms": float(np.sum(timing.stall_ms)) if timing else math.nan,
        "conv_ms": float(kernels.time_ms.sum()) if len(kernels) else math.nan,
        "offload_bytes": int(copies[copies.direction == "offload"].bytes.sum()),
        "prefetch_bytes": int(copies[copies.direction == "prefetch"].bytes.sum()),
        "recompute_count": int(plan.recompute_count),
        "recompute_ms": float(rec.compute_ms.sum()) if timing else math.nan,
        "layer_runs_measured": int(sum(s == "measured" for s in rows["time_source"])),
        "layer_runs_modelled": int(sum(s == "roofline" for s in rows["time_source"])),
        "max_live_tensors": int(np.max(curve.live_count)) if n else 0,
        "fits": bool(capacity is None or peak <= capacity),
        "min_capacity": min_cap,
        # convolution kernel runs whose workspace is not counted (no profile, and not in a conv plan)
        "workspace_unknown": len(tick_kernels(plan, precision, layout)) - len(choices),
    }
    notes = list(plan.notes)
    if summary["workspace_unknown"]:
        notes.append(_unknown_note(summary["workspace_unknown"], conv_plan))
    if profile is None:
        notes.append("no profile: no time modelled")
    elif missing := unmeasured(profile, choices, net.batch):
        how = (
            "undivided, as PyTorch runs them: cuDNN's heuristic order at the largest measured size below it, "
            "times and workspaces extrapolated"
            if plan.workspace_rule in ("heuristic", "per-layer-heuristic")
            else "micro-batches of its measured sizes (mu-cuDNN's desirable set), as `python -m engine plan` does"
        )
        notes.append(
            f"the profile has no measurement at mini-batch {net.batch} for {missing} of {len(choices)} "
            f"kernel runs: they run {how}"
        )
    paper = P.MEMORY_POLICIES[plan.policy].paper if plan.policy in P.MEMORY_POLICIES else ""
    return MemoryResult(
        net.name,
        net.batch,
        plan.policy,
        paper,
        inv.convention.name,
        capacity,
        plan.workspace_rule,
        ticks,
        kernels,
        copies,
        summary,
        dict(plan.options),
        notes,
        profile.describe() if profile is not None else "",
        plan,
        params,
    )


LOWER_BOUND = "the peak is a lower bound"  # how the note of a peak without convolution workspace begins


def _unknown_note(unknown: int, conv_plan) -> str:
    where = (
        "are not in the conv plan (stock PyTorch runs them) and no profile gives"
        if conv_plan is not None
        else "have no profile to give"
    )
    return (
        f"{LOWER_BOUND}, not a prediction of what runs: {unknown} convolution kernel runs {where} "
        f"their workspace, which cuDNN takes at run time (give a profile, --profile or profile=, whose heuristic "
        f"rule is what stock PyTorch picks; in Python also conv_plan=, the plan applied with apply_plan)"
    )


def format_table(result: MemoryResult) -> str:
    """A short human-readable report: summary lines and the per-step memory table."""
    s = result.summary
    cap = format_size(result.capacity) if result.capacity else "unbounded"
    lines = [
        f"{result.network} batch {result.batch}, policy {result.policy} ({result.paper}; tensors as "
        f"{result.convention}), capacity {cap}, workspace rule {result.workspace_rule}"
    ]
    at_least = "at least " if result.peak_is_lower_bound else ""
    lines.append(
        f"peak {at_least}{format_size(s['peak'])} at step {s['peak_step']} "
        f"({s['peak_layer']} {s['peak_phase']}); "
        f"live without workspace {format_size(s['peak_live'])}; activations+gradients "
        f"{format_size(s['peak_data'])}; fits: {'yes' if s['fits'] else 'no'} "
        f"(needs at least {format_size(s['min_capacity'])})"
    )
    if not math.isnan(s["iteration_ms"]):
        lines.append(
            f"iteration {s['iteration_ms']:.2f} ms (compute {s['compute_ms']:.2f}, convolutions "
            f"{s['conv_ms']:.2f}, stalls {s['stall_ms']:.2f}, recompute {s['recompute_ms']:.2f}); "
            f"time-weighted average memory {format_size(s['avg_time_weighted'])}"
        )
    lines.append(
        f"offloaded {format_size(s['offload_bytes'])}, prefetched {format_size(s['prefetch_bytes'])}, "
        f"{s['recompute_count']} re-forwards, per-step average memory {format_size(s['avg_per_step'])}"
    )
    if result.time_note:
        lines.append(result.time_note)
    for note in result.notes:
        lines.append(f"note: {note}")
    steps = result.steps()
    head = f"{'step':>4} {'layer':<16} {'ph':<2} {'live':>10} {'workspace':>10} {'total':>10} {'free':>10} {'n':>3}"
    lines += ["", head]
    for r in steps.itertuples():
        free = "" if math.isnan(r.free) else format_size(r.free)
        lines.append(
            f"{r.step:>4} {r.layer[:16]:<16} {r.phase:<2} {format_size(r.live):>10} "
            f"{format_size(r.workspace):>10} {format_size(r.total):>10} {free:>10} {r.live_tensors:>3}"
        )
    return "\n".join(lines)
