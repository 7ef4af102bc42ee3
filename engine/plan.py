"""Plans: the portable result of a WR or WD optimisation, as versioned JSON (docs/plan-schema.md).

A plan names, for every convolution kernel of a network in execution order, the micro-configurations
to run (micro-batch size + the cuDNN execution plan that ran it, identified by its name, engine id and
knobs, from which engine.gpu.graphs rebuilds it exactly through the cuDNN frontend), with the
predicted time and workspace from the profile. WD plans also place every kernel's workspace segment
in one arena (mu-cuDNN gave each layer a segment of its own). Loading validates everything and names the offending
field, so a hand-edited or foreign file fails with one clear line instead of misbehaving on a GPU.
It is over 300 statements because the format and its validation are one contract: every field the data
classes hold is checked here, next to its definition.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path

from .errors import EngineError, PlanFormatError
from .fileio import GZIP_MAGIC, MAX_FILE_BYTES, atomic_write, check_depth, gunzip_bounded, load_json_file, parse_json
from .fileio import short as _short
from .kernels import KernelKind, KernelSignature
from .configuration import Configuration, MicroConfig, parse_plan_name
from .precision import LAYOUTS, PRECISIONS
from .policies import POLICIES, batch_sizes, offers

FORMAT = "ucudnn-explorer-plan"
VERSION = 1
MODES = ("wr", "wd")
ALIGNMENT = 256  # WD segment offsets: cudaMalloc alignment, and what cuDNN expects of a workspace pointer
_REL_TOL = 1e-6  # predicted totals are sums of floats; JSON round trips keep them to ~1e-15
MAX_INT = (1 << 63) - 1  # bytes, ids and offsets are int64 on the GPU side


def align(n: int) -> int:
    """``n`` rounded up to the arena alignment."""
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class PlanMicro:
    """One micro-configuration: ``batch`` samples run by one recorded cuDNN execution plan."""

    batch: int
    plan: str  # the plan's name in its cuDNN build; checked after rebuilding
    engine_id: int
    knobs: dict  # {knob type (decimal string): value}, exactly as profiled
    time_ms: float  # predicted (profiled median)
    workspace: int  # bytes

    def to_dict(self) -> dict:
        return {
            "batch": self.batch,
            "plan": self.plan,
            "engine_id": self.engine_id,
            "knobs": dict(self.knobs),
            "time_ms": self.time_ms,
            "workspace": self.workspace,
        }

    @property
    def micro_config(self) -> MicroConfig:
        return MicroConfig(self.batch, self.plan, self.time_ms, self.workspace)


@dataclass(frozen=True)
class StockEstimate:
    """What stock PyTorch runs for a kernel, undivided (engine.stock): ``heuristic_ms`` cuDNN's first heuristic
    plan (``cudnn.benchmark`` off), ``benchmark_ms`` the fastest of the plans ``cudnn.benchmark`` tries, each the
    profile's time (None: unknown, a plan among them was not timed); ``workspace`` the most any of them takes."""

    heuristic_ms: float | None
    benchmark_ms: float | None
    workspace: int

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class PlanKernel:
    """One (layer, direction) of the network and the configuration chosen for it."""

    id: str  # e.g. conv2:F
    layer: str
    kind: KernelKind
    signature: str  # KernelSignature.key (no mini-batch size)
    micro: list[PlanMicro]  # in execution order
    workspace: int  # max over micro
    time_ms: float  # sum over micro
    undivided_time_ms: float | None  # this kernel in the undivided baseline at the same memory; None if infeasible
    offset: int | None = None  # WD: byte offset of this kernel's segment in the arena
    stock: StockEstimate | None = None  # what stock PyTorch would run instead (absent from older plans)

    @property
    def configuration(self) -> Configuration:
        return Configuration(tuple(m.micro_config for m in self.micro))

    @property
    def division(self) -> str:
        return self.configuration.division

    def to_dict(self) -> dict:
        d = {
            "id": self.id,
            "layer": self.layer,
            "kind": self.kind.value,
            "signature": self.signature,
            "micro": [m.to_dict() for m in self.micro],
            "workspace": self.workspace,
            "time_ms": self.time_ms,
            "undivided_time_ms": self.undivided_time_ms,
        }
        if self.offset is not None:
            d["offset"] = self.offset
        if self.stock is not None:
            d["stock"] = self.stock.to_dict()
        return d


