"""Profiles: measured cuDNN execution plans per (kernel signature, micro-batch size, plan).

One canonical on-disk format serves bundled profiles (``assets/profiles``) and live ones exported
from the GPU profiler's SQLite cache: a JSON document, gzip-compressed when the file name ends in
``.gz``::

    {"format": "ucudnn-explorer-profile", "version": 1,
     "provenance": {"gpu": ..., "driver": ..., "cudnn_version": ..., "frontend_version": ...,
                    "date": ..., "command": ..., "synthetic": false, ...},
     "networks": [{"name": "alexnet", "batch": 256, "precision": "tf32", "layout": "NCHW",
                   "policy": "powerOfTwo"}, ...],
     "columns": [...COLUMNS...], "rows": [[...], ...]}

Every plan is stored, failures included (status/reason), and no workspace limit is applied at
storage time: budgets are applied at query time (mu-cuDNN filtered by its limit before storing).
"""

from __future__ import annotations

import json
import shlex
import functools
import math
import os
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from .errors import EngineError, ProfileFormatError
from .configuration import MicroConfig, parse_plan_name
from .fileio import atomic_write, parse_json, read_bounded
from .fileio import short as _short
from .kernels import KernelSignature
from .precision import DEFAULT_PRECISION, LAYOUTS, PRECISIONS
from .policies import MAX_BATCH

FORMAT = "ucudnn-explorer-profile"
VERSION = 1

# column -> python type; the tidy table has one row per (signature, micro_batch, plan)
COLUMNS = {
    "signature": str,  # KernelSignature.key (no mini-batch size)
    "micro_batch": int,  # micro-batch size b the plan ran on
    "plan": str,  # cuDNN plan name "eng<id>_k<knob>=<v>..."; identity within one cuDNN build
    "engine_id": int,
    "knobs": str,  # JSON object {knob_type_int: value}, enough to rebuild the plan
    # position in cuDNN's ranked list (heuristics A then FALLBACK); -1: found by the engine sweep
    "heuristic_rank": int,
    "workspace": int,  # bytes
    "time_ms": float,  # median of `repeats` back-to-back runs (NaN unless status == "ok")
    "time_min_ms": float,
    "time_max_ms": float,
    "repeats": int,
    "status": str,  # ok | failed | skipped
    "reason": str,  # why a plan failed or was skipped
    "numerical_notes": str,  # "|"-joined cuDNN numerical notes, e.g. TENSOR_CORE|NONDETERMINISTIC
    "behavior_notes": str,  # "|"-joined behaviour notes, e.g. RUNTIME_COMPILATION
}
STATUSES = ("ok", "failed", "skipped")
# the reason of a runtime-compiled plan the profiler left unbuilt (engine.gpu.profiler.build_graph)
RTC_NOT_PROFILED = "runtime-compiled engine, not profiled (--include-rtc profiles it)"
ENGINE_SETS = ("all", "heuristics", "deterministic")  # Profile.restrict
MAX_PIECES = 16  # micro-batches of the largest measured size a mini-batch may need (planning cost grows with B)
ASSETS = Path(__file__).resolve().parent.parent / "assets" / "profiles"


