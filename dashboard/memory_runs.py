"""The memory tab's measured runs: ``benchmarks/memory_training.py``'s results JSON, read within engine.fileio's
bounds, validated field by field, cached per file version. Imports no Panel.

The file is ``${UCUDNN_MEMORY_RESULTS}`` if set, else ``benchmarks/reports/memory_training.json`` of this
repository (written by ``python benchmarks/memory_training.py measure`` on a GPU host; absent until one has run,
which is not an error). Its rows are keyed as the benchmark keys them: (kind, model, variant, batch, capacity).
The tab shows the ``step`` row whose model is its network (a torchvision name such as ``alexnet``: the zoo twin
of that name, or ``torchvision:alexnet``), whose variant is its memory policy and whose batch is its mini-batch,
under the tab's capacity if such a capped run exists, else the run without a cap. The benchmark runs TF32 NCHW
only, so other data types and layouts match nothing. A bad file raises ``MemoryRunsFormatError``, one line.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import NamedTuple

from engine.errors import EngineError
from engine.fileio import parse_json, read_bounded
from engine.fileio import short as _short

RESULTS_ENV = "UCUDNN_MEMORY_RESULTS"
DEFAULT_RESULTS = Path(__file__).resolve().parent.parent / "benchmarks" / "reports" / "memory_training.json"
MEASURE = "python benchmarks/memory_training.py measure"
BENCH_SCOPE = ("tf32", "NCHW")  # what the benchmark runs (its docstring): TF32, NCHW
MAX_BYTES = 16 << 20  # a full run (3 models x 5 policies, capacity searches) is well under 1 MiB
MAX_ROWS = 20_000
MAX_TEXT = 240  # longer strings from the file are cut for display
_BIG = 2.0**63


class MemoryRunsFormatError(EngineError, ValueError):
    """A measured-runs file that is not one the memory benchmark writes."""


@dataclass(frozen=True)
class MeasuredRun:
    """One ``step`` case of the benchmark: what it predicted and what it measured (``error``: why it failed)."""

    model: str
    variant: str
    batch: int
    capacity: int | None
    error: str = ""
    peak: float | None = None  # torch.cuda.max_memory_allocated over the timed steps (bytes)
    step_ms: float | None = None  # median over the timed steps
    step_ms_p10: float | None = None
    step_ms_p90: float | None = None
    steps: int | None = None
    offloaded_bytes: float | None = None  # per step, the memory runtime's own counters
    recomputed: float | None = None
    predicted: dict = field(default_factory=dict)  # the benchmark's plan_memory: peak, iteration_ms, ...


@dataclass(frozen=True)
class MemoryRuns:
    path: str
    provenance: dict
    runs: tuple[MeasuredRun, ...]
    capacity: dict  # "model/GiB" -> {"predicted": {variant: batch}, "found": {variant: batch}, "best": variant}

    @property
    def synthetic(self) -> bool:
        return self.provenance.get("synthetic") is True

    def find(
        self, network: str, batch: int, policy: str, capacity: int | None, precision: str = "tf32", layout: str = "NCHW"
    ) -> MeasuredRun | None:
        """The run for these controls: under ``capacity`` if the benchmark ran one there, else without a cap."""
        if (precision, layout) != BENCH_SCOPE:
            return None
        rows = [r for r in self.runs if r.model == model_of(network) and r.variant == policy and r.batch == batch]
        return next((r for r in rows if capacity is not None and r.capacity == capacity), None) or next(
            (r for r in rows if r.capacity is None), None
        )

    def scopes(self) -> list[str]:
        """What was measured without a cap, e.g. ``alexnet b256``."""
        return list(dict.fromkeys(f"{r.model} b{r.batch}" for r in self.runs if r.capacity is None))

    def capacity_runs(self, network: str) -> list[tuple[int, dict]]:
        """(GiB, entry) of the network's capacity searches, smallest capacity first."""
        out = []
        for key, entry in self.capacity.items():
            model, _, gib = key.rpartition("/")
            if model == model_of(network) and gib.isdigit():
                out.append((int(gib), entry))
        return sorted(out, key=lambda x: x[0])

    def provenance_line(self) -> str:
        """GPU, date and versions of the run, e.g. ``NVIDIA H100 80GB HBM3, 2026-11-24, PyTorch 2.11.0``."""
        p = self.provenance
        parts = [p.get("gpu") or "unknown GPU", str(p.get("date") or "unknown date")[:10]]
        parts += [f"{name} {p[k]}" for k, name in (("torch", "PyTorch"), ("cudnn_version", "cuDNN")) if p.get(k)]
        return ("SYNTHETIC data, " if self.synthetic else "") + ", ".join(str(x) for x in parts)


