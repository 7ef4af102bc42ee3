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
storage time: budgets are applied at query time (ucudnn-reference.md §11, bug 10).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from .errors import EngineError, ProfileFormatError
from .kernels import KernelSignature
from .configuration import MicroConfig

FORMAT = "ucudnn-explorer-profile"
VERSION = 1

# column -> python type; the tidy table has one row per (signature, micro_batch, plan)
COLUMNS = {
    "signature": str,        # KernelSignature.key (no mini-batch size)
    "micro_batch": int,      # micro-batch size b the plan ran on
    "plan": str,             # cuDNN plan name "eng<id>_k<knob>=<v>..."; identity within one cuDNN build
    "engine_id": int,
    "knobs": str,            # JSON object {knob_type_int: value}, enough to rebuild the plan
    "heuristic_rank": int,   # position in cuDNN's ranked list (heuristics A then FALLBACK); -1: found by the engine sweep
    "workspace": int,        # bytes
    "time_ms": float,        # median of `repeats` back-to-back runs (NaN unless status == "ok")
    "time_min_ms": float,
    "time_max_ms": float,
    "repeats": int,
    "status": str,           # ok | failed | skipped
    "reason": str,           # why a plan failed or was skipped
    "numerical_notes": str,  # "|"-joined cuDNN numerical notes, e.g. TENSOR_CORE|NONDETERMINISTIC
    "behavior_notes": str,   # "|"-joined behaviour notes, e.g. RUNTIME_COMPILATION
}
STATUSES = ("ok", "failed", "skipped")
ENGINE_SETS = ("all", "heuristics", "deterministic")  # Profile.restrict
ASSETS = Path(__file__).resolve().parent.parent / "assets" / "profiles"


class Profile:
    """A tidy table of measurements plus provenance; the optimizers read ``candidates``."""

    def __init__(self, table: pd.DataFrame, provenance: dict, networks: list[dict] | None = None,
                 source: str = ""):
        table = _validate_table(table)
        # TF32 means fp32 data on TF32 tensor cores; plans that convert inputs to fp16 are another precision
        # (they flush small gradients to zero) and are never planned (engine.gpu.graphs deselects them too)
        down = table.signature.str.contains("/tf32/", regex=False) & \
            table.numerical_notes.str.contains("DOWN_CONVERT_INPUTS", regex=False)
        self.down_converting = int(down.sum())
        self.table = table[~down] if self.down_converting else table
        self.provenance = dict(provenance)
        self.networks = list(networks or [])
        self.source = source
        ok = self.table[self.table.status == "ok"].sort_values("time_ms", kind="stable")
        # per signature: {b: [MicroConfig, ...]} fastest first; built once, the hot path of every query
        self._cands: dict[str, dict[int, list[MicroConfig]]] = {}
        for sig, b, p, t, w in zip(ok.signature.tolist(), ok.micro_batch.tolist(), ok.plan.tolist(),
                                   ok.time_ms.tolist(), ok.workspace.tolist()):
            self._cands.setdefault(sig, {}).setdefault(b, []).append(MicroConfig(b, p, t, w))

    # --- construction and I/O -------------------------------------------------------------
    @classmethod
    def from_records(cls, rows: Iterable[dict], provenance: dict, networks: list[dict] | None = None) -> "Profile":
        frame = pd.DataFrame(list(rows), columns=list(COLUMNS))
        return cls(frame, provenance, networks)

    @classmethod
    def load(cls, path: str | Path) -> "Profile":
        path = Path(path)
        try:
            raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
            doc = json.loads(raw)
        except FileNotFoundError:
            raise ProfileFormatError(f"profile {str(path)!r} does not exist") from None
        except (OSError, ValueError, EOFError) as err:
            raise ProfileFormatError(f"profile {str(path)!r} is not valid (gzip) JSON: {err}") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise ProfileFormatError(f"profile {str(path)!r}: field 'format' must be {FORMAT!r}")
        if doc.get("version") != VERSION:
            raise ProfileFormatError(f"profile {str(path)!r}: field 'version' is {doc.get('version')!r}, "
                                     f"this engine reads version {VERSION}")
        for key in ("provenance", "columns", "rows"):
            if key not in doc:
                raise ProfileFormatError(f"profile {str(path)!r}: missing field {key!r}")
        if doc["columns"] != list(COLUMNS):
            missing = [c for c in COLUMNS if c not in doc["columns"]]
            raise ProfileFormatError(f"profile {str(path)!r}: field 'columns' must be {list(COLUMNS)}"
                                     + (f" (missing {missing})" if missing else ""))
        if not isinstance(doc["rows"], list) or any(
                not isinstance(r, list) or len(r) != len(COLUMNS) for r in doc["rows"]):
            raise ProfileFormatError(f"profile {str(path)!r}: every entry of 'rows' must be a list of "
                                     f"{len(COLUMNS)} values")
        frame = pd.DataFrame(doc["rows"], columns=list(COLUMNS))
        try:
            return cls(frame, doc["provenance"], doc.get("networks", []), source=str(path))
        except ProfileFormatError as err:
            raise ProfileFormatError(f"profile {str(path)!r}: {err}") from None

    def to_document(self) -> dict:
        columns = [[None if isinstance(v, float) and math.isnan(v) else v for v in self.table[c].tolist()]
                   if typ is float else self.table[c].tolist() for c, typ in COLUMNS.items()]
        rows = [list(r) for r in zip(*columns)]
        return {"format": FORMAT, "version": VERSION, "provenance": self.provenance,
                "networks": self.networks, "columns": list(COLUMNS), "rows": rows}

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        data = json.dumps(self.to_document(), separators=(",", ":")).encode()
        path.write_bytes(gzip.compress(data, mtime=0) if path.suffix == ".gz" else data)
        return path

    # --- queries --------------------------------------------------------------------------
    @property
    def synthetic(self) -> bool:
        return bool(self.provenance.get("synthetic", False))

    def signatures(self) -> list[str]:
        return sorted(self.table.signature.unique())

    def sizes(self, key: str) -> list[int]:
        return sorted(self._cands.get(key, {}))

    def has(self, key: str) -> bool:
        return key in self._cands

    def candidates(self, key: str, sizes: Iterable[int] | None = None) -> dict[int, list[MicroConfig]]:
        """Micro-configurations measured ``ok`` for a signature: {b: [MicroConfig, ...]}, fastest first."""
        by_b = self._cands.get(key, {})
        if sizes is None:
            return dict(by_b)
        return {b: by_b[b] for b in sizes if b in by_b}

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

    def heuristic_first(self, key: str, batch: int, limit: int | None) -> MicroConfig | None:
        """The plan a framework would run undivided: the first in cuDNN's heuristic order that fits ``limit``."""
        t = self.table
        rows = t[(t.signature == key) & (t.micro_batch == batch) & (t.status == "ok") & (t.heuristic_rank >= 0)]
        if limit is not None:
            rows = rows[rows.workspace <= limit]
        if rows.empty:
            return None
        r = rows.sort_values("heuristic_rank").iloc[0]
        return MicroConfig(batch, r.plan, float(r.time_ms), int(r.workspace))

    def describe(self) -> str:
        p = self.provenance
        nets = ", ".join(f"{n['name']} b{n['batch']} {n.get('precision', '')} {n.get('layout', '')}".strip()
                         for n in self.networks) or "no networks recorded"
        tag = "SYNTHETIC " if self.synthetic else ""
        return (f"{tag}{p.get('gpu', '?')} cuDNN {p.get('cudnn_version', '?')} frontend "
                f"{p.get('frontend_version', '?')} ({p.get('date', '?')}): {nets}")