@dataclass
class PlanTotals:
    """Predicted network totals; the baseline is undivided cuDNN under the same memory rule."""

    time_ms: float  # sum of kernel times
    workspace: int  # sum of kernel workspaces (each kernel its own, as Caffe and WD)
    max_workspace: int  # largest kernel workspace (one workspace shared by all kernels)
    undivided_time_ms: float | None  # policy undivided at the same budget; None when that is infeasible
    unlimited_time_ms: float  # every kernel's fastest configuration, no workspace limit
    unlimited_workspace: int  # sum of those configurations' workspaces
    speedup: float | None  # undivided_time_ms / time_ms

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Plan:
    mode: str  # wr | wd
    policy: str  # batch-size policy name or comma list of sizes
    budget: int  # bytes: per-kernel limit (WR) or total (WD)
    network: str
    batch: int
    precision: str
    layout: str
    kernels: list[PlanKernel]
    totals: PlanTotals
    provenance: dict
    arena_size: int | None = None  # WD: bytes of the one workspace arena holding all segments
    solver: dict | None = None  # WD: ILP solver, status, size and timings
    notes: list[str] = field(default_factory=list)
    limits: dict[str, int] | None = None  # WR: {kernel id: bytes} for kernels whose limit is not ``budget``

    def limit(self, kernel_id: str) -> int:
        """A WR kernel's workspace limit: its own where the plan has one, else the budget."""
        return (self.limits or {}).get(kernel_id, self.budget)

    def to_dict(self) -> dict:
        d = {"format": FORMAT, "version": VERSION, "mode": self.mode, "policy": self.policy, "budget": self.budget}
        if self.limits:
            d["limits"] = dict(self.limits)
        d |= {
            "network": {"name": self.network, "batch": self.batch},
            "precision": self.precision,
            "layout": self.layout,
            "kernels": [k.to_dict() for k in self.kernels],
            "totals": self.totals.to_dict(),
        }
        if self.mode == "wd":
            d["arena_size"] = self.arena_size
            d["solver"] = dict(self.solver or {})
        d["notes"] = list(self.notes)
        d["provenance"] = self.provenance
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1)

    def save(self, path: str | Path) -> Path:
        """Write JSON, gzip-compressed when the name ends in ``.gz``."""
        return atomic_write(path, self.to_json() + "\n", gzip_suffix=True, what="plan")

    @classmethod
    def from_dict(cls, doc) -> "Plan":
        """Validate a plan document; any problem raises PlanFormatError naming the field."""
        plan = _parse_plan(doc)
        _check_unlimited(plan.totals)
        return plan


def load_plan(path: str | Path, network=None) -> Plan:
    """Read and validate a plan file, then check it against its network: ``network`` if given (a
    ``Network``), else the one its name and mini-batch build (a zoo name, generator or spec path)."""
    what = f"plan {str(path)!r}"
    return _checked(load_json_file(path, what, PlanFormatError), what, network)


def plan_from_bytes(data: bytes, name: str, network=None) -> Plan:
    """``load_plan`` for a file's content (an upload), gzip-compressed when ``name`` ends in ``.gz`` or it
    starts as gzip does."""
    what = f"plan {name!r}"
    if len(data) > MAX_FILE_BYTES:
        raise PlanFormatError(f"{what} is larger than {MAX_FILE_BYTES // 1024**2} MiB, the most this engine reads")
    if name.endswith(".gz") or data.startswith(GZIP_MAGIC):
        data = gunzip_bounded(data, what, PlanFormatError)
    return _checked(parse_json(data, what, PlanFormatError), what, network)


def _checked(doc, what: str, network) -> Plan:
    try:
        plan = _parse_plan(doc)
        check_network(plan, network)
        _check_unlimited(plan.totals)
    except PlanFormatError as err:
        raise PlanFormatError(f"{what}: {err}") from None
    return plan


