"""cuDNN frontend graphs for one convolution kernel at one micro-batch size.

Rules from ../shared/reference/cudnn-frontend.md: dims are logical NCHW and strides encode the
layout (§3); every output gets explicit dims, strides and dtype, or the frontend silently gives it
NHWC strides (§3, gotcha 2); one graph per (signature, b) (§3.6); plans come from heuristics A then
FALLBACK, built per index so each failure is recorded (§4).

Plans are identified by name (``eng<id>_k<knob>=<v>...``). Replaying ``(engine_id, knobs)`` through
``create_execution_plan`` fails on this frontend for engines whose knob types the Python enum
does not know (they come back as ``NOT_SET``; measured on the H100 with cuDNN 9.19 / frontend 1.32),
so a plan is rebuilt by regenerating the same heuristic list and building the entry of that name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import cudnn

from ..errors import EngineError
from ..kernels import KernelKind, KernelSignature

_DT = {"tf32": "FLOAT", "fp32": "FLOAT", "fp16": "HALF", "bf16": "BFLOAT16"}
_NAME = re.compile(r"^eng(\d+)((?:_k\d+=-?\d+)*)$")
HEURISTICS = ("A", "FALLBACK")
# the frontend's lowered-graph execute takes {uid: pointer}; its public path re-describes tensors
# on every call (cudnn-frontend.md §12). Pinned to the frontend version it was checked against.
LOWERED_EXECUTE_VERSIONS = ("1.32.0",)


def parse_plan_name(name: str) -> tuple[int, dict[str, int]]:
    """``eng38_k2=0_k13=2`` -> (38, {"2": 0, "13": 2}): backend knob type numbers and values."""
    m = _NAME.match(name)
    if not m:
        return -1, {}
    knobs = dict(kv.split("=") for kv in m.group(2).split("_k")[1:])
    return int(m.group(1)), {k: int(v) for k, v in knobs.items()}


def strides(layout: str, n: int, c: int, h: int, w: int) -> list[int]:
    if layout == "NCHW":
        return [c * h * w, h * w, w, 1]
    return [h * w * c, 1, w * c, c]


def operand_shapes(sig: KernelSignature, b: int) -> dict[str, tuple[int, int, int, int]]:
    """Logical NCHW dims of x (input), w (filter), y (output) at micro-batch b."""
    return {"x": (b, sig.c, sig.h, sig.w), "w": (sig.k, sig.c // sig.groups, sig.r, sig.s),
            "y": (b, sig.k, sig.out_h, sig.out_w)}


@dataclass
class ConvGraph:
    """A built operation graph plus its ranked plan list; ``uids`` maps x/w/y to tensor uids."""

    sig: KernelSignature
    b: int
    graph: object
    uids: dict[str, int]
    names: list[str] = field(default_factory=list)
    built: dict[int, int] = field(default_factory=dict)   # plan index -> workspace bytes

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
        """A callable ``run(ptrs: {x,w,y}, workspace_ptr)`` that enqueues plan ``index`` on ctx's stream."""
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
            g.execute_plan_at_index({tensors[k]: ptrs[k] for k in ("x", "w", "y")}, ws_ptr or None, index,
                                    handle=ctx.handle)
        return run_public


NUMERICAL_NOTES = ("TENSOR_CORE", "DOWN_CONVERT_INPUTS", "FFT", "WINOGRAD", "NONDETERMINISTIC",
                   "REDUCED_PRECISION_REDUCTION")