class Profile:
    """A tidy table of measurements plus provenance; the optimizers read ``candidates``."""

    def __init__(self, table: pd.DataFrame, provenance: dict, networks: list[dict] | None = None, source: str = ""):
        table = _validate_table(table)
        other = _other_precision(table)
        self.table = table[~other] if other.any() else table
        self.provenance = _validate_provenance(provenance)
        self.networks = _validate_networks([] if networks is None else networks)
        self.source = source
        ok = self.table[self.table.status == "ok"]
        # by signature, fastest first (ties in file order); candidates are built per signature on first use,
        # so loading a large profile does not pay for kernels nobody queries
        ok = ok.iloc[np.lexsort((ok.time_ms.to_numpy(), pd.factorize(ok.signature)[0]))]
        self._ok, self._rows = ok[["micro_batch", "plan", "time_ms", "workspace"]], ok.groupby("signature").indices
        self._cands: dict[str, dict[int, list[MicroConfig]]] = {}

    @functools.cached_property
    def first_plan_left_out(self) -> frozenset[str]:
        """Signatures where the profile left cuDNN's first heuristic plan (what stock PyTorch runs) unbuilt as
        runtime-compiled: a profile made before engine.gpu.profiler.build_graph timed it. Those profiles also gave
        that reason to first plans a precision's note filter excluded. Computed once: make_plan asks on every
        dashboard slider move."""
        t = self.table
        return frozenset(t.signature[(t.heuristic_rank == 0) & (t.reason == RTC_NOT_PROFILED)])

    # --- construction and I/O -------------------------------------------------------------
    @classmethod
    def from_records(cls, rows: Iterable[dict], provenance: dict, networks: list[dict] | None = None) -> "Profile":
        frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
        return cls(frame, provenance, networks)

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        """Read and validate a profile file within the size and nesting limits of engine.fileio."""
        what = f"profile {str(path)!r}"
        # rows hold flat values, checked column by column: walking them for depth would double the load time
        doc = parse_json(read_bounded(path, what, ProfileFormatError), what, ProfileFormatError, skip=("rows",))
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ProfileFormatError(f"{what}: field 'format' must be {FORMAT!r}")
        version = doc.get("version")
        if type(version) is not int or version != VERSION:
            raise ProfileFormatError(
                f"{what}: field 'version' is {_short(version)}, this engine reads version {VERSION} (an integer)"
            )
        for key in ("provenance", "columns", "rows"):
            if key not in doc:
                raise ProfileFormatError(f"{what}: missing field {key!r}")
        unknown = [k for k in doc if k not in ("format", "version", "provenance", "networks", "columns", "rows")]
        if unknown:
            raise ProfileFormatError(f"{what}: field {_short(unknown[0])} is not part of the profile format")
        if doc["columns"] != list(COLUMNS):
            missing = [c for c in COLUMNS if c not in doc["columns"]] if isinstance(doc["columns"], list) else []
            raise ProfileFormatError(
                f"{what}: field 'columns' must be {list(COLUMNS)}" + (f" (missing {missing})" if missing else "")
            )
        if not isinstance(doc["rows"], list) or any(
            not isinstance(r, list) or len(r) != len(COLUMNS) for r in doc["rows"]
        ):
            raise ProfileFormatError(f"{what}: every entry of 'rows' must be a list of {len(COLUMNS)} values")
        frame = pd.DataFrame(doc["rows"], columns=list(COLUMNS), dtype=object)  # as written: 2.0 stays a float
        try:
            return cls(frame, doc["provenance"], doc.get("networks", []), source=str(path))
        except ProfileFormatError as err:
            raise ProfileFormatError(f"{what}: {err}") from None

    def to_document(self) -> dict:
        columns = [
            [None if isinstance(v, float) and math.isnan(v) else v for v in self.table[c].tolist()]
            if typ is float
            else self.table[c].tolist()
            for c, typ in COLUMNS.items()
        ]
        rows = [list(r) for r in zip(*columns)]
        return {
            "format": FORMAT,
            "version": VERSION,
            "provenance": self.provenance,
            "networks": self.networks,
            "columns": list(COLUMNS),
            "rows": rows,
        }

    def save(self, path: str | Path) -> Path:
        return atomic_write(
            path, json.dumps(self.to_document(), separators=(",", ":")), gzip_suffix=True, what="profile"
        )

    # --- queries --------------------------------------------------------------------------
    @property
    def synthetic(self) -> bool:
        return bool(self.provenance.get("synthetic", False))

    def signatures(self) -> list[str]:
        return sorted(self.table.signature.unique())

    def sizes(self, key: str) -> list[int]:
        return sorted(self._by_size(key))

    def has(self, key: str) -> bool:
        return key in self._rows

    def _by_size(self, key: str) -> dict[int, list[MicroConfig]]:
        """{b: [MicroConfig, ...]} fastest first for one signature ({} if unmeasured), built once."""
        if key not in self._cands and key in self._rows:
            part, by_b = self._ok.take(self._rows[key]), {}
            for b, p, t, w in zip(*(part[c].tolist() for c in part.columns)):
                by_b.setdefault(b, []).append(MicroConfig(b, p, t, w))
            self._cands[key] = by_b
        return self._cands.get(key, {})

    def candidates(self, key: str, sizes: Iterable[int] | None = None) -> dict[int, list[MicroConfig]]:
        """Micro-configurations measured ``ok`` for a signature: {b: [MicroConfig, ...]}, fastest first."""
        by_b = self._by_size(key)
        if sizes is None:
            return dict(by_b)
        return {b: by_b[b] for b in sizes if b in by_b}

    def require_kernels(self, network, precision: str, layout: str, policy: str = "powerOfTwo") -> None:
        """Raise EngineError unless every convolution kernel of ``network`` (a Network) has measurements here
        from which its mini-batch is within MAX_PIECES micro-batches, saying what is missing and the command
        that measures it (a mini-batch far beyond the measured sizes would take the optimizers minutes)."""
        kernels = network.kernels(precision, layout)
        missing = [k for k in kernels if not self.has(k.signature.key)]
        command = (
            f"python -m engine profile --network {shlex.quote(network.source or network.name)} --batch "
            f"{network.batch} --dtype {precision} --layout {layout} --policy {policy}"
        )
        where = repr(Path(self.source).name) if self.source else "(in memory)"
        if missing:
            raise EngineError(
                f"profile {where} lacks {len(missing)} of the {len(kernels)} convolution kernels of "
                f"{network.name} b{network.batch} {precision}/{layout} (first: {missing[0].id}); "
                f"measure them on a GPU with: {command}"
            )
        largest = min(max(self._by_size(k.signature.key)) for k in kernels) if kernels else network.batch
        if network.batch > MAX_PIECES * largest:
            raise EngineError(
                f"mini-batch {network.batch} would take more than {MAX_PIECES} micro-batches per kernel "
                f"from profile {where}, whose largest measured micro-batch is {largest}; measure "
                f"larger ones on a GPU with: {command}"
            )

    def plan_row(self, key: str, micro_batch: int, plan: str) -> dict:
        """The full record of one measured plan (engine id, knobs, notes) for execution and plans."""
        t = self.table
        hit = t[(t.signature == key) & (t.micro_batch == micro_batch) & (t.plan == plan)]
        if hit.empty:
            raise KeyError(f"no measurement of plan {plan!r} at micro-batch {micro_batch} for {key}")
        return hit.iloc[0].to_dict()

    @property
    def swept(self) -> bool:
        """Whether the profile holds plans found by the engine sweep (outside cuDNN's heuristic list)."""
        return bool((self.table.heuristic_rank < 0).any())

    def restrict(self, engines: str) -> "Profile":
        """The same measurements limited to an engine set (ENGINE_SETS): ``all``; ``heuristics``, cuDNN's
        heuristic list, which is what the engine sweep adds taken away; ``deterministic``, no plan labelled
        NONDETERMINISTIC (atomics or split-K: results that can differ from run to run)."""
        t = self.table
        if engines == "all":
            return self
        if engines == "heuristics":
            keep = t.heuristic_rank >= 0
        elif engines == "deterministic":
            keep = ~t.numerical_notes.str.contains("NONDETERMINISTIC", regex=False)
        else:
            raise EngineError(f"engine set must be one of {', '.join(ENGINE_SETS)}, got {engines!r}")
        prov = dict(self.provenance, engines=engines)
        return Profile(t[keep], prov, self.networks, self.source)

    def ranked(self, key: str, batch: int, limit: float | None, timed_only: bool):
        """The kernel's plans in cuDNN's heuristic order at ``batch`` whose workspace fits ``limit``."""
        t = self.table
        keep = (t.signature == key) & (t.micro_batch == batch) & (t.heuristic_rank >= 0)
        keep &= (t.status == "ok") if timed_only else (t.status != "failed")
        if limit is not None:
            keep &= t.workspace <= limit
        return t[keep].sort_values("heuristic_rank", kind="stable")

    def heuristic_first(self, key: str, batch: int, limit: int | None) -> MicroConfig | None:
        """The plan a framework would run undivided: the first in cuDNN's heuristic order that fits ``limit``."""
        rows = self.ranked(key, batch, limit, timed_only=True)
        if rows.empty:
            return None
        r = rows.iloc[0]
        return MicroConfig(batch, r.plan, float(r.time_ms), int(r.workspace))

    def framework_first(self, key: str, batch: int, limit: float | None) -> tuple[MicroConfig, bool] | None:
        """What PyTorch without ``cudnn.benchmark`` runs: the first plan in cuDNN's heuristic order whose workspace
        it can allocate (``limit``), plans the profiler skipped included (their workspace is known; PyTorch does
        not skip them). Returns (plan, timed); an untimed plan carries the fastest time measured for the kernel
        at that batch, an optimistic stand-in. None when no ranked plan of that batch fits."""
        rows = self.ranked(key, batch, limit, timed_only=False)
        if rows.empty:
            return None
        r = rows.iloc[0]
        if r.status == "ok":
            return MicroConfig(batch, r.plan, float(r.time_ms), int(r.workspace)), True
        t = self.table
        ok = t[(t.signature == key) & (t.micro_batch == batch) & (t.status == "ok")]
        if ok.empty:
            return None
        return MicroConfig(batch, r.plan, float(ok.time_ms.min()), int(r.workspace)), False

    def describe(self) -> str:
        p = self.provenance
        nets = (
            ", ".join(
                f"{n['name']} b{n['batch']} {n.get('precision', '')} {n.get('layout', '')}".strip()
                for n in self.networks
            )
            or "no networks recorded"
        )
        tag = "SYNTHETIC " if self.synthetic else ""
        return (
            f"{tag}{p.get('gpu', '?')} cuDNN {p.get('cudnn_version', '?')} frontend "
            f"{p.get('frontend_version', '?')} ({p.get('date', '?')}): {nets}"
        )


