"""cuDNN frontend graphs for one convolution kernel at one micro-batch size.

Rules of the cuDNN frontend's Python graph API (cudnn-frontend 1.x, ``python/cudnn``): dims are logical
NCHW and strides encode the layout; every output gets explicit dims, strides and dtype, or the frontend
silently gives it NHWC strides; one graph per (signature, b); plans come from heuristics A then FALLBACK,
built per index so each failure is recorded.

Beyond the heuristic list, ``sweep`` appends every engine cuDNN offers for the graph
(``get_engine_count`` / ``get_knobs_for_engine`` / ``create_execution_plan``) with its default knobs
and a sample of knob settings. On the H100 with cuDNN 9.19 these configurations, absent from
heuristics A, B and FALLBACK, were up to 2x faster with half the workspace for fp32 NCHW
(benchmarks/reports/engine-sweep.md).

Plans are identified by name (``eng<id>_k<knob>=<v>...``, knob numbers of cudnnBackendKnobType_t).
A heuristic plan is rebuilt by regenerating the heuristic list and building the entry of that name:
replaying its ``(engine_id, knobs)`` is not always possible because the frontend's Python enum lacks
some knob types (they come back as ``NOT_SET``). A swept plan sets only knobs the enum has, so it is
rebuilt by appending the same configuration; either way the rebuilt name must equal the recorded one.
"""

from __future__ import annotations

import random
import zlib
from dataclasses import dataclass, field

import cudnn

from ..errors import EngineError
from ..kernels import KernelKind, KernelSignature
from ..plan import parse_plan_name as _parse_plan_name
from ..precision import PRECISIONS

HEURISTICS = ("A", "FALLBACK")
ALIGN = 16  # bytes: the frontend's default operand alignment (cudnn-frontend.md §3, gotcha 5): a micro-batch
#             must start at a multiple of it
# the frontend's lowered-graph execute takes {uid: pointer}, its pre-indexed execute (_execute_with_raw_ptrs)
# a void*[] in ascending-uid order; its public path re-describes tensors on every call (630 us against 10.5 us
# per call, measured on the H100).
# Both are private: pinned to the frontend version they were checked against.
LOWERED_EXECUTE_VERSIONS = ("1.32.0",)
# cudnnBackendKnobType_t of cuDNN 9 (cudnn_graph.h), by number: the "k<n>" of plan names
BACKEND_KNOBS = (
    "SPLIT_K",
    "SWIZZLE",
    "TILE_SIZE",
    "USE_TEX",
    "EDGE",
    "KBLOCK",
    "LDGA",
    "LDGB",
    "CHUNK_K",
    "SPLIT_H",
    "WINO_TILE",
    "MULTIPLY",
    "SPLIT_K_BUF",
    "TILEK",
    "STAGES",
    "REDUCTION_MODE",
    "CTA_SPLIT_K_MODE",
    "SPLIT_K_SLC",
    "IDX_MODE",
    "SLICED",
    "SPLIT_RS",
    "SINGLEBUFFER",
    "LDGC",
    "SPECFILT",
    "KERNEL_CFG",
    "WORKSPACE",
    "TILE_CGA",
    "TILE_CGA_M",
    "TILE_CGA_N",
    "BLOCK_SIZE",
    "OCCUPANCY",
    "ARRAY_SIZE_PER_THREAD",
    "NUM_C_PER_BLOCK",
    "SPLIT_COLS",
    "TILE_ROWS",
    "TILE_COLS",
    "LOAD_SIZE",
)


def parse_plan_name(name: str) -> tuple[int, dict[str, int]]:
    """engine.plan.parse_plan_name, with (-1, {}) for a name not of cuDNN's form (the profiler records those)."""
    return _parse_plan_name(name) or (-1, {})


def settable_knobs(knobs: dict[str, int]) -> dict:
    """{cudnn.knob_type: value} for the knobs of a plan name that this frontend's enum can set."""
    out = {}
    for number, value in knobs.items():
        i = int(number)
        kt = getattr(cudnn.knob_type, BACKEND_KNOBS[i], None) if 0 <= i < len(BACKEND_KNOBS) else None
        if kt is not None:
            out[kt] = int(value)
    return out


