"""Bokeh figures for the views, built once and updated by replacing their sources' data. Imports no Panel.

Each class owns one figure (``.fig``) and an ``update(...)`` that takes tidy frames from
``dashboard.frames`` and ``dashboard.analysis``; nothing is recreated per update, so the page does not
flicker and a budget change only ships a few columns to the browser (Bokeh streams only the changed
``ColumnDataSource`` columns).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
from bokeh.core.properties import field, value
from bokeh.models import (
    AllIndices,
    ColumnDataSource,
    CustomJSHover,
    CustomJSTickFormatter,
    FactorRange,
    FixedTicker,
    GlyphRenderer,
    HoverTool,
    Legend,
    LegendItem,
    LinearColorMapper,
    Range1d,
    Span,
    UnionRenderers,
)
from bokeh.plotting import figure

from engine.units import MiB, format_size

from .palette import POLICY_COLORS

KIND_COLORS = {"F": "#4c72b0", "BD": "#dd8452", "BF": "#55a868"}
KIND_LABELS = {"F": "Forward (F)", "BD": "BackwardData (BD)", "BF": "BackwardFilter (BF)"}
MEASURED_COLOR = "#444444"
WS_FLOOR_MIB = 1 / 1024  # a log axis cannot show 0 B: zero-workspace points sit at 1 KiB (tooltips say 0 B)
HEADROOM = 1.25  # the workspace-division plot's y range over its tallest bar: room for the legend's row
TOOLS = "pan,wheel_zoom,box_zoom,reset,save"
# tick labels of a MiB axis with binary units, so a log axis reads "1 KiB ... 1 MiB ... 1 GiB"
_MIB_TICKS_JS = """
    const v = tick;
    const fmt = (x) => (x >= 100 || Math.abs(x - Math.round(x)) < 1e-9) ? Math.round(x).toString() : x.toPrecision(2);
    if (v >= 1024 * 1024) return fmt(v / (1024 * 1024)) + " TiB";
    if (v >= 1024) return fmt(v / 1024) + " GiB";
    if (v >= 1) return fmt(v) + " MiB";
    if (v * 1024 >= 1) return fmt(v * 1024) + " KiB";
    return fmt(v * 1024 * 1024) + " B";