MAX_INT = (1 << 63) - 1
_NETWORK_FIELDS = {"name": str, "batch": int, "precision": str, "layout": str, "policy": str}


def _validate_provenance(provenance) -> dict:
    if not isinstance(provenance, dict):
        raise ProfileFormatError(f"field 'provenance' must be an object, got {_short(provenance)}")
    if not isinstance(provenance.get("synthetic", False), bool):
        raise ProfileFormatError(
            f"field 'provenance.synthetic' must be true or false, got {_short(provenance['synthetic'])}"
        )
    return dict(provenance)


def _validate_networks(networks) -> list[dict]:
    if not isinstance(networks, list):
        raise ProfileFormatError(f"field 'networks' must be a list of objects, got {_short(networks)}")
    for i, n in enumerate(networks):
        if not isinstance(n, dict) or "name" not in n:
            raise ProfileFormatError(f"field 'networks[{i}]' must be an object with at least 'name', got {_short(n)}")
        for key, value in n.items():
            typ = _NETWORK_FIELDS.get(key)
            if typ is None:
                raise ProfileFormatError(f"field 'networks[{i}].{_short(key)[1:-1]}' is not part of the profile format")
            if type(value) is not typ or (typ is int and not 1 <= value <= MAX_INT):
                raise ProfileFormatError(
                    f"field 'networks[{i}].{key}' must be a{' positive' if typ is int else ''} "
                    f"{typ.__name__}, got {_short(value)}"
                )
        if n.get("precision", DEFAULT_PRECISION) not in PRECISIONS or n.get("layout", "NCHW") not in LAYOUTS:
            raise ProfileFormatError(
                f"field 'networks[{i}]' has precision/layout {_short(n.get('precision'))}/"
                f"{_short(n.get('layout'))}; expected {sorted(PRECISIONS)} / {list(LAYOUTS)}"
            )
    return [dict(n) for n in networks]