def strides(layout: str, n: int, c: int, h: int, w: int) -> list[int]:
    if layout == "NCHW":
        return [c * h * w, h * w, w, 1]
    return [h * w * c, 1, w * c, c]


def operand_shapes(sig: KernelSignature, b: int) -> dict[str, tuple[int, int, int, int]]:
    """Logical NCHW dims of x (input), w (filter), y (output) at micro-batch b."""
    return {
        "x": (b, sig.c, sig.h, sig.w),
        "w": (sig.k, sig.c // sig.groups, sig.r, sig.s),
        "y": (b, sig.k, sig.out_h, sig.out_w),
    }


@dataclass
class ConvGraph:
    """A built operation graph plus its ranked plan list; ``uids`` maps x/w/y to tensor uids."""

    sig: KernelSignature
    b: int
    graph: object
    uids: dict[str, int]
    names: list[str] = field(default_factory=list)
    built: dict[int, int] = field(default_factory=dict)  # plan index -> workspace bytes
    heuristic: int = 0  # plans [0, heuristic) are cuDNN's heuristic list; later ones were appended

    def append(self, engine_id: int, knobs: dict) -> int:
        """Append one engine configuration to the plan list and return its index (raises if refused)."""
        try:
            self.graph.create_execution_plan(engine_id, knobs)
        finally:  # keep names aligned with the plan list whatever happened
            for i in range(len(self.names), self.graph.get_execution_plan_count()):
                self.names.append(self.graph.get_plan_name_at_index(i))
        return len(self.names) - 1

    def index_of(self, name: str) -> int:
        """Index of the named plan: its heuristic entry, or the same configuration appended again."""
        if name in self.names:
            return self.names.index(name)
        engine_id, knobs = parse_plan_name(name)
        if engine_id < 0:
            raise EngineError(f"{name!r} is not a cuDNN plan name (eng<id>_k<knob>=<value>...)")
        try:
            index = self.append(engine_id, settable_knobs(knobs))
        except Exception as err:
            raise EngineError(f"cuDNN refuses engine {engine_id} with knobs {knobs}: {err}") from None
        if self.names[index] != name:
            raise EngineError(
                f"engine {engine_id} with the settable knobs of {name!r} is {self.names[index]!r} in this cuDNN"
            )
        return index

    def build(self, index: int) -> int:
        """Build plan ``index`` (raises on failure) and return its workspace size in bytes."""
        if index not in self.built:
            self.graph.build_plan_at_index(index)
            self.built[index] = int(self.graph.get_workspace_size_plan_at_index(index))
        return self.built[index]

    def behavior_notes(self, index: int) -> list[str]:
        try:
            return [str(n).split(".")[-1] for n in self.graph.get_behavior_notes_for_plan_at_index(index)]
        except Exception:
            return []

    def executor(self, index: int, ctx):
        """A callable ``run(ptrs: {x,w,y}, workspace_ptr)`` that enqueues plan ``index`` on ctx's stream: one
        plan at a time (profiling, references); a configuration's pieces launch through engine.gpu.pieces."""
        g = self.graph
        if getattr(cudnn, "__version__", "") in LOWERED_EXECUTE_VERSIONS:
            lowered = g._lowered_graph
            cpp_index = g._plans[index].cpp_index
            ux, uw, uy = self.uids["x"], self.uids["w"], self.uids["y"]
            bh = ctx.backend_handle

            def run(ptrs, ws_ptr):
                lowered._execute_plan_at_index({ux: ptrs["x"], uw: ptrs["w"], uy: ptrs["y"]}, ws_ptr, cpp_index, bh)

            return run
        tensors = {k: g._tensor_by_uid[u] for k, u in self.uids.items()}

        def run_public(ptrs, ws_ptr):  # slower public path, for other frontend versions
            g.execute_plan_at_index(
                {tensors[k]: ptrs[k] for k in ("x", "w", "y")}, ws_ptr or None, index, handle=ctx.handle
            )

        return run_public

    def raw_execute(self, index: int):
        """(execute, backend plan index, roles in operand order) for the frontend's pre-indexed execute:
        ``execute(address of a void*[3], 3, workspace_ptr, backend_handle, backend plan index)``, the pointers
        in the lowered graph's ascending-uid order. 1.32's own ``execute`` takes this path once it has sorted
        a variant pack; here the sorting is done once per plan, at build."""
        version = getattr(cudnn, "__version__", "")
        if version not in LOWERED_EXECUTE_VERSIONS:
            raise EngineError(
                f"cudnn-frontend {version}: the pre-indexed execute is checked only against "
                f"{', '.join(LOWERED_EXECUTE_VERSIONS)}; install nvidia-cudnn-frontend=="
                f"{LOWERED_EXECUTE_VERSIONS[-1]}"
            )
        lowered = self.graph._lowered_graph
        lowered._prepare_variant_pack_template()
        order = [int(u) for u in lowered._get_variant_pack_uids_sorted()]
        role = {u: r for r, u in self.uids.items()}
        if sorted(order) != sorted(role):
            raise EngineError(f"{self.sig.key} at b={self.b}: the graph's operands {order} are not x, w, y {self.uids}")
        return lowered._execute_with_raw_ptrs, self.graph._plans[index].cpp_index, tuple(role[u] for u in order)


NUMERICAL_NOTES = (
    "TENSOR_CORE",
    "DOWN_CONVERT_INPUTS",
    "FFT",
    "WINOGRAD",
    "NONDETERMINISTIC",
    "REDUCED_PRECISION_REDUCTION",
)


def make_graph(
    sig: KernelSignature,
    b: int,
    ctx,
    *,
    include_rtc: bool = True,
    float64: bool = False,
    select_note: str | None = None,
) -> ConvGraph:
    """Operation graph of ``sig`` at micro-batch ``b`` with its heuristic plan list (not yet built).

    The roles x/w/y are the operands a micro-batch slices: Forward x=X, y=Y; BackwardData x=dY,
    y=dX; BackwardFilter x=X, y=dY and the filter slot w holds dW (the output, never sliced).
    ``float64`` builds the same convolution in double precision (the verification reference);
    ``select_note`` keeps only plans carrying that numerical note (see numerical_notes), and no others.
    """
    F = cudnn.data_type.DOUBLE if float64 else cudnn.data_type.FLOAT
    io = F if float64 else getattr(cudnn.data_type, PRECISIONS[sig.precision].cudnn_type)
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F, handle=ctx.handle)
    shp = operand_shapes(sig, b)
    st = {k: strides(sig.layout, *v) for k, v in shp.items()}
    conv = dict(
        padding=[sig.pad_h, sig.pad_w],
        stride=[sig.stride_h, sig.stride_w],
        dilation=[sig.dil_h, sig.dil_w],
        compute_data_type=F,
    )

    def operand(name: str, role: str):
        return g.tensor(name=name, dim=list(shp[role]), stride=st[role], data_type=io)

    # (output node, the logical shape it has, the executor slot it fills)
    if sig.kind is KernelKind.FORWARD:
        x, w = operand("X", "x"), operand("W", "w")
        out, shape, slot, uids = g.conv_fprop(image=x, weight=w, **conv), "y", "y", {"x": x.uid, "w": w.uid}
    elif sig.kind is KernelKind.BACKWARD_DATA:
        dy, w = operand("DY", "y"), operand("W", "w")
        out, shape, slot, uids = g.conv_dgrad(loss=dy, filter=w, **conv), "x", "y", {"x": dy.uid, "w": w.uid}
    else:
        x, dy = operand("X", "x"), operand("DY", "y")
        out, shape, slot, uids = g.conv_wgrad(image=x, loss=dy, **conv), "w", "w", {"x": x.uid, "y": dy.uid}
    out.set_output(True).set_dim(list(shp[shape])).set_stride(st[shape]).set_data_type(io)
    uids[slot] = out.uid
    try:
        g.validate()
        g.build_operation_graph()
    except Exception as err:
        raise EngineError(f"cuDNN rejects the graph of {sig.key} at b={b}: {err}") from err
    if not float64 and not select_note:  # a labelling graph keeps every plan: notes belong to the plan, not a precision
        # plans that are another precision (strict fp32: no tensor cores; TF32: no fp16 down-conversion)
        if notes := PRECISIONS[sig.precision].deselect_notes:
            g.deselect_numeric_notes([getattr(cudnn.numerical_note, n) for n in notes])
    if not include_rtc:
        g.deselect_behavior_notes([cudnn.behavior_note.RUNTIME_COMPILATION])
    if select_note:
        g.select_numeric_notes([getattr(cudnn.numerical_note, select_note)])
    g.create_execution_plans([getattr(cudnn.heur_mode, m) for m in HEURISTICS])
    cg = ConvGraph(sig, b, g, uids)
    cg.names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    cg.heuristic = len(cg.names)
    return cg