def make_graph(sig: KernelSignature, b: int, ctx, *, include_rtc: bool = True, float64: bool = False,
               select_note: str | None = None) -> ConvGraph:
    """Operation graph of ``sig`` at micro-batch ``b`` with its heuristic plan list (not yet built).

    The roles x/w/y are the operands a micro-batch slices: Forward x=X, y=Y; BackwardData x=dY,
    y=dX; BackwardFilter x=X, y=dY and the filter slot w holds dW (the output, never sliced).
    ``float64`` builds the same convolution in double precision (the verification reference);
    ``select_note`` keeps only plans carrying that numerical note (see numerical_notes).
    """
    F = cudnn.data_type.DOUBLE if float64 else cudnn.data_type.FLOAT
    io = F if float64 else getattr(cudnn.data_type, _DT[sig.precision])
    g = cudnn.pygraph(io_data_type=io, intermediate_data_type=F, compute_data_type=F, handle=ctx.handle)
    shp = operand_shapes(sig, b)
    st = {k: strides(sig.layout, *v) for k, v in shp.items()}
    conv = dict(padding=[sig.pad_h, sig.pad_w], stride=[sig.stride_h, sig.stride_w],
                dilation=[sig.dil_h, sig.dil_w], compute_data_type=F)

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
    if sig.precision == "fp32" and not float64:  # strict fp32: no TF32 tensor cores, no down-conversion (cudnn-frontend.md §3)
        g.deselect_numeric_notes([cudnn.numerical_note.TENSOR_CORE, cudnn.numerical_note.DOWN_CONVERT_INPUTS])
    if not include_rtc:
        g.deselect_behavior_notes([cudnn.behavior_note.RUNTIME_COMPILATION])
    if select_note:
        g.select_numeric_notes([getattr(cudnn.numerical_note, select_note)])
    g.create_execution_plans([getattr(cudnn.heur_mode, m) for m in HEURISTICS])
    cg = ConvGraph(sig, b, g, uids)
    cg.names = [g.get_plan_name_at_index(i) for i in range(g.get_execution_plan_count())]
    return cg


def numerical_notes(sig: KernelSignature, b: int, ctx, names: list[str]) -> dict[str, list[str]]:
    """Numerical notes of the named plans of (sig, b). The frontend cannot query them per plan
    (cudnn-frontend.md §4), so for each note a sibling graph keeps only the plans that carry it: a
    plan whose build is refused there ("Deselecting execution plan") lacks the note."""
    notes: dict[str, list[str]] = {n: [] for n in names}
    for note in NUMERICAL_NOTES:
        cg = make_graph(sig, b, ctx, include_rtc=False, select_note=note)
        for i, name in enumerate(cg.names):
            if name not in notes:
                continue
            try:
                cg.graph.build_plan_at_index(i)
            except Exception as err:
                if "Deselecting" in str(err) or "excluded" in str(err):
                    continue
                raise
            notes[name].append(note)
    return notes


def per_sample_bytes(sig: KernelSignature) -> dict[str, int]:
    """Bytes per sample of the sliced operands x and y, and of the whole filter w (roles as in make_graph)."""
    shp = operand_shapes(sig, 1)
    n = {k: v[0] * v[1] * v[2] * v[3] * sig.itemsize for k, v in shp.items()}
    if sig.kind is KernelKind.BACKWARD_DATA:
        n["x"], n["y"] = n["y"], n["x"]
    return n


def output_role(sig: KernelSignature) -> str:
    return "w" if sig.kind is KernelKind.BACKWARD_FILTER else "y"


class PlanCache:
    """Built plans by (signature key, b, plan name), rebuilt by name from the heuristic list."""

    def __init__(self, ctx, include_rtc: bool = True):
        self.ctx, self.include_rtc = ctx, include_rtc
        self._graphs: dict[tuple[str, int], ConvGraph] = {}

    def graph(self, sig: KernelSignature, b: int) -> ConvGraph:
        key = (sig.key, b)
        if key not in self._graphs:
            self._graphs[key] = make_graph(sig, b, self.ctx, include_rtc=self.include_rtc)
        return self._graphs[key]

    def plan(self, sig: KernelSignature, b: int, name: str):
        """(run callable, workspace bytes) of the named plan; a clear error if this cuDNN has no such plan."""
        cg = self.graph(sig, b)
        if name not in cg.names:
            raise EngineError(
                f"plan {name!r} of {sig.key} at micro-batch {b} is not in this cuDNN's heuristic list "
                f"({len(cg.names)} plans); was the profile measured with another cuDNN version or GPU?")
        index = cg.names.index(name)
        try:
            ws = cg.build(index)
        except Exception as err:
            raise EngineError(f"plan {name!r} of {sig.key} at b={b} fails to build: {err}") from err
        return cg.executor(index, self.ctx), ws