"""


def mib_ticks() -> CustomJSTickFormatter:
    """A new formatter per figure (Bokeh models cannot be shared between documents)."""
    return CustomJSTickFormatter(code=_MIB_TICKS_JS)


def log2_ticks(lo_mib: float, hi_mib: float, max_ticks: int = 7) -> list[float]:
    """Powers of two (in MiB) spanning [lo, hi], at most ``max_ticks``; steps of 1, 2, 5 or 10 octaves keep
    1 KiB, 1 MiB and 1 GiB among the ticks once the range is wide."""
    k0, k1 = math.floor(math.log2(max(lo_mib, 2**-20))), math.ceil(math.log2(max(hi_mib, 2**-20)))
    step = next((s for s in (1, 2, 5, 10, 20) if (k1 - k0) // s + 1 <= max_ticks), 20)
    start = (k0 // step) * step
    return [2.0**k for k in range(start, k1 + 1, step)]


def _size_column(values_bytes) -> list[str]:
    return [format_size(v) for v in values_bytes]


def _style(fig, title_size="12pt"):
    """The views' common look, and fewer Bokeh models: a page's cost on the server and in the browser grows
    with its model count (issue 25: ten sessions on two CPUs). bokeh.plotting gives every renderer its own
    muted and non-selection glyph, which the browser derives itself when they are "auto" (nothing is muted
    here, and only a renderer with a selection look of its own is ever selected), and every view and source
    its own index filter and selection policy, which hold no state: one of each serves the figure."""
    everything, union = AllIndices(), UnionRenderers()
    for r in fig.renderers:
        if isinstance(r, GlyphRenderer):
            r.muted_glyph = "auto"
            if r.selection_glyph == "auto":
                r.nonselection_glyph = "auto"
            r.view.filter = everything
            r.data_source.selection_policy = union
    if fig.title is not None:
        fig.title.text_font_size = title_size
    fig.toolbar.logo = None
    fig.xaxis.axis_label_text_font_style = "normal"
    fig.yaxis.axis_label_text_font_style = "normal"
    return fig


class ParetoPlot:
    """Network Pareto fronts (total conv time vs total workspace) per policy, WR's curve, the current plan,
    the undivided baseline at the same memory and the unlimited-workspace optimum."""

    def __init__(self, height: int = 400):
        fig = figure(
            height=height,
            sizing_mode="stretch_width",
            x_axis_type="log",
            tools=TOOLS,
            title="Network Pareto front",
            x_axis_label="Total workspace (log scale)",
            y_axis_label="Total convolution time [ms]",
        )
        fig.xaxis.formatter = mib_ticks()
        self.ticker = FixedTicker(ticks=[1.0])
        fig.xaxis.ticker = self.ticker
        self.fronts = {p: ColumnDataSource(self._empty_line()) for p in POLICY_COLORS}
        self.sweep = ColumnDataSource(self._empty_line())
        self.marks = ColumnDataSource(
            {"x": [], "y": [], "what": [], "detail": [], "time": [], "size": [], "marker": [], "color": []}
        )
        items = []
        hover_renderers = []
        self.items = {}
        for policy, color in POLICY_COLORS.items():
            line = fig.step("x", "time_ms", source=self.fronts[policy], mode="after", line_width=2, color=color)
            dots = fig.scatter("x", "time_ms", source=self.fronts[policy], size=3, color=color, alpha=0.6)
            items.append(LegendItem(label=f"WD front, {policy}", renderers=[line, dots]))
            self.items[policy] = items[-1]
            hover_renderers.append(dots)
        self.other = ColumnDataSource(self._empty_line())  # the same policy's front on another GPU (compare)
        other = fig.step(
            "x", "time_ms", source=self.other, mode="after", line_width=2, line_dash="dashdot", color="#333333"
        )
        other_dots = fig.scatter("x", "time_ms", source=self.other, size=3, color="#333333", alpha=0.6)
        self.other_item = LegendItem(label="another GPU", renderers=[other, other_dots], visible=False)
        items.append(self.other_item)
        hover_renderers.append(other_dots)
        sweep = fig.line("x", "time_ms", source=self.sweep, line_dash="dashed", line_width=1.5, color="#2ca02c")
        sweep_dots = fig.scatter("x", "time_ms", source=self.sweep, size=3, color="#2ca02c", alpha=0.6)
        items.append(LegendItem(label="WR, limit swept (current policy)", renderers=[sweep, sweep_dots]))
        hover_renderers.append(sweep_dots)
        marks = fig.scatter(
            "x", "y", source=self.marks, size="size", marker="marker", color="color", line_color="black", line_width=1
        )
        self.budget_span = Span(
            location=1, dimension="height", line_dash="dotted", line_color="#d62728", line_width=1.5, visible=False
        )
        fig.add_layout(self.budget_span)
        fig.add_tools(
            HoverTool(
                renderers=hover_renderers,
                tooltips=[("policy", "@policy"), ("workspace", "@ws_label"), ("time", "@time_ms{0.000} ms")],
            )
        )
        fig.add_tools(HoverTool(renderers=[marks], tooltips=[("", "@what @detail"), ("time", "@time")]))
        # the budget Span cannot be a legend entry: an empty line with its look stands in for it
        budget_key = fig.line([math.nan], [math.nan], line_dash="dotted", line_color="#d62728", line_width=1.5)
        items.append(LegendItem(label="budget (total)", renderers=[budget_key]))
        legend = Legend(
            items=items + [LegendItem(label=field("what"), renderers=[marks])],
            click_policy="hide",
            label_text_font_size="8pt",
            spacing=0,
            padding=3,
            location="bottom_left",
            background_fill_alpha=0.85,
            glyph_height=13,
            label_height=13,
        )
        fig.add_layout(legend)
        self.fig = _style(fig)

    @staticmethod
    def _empty_line():
        return {"x": [], "time_ms": [], "policy": [], "ws_label": []}

    @staticmethod
    def _line(frame: pd.DataFrame, policy: str) -> dict:
        return {
            "x": np.maximum(frame.workspace_mib.to_numpy(), WS_FLOOR_MIB),
            "time_ms": frame.time_ms.to_numpy(),
            "policy": [policy] * len(frame),
            "ws_label": _size_column(frame.workspace),
        }

    def update_fronts(self, fronts: pd.DataFrame, sweep: pd.DataFrame, policy: str, title: str) -> None:
        """Per analysis (and policy): the fronts of every policy, WR's curve for ``policy``, the title."""
        self.fig.title.text = title
        for name, src in self.fronts.items():
            part = fronts[fronts.policy == name]
            src.data = self._line(part, name) if len(part) else self._empty_line()
            self.items[name].visible = bool(len(part))
        self.sweep.data = self._line(sweep, f"WR {policy}") if len(sweep) else self._empty_line()
        xs = np.maximum(np.concatenate([fronts.workspace_mib.to_numpy(), sweep.workspace_mib.to_numpy()]), WS_FLOOR_MIB)
        if len(xs):
            self.ticker.ticks = log2_ticks(xs.min(), xs.max())

    def update_other(self, front: pd.DataFrame | None, label: str) -> None:
        """Another GPU's front for the current policy (None: no comparison), labelled with its GPU."""
        self.other.data = self._line(front, label) if front is not None and len(front) else self._empty_line()
        # a str set after construction would name a column (LegendItem converts only its constructor's)
        self.other_item.update(label=value(label or "another GPU"), visible=front is not None)

    def update_marks(self, marks: list[dict], budget_total: int | None) -> None:
        """``marks``: dicts with what (the legend label: keep it stable), detail, workspace (bytes), time_ms,
        marker, color, size."""
        self.marks.data = {
            "x": [max(m["workspace"] / MiB, WS_FLOOR_MIB) for m in marks],
            "y": [m["time_ms"] for m in marks],
            "what": [m["what"] for m in marks],
            "detail": [m.get("detail", "") for m in marks],
            "time": [f"{m['time_ms']:.3f} ms, {format_size(m['workspace'])}" for m in marks],
            "size": [m.get("size", 12) for m in marks],
            "marker": [m["marker"] for m in marks],
            "color": [m["color"] for m in marks],
        }
        if budget_total is not None:
            x = max(budget_total / MiB, WS_FLOOR_MIB)
            self.budget_span.update(location=x, visible=True)
        else:
            self.budget_span.visible = False