def sweep(cg: ConvGraph, knob_samples: int, include_rtc: bool = False, skips: dict | None = None) -> list[int]:
    """Append the engine configurations outside the heuristic list; return the indices of those that
    build and whose plan name is new.

    Every engine that supports the graph is tried with its default knobs and with up to
    ``knob_samples`` random settings of the knobs the frontend can set (seeded by signature and b, so
    a resumed profile draws the same ones). Settings cuDNN refuses are not plans and are skipped; note
    filters set on the graph (strict fp32) apply to appended configurations too. Without ``include_rtc`` a
    runtime-compiled configuration is dropped before it is built, by its behaviour notes (known before
    building: the frontend's own behaviour-note filter reads the same ones), or after, should a build show
    one. ``skips`` counts, by reason, the configurations that did not become plans.
    """
    g = cg.graph
    known = set(cg.names)
    rng = random.Random(zlib.crc32(f"{cg.sig.key}/{cg.b}".encode()))
    skips = {} if skips is None else skips
    new = []

    def skip(reason: str) -> None:
        skips[reason] = skips.get(reason, 0) + 1

    for engine_id in range(g.get_engine_count()):
        try:
            knobs = g.get_knobs_for_engine(engine_id)
        except Exception:  # the engine does not support this graph
            skip("engine does not support the graph")
            continue
        axes = [
            (k.type, range(int(k.min_value), int(k.max_value) + 1, max(int(k.stride), 1)))
            for k in knobs
            if str(k.type).split(".")[-1] != "NOT_SET"
        ]
        settings, drawn = [{}], set()
        for _ in range(4 * knob_samples if axes else 0):
            if len(settings) > knob_samples:
                break
            values = tuple(rng.choice(r) for _, r in axes)
            if values not in drawn:
                drawn.add(values)
                settings.append({t: v for (t, _), v in zip(axes, values)})
        for knob_values in settings:
            try:
                index = cg.append(engine_id, knob_values)
            except Exception:
                skip("knob setting refused")
                continue
            if cg.names[index] in known:
                skip("plan name already listed")
                continue
            if not include_rtc and "RUNTIME_COMPILATION" in cg.behavior_notes(index):
                known.add(cg.names[index])
                skip("runtime-compiled, not built")
                continue
            try:
                cg.build(index)
            except Exception:
                skip("build refused")
                continue
            known.add(cg.names[index])
            if not include_rtc and "RUNTIME_COMPILATION" in cg.behavior_notes(index):
                skip("runtime-compiled, found after building")
                continue
            new.append(index)
    return new


