"""The memory tab's figures: a training step's memory per step, stacked by tensor class (with the measured peak
of a GPU run as a line, where one exists), and the host-device copies below it. Built once and updated by
replacing their sources' data. Imports no Panel."""

from __future__ import annotations

import numpy as np
from bokeh.models import ColumnDataSource, HoverTool, Legend, LegendItem, Range1d
from bokeh.palettes import Category20_20
from bokeh.plotting import figure

from engine.memory.tensors import CLASSES
from engine.units import format_size

from .plots import TOOLS, _style

_KNOWN = {
    "weights": "#4c72b0",
    "weight_grads": "#8fa8d6",
    "optimizer": "#64b5cd",
    "bn_stats": "#8c8c8c",
    "input": "#ccb974",
    "activations": "#55a868",
    "gradients": "#dd8452",
    "masks": "#937860",
    "workspace": "#c44e52",
}
# every tensor class engine.memory knows, in its order; a class added there gets a colour of its own
_SPARE = [c for c in Category20_20 if c not in _KNOWN.values()]
MEMORY_COLORS = {c: _KNOWN.get(c) or _SPARE[i % len(_SPARE)] for i, c in enumerate(CLASSES)}
LANE_COLORS = {"offload": "#8172b3", "prefetch": "#da8bc3"}