def _other_precision(table: pd.DataFrame) -> pd.Series:
    """Plans with a numerical note their precision deselects: another precision, never planned (as in graphs)."""
    notes, out = "|" + table.numerical_notes + "|", pd.Series(False, index=table.index)
    for rec, note in ((r, n) for r in PRECISIONS.values() for n in r.deselect_notes):
        out |= table.signature.str.contains(f"/{rec.name}/", regex=False) & notes.str.contains(f"|{note}|", regex=False)
    return out


def _first(frame: pd.DataFrame, mask) -> str:
    r = frame[mask].iloc[0]
    return f"plan {_short(r.plan)} of {r.signature} at b={r.micro_batch}"


def _coerce(frame: pd.DataFrame) -> pd.DataFrame:
    """Every column to its type, refusing what would change a value: 1.5 or true as an integer, true or a string
    as a number, a number or a list as a string (empty strings stand for missing text)."""
    for col, typ in COLUMNS.items():
        s = frame[col]
        kind = pd.api.types.infer_dtype(s, skipna=typ is not int)  # in C: Python-level checks only on bad columns
        if typ is int:
            if kind != "integer" or not (pd.api.types.is_integer_dtype(s) or s.dtype == object):
                bad = s[~s.map(lambda v: type(v) is int)] if s.dtype == object else s
                shown = _short(bad.iloc[0]) if len(bad) else f"values of type {kind}"
                raise ProfileFormatError(f"column {col!r} must hold integers, got {shown}")
            try:
                frame[col] = s.astype("int64")
            except OverflowError:
                big = s[~s.map(lambda v: abs(v) <= MAX_INT)]
                raise ProfileFormatError(
                    f"column {col!r} must hold integers below 2^63, got {_short(big.iloc[0])}"
                ) from None
        elif typ is float:
            if kind not in ("floating", "integer", "mixed-integer-float", "empty"):
                bad = s[~s.map(lambda v: v is None or (isinstance(v, (int, float)) and not isinstance(v, bool)))]
                shown = _short(bad.iloc[0]) if len(bad) else f"values of type {kind}"
                raise ProfileFormatError(f"column {col!r} must hold numbers or null, got {shown}")
            frame[col] = pd.to_numeric(s).astype(float)
        else:
            if kind not in ("string", "empty"):
                bad = s[~s.map(lambda v: v is None or isinstance(v, str))]
                shown = _short(bad.iloc[0]) if len(bad) else f"values of type {kind}"
                raise ProfileFormatError(f"column {col!r} must hold strings, got {shown}")
            frame[col] = s.fillna("").astype(str)
    return frame