def check_network(plan: Plan, network=None) -> None:
    """The plan's kernels must be exactly the network's convolution kernels, in execution order, with
    the same signatures: a plan for another network, or missing or reordered kernels, would run wrong."""
    if network is None:
        from .zoo import get_network

        try:
            network = get_network(plan.network, plan.batch)
        except (EngineError, ValueError, KeyError, OSError) as err:
            why = str(err) if len(str(err)) <= 300 else str(err)[:297] + "..."
            raise PlanFormatError(
                f"field network names {_short(plan.network)}, which cannot be built here to check "
                f"the plan against ({why})"
            ) from None
    if network.batch != plan.batch:
        raise PlanFormatError(f"field network.batch is {plan.batch} but the network has mini-batch {network.batch}")
    expected = network.kernels(plan.precision, plan.layout)
    if len(expected) != len(plan.kernels):
        raise PlanFormatError(
            f"field kernels lists {len(plan.kernels)} kernels but {network.name} has "
            f"{len(expected)} convolution kernels"
        )
    for i, (k, e) in enumerate(zip(plan.kernels, expected)):
        if k.id != e.id:
            raise PlanFormatError(
                f"field kernels[{i}].id is {_short(k.id)} but kernel {i} of {network.name} in "
                f"execution order is {_short(e.id)}"
            )
        if k.signature != e.signature.key:
            raise PlanFormatError(
                f"field kernels[{i}].signature is {_short(k.signature)} but {network.name}'s {e.id} "
                f"is {_short(e.signature.key)}"
            )


# --- validation ------------------------------------------------------------------------------


def _check_unlimited(t: PlanTotals) -> None:
    """The unlimited-workspace optimum is never slower than a plan (shown as the optimum, it must be one);
    checked after the kernels, which a wrong total follows from more often."""
    if t.unlimited_time_ms > t.time_ms and not _close(t.unlimited_time_ms, t.time_ms):
        _fail(
            "totals.unlimited_time_ms",
            f"is {t.unlimited_time_ms} ms, slower than the plan's {t.time_ms} ms; "
            f"the unlimited-workspace optimum cannot be",
        )


def _fail(path: str, problem: str):
    raise PlanFormatError(f"field {path} {problem}")


def _fields(obj, path: str, required: tuple[str, ...], optional: tuple[str, ...] = ()) -> dict:
    if not isinstance(obj, dict):
        _fail(path, f"must be an object, got {type(obj).__name__}")
    prefix = f"{path}." if path else ""
    for key in required:
        if key not in obj:
            raise PlanFormatError(f"field {prefix}{key} is missing")
    for key in obj:
        if key not in required and key not in optional:
            raise PlanFormatError(
                f"field {prefix}{_short(key)[1:-1]} is not part of the plan format (version {VERSION})"
            )
    return obj


class _Offered:
    """Membership in a named policy's micro-batch sizes, computed per size."""

    def __init__(self, policy: str, batch: int):
        self.policy, self.batch = policy, batch

    def __contains__(self, size: int) -> bool:
        return offers(self.policy, self.batch, size)


def _int(v, path: str, minimum: int = 0, maximum: int = MAX_INT) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(path, f"must be an integer, got {_short(v)}")
    if v < minimum:
        _fail(path, f"must be >= {minimum}, got {_short(v)}")
    if v > maximum:
        _fail(path, f"must be <= {maximum}, got {_short(v)}")
    return v


def _num(v, path: str, positive: bool = False, nullable: bool = False) -> float | None:
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or abs(v) > 1e300 or not math.isfinite(v):
        _fail(path, f"must be a finite number{' or null' if nullable else ''}, got {_short(v)}")
    if v < 0 or (positive and v == 0):
        _fail(path, f"must be {'positive' if positive else 'non-negative'}, got {_short(v)}")
    return float(v)


def _str(v, path: str) -> str:
    if not isinstance(v, str) or not v:
        _fail(path, f"must be a non-empty string, got {_short(v)}")
    return v


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-9)