# A workspace cap no plan meets: in a sibling graph the frontend refuses every plan, either for the
# note filter ("Deselecting execution plan") or, having passed it, for the cap, and compiles none
# (plans.h check_support_at_index, cuDNN >= 9.2: filter, then engine-config workspace, then build).
PROBE_CAP = -1
_PROBE_OK: bool | None = None  # whether the capped probe agreed with building, checked once per process


def label_graph(sig: KernelSignature, b: int, ctx, names: list[str], *, probe: bool) -> dict[str, list[str]]:
    """Notes of the named plans of (sig, b), by the capped probe or by building each plan (numerical_notes)."""
    notes: dict[str, list[str]] = {n: [] for n in names}
    for note in NUMERICAL_NOTES:
        cg = make_graph(sig, b, ctx, select_note=note)  # runtime-compiled: cuDNN's first plan may be one
        if probe:
            cg.graph.deselect_workspace_greater_than(PROBE_CAP)
        for name in names:
            try:
                cg.graph.build_plan_at_index(cg.index_of(name))
            except Exception as err:
                msg = str(err)
                if "Deselecting" in msg or "excluded" in msg:
                    continue
                if not (probe and "orkspace" in msg):
                    raise
            notes[name].append(note)
    return notes


def numerical_notes(sig: KernelSignature, b: int, ctx, names: list[str]) -> dict[str, list[str]]:
    """Numerical notes of the named plans on the graph of (sig, b): labelled per built plan, since one
    plan name (``eng25``) is a different kernel in another graph. The frontend cannot query notes per
    plan (cudnn-frontend.md §4), so for each note a sibling graph keeps only the plans that carry it:
    a plan refused there ("Deselecting execution plan") lacks the note. Swept plans are appended to
    the sibling graph, where the filter applies to them too.

    Under PROBE_CAP nothing is compiled. The first call of a process labels its plans both ways;
    only if the two agree are later calls probed, else every plan is built."""
    global _PROBE_OK
    if _PROBE_OK is None and names:
        built = label_graph(sig, b, ctx, names, probe=False)
        try:
            _PROBE_OK = label_graph(sig, b, ctx, names, probe=True) == built
        except Exception:
            _PROBE_OK = False
        return built
    return label_graph(sig, b, ctx, names, probe=bool(_PROBE_OK))