def _validate_table(frame: pd.DataFrame) -> pd.DataFrame:
    """Types, then meaning: every row a measurement the optimizers can trust."""
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ProfileFormatError(f"profile table lacks columns {missing}")
    frame = _coerce(frame[list(COLUMNS)].copy())
    bad = ~frame.status.isin(STATUSES)
    if bad.any():
        raise ProfileFormatError(
            f"column 'status' holds {_short(frame.status[bad].iloc[0])}; expected one of {STATUSES}"
        )
    ok = frame.status == "ok"
    checks = [
        (frame.workspace < 0, "has a negative workspace"),
        (frame.micro_batch < 1, "has a micro-batch size below 1"),
        (frame.micro_batch > MAX_BATCH, f"has a micro-batch size above {MAX_BATCH}"),
        (frame.engine_id < 0, "has a negative engine id"),
        (frame.heuristic_rank < -1, "has a heuristic rank below -1 (-1 marks plans found by the engine sweep)"),
        (
            ok & ~(np.isfinite(frame.time_ms) & (frame.time_ms > 0)),
            "is 'ok' but its time_ms is not a positive finite number",
        ),
        (
            ok & ~(np.isfinite(frame.time_min_ms) & np.isfinite(frame.time_max_ms) & (frame.time_min_ms > 0)),
            "is 'ok' but its time_min_ms or time_max_ms is not a positive finite number",
        ),
        (
            ok & ~((frame.time_min_ms <= frame.time_ms) & (frame.time_ms <= frame.time_max_ms)),
            "is 'ok' but its times are not time_min_ms <= time_ms <= time_max_ms",
        ),
        (ok & (frame.repeats < 1), "is 'ok' but has fewer than 1 repeat"),
    ]
    for mask, problem in checks:
        if mask.any():
            raise ProfileFormatError(f"{_first(frame, mask)} {problem}")
    dup = frame.duplicated(["signature", "micro_batch", "plan"])
    if dup.any():
        raise ProfileFormatError(
            f"{_first(frame, dup)} appears in more than one row; a plan is measured once per "
            f"kernel and micro-batch size"
        )
    for key in frame.signature.unique():
        if KernelSignature.from_key(key).key != key:  # from_key raises ProfileFormatError naming the key
            raise ProfileFormatError(f"malformed kernel signature {_short(key)}: not in canonical form")
    for name, engine_id, knobs in frame[["plan", "engine_id", "knobs"]].drop_duplicates().itertuples(index=False):
        _check_plan_identity(name, engine_id, knobs)
    return frame.reset_index(drop=True)