def _parse_plan(doc) -> Plan:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise PlanFormatError(f"field format must be {FORMAT!r} (not a ucudnn-explorer plan), got {_short(got)}")
    version = doc.get("version")
    if type(version) is not int or version != VERSION:  # True == 1 and 1.0 == 1 in Python; neither is a version
        raise PlanFormatError(f"field version is {_short(version)}; this engine reads version {VERSION} (an integer)")
    check_depth(doc, "the plan", PlanFormatError)
    mode = doc.get("mode")
    if "mode" not in doc:
        _fail("mode", "is missing")
    if mode not in MODES:  # before the fields, which depend on it (a WD plan has arena_size and solver)
        _fail("mode", f"must be one of {MODES}, got {_short(mode)}")
    wd = mode == "wd"
    _fields(
        doc,
        "",
        (
            "format",
            "version",
            "mode",
            "policy",
            "budget",
            "network",
            "precision",
            "layout",
            "kernels",
            "totals",
            "notes",
            "provenance",
        )
        + (("arena_size", "solver") if wd else ()),
        () if wd else ("limits",),
    )
    budget = _int(doc["budget"], "budget")
    net = _fields(doc["network"], "network", ("name", "batch"))
    name = _str(net["name"], "network.name")
    batch = _int(net["batch"], "network.batch", 1)
    policy = _str(doc["policy"], "policy")
    try:
        if policy in POLICIES:  # never list the sizes of `all`: a huge batch would take gigabytes
            offers(policy, batch, batch)
            allowed = _Offered(policy, batch)
        else:
            allowed = set(batch_sizes(policy, batch))
    except ValueError as err:
        _fail("policy", f"is not a batch-size policy for mini-batch {batch}: {err}")
    precision, layout = doc["precision"], doc["layout"]
    if not isinstance(precision, str) or precision not in PRECISIONS:  # a list or object is unhashable
        _fail("precision", f"must be one of {sorted(PRECISIONS)}, got {_short(precision)}")
    if layout not in LAYOUTS:
        _fail("layout", f"must be one of {list(LAYOUTS)}, got {_short(layout)}")

    limits = _parse_limits(doc.get("limits"))
    if not isinstance(doc["kernels"], list) or not doc["kernels"]:
        _fail("kernels", "must be a non-empty list")
    kernels, seen = [], {}
    for i, kd in enumerate(doc["kernels"]):
        k = _parse_kernel(kd, f"kernels[{i}]", wd, batch, allowed, precision, layout)
        if k.id in seen:
            _fail(f"kernels[{i}].id", f"repeats {_short(k.id)} (also kernels[{seen[k.id]}])")
        seen[k.id] = i
        if not wd and k.workspace > limits.get(k.id, budget):
            what = f"its limit {limits[k.id]}" if k.id in limits else f"the per-kernel budget {budget}"
            _fail(f"kernels[{i}].workspace", f"is {k.workspace} bytes, above {what}")
        kernels.append(k)
    stray = [kid for kid in limits if kid not in seen]
    if stray:
        _fail("limits", f"names {_short(stray[0])}, which is not a kernel of the plan")

    arena_size, solver = None, None
    if wd:
        arena_size = _int(doc["arena_size"], "arena_size")
        if arena_size > budget:
            _fail("arena_size", f"is {arena_size} bytes, above the budget {budget}")
        _check_segments(kernels, arena_size)
        solver = _fields(doc["solver"], "solver", ("name", "status"), ("n_variables", "solve_time_s", "build_time_s"))
        _str(solver["name"], "solver.name")
        _str(solver["status"], "solver.status")
        if "n_variables" in solver:
            _int(solver["n_variables"], "solver.n_variables")
        for key in ("solve_time_s", "build_time_s"):
            if key in solver:
                _num(solver[key], f"solver.{key}")

    totals = _parse_totals(doc["totals"], kernels)
    notes = doc["notes"]
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        _fail("notes", "must be a list of strings")
    prov = _fields(
        doc["provenance"], "provenance", ("profile", "created", "engine_version", "command"), ("profile_source",)
    )
    if not isinstance(prov["profile"], dict):
        _fail("provenance.profile", "must be an object (the profile's provenance)")
    if not isinstance(prov["profile"].get("synthetic", False), bool):  # "no" would read as true
        _fail("provenance.profile.synthetic", f"must be true or false, got {_short(prov['profile']['synthetic'])}")
    _str(prov["created"], "provenance.created")
    _str(prov["engine_version"], "provenance.engine_version")
    if not isinstance(prov["command"], str):
        _fail("provenance.command", f"must be a string, got {_short(prov['command'])}")
    return Plan(
        mode,
        policy,
        budget,
        name,
        batch,
        precision,
        layout,
        kernels,
        totals,
        dict(prov),
        arena_size,
        dict(solver) if solver is not None else None,
        list(notes),
        limits or None,
    )


def _parse_limits(ld) -> dict[str, int]:
    """WR's optional per-kernel limits: {kernel id: bytes}, at most one per kernel (checked by the caller)."""
    if ld is None:
        return {}
    if not isinstance(ld, dict) or not ld:
        _fail("limits", f"must be a non-empty object {{kernel id: bytes}}, got {_short(ld)}")
    return {_str(k, "limits"): _int(v, f"limits.{_short(k)[1:-1]}") for k, v in ld.items()}