class Measured(NamedTuple):
    """What the memory tab shows: the file (None: none yet), the matching run (None: none) and the file's
    one-line problem ("" when it read)."""

    runs: MemoryRuns | None
    run: MeasuredRun | None
    error: str
    path: str


def model_of(network: str) -> str:
    """The benchmark's model name of a dashboard network: ``torchvision:alexnet`` and the zoo's ``alexnet`` are
    ``alexnet``."""
    return str(network).removeprefix("torchvision:")


def results_path(environ=None) -> Path:
    environ = os.environ if environ is None else environ
    return Path(environ.get(RESULTS_ENV) or DEFAULT_RESULTS)


def measured(
    path: str | Path,
    network: str | None,
    batch: int | None,
    policy: str,
    capacity: int | None,
    precision: str | None = "tf32",
    layout: str | None = "NCHW",
) -> Measured:
    """The measured run for the memory tab's controls; a bad file becomes ``error``, never an exception."""
    try:
        runs = load_runs(path)
    except MemoryRunsFormatError as err:
        return Measured(None, None, str(err), str(path))
    run = None
    if runs is not None and network is not None and batch is not None:
        run = runs.find(network, int(batch), policy, capacity, precision, layout)
    return Measured(runs, run, "", str(path))


def load_runs(path: str | Path) -> MemoryRuns | None:
    """The file's runs (read again only when it changes); None when it is the default file and absent."""
    path = Path(path)
    try:
        st = path.stat()
    except OSError:
        if path == DEFAULT_RESULTS:
            return None
        st = None
    runs, error = _load(str(path), st.st_mtime_ns if st else 0, st.st_size if st else -1)
    if error:
        raise MemoryRunsFormatError(error)
    return runs


@lru_cache(maxsize=8)
def _load(path: str, mtime_ns: int, size: int) -> tuple[MemoryRuns | None, str]:
    """(runs, "") or (None, the problem): a bad file is read once per version, not on every redraw."""
    what = f"measured memory runs {path!r}"
    try:
        doc = parse_json(read_bounded(path, what, MemoryRunsFormatError, limit=MAX_BYTES), what, MemoryRunsFormatError)
        return parse(doc, path), ""
    except MemoryRunsFormatError as err:
        return None, " ".join(str(err).split())


# --- validation ----------------------------------------------------------------------------------------------


def _fail(path: str, where: str, problem: str):
    raise MemoryRunsFormatError(f"measured memory runs {path!r}: field {where} {problem}")


def _text(v, path: str, where: str) -> str:
    if not isinstance(v, str):
        _fail(path, where, f"must be a string, got {_short(v)}")
    v = " ".join(v.split())
    return v if len(v) <= MAX_TEXT else v[: MAX_TEXT - 3] + "..."


def _num(v, path: str, where: str, optional: bool = False, positive: bool = False) -> float | None:
    if v is None and optional:
        return None
    if (
        isinstance(v, bool)
        or not isinstance(v, (int, float))
        or not abs(v) < _BIG
        or not math.isfinite(v)
        or v < 0
        or (positive and v == 0)
    ):
        _fail(path, where, f"must be a {'positive' if positive else 'non-negative'} number, got {_short(v)}")
    return float(v)


def _int(v, path: str, where: str, optional: bool = False) -> int | None:
    if v is None and optional:
        return None
    if type(v) is not int or not 0 < v < _BIG:
        _fail(path, where, f"must be a positive integer, got {_short(v)}")
    return v


def _dict(v, path: str, where: str) -> dict:
    if not isinstance(v, dict):
        _fail(path, where, f"must be an object, got {_short(v)}")
    return v


def per_step(stats: list, key: str) -> float | None:
    """A runtime counter per step from its snapshots after each timed step, as the benchmark's report reads it:
    cumulative counters by their growth, per-step ones by the last value; lists count their entries."""
    vals = [s.get(key) for s in stats if isinstance(s, dict) and key in s]
    vals = [len(v) if isinstance(v, (list, tuple, dict)) else v for v in vals]
    if not vals or not all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < _BIG and math.isfinite(v) for v in vals
    ):
        return None
    if len(vals) > 1 and vals[-1] > vals[0]:
        return (vals[-1] - vals[0]) / (len(vals) - 1)
    return float(vals[-1])