def _validate_table(frame: pd.DataFrame) -> pd.DataFrame:
    missing = [c for c in COLUMNS if c not in frame.columns]
    if missing:
        raise ProfileFormatError(f"profile table lacks columns {missing}")
    frame = frame[list(COLUMNS)].copy()
    for col, typ in COLUMNS.items():
        try:
            if typ is float:
                frame[col] = pd.to_numeric(frame[col], errors="raise").astype(float)
            elif typ is int:
                if frame[col].isna().any():
                    raise ValueError("missing values")
                frame[col] = frame[col].astype("int64")
            else:
                frame[col] = frame[col].fillna("").astype(str)
        except (ValueError, TypeError) as err:
            raise ProfileFormatError(f"column {col!r} must hold {typ.__name__} values: {err}") from None
    bad = ~frame.status.isin(STATUSES)
    if bad.any():
        raise ProfileFormatError(f"column 'status' holds {frame.status[bad].iloc[0]!r}; expected one of {STATUSES}")
    ok = frame.status == "ok"
    if (frame.workspace < 0).any():
        raise ProfileFormatError("column 'workspace' holds a negative size")
    if (frame.micro_batch < 1).any():
        raise ProfileFormatError("column 'micro_batch' holds a size below 1")
    bad_t = ok & ~(frame.time_ms > 0)
    if bad_t.any():
        r = frame[bad_t].iloc[0]
        raise ProfileFormatError(f"plan {r.plan!r} of {r.signature} at b={r.micro_batch} is 'ok' but has "
                                 f"time_ms={r.time_ms!r}; ok rows need a positive time")
    for key in frame.signature.unique():
        KernelSignature.from_key(key)  # raises ProfileFormatError naming the key
    return frame.reset_index(drop=True)


def bundled_profiles() -> dict[str, Path]:
    """Profiles shipped in ``assets/profiles``, by name (file name without ``.profile.json.gz``)."""
    if not ASSETS.is_dir():
        return {}
    return {p.name.split(".profile")[0]: p for p in sorted(ASSETS.glob("*.profile.json*"))}


def resolve_profile(name_or_path: str | Path) -> Path:
    """A bundled profile name or a file path."""
    bundled = bundled_profiles()
    if str(name_or_path) in bundled:
        return bundled[str(name_or_path)]
    path = Path(name_or_path)
    if path.exists():
        return path
    known = ", ".join(bundled) or "none bundled"
    raise ProfileFormatError(f"no profile {str(name_or_path)!r}: not a file and not a bundled profile ({known})")