def _parse_kernel(kd, path: str, wd: bool, batch: int, allowed: set[int], precision: str, layout: str) -> PlanKernel:
    _fields(
        kd,
        path,
        ("id", "layer", "kind", "signature", "micro", "workspace", "time_ms", "undivided_time_ms")
        + (("offset",) if wd else ()),
        ("stock",),
    )
    layer = _str(kd["layer"], f"{path}.layer")
    try:
        kind = KernelKind(kd["kind"])
    except ValueError:
        _fail(f"{path}.kind", f"must be one of {[k.value for k in KernelKind]}, got {_short(kd['kind'])}")
    kid = _str(kd["id"], f"{path}.id")
    if kid != f"{layer}:{kind.short}":
        _fail(f"{path}.id", f"is {_short(kid)} but layer and kind make {layer}:{kind.short}")
    key = _str(kd["signature"], f"{path}.signature")
    try:
        sig = KernelSignature.from_key(key)
    except (ValueError, TypeError) as err:
        _fail(f"{path}.signature", f"is not a kernel signature: {err}")
    if sig.kind is not kind:
        _fail(f"{path}.signature", f"is a {sig.kind.value} signature but kind is {kind.value}")
    if (sig.precision, sig.layout) != (precision, layout):
        _fail(f"{path}.signature", f"is {sig.precision}/{sig.layout}, the plan is {precision}/{layout}")

    if not isinstance(kd["micro"], list) or not kd["micro"]:
        _fail(f"{path}.micro", "must be a non-empty list of micro-configurations")
    if len(kd["micro"]) > batch:  # every micro-batch has at least one sample
        _fail(f"{path}.micro", f"lists {len(kd['micro'])} micro-configurations, more than the mini-batch {batch}")
    micro = [_parse_micro(md, f"{path}.micro[{j}]", allowed) for j, md in enumerate(kd["micro"])]
    total = sum(m.batch for m in micro)
    if total != batch:
        sizes = "+".join(str(m.batch) for m in micro[:16]) + ("+..." if len(micro) > 16 else "")
        _fail(f"{path}.micro", f"has micro-batch sizes {sizes} = {total}, not the mini-batch {batch}")
    workspace = _int(kd["workspace"], f"{path}.workspace")
    if workspace != max(m.workspace for m in micro):
        _fail(
            f"{path}.workspace",
            f"is {workspace} but its largest micro-configuration workspace is {max(m.workspace for m in micro)}",
        )
    time_ms = _num(kd["time_ms"], f"{path}.time_ms", positive=True)
    if not _close(time_ms, sum(m.time_ms for m in micro)):
        _fail(f"{path}.time_ms", f"is {time_ms} but its micro-configurations sum to {sum(m.time_ms for m in micro)}")
    undivided = _num(kd["undivided_time_ms"], f"{path}.undivided_time_ms", positive=True, nullable=True)
    offset = _int(kd["offset"], f"{path}.offset") if wd else None
    stock = _parse_stock(kd["stock"], f"{path}.stock") if "stock" in kd else None
    return PlanKernel(kid, layer, kind, key, micro, workspace, time_ms, undivided, offset, stock)


def _parse_stock(sd, path: str) -> StockEstimate:
    _fields(sd, path, ("heuristic_ms", "benchmark_ms", "workspace"))
    return StockEstimate(
        _num(sd["heuristic_ms"], f"{path}.heuristic_ms", positive=True, nullable=True),
        _num(sd["benchmark_ms"], f"{path}.benchmark_ms", positive=True, nullable=True),
        _int(sd["workspace"], f"{path}.workspace"),
    )


def _parse_micro(md, path: str, allowed: set[int]) -> PlanMicro:
    _fields(md, path, ("batch", "plan", "engine_id", "knobs", "time_ms", "workspace"))
    b = _int(md["batch"], f"{path}.batch", 1)
    if b not in allowed:
        _fail(f"{path}.batch", f"is {b}, which the plan's policy does not offer")
    knobs = md["knobs"]
    if not isinstance(knobs, dict):
        _fail(f"{path}.knobs", f"must be an object {{knob type: value}}, got {_short(knobs)}")
    for kt, kv in knobs.items():
        if not re.fullmatch(r"-?[0-9]{1,9}", kt):
            _fail(f"{path}.knobs", f"has key {_short(kt)}; knob types are integers")
        if isinstance(kv, bool) or not isinstance(kv, int) or abs(kv) > MAX_INT:
            _fail(f"{path}.knobs.{kt}", f"must be an integer knob value, got {_short(kv)}")
    name = _str(md["plan"], f"{path}.plan")
    engine_id = _int(md["engine_id"], f"{path}.engine_id")
    named = parse_plan_name(name)
    if named is None:
        _fail(f"{path}.plan", f"is {_short(name)}, not a cuDNN plan name such as eng38_k2=0_k13=2")
    named_id, named_knobs = named
    if named_id != engine_id:
        _fail(f"{path}.engine_id", f"is {engine_id} but the plan name {name} says engine {named_id}")
    if named_knobs != knobs:
        _fail(f"{path}.knobs", f"are {_short(knobs)} but the plan name {name} says {_short(named_knobs)}")
    return PlanMicro(
        b,
        name,
        engine_id,
        dict(knobs),
        _num(md["time_ms"], f"{path}.time_ms", positive=True),
        _int(md["workspace"], f"{path}.workspace"),
    )