PREDICTED_NUMBERS = (
    "peak",
    "iteration_ms",
    "conv_ms",
    "stall_ms",
    "offload_bytes",
    "prefetch_bytes",
    "recompute_count",
)
PREDICTED_TEXT = ("time_model", "workspace_rule", "convention")


def _predicted(v, path: str, where: str) -> dict:
    out = {}
    for k, x in _dict(v, path, where).items():
        if k in PREDICTED_NUMBERS:
            out[k] = _num(x, path, f"{where}.{k}", optional=True)
        elif k in PREDICTED_TEXT:
            out[k] = _text(x, path, f"{where}.{k}")
    return out


def _run(r: dict, path: str, where: str) -> MeasuredRun:
    key = dict(
        model=_text(r.get("model"), path, f"{where}.model"),
        variant=_text(r.get("variant"), path, f"{where}.variant"),
        batch=_int(r.get("batch"), path, f"{where}.batch"),
        capacity=_int(r.get("capacity"), path, f"{where}.capacity", optional=True),
    )
    predicted = _predicted(r.get("predicted", {}), path, f"{where}.predicted")
    if "error" in r:
        return MeasuredRun(**key, error=_text(r["error"], path, f"{where}.error") or "failed", predicted=predicted)
    stats = r.get("stats", [])
    if not isinstance(stats, list):
        _fail(path, f"{where}.stats", f"must be a list, got {_short(stats)}")
    return MeasuredRun(
        **key,
        peak=_num(r.get("peak"), path, f"{where}.peak"),
        step_ms=_num(r.get("step_ms"), path, f"{where}.step_ms", positive=True),
        step_ms_p10=_num(r.get("step_ms_p10"), path, f"{where}.step_ms_p10", optional=True),
        step_ms_p90=_num(r.get("step_ms_p90"), path, f"{where}.step_ms_p90", optional=True),
        steps=_int(r.get("steps"), path, f"{where}.steps", optional=True),
        offloaded_bytes=per_step(stats, "offloaded_bytes"),
        recomputed=per_step(stats, "recomputed_layers"),
        predicted=predicted,
    )


def _batches(v, path: str, where: str) -> dict:
    return {
        _text(k, path, where): _int(b, path, f"{where}.{_short(k)[1:-1]}", optional=True)
        for k, b in _dict(v, path, where).items()
    }


def _capacity(doc: dict, path: str) -> dict:
    out = {}
    for key, e in _dict(doc.get("capacity", {}), path, "capacity").items():
        where = f"capacity.{_short(key)[1:-1]}"
        e = _dict(e, path, where)
        if "error" in e:
            out[key] = {"error": _text(e["error"], path, f"{where}.error")}
            continue
        out[key] = {
            "predicted": _batches(e.get("predicted", {}), path, f"{where}.predicted"),
            "found": _batches(e.get("found", {}), path, f"{where}.found"),
            "best": _text(e.get("best", ""), path, f"{where}.best"),
        }
    return out


def parse(doc, path: str = "") -> MemoryRuns:
    """A validated ``MemoryRuns`` from the benchmark's results document (``step`` rows kept; others only checked
    to be rows)."""
    if not isinstance(doc, dict):
        raise MemoryRunsFormatError(
            f"measured memory runs {path!r} must be a JSON object with 'results', got {type(doc).__name__}"
        )
    results = doc.get("results")
    if not isinstance(results, list):
        _fail(path, "results", f"must be a list of runs, got {_short(results)}")
    if len(results) > MAX_ROWS:
        _fail(path, "results", f"holds {len(results)} runs, more than {MAX_ROWS}")
    prov = {}
    for k, v in _dict(doc.get("provenance", {}), path, "provenance").items():
        if k == "synthetic":
            prov[k] = v is True
        elif isinstance(v, str):
            prov[k] = _text(v, path, f"provenance.{_short(k)[1:-1]}")
        elif isinstance(v, (int, float)) and not isinstance(v, bool) and abs(v) < _BIG:
            prov[k] = v
    runs = []
    for i, r in enumerate(results):
        r = _dict(r, path, f"results[{i}]")
        if _text(r.get("kind"), path, f"results[{i}].kind") == "step":
            runs.append(_run(r, path, f"results[{i}]"))
    return MemoryRuns(path, prov, tuple(runs), _capacity(doc, path))
