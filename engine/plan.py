"""Plans: the portable result of a WR or WD optimisation, as versioned JSON (docs/plan-schema.md).

A plan names, for every convolution kernel of a network in execution order, the micro-configurations
to run (micro-batch size + the cuDNN execution plan that ran it, identified by its name, engine id and
knobs, from which engine.gpu.graphs rebuilds it exactly; cudnn-frontend.md §6), with the
predicted time and workspace from the profile. WD plans also place every kernel's workspace segment
in one arena (ucudnn-reference.md §11, bug 9). Loading validates everything and names the offending
field, so a hand-edited or foreign file fails with one clear line instead of misbehaving on a GPU.
"""

from __future__ import annotations

import gzip
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

from .errors import PlanFormatError
from .kernels import LAYOUTS, PRECISIONS, KernelKind, KernelSignature
from .configuration import Configuration, MicroConfig
from .policies import batch_sizes

FORMAT = "ucudnn-explorer-plan"
VERSION = 1
MODES = ("wr", "wd")
ALIGNMENT = 256  # WD segment offsets: cudaMalloc alignment, and what cuDNN expects of a workspace pointer
_REL_TOL = 1e-6  # predicted totals are sums of floats; JSON round trips keep them to ~1e-15


def align(n: int) -> int:
    """``n`` rounded up to the arena alignment."""
    return -(-n // ALIGNMENT) * ALIGNMENT


@dataclass(frozen=True)
class PlanMicro:
    """One micro-configuration: ``batch`` samples run by one recorded cuDNN execution plan."""

    batch: int
    plan: str            # the plan's name in its cuDNN build; checked after rebuilding
    engine_id: int
    knobs: dict          # {knob type (decimal string): value}, exactly as profiled
    time_ms: float       # predicted (profiled median)
    workspace: int       # bytes

    def to_dict(self) -> dict:
        return {"batch": self.batch, "plan": self.plan, "engine_id": self.engine_id, "knobs": dict(self.knobs),
                "time_ms": self.time_ms, "workspace": self.workspace}

    @property
    def micro_config(self) -> MicroConfig:
        return MicroConfig(self.batch, self.plan, self.time_ms, self.workspace)


@dataclass
class PlanKernel:
    """One (layer, direction) of the network and the configuration chosen for it."""

    id: str                          # e.g. conv2:F
    layer: str
    kind: KernelKind
    signature: str                   # KernelSignature.key (no mini-batch size)
    micro: list[PlanMicro]           # in execution order
    workspace: int                   # max over micro
    time_ms: float                   # sum over micro
    undivided_time_ms: float | None  # this kernel in the undivided baseline at the same memory; None if infeasible
    offset: int | None = None        # WD: byte offset of this kernel's segment in the arena

    @property
    def configuration(self) -> Configuration:
        return Configuration(tuple(m.micro_config for m in self.micro))

    @property
    def division(self) -> str:
        return self.configuration.division

    def to_dict(self) -> dict:
        d = {"id": self.id, "layer": self.layer, "kind": self.kind.value, "signature": self.signature,
             "micro": [m.to_dict() for m in self.micro], "workspace": self.workspace, "time_ms": self.time_ms,
             "undivided_time_ms": self.undivided_time_ms}
        if self.offset is not None:
            d["offset"] = self.offset
        return d


@dataclass
class PlanTotals:
    """Predicted network totals; the baseline is undivided cuDNN under the same memory rule."""

    time_ms: float                   # sum of kernel times
    workspace: int                   # sum of kernel workspaces (each kernel its own, as Caffe and WD)
    max_workspace: int               # largest kernel workspace (one workspace shared by all kernels)
    undivided_time_ms: float | None  # policy undivided at the same budget; None when that is infeasible
    unlimited_time_ms: float         # every kernel's fastest configuration, no workspace limit
    unlimited_workspace: int         # sum of those configurations' workspaces
    speedup: float | None            # undivided_time_ms / time_ms

    def to_dict(self) -> dict:
        return dict(self.__dict__)


@dataclass
class Plan:
    mode: str                        # wr | wd
    policy: str                      # batch-size policy name or comma list of sizes
    budget: int                      # bytes: per-kernel limit (WR) or total (WD)
    network: str
    batch: int
    precision: str
    layout: str
    kernels: list[PlanKernel]
    totals: PlanTotals
    provenance: dict
    arena_size: int | None = None    # WD: bytes of the one workspace arena holding all segments
    solver: dict | None = None       # WD: ILP solver, status, size and timings
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        d = {"format": FORMAT, "version": VERSION, "mode": self.mode, "policy": self.policy, "budget": self.budget,
             "network": {"name": self.network, "batch": self.batch}, "precision": self.precision,
             "layout": self.layout, "kernels": [k.to_dict() for k in self.kernels], "totals": self.totals.to_dict()}
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
        path = Path(path)
        data = (self.to_json() + "\n").encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
        return path

    @classmethod
    def from_dict(cls, doc) -> "Plan":
        """Validate a plan document; any problem raises PlanFormatError naming the field."""
        return _parse_plan(doc)


def load_plan(path: str | Path) -> Plan:
    path = Path(path)
    try:
        raw = path.read_bytes()
        doc = json.loads(gzip.decompress(raw) if path.suffix == ".gz" else raw)
    except FileNotFoundError:
        raise PlanFormatError(f"plan {str(path)!r} does not exist") from None
    except (OSError, ValueError, EOFError) as err:
        raise PlanFormatError(f"plan {str(path)!r} is not valid JSON: {err}") from None
    try:
        return _parse_plan(doc)
    except PlanFormatError as err:
        raise PlanFormatError(f"plan {str(path)!r}: {err}") from None


# --- validation ------------------------------------------------------------------------------

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
            raise PlanFormatError(f"field {prefix}{key} is not part of the plan format (version {VERSION})")
    return obj


def _int(v, path: str, minimum: int = 0) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        _fail(path, f"must be an integer, got {v!r}")
    if v < minimum:
        _fail(path, f"must be >= {minimum}, got {v}")
    return v


def _num(v, path: str, positive: bool = False, nullable: bool = False) -> float | None:
    if v is None and nullable:
        return None
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        _fail(path, f"must be a finite number{' or null' if nullable else ''}, got {v!r}")
    if v < 0 or (positive and v == 0):
        _fail(path, f"must be {'positive' if positive else 'non-negative'}, got {v!r}")
    return float(v)


def _str(v, path: str) -> str:
    if not isinstance(v, str) or not v:
        _fail(path, f"must be a non-empty string, got {v!r}")
    return v


def _close(a: float, b: float) -> bool:
    return math.isclose(a, b, rel_tol=_REL_TOL, abs_tol=1e-9)


def _parse_plan(doc) -> Plan:
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        got = doc.get("format") if isinstance(doc, dict) else type(doc).__name__
        raise PlanFormatError(f"field format must be {FORMAT!r} (not a ucudnn-explorer plan), got {got!r}")
    if doc.get("version") != VERSION:
        raise PlanFormatError(f"field version is {doc.get('version')!r}; this engine reads version {VERSION}")
    mode = doc.get("mode")
    wd = mode == "wd"
    _fields(doc, "", ("format", "version", "mode", "policy", "budget", "network", "precision", "layout", "kernels",
                      "totals", "notes", "provenance") + (("arena_size", "solver") if wd else ()))
    if mode not in MODES:
        _fail("mode", f"must be one of {MODES}, got {mode!r}")
    budget = _int(doc["budget"], "budget")
    net = _fields(doc["network"], "network", ("name", "batch"))
    name = _str(net["name"], "network.name")
    batch = _int(net["batch"], "network.batch", 1)
    policy = _str(doc["policy"], "policy")
    try:
        allowed = set(batch_sizes(policy, batch))
    except ValueError as err:
        _fail("policy", f"is not a batch-size policy: {err}")
    precision, layout = doc["precision"], doc["layout"]
    if precision not in PRECISIONS:
        _fail("precision", f"must be one of {sorted(PRECISIONS)}, got {precision!r}")
    if layout not in LAYOUTS:
        _fail("layout", f"must be one of {list(LAYOUTS)}, got {layout!r}")

    if not isinstance(doc["kernels"], list) or not doc["kernels"]:
        _fail("kernels", "must be a non-empty list")
    kernels, seen = [], {}
    for i, kd in enumerate(doc["kernels"]):
        k = _parse_kernel(kd, f"kernels[{i}]", wd, batch, allowed, precision, layout)
        if k.id in seen:
            _fail(f"kernels[{i}].id", f"repeats {k.id!r} (also kernels[{seen[k.id]}])")
        seen[k.id] = i
        if not wd and k.workspace > budget:
            _fail(f"kernels[{i}].workspace", f"is {k.workspace} bytes, above the per-kernel budget {budget}")
        kernels.append(k)

    arena_size, solver = None, None
    if wd:
        arena_size = _int(doc["arena_size"], "arena_size")
        if arena_size > budget:
            _fail("arena_size", f"is {arena_size} bytes, above the budget {budget}")
        _check_segments(kernels, arena_size)
        solver = _fields(doc["solver"], "solver", ("name", "status"),
                         ("n_variables", "solve_time_s", "build_time_s"))
        _str(solver["name"], "solver.name")
        _str(solver["status"], "solver.status")

    totals = _parse_totals(doc["totals"], kernels)
    notes = doc["notes"]
    if not isinstance(notes, list) or not all(isinstance(n, str) for n in notes):
        _fail("notes", "must be a list of strings")
    prov = _fields(doc["provenance"], "provenance", ("profile", "created", "engine_version", "command"),
                   ("profile_source",))
    if not isinstance(prov["profile"], dict):
        _fail("provenance.profile", "must be an object (the profile's provenance)")
    _str(prov["created"], "provenance.created")
    _str(prov["engine_version"], "provenance.engine_version")
    if not isinstance(prov["command"], str):
        _fail("provenance.command", f"must be a string, got {prov['command']!r}")
    return Plan(mode, policy, budget, name, batch, precision, layout, kernels, totals, dict(prov), arena_size,
                dict(solver) if solver is not None else None, list(notes))


def _parse_kernel(kd, path: str, wd: bool, batch: int, allowed: set[int], precision: str, layout: str) -> PlanKernel:
    _fields(kd, path, ("id", "layer", "kind", "signature", "micro", "workspace", "time_ms", "undivided_time_ms")
            + (("offset",) if wd else ()))
    layer = _str(kd["layer"], f"{path}.layer")
    try:
        kind = KernelKind(kd["kind"])
    except ValueError:
        _fail(f"{path}.kind", f"must be one of {[k.value for k in KernelKind]}, got {kd['kind']!r}")
    kid = _str(kd["id"], f"{path}.id")
    if kid != f"{layer}:{kind.short}":
        _fail(f"{path}.id", f"is {kid!r} but layer and kind make {layer}:{kind.short}")
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
    micro = [_parse_micro(md, f"{path}.micro[{j}]", allowed) for j, md in enumerate(kd["micro"])]
    total = sum(m.batch for m in micro)
    if total != batch:
        _fail(f"{path}.micro", f"has micro-batch sizes {'+'.join(str(m.batch) for m in micro)} = {total}, "
                               f"not the mini-batch {batch}")
    workspace = _int(kd["workspace"], f"{path}.workspace")
    if workspace != max(m.workspace for m in micro):
        _fail(f"{path}.workspace", f"is {workspace} but its largest micro-configuration workspace is "
                                   f"{max(m.workspace for m in micro)}")
    time_ms = _num(kd["time_ms"], f"{path}.time_ms", positive=True)
    if not _close(time_ms, sum(m.time_ms for m in micro)):
        _fail(f"{path}.time_ms", f"is {time_ms} but its micro-configurations sum to {sum(m.time_ms for m in micro)}")
    undivided = _num(kd["undivided_time_ms"], f"{path}.undivided_time_ms", positive=True, nullable=True)
    offset = _int(kd["offset"], f"{path}.offset") if wd else None
    return PlanKernel(kid, layer, kind, key, micro, workspace, time_ms, undivided, offset)


def _parse_micro(md, path: str, allowed: set[int]) -> PlanMicro:
    _fields(md, path, ("batch", "plan", "engine_id", "knobs", "time_ms", "workspace"))
    b = _int(md["batch"], f"{path}.batch", 1)
    if b not in allowed:
        _fail(f"{path}.batch", f"is {b}, which the plan's policy does not offer")
    knobs = md["knobs"]
    if not isinstance(knobs, dict):
        _fail(f"{path}.knobs", f"must be an object {{knob type: value}}, got {knobs!r}")
    for kt, kv in knobs.items():
        if not kt.lstrip("-").isdigit():
            _fail(f"{path}.knobs", f"has key {kt!r}; knob types are integers")
        if isinstance(kv, bool) or not isinstance(kv, int):
            _fail(f"{path}.knobs.{kt}", f"must be an integer knob value, got {kv!r}")
    return PlanMicro(b, _str(md["plan"], f"{path}.plan"), _int(md["engine_id"], f"{path}.engine_id"), dict(knobs),
                     _num(md["time_ms"], f"{path}.time_ms", positive=True),
                     _int(md["workspace"], f"{path}.workspace"))


def _check_segments(kernels: list[PlanKernel], arena_size: int) -> None:
    """WD segments are aligned, inside the arena and pairwise disjoint (empty segments take no bytes)."""
    segs = []
    for i, k in enumerate(kernels):
        if k.offset % ALIGNMENT:
            _fail(f"kernels[{i}].offset", f"is {k.offset}, not a multiple of {ALIGNMENT}")
        if k.offset + k.workspace > arena_size:
            _fail(f"kernels[{i}].offset", f"puts segment [{k.offset}, {k.offset + k.workspace}) past the arena "
                                          f"size {arena_size}")
        if k.workspace:
            segs.append((k.offset, k.offset + k.workspace, i))
    segs.sort()
    for (s0, e0, i0), (s1, e1, i1) in zip(segs, segs[1:]):
        if s1 < e0:
            a, b = sorted((i0, i1))
            _fail(f"kernels[{b}].offset", f"segment [{kernels[b].offset}, {kernels[b].offset + kernels[b].workspace})"
                                          f" overlaps kernels[{a}]'s segment "
                                          f"[{kernels[a].offset}, {kernels[a].offset + kernels[a].workspace})")


def _parse_totals(td, kernels: list[PlanKernel]) -> PlanTotals:
    _fields(td, "totals", ("time_ms", "workspace", "max_workspace", "undivided_time_ms", "unlimited_time_ms",
                           "unlimited_workspace", "speedup"))
    t = PlanTotals(
        _num(td["time_ms"], "totals.time_ms", positive=True), _int(td["workspace"], "totals.workspace"),
        _int(td["max_workspace"], "totals.max_workspace"),
        _num(td["undivided_time_ms"], "totals.undivided_time_ms", positive=True, nullable=True),
        _num(td["unlimited_time_ms"], "totals.unlimited_time_ms", positive=True),
        _int(td["unlimited_workspace"], "totals.unlimited_workspace"),
        _num(td["speedup"], "totals.speedup", positive=True, nullable=True))
    if not _close(t.time_ms, sum(k.time_ms for k in kernels)):
        _fail("totals.time_ms", f"is {t.time_ms} but the kernels sum to {sum(k.time_ms for k in kernels)}")
    if t.workspace != sum(k.workspace for k in kernels):
        _fail("totals.workspace", f"is {t.workspace} but the kernels sum to {sum(k.workspace for k in kernels)}")
    if t.max_workspace != max(k.workspace for k in kernels):
        _fail("totals.max_workspace", f"is {t.max_workspace} but the largest kernel workspace is "
                                      f"{max(k.workspace for k in kernels)}")
    if t.undivided_time_ms is not None:
        parts = [k.undivided_time_ms for k in kernels]
        if None in parts:
            _fail("totals.undivided_time_ms", f"is a number but kernels[{parts.index(None)}].undivided_time_ms is null")
        if not _close(t.undivided_time_ms, sum(parts)):
            _fail("totals.undivided_time_ms", f"is {t.undivided_time_ms} but the kernels sum to {sum(parts)}")
    if (t.speedup is None) != (t.undivided_time_ms is None):
        _fail("totals.speedup", "must be null exactly when totals.undivided_time_ms is null")
    if t.speedup is not None and not _close(t.speedup, t.undivided_time_ms / t.time_ms):
        _fail("totals.speedup", f"is {t.speedup} but undivided_time_ms / time_ms is "
                                f"{t.undivided_time_ms / t.time_ms}")
    return t