def _check_segments(kernels: list[PlanKernel], arena_size: int) -> None:
    """WD segments are aligned, inside the arena and pairwise disjoint (empty segments take no bytes)."""
    segs = []
    for i, k in enumerate(kernels):
        if k.offset % ALIGNMENT:
            _fail(f"kernels[{i}].offset", f"is {k.offset}, not a multiple of {ALIGNMENT}")
        if k.offset + k.workspace > arena_size:
            _fail(
                f"kernels[{i}].offset",
                f"puts segment [{k.offset}, {k.offset + k.workspace}) past the arena size {arena_size}",
            )
        if k.workspace:
            segs.append((k.offset, k.offset + k.workspace, i))
    segs.sort()
    for (_, e0, i0), (s1, _, i1) in zip(segs, segs[1:]):
        if s1 < e0:
            a, b = sorted((i0, i1))
            _fail(
                f"kernels[{b}].offset",
                f"segment [{kernels[b].offset}, {kernels[b].offset + kernels[b].workspace})"
                f" overlaps kernels[{a}]'s segment "
                f"[{kernels[a].offset}, {kernels[a].offset + kernels[a].workspace})",
            )


def _parse_totals(td, kernels: list[PlanKernel]) -> PlanTotals:
    _fields(
        td,
        "totals",
        (
            "time_ms",
            "workspace",
            "max_workspace",
            "undivided_time_ms",
            "unlimited_time_ms",
            "unlimited_workspace",
            "speedup",
        ),
    )
    t = PlanTotals(
        _num(td["time_ms"], "totals.time_ms", positive=True),
        _int(td["workspace"], "totals.workspace"),
        _int(td["max_workspace"], "totals.max_workspace"),
        _num(td["undivided_time_ms"], "totals.undivided_time_ms", positive=True, nullable=True),
        _num(td["unlimited_time_ms"], "totals.unlimited_time_ms", positive=True),
        _int(td["unlimited_workspace"], "totals.unlimited_workspace"),
        _num(td["speedup"], "totals.speedup", positive=True, nullable=True),
    )
    if not _close(t.time_ms, sum(k.time_ms for k in kernels)):
        _fail("totals.time_ms", f"is {t.time_ms} but the kernels sum to {sum(k.time_ms for k in kernels)}")
    if t.workspace != sum(k.workspace for k in kernels):
        _fail("totals.workspace", f"is {t.workspace} but the kernels sum to {sum(k.workspace for k in kernels)}")
    if t.max_workspace != max(k.workspace for k in kernels):
        _fail(
            "totals.max_workspace",
            f"is {t.max_workspace} but the largest kernel workspace is {max(k.workspace for k in kernels)}",
        )
    if t.undivided_time_ms is not None:
        parts = [k.undivided_time_ms for k in kernels]
        if None in parts:
            _fail("totals.undivided_time_ms", f"is a number but kernels[{parts.index(None)}].undivided_time_ms is null")
        if not _close(t.undivided_time_ms, sum(parts)):
            _fail("totals.undivided_time_ms", f"is {t.undivided_time_ms} but the kernels sum to {sum(parts)}")
    if (t.speedup is None) != (t.undivided_time_ms is None):
        _fail("totals.speedup", "must be null exactly when totals.undivided_time_ms is null")
    if t.speedup is not None and not _close(t.speedup, t.undivided_time_ms / t.time_ms):
        _fail("totals.speedup", f"is {t.speedup} but undivided_time_ms / time_ms is {t.undivided_time_ms / t.time_ms}")
    return t