class DesirablePlot:
    """Fig. 8: one kernel's desirable configurations (time vs workspace); next to each point a small bar
    shows how the mini-batch is divided (segment widths) and which engine runs each piece (colours).
    The workspace axis is logarithmic (the sets span bytes to GiB), so the bars are laid out in log space."""

    BAR_W, GAP = 0.15, 0.012  # of the log-x span
    BAR_H = 0.035  # of the y span

    def __init__(self, height: int = 400):
        self.x_range, self.y_range = Range1d(0.5, 2), Range1d(0, 1)
        fig = figure(
            height=height,
            sizing_mode="stretch_width",
            tools=TOOLS,
            x_range=self.x_range,
            y_range=self.y_range,
            x_axis_type="log",
            title="Desirable set",
            x_axis_label="Workspace (log scale)",
            y_axis_label="Kernel time [ms]",
        )
        fig.xaxis.formatter = mib_ticks()
        self.ticker = FixedTicker(ticks=[1.0])
        fig.xaxis.ticker = self.ticker
        self.points = ColumnDataSource(
            {"x": [], "y": [], "division": [], "plans": [], "engines": [], "ws": [], "size": [], "line": []}
        )
        self.pieces = ColumnDataSource(
            {
                "left": [],
                "right": [],
                "bottom": [],
                "top": [],
                "engine": [],
                "color": [],
                "alpha": [],
                "batch": [],
                "plan": [],
            }
        )
        # pieces alternate in shade rather than carrying outlines: a 20-piece division would be mostly outline
        bars = fig.quad(
            left="left",
            right="right",
            bottom="bottom",
            top="top",
            color="color",
            fill_alpha="alpha",
            line_color=None,
            source=self.pieces,
            legend_field="engine",
        )
        pts = fig.scatter("x", "y", source=self.points, size="size", color="#222222", line_color="line", line_width=2.5)
        self.limit = Span(
            location=1, dimension="height", line_dash="dotted", line_color="#d62728", line_width=1.5, visible=False
        )
        fig.add_layout(self.limit)
        fig.add_tools(
            HoverTool(
                renderers=[pts],
                tooltips=[
                    ("workspace", "@ws"),
                    ("time", "@y{0.000} ms"),
                    ("division", "@division"),
                    ("engines", "@engines"),
                    ("plans", "@plans"),
                ],
            )
        )
        fig.add_tools(
            HoverTool(
                renderers=[bars], tooltips=[("piece", "@batch samples"), ("engine", "@engine"), ("plan", "@plan")]
            )
        )
        fig.legend.title = "engine"
        fig.legend.label_text_font_size = "8pt"
        fig.legend.location = "bottom_left"  # below-left of a Pareto set is empty by definition
        fig.legend.background_fill_alpha = 0.85
        self.fig = _style(fig)
        self._shown = self._shown_pieces = None

    def update(
        self, points: pd.DataFrame, pieces: pd.DataFrame, colors: dict[str, str], title: str, limit_bytes: int | None
    ) -> None:
        if self.fig.title.text != title:
            self.fig.title.text = title
        if points.empty:
            self.points.data = {k: [] for k in self.points.data}
            self.pieces.data = {k: [] for k in self.pieces.data}
            self.limit.visible = False
            self._shown = None
            return
        x = np.maximum(points.workspace_mib.to_numpy(dtype=float), WS_FLOOR_MIB)
        y = points.time_ms.to_numpy(dtype=float)
        lx = np.log10(x)
        lo, hi = lx.min(), lx.max()
        if limit_bytes is not None:
            ll = math.log10(max(limit_bytes / MiB, WS_FLOOR_MIB))
            lo, hi = min(lo, ll), max(hi, ll)
        span = max(hi - lo, 1.0)
        w, gap = self.BAR_W * span, self.GAP * span
        self.x_range.update(start=10 ** (lo - 0.04 * span), end=10 ** (hi + gap + w + 0.04 * span))
        self.ticker.ticks = log2_ticks(10**lo, 10 ** (hi + gap + w))
        y_lo, y_hi = y.min(), y.max()
        span_y = max(y_hi - y_lo, 0.05 * y_hi, 1e-9)
        pad = 0.08 * span_y
        self.y_range.update(start=max(0.0, y_lo - pad), end=y_hi + pad)
        chosen = points.chosen.to_numpy(dtype=bool)
        marks = {"size": np.where(chosen, 13, 7), "line": np.where(chosen, "#d62728", "#222222").tolist()}
        # what the bars' positions depend on: the pieces frame itself (not its id(), which a later frame could
        # reuse) and the axes
        key = (title, len(points), lo, hi)
        if key == self._shown and pieces is self._shown_pieces:  # same kernel and set: only the mark moves
            self.points.data.update(marks)
        else:
            h = self.BAR_H * (span_y + 2 * pad)
            at = dict(zip(points["index"], zip(lx, y)))
            plx = np.array([at[i][0] for i in pieces["index"]])
            py = np.array([at[i][1] for i in pieces["index"]])
            self.pieces.data = {
                "left": 10 ** (plx + gap + w * pieces.start.to_numpy(dtype=float)),
                "right": 10 ** (plx + gap + w * pieces.end.to_numpy(dtype=float)),
                "bottom": py - h / 2,
                "top": py + h / 2,
                "engine": pieces.engine.tolist(),
                "color": [colors.get(e, "#999999") for e in pieces.engine],
                "batch": pieces.batch.tolist(),
                "plan": pieces.plan.tolist(),
                "alpha": np.where(pieces.groupby("index").cumcount().to_numpy() % 2 == 0, 1.0, 0.6),
            }
            self.points.data = {
                "x": x,
                "y": y,
                "division": points.division.tolist(),
                "plans": points.plans.tolist(),
                "engines": points.engines.tolist(),
                "ws": _size_column(points.workspace_mib * MiB),
                **marks,
            }
            self._shown, self._shown_pieces = key, pieces
        if limit_bytes is not None:
            self.limit.update(location=max(limit_bytes / MiB, WS_FLOOR_MIB), visible=True)
        else:
            self.limit.visible = False