def note_method() -> str:
    """How this process labels numerical notes: "probe" (capped, nothing compiled), "build", or "unchecked"."""
    return {None: "unchecked", True: "probe", False: "build"}[_PROBE_OK]


def per_sample_bytes(sig: KernelSignature) -> dict[str, int]:
    """Bytes per sample of the sliced operands x and y, and of the whole filter w (roles as in make_graph)."""
    shp = operand_shapes(sig, 1)
    n = {k: v[0] * v[1] * v[2] * v[3] * sig.itemsize for k, v in shp.items()}
    if sig.kind is KernelKind.BACKWARD_DATA:
        n["x"], n["y"] = n["y"], n["x"]
    return n


def output_role(sig: KernelSignature) -> str:
    return "w" if sig.kind is KernelKind.BACKWARD_FILTER else "y"


class ExecutionPlans:
    """Built cuDNN execution plans by (signature key, b, plan name), rebuilt by name (ConvGraph.index_of)."""

    def __init__(self, ctx, include_rtc: bool = True):
        self.ctx, self.include_rtc = ctx, include_rtc
        self._graphs: dict[tuple[str, int], ConvGraph] = {}

    def graph(self, sig: KernelSignature, b: int) -> ConvGraph:
        key = (sig.key, b)
        if key not in self._graphs:
            self._graphs[key] = make_graph(sig, b, self.ctx, include_rtc=self.include_rtc)
        return self._graphs[key]

    def build(self, sig: KernelSignature, b: int, name: str) -> tuple[ConvGraph, int, int]:
        """(graph, plan index, workspace bytes) of the named plan, built; a clear error if this cuDNN has no
        such plan."""
        cg = self.graph(sig, b)
        try:
            index = cg.index_of(name)
        except EngineError as err:
            raise EngineError(
                f"plan {name!r} of {sig.key} at micro-batch {b} is neither in this cuDNN's heuristic list "
                f"({cg.heuristic} plans) nor rebuildable ({err}); was the profile measured with another cuDNN "
                f"version or GPU?"
            ) from None
        try:
            ws = cg.build(index)
        except Exception as err:
            raise EngineError(f"plan {name!r} of {sig.key} at b={b} fails to build: {err}") from err
        return cg, index, ws