class MemoryPlot:
    """The memory planner's timeline: memory per step stacked by class, the capacity and what it leaves
    for workspace, recomputed steps marked; below it, host-device copies on an offload and a prefetch lane."""

    def __init__(self, height: int = 380):
        self.x_range = Range1d(0, 1)
        fig = figure(
            height=height,
            sizing_mode="stretch_width",
            x_range=self.x_range,
            tools=TOOLS,
            title="Memory timeline",
            y_axis_label="GPU memory [GiB]",
        )
        classes = list(MEMORY_COLORS)
        self.stack = ColumnDataSource({"tick": [], **{c: [] for c in classes}})
        areas = fig.varea_stack(classes, x="tick", source=self.stack, color=list(MEMORY_COLORS.values()), alpha=0.85)
        self.lines = ColumnDataSource(
            {k: [] for k in ("tick", "total", "live", "workspace", "free", "capacity", "layer", "phase")}
        )
        total = fig.line("tick", "total", source=self.lines, color="#222222", line_width=1)
        free = fig.line("tick", "free", source=self.lines, color="#c44e52", line_dash="dashed", line_width=1.5)
        cap = fig.line("tick", "capacity", source=self.lines, color="black", line_dash="dotted", line_width=2)
        self.recompute = ColumnDataSource({"tick": [], "y": [], "layer": [], "ms": []})
        rec = fig.scatter("tick", "y", source=self.recompute, marker="inverted_triangle", size=8, color="#d62728")
        self.measured = ColumnDataSource({"tick": [], "peak": [], "what": []})
        meas = fig.line("tick", "peak", source=self.measured, color="#1f77b4", line_dash="dashdot", line_width=2.5)
        fig.add_tools(
            HoverTool(
                renderers=[total],
                mode="vline",
                tooltips=[
                    ("step", "@tick (@phase) @layer"),
                    ("total", "@total{0.00} GiB"),
                    ("tensors", "@live{0.00} GiB"),
                    ("workspace", "@workspace{0.00} GiB"),
                    ("free for workspace", "@free{0.00} GiB"),
                ],
            )
        )
        fig.add_tools(HoverTool(renderers=[rec], tooltips=[("recomputed", "@layer"), ("compute", "@ms{0.000} ms")]))
        fig.add_tools(HoverTool(renderers=[meas], tooltips=[("measured peak", "@peak{0.00} GiB"), ("run", "@what")]))
        self.items = {c: LegendItem(label=c.replace("_", " "), renderers=[r]) for c, r in zip(classes, areas)}
        extra = [
            LegendItem(label="total", renderers=[total]),
            LegendItem(label="capacity", renderers=[cap]),
            LegendItem(label="free for workspace", renderers=[free]),
            LegendItem(label="recomputed step", renderers=[rec]),
            LegendItem(label="measured peak", renderers=[meas], visible=False),
        ]
        self.extra = {i.label.value: i for i in extra}
        fig.add_layout(
            Legend(
                items=list(self.items.values()) + extra,
                label_text_font_size="8pt",
                spacing=0,
                glyph_height=12,
                label_height=12,
                padding=4,
                click_policy="hide",
            ),
            "right",
        )
        fig.xaxis.visible = False
        self.fig = _style(fig)
        lanes = figure(
            height=140,
            sizing_mode="stretch_width",
            x_range=self.x_range,
            y_range=["prefetch", "offload"],
            tools="xpan,xwheel_zoom,reset",
            title=None,
            x_axis_label="Step of one training iteration (forward, then backward)",
        )
        self.copies = ColumnDataSource(
            {k: [] for k in ("lane", "left", "right", "color", "storage", "bytes", "reason")}
        )
        bars = lanes.hbar(
            y="lane",
            left="left",
            right="right",
            height=0.6,
            source=self.copies,
            color="color",
            line_color="white",
            line_width=0.5,
        )
        lanes.add_tools(
            HoverTool(
                renderers=[bars],
                tooltips=[
                    ("copy", "@lane @storage"),
                    ("size", "@bytes"),
                    ("steps", "@left{0} to @right{0}"),
                    ("why", "@reason"),
                ],
            )
        )
        lanes.ygrid.grid_line_color = None
        lanes.yaxis.axis_label = "host copies"
        lanes.min_border_right = 150  # line up with the legend column above
        self.lanes = _style(lanes)

    def update(self, frames: dict, title: str) -> None:
        gib = float(1 << 30)
        mem, lines = frames["memory"], frames["lines"]
        wide = mem.pivot_table(index="tick", columns="cls", values="bytes", aggfunc="sum", observed=False)
        wide = wide.reindex(index=lines.tick.to_numpy(), columns=list(MEMORY_COLORS)).fillna(0.0) / gib
        ticks = lines.tick.to_numpy(dtype=float)
        self.stack.data = {"tick": ticks, **{c: wide[c].to_numpy() for c in MEMORY_COLORS}}
        for c, item in self.items.items():
            item.visible = bool(wide[c].any())
        cap = lines.capacity.to_numpy(dtype=float) / gib
        self.lines.data = {
            "tick": ticks,
            "total": lines.total.to_numpy(dtype=float) / gib,
            "live": lines.live.to_numpy(dtype=float) / gib,
            "workspace": lines.workspace.to_numpy(dtype=float) / gib,
            "free": lines.free_for_workspace.to_numpy(dtype=float) / gib,
            "capacity": cap,
            "layer": lines.layer.tolist(),
            "phase": lines.phase.tolist(),
        }
        bounded = bool(np.isfinite(cap).any())
        self.extra["capacity"].visible = self.extra["free for workspace"].visible = bounded
        rec = frames["recompute"]
        at = dict(zip(lines.tick, lines.total.to_numpy(dtype=float) / gib))
        self.recompute.data = {
            "tick": rec.tick.to_numpy(dtype=float),
            "y": [at.get(t, 0.0) for t in rec.tick],
            "layer": rec.layer.tolist(),
            "ms": rec.compute_ms.to_numpy(dtype=float),
        }
        self.extra["recomputed step"].visible = bool(len(rec))
        cp = frames["copies"]
        right = cp.deadline_tick.to_numpy(dtype=float)
        left = cp.issue_tick.to_numpy(dtype=float)
        right = np.where(np.isnan(right) | (right <= left), left + 1, right)
        self.copies.data = {
            "lane": cp.lane.tolist(),
            "left": left,
            "right": right,
            "color": [LANE_COLORS.get(x, "#999999") for x in cp.lane],
            "storage": cp.storage.astype(str).tolist(),
            "bytes": [format_size(b) for b in cp.bytes],
            "reason": cp.reason.astype(str).tolist(),
        }
        self.x_range.update(start=-0.5, end=float(ticks.max()) + 0.5 if len(ticks) else 1.0)
        self.fig.title.text = title

    def mark_measured(self, peak: float | None, what: str = "") -> None:
        """The measured peak (bytes) of a GPU run as a horizontal line across the step; None removes it."""
        if peak is None:
            self.measured.data = {"tick": [], "peak": [], "what": []}
        else:
            span = [self.x_range.start, self.x_range.end]
            self.measured.data = {"tick": span, "peak": [peak / float(1 << 30)] * 2, "what": [what] * 2}
        self.extra["measured peak"].visible = peak is not None