class WorkspacePlot:
    """Fig. 14: each layer's workspace stacked by direction (F / BD / BF), WR (left, light) and WD (right,
    dark) side by side at the same total. One source per direction, so a click says which kernel it hit."""

    OFFSET = {"WR": -0.21, "WD": 0.21}

    def __init__(self, height: int = 330):
        self.x_range = FactorRange(factors=["-"], range_padding=0.01)
        fig = figure(
            height=height,
            sizing_mode="stretch_width",
            x_range=self.x_range,
            tools="pan,xwheel_zoom,reset,save,tap",
            title="Workspace division: WR vs WD at the same total",
            y_axis_label="Workspace [MiB]",
            x_axis_label="Layer (left bar WR, right bar WD)",
        )
        self.sources = {}
        for kind, color in KIND_COLORS.items():
            src = ColumnDataSource(
                {"x": [], "bottom": [], "top": [], "value": [], "mode": [], "alpha": [], "kernel": []}
            )
            fig.vbar(
                x="x",
                bottom="bottom",
                top="top",
                width=0.4,
                source=src,
                color=color,
                fill_alpha="alpha",
                line_color="white",
                line_width=0.5,
                legend_label=KIND_LABELS[kind],
                nonselection_fill_alpha="alpha",
                selection_line_color="#d62728",
                selection_line_width=2,
            )
            self.sources[kind] = src
        fig.add_tools(HoverTool(tooltips=[("kernel", "@kernel (@mode)"), ("workspace", "@value{0.00} MiB")]))
        fig.xaxis.major_label_orientation = math.pi / 2
        fig.xaxis.major_label_text_font_size = "7pt"
        fig.xgrid.grid_line_color = None
        fig.legend.location = "top_right"
        fig.legend.label_text_font_size = "9pt"
        fig.legend.orientation = "horizontal"
        fig.y_range.start = 0
        self.fig = _style(fig)

    def update(self, frame: pd.DataFrame) -> None:
        """Per budget only bottom/top/value change: those columns alone are sent when the layers are the same."""
        layers = list(dict.fromkeys(frame.layer)) or ["-"]
        modes = frame["mode"].to_numpy()
        x = [(layer, self.OFFSET[m]) for layer, m in zip(frame.layer, modes)]
        same = list(self.x_range.factors) == layers and self.sources["F"].data["x"] == x
        if not same:
            self.x_range.factors = layers
        bottom = np.zeros(len(frame))
        for kind, src in self.sources.items():
            v = frame[kind].to_numpy(dtype=float)
            cols = {"bottom": bottom.copy(), "top": bottom + v, "value": v}
            if same:
                src.data.update(cols)
            else:
                src.data = {
                    "x": x,
                    **cols,
                    "mode": modes.tolist(),
                    "alpha": np.where(modes == "WR", 0.5, 1.0),
                    "kernel": [f"{layer}:{kind}" for layer in frame.layer],
                }
            bottom = bottom + v
        # a quarter of headroom above the tallest bar for the legend's row (it hid AlexNet's conv4)
        self.fig.y_range.end = HEADROOM * float(bottom.max()) if bottom.size and bottom.max() > 0 else 1.0