MAX_KNOBS_CHARS = 1024  # a plan's knobs are a flat {knob type: value} of a dozen entries at most


def parse_knobs(knobs) -> dict | None:
    """A plan's knobs cell as the dict it spells, or None when it is not a flat JSON object of bounded size (a
    crafted cell of 10,000 nested brackets made json.loads recurse out of the interpreter's stack)."""
    if not isinstance(knobs, str) or len(knobs) > MAX_KNOBS_CHARS:
        return None
    try:
        parsed = json.loads(knobs)
    except (ValueError, RecursionError):
        return None
    if not isinstance(parsed, dict) or any(isinstance(v, (dict, list)) for v in parsed.values()):
        return None
    return parsed


def _check_plan_identity(name: str, engine_id: int, knobs: str) -> None:
    """The engine id and knobs must be the ones the plan name spells: they are what rebuilds the plan."""
    named = parse_plan_name(name)
    if named is None:
        raise ProfileFormatError(f"plan {_short(name)} is not a cuDNN plan name such as eng38_k2=0_k13=2")
    parsed = parse_knobs(knobs)
    if parsed is None:
        raise ProfileFormatError(
            f"plan {_short(name)} has knobs {_short(knobs)}, not a JSON object {{knob type: value}}"
        )
    if named != (engine_id, parsed):
        raise ProfileFormatError(
            f"plan {_short(name)} has engine id {engine_id} and knobs {_short(knobs)}, but its "
            f"name says engine {named[0]} with knobs {json.dumps(named[1])}"
        )


def bundled_profiles() -> dict[str, Path]:
    """Profiles shipped in ``assets/profiles``, by name (file name without ``.profile.json.gz``)."""
    if not ASSETS.is_dir():
        return {}
    return {p.name.split(".profile")[0]: p for p in sorted(ASSETS.glob("*.profile.json*"))}


def resolve_profile(name_or_path: str | Path) -> Path:
    """A bundled profile name or a file path."""
    if not isinstance(name_or_path, (str, os.PathLike)):
        raise ProfileFormatError(
            f"a profile is a bundled profile's name or a file's path, got {type(name_or_path).__name__} "
            f"{_short(name_or_path)}"
        )
    bundled = bundled_profiles()
    if str(name_or_path) in bundled:
        return bundled[str(name_or_path)]
    path = Path(name_or_path)
    if path.exists():
        return path
    known = ", ".join(bundled) or "none bundled"
    raise ProfileFormatError(f"no profile {str(name_or_path)!r}: not a file and not a bundled profile ({known})")