class TimelinePlot:
    """Fig. 3: per-layer lanes, kernels in execution order, each split into its micro-batches and coloured by
    engine; after verification a measured lane under each layer.

    Every column sent per update is numeric (binary on the websocket): text columns travel as codes into
    small name lists that the hover and the colour mapper look up, so a ResNet-50 plan of ~1,000 pieces
    costs a few arrays per budget change, not thousands of strings.
    """

    def __init__(self, height: int = 420):
        self.y_range = Range1d(-0.6, 0.6)
        fig = figure(
            height=height,
            sizing_mode="stretch_width",
            y_range=self.y_range,
            tools=TOOLS,
            title="Timeline",
            x_axis_label="Time since the first convolution [ms]",
            y_axis_label="Layer",
        )
        self.source = ColumnDataSource(
            {
                k: []
                for k in (
                    "y",
                    "left",
                    "right",
                    "duration",
                    "batch",
                    "piece",
                    "pieces",
                    "kernel",
                    "plan",
                    "engine",
                    "alpha",
                )
            }
        )
        self.names = {
            k: CustomJSHover(args={"names": []}, code="return names[value] ?? '';")
            for k in ("kernel", "plan", "engine")
        }
        self.cmap = LinearColorMapper(palette=["#999999"], low=-0.5, high=0.5)
        self.bars = fig.hbar(
            y="y",
            left="left",
            right="right",
            height=0.75,
            source=self.source,
            color={"field": "engine", "transform": self.cmap},
            fill_alpha="alpha",
            line_color="white",
            line_width=0.6,
        )
        fig.add_tools(
            HoverTool(
                renderers=[self.bars],
                tooltips=[
                    ("kernel", "@kernel{custom}"),
                    ("piece", "@piece of @pieces (@batch samples)"),
                    ("engine", "@engine{custom}"),
                    ("plan", "@plan{custom}"),
                    ("start", "@left{0.000} ms"),
                    ("duration", "@duration{0.000} ms"),
                ],
                formatters={f"@{k}": v for k, v in self.names.items()},
            )
        )
        self.ticker = FixedTicker(ticks=[0])
        fig.yaxis.ticker = self.ticker
        fig.ygrid.grid_line_color = None
        fig.yaxis.major_label_text_font_size = "8pt"
        # inside, bottom left: the last layers' lanes are empty until their forward kernels run mid-step, and
        # a legend outside the frame would re-lay out the whole page whenever its entries change
        self.legend = Legend(
            items=[],
            title="engine",
            label_text_font_size="8pt",
            location="bottom_left",
            background_fill_alpha=0.85,
            glyph_height=12,
            label_height=12,
            spacing=0,
            padding=4,
        )
        self._legend: dict[str, int] = {}
        fig.add_layout(self.legend)
        self.fig = _style(fig)

    @staticmethod
    def _codes(values, names: list[str]) -> np.ndarray:
        index = {n: i for i, n in enumerate(names)}
        return np.fromiter((index[v] for v in values), dtype=np.int32, count=len(values))

    def _set_names(self, key: str, names: list[str]) -> None:
        if self.names[key].args.get("names") != names:
            self.names[key].args = {"names": names}

    def update(self, frame: pd.DataFrame, colors: dict[str, str], title: str) -> None:
        have = set(frame.lane)
        lanes = [
            lane for layer in dict.fromkeys(frame.layer) for lane in (layer, f"{layer} (measured)") if lane in have
        ] or ["-"]
        n = len(lanes)
        ticks = list(range(n))
        if list(self.ticker.ticks) != ticks or self.fig.yaxis[0].major_label_overrides.get(n - 1) != lanes[0]:
            self.ticker.ticks = ticks
            self.fig.yaxis[0].major_label_overrides = {n - 1 - i: lane for i, lane in enumerate(lanes)}
            self.y_range.update(start=-0.6, end=n - 0.4)
        kernels, plans = list(dict.fromkeys(frame.kernel)), list(dict.fromkeys(frame.plan))
        engines = list(dict.fromkeys(frame.engine))
        for key, names in (("kernel", kernels), ("plan", plans), ("engine", engines)):
            self._set_names(key, names)
        palette = [MEASURED_COLOR if e == "measured" else colors.get(e, "#999999") for e in engines] or ["#999999"]
        if list(self.cmap.palette) != palette:
            self.cmap.update(palette=palette, low=-0.5, high=len(palette) - 0.5)
        lane_pos = {lane: n - 1 - i for i, lane in enumerate(lanes)}
        engine_codes = self._codes(frame.engine.tolist(), engines)
        piece = frame.piece.astype(str)
        split = piece.str.split("/", n=1, expand=True) if len(frame) else None
        measured = frame.row.to_numpy() == "measured"
        self.source.data = {
            "y": np.fromiter((lane_pos[v] for v in frame.lane), dtype=float, count=len(frame)),
            "left": frame.start_ms.to_numpy(dtype=float),
            "right": frame.end_ms.to_numpy(dtype=float),
            "duration": frame.duration_ms.to_numpy(dtype=float),
            "batch": frame.batch.to_numpy(dtype=np.int32),
            "piece": (
                pd.to_numeric(split[0], errors="coerce").fillna(1).to_numpy(dtype=np.int32)
                if split is not None
                else np.zeros(0, np.int32)
            ),
            "pieces": (
                pd.to_numeric(split[1], errors="coerce").fillna(1).to_numpy(dtype=np.int32)
                if split is not None and split.shape[1] > 1
                else np.ones(len(frame), np.int32)
            ),
            "kernel": self._codes(frame.kernel.tolist(), kernels),
            "plan": self._codes(frame.plan.tolist(), plans),
            "engine": engine_codes,
            "alpha": np.where(measured, 0.75, 1.0),
        }
        order = {e: i for i, e in enumerate(colors)}
        first = {
            e: int(np.argmax(engine_codes == engines.index(e)))
            for e in sorted(engines, key=lambda e: order.get(e, len(order)))
        }
        if self._legend != first:
            self.legend.items = [LegendItem(label=e, renderers=[self.bars], index=i) for e, i in first.items()]
            self._legend = first
        height = max(260, 60 + 16 * n)
        if self.fig.height != height:
            self.fig.height = height
        if self.fig.title.text != title:
            self.fig.title.text = title
