"""Memory tab: the memory planner's timeline (vDNN, Layrub, SuperNeurons) for the chosen network, and where the
memory benchmark measured the same network, mini-batch and policy on a GPU, its measured peak and step time
beside the predictions (dashboard/memory_runs.py).

Planned on demand: only while the tab is shown, and again when the network, profile or the tab's own
controls change (a plan takes up to a second; the budget slider must stay fast).
"""

from __future__ import annotations

import html

import panel as pn

from engine.errors import BudgetError, EngineError
from engine.memory import MEMORY_POLICIES
from engine.units import GiB, format_size, parse_size

from ..errors import describe_error, literal
from ..memory_plot import MemoryPlot
from ..memory_runs import MEASURE, RESULTS_ENV, Measured
from .base import StateView
from .widgets import Choice

CAPACITIES = {
    "12 GiB (K40, TITAN X: the papers' GPUs)": 12 * GiB,
    "16 GiB (P100)": 16 * GiB,
    "32 GiB (V100)": 32 * GiB,
    "80 GiB (H100)": 80 * GiB,
    "unbounded": None,
}


class MemoryView(StateView):
    _watch = {"selection": ("analysis",), "memory_state": ("memory_policy", "capacity", "memory_results")}

    def _build(self) -> None:
        self.plot: MemoryPlot | None = None  # made, with its data, when the tab first shows a plan
        self.plots = pn.Column(sizing_mode="stretch_width")
        self.policy = Choice(
            label="Memory policy",
            options=self.state.memory_state.param.memory_policy.objects,
            value=self.state.memory_policy,
            width=220,
        )
        self.capacity = Choice(label="GPU capacity", options=CAPACITIES, value=self.state.capacity, width=260)
        self.exact = pn.widgets.TextInput(label="or exactly", placeholder="e.g. 24GiB", width=140)
        self.error = pn.pane.Alert("", alert_type="danger", visible=False, sizing_mode="stretch_width")
        self.listen(self.capacity, "value", self._pick_capacity)
        self.listen(self.exact, "value", self._exact)
        self.listen(self.policy, "value", self._pick_policy)
        self.text = self.caption("memory-caption")
        self.measured = self.caption("memory-measured")
        self.measured_error = pn.pane.Alert("", alert_type="warning", visible=False, sizing_mode="stretch_width")
        self.panel = pn.Column(
            pn.Row(self.policy, self.capacity, self.exact),
            self.error,
            self.plots,
            self.text,
            self.measured_error,
            self.measured,
            sizing_mode="stretch_width",
        )

    def _pick_policy(self, event) -> None:
        if event.new is not None and event.new != self.state.memory_policy:
            self.state.memory_policy = event.new

    def _pick_capacity(self, event) -> None:
        if event.new != self.state.capacity and event.new in self.capacity.options.values():
            self.state.capacity = event.new

    def _exact(self, event) -> None:
        """A typed capacity; an emptied box drops the error that quoted its text, and 0 is refused as the
        CLI's --capacity 0 is ("unbounded" is a choice of the list)."""
        if not event.new.strip():
            self.error.visible = False
            return
        try:
            capacity = parse_size(event.new)
            if not capacity:
                raise BudgetError(
                    f"capacity must be positive, got {event.new.strip()!r}: pick 'unbounded' for no limit"
                )
            self.state.capacity = capacity
        except BudgetError as err:
            self.error.param.update(object=literal(err), visible=True)
            return
        self.error.visible = False

    def _sync_capacity(self) -> None:
        """The dropdown shows the capacity the plan uses: a typed one joins the list as "typed: X"."""
        cap = self.state.capacity
        options = dict(CAPACITIES)
        if cap not in options.values():
            options[f"typed: {format_size(cap)}"] = cap
        if self.capacity.options != options or self.capacity.value != cap:
            self.capacity.param.update(options=options, value=cap)
        typed = self.exact.value.strip()
        if typed:
            try:
                same = parse_size(typed) == cap
            except BudgetError:
                same = False
            if not same:
                self.exact.value = ""

    def _refresh_hidden(self, *_events) -> None:
        """The tab's own controls follow the state; planning waits for the tab to open."""
        self._sync_capacity()
        if self.policy.value != self.state.memory_policy:
            self.policy.value = self.state.memory_policy

    def _refresh(self, *_events) -> None:
        self._refresh_hidden()
        if self.state.scope is None:
            return
        try:
            frames = self.state.memory()
        except (EngineError, ValueError, KeyError) as err:
            self.error.param.update(object=literal(f"Memory planner: {describe_error(err)}"), visible=True)
            self._stale = True  # planned again when the tab next opens
            return
        self.error.visible = False
        s = frames["summary"].iloc[0]
        cap = self.state.capacity
        title = (
            f"Memory timeline: {s['network']} B={s['batch']}, {s['policy']}, "
            f"capacity {format_size(cap) if cap else 'unbounded'}"
        )
        first = self.plot is None
        if first:  # figures enter the page with their data: an empty figure cannot set its ranges
            self.plot = MemoryPlot()
            self.plot.fig.css_classes = ["ucd-memory"]
        self.plot.update(frames, title)
        if first:
            self.plots[:] = [
                pn.pane.Bokeh(self.plot.fig, sizing_mode="stretch_width"),
                pn.pane.Bokeh(self.plot.lanes, sizing_mode="stretch_width"),
            ]
        fits = "fits" if s["fits"] else "does NOT fit"
        timing = (
            f"; iteration {s['iteration_ms']:.1f} ms (convolutions {s['conv_ms']:.1f} ms, stalls "
            f"{s['stall_ms']:.1f} ms)"
            if s["iteration_ms"] == s["iteration_ms"]
            else ""
        )
        moved = (
            f"; offloaded {format_size(s['offload_bytes'])}, prefetched {format_size(s['prefetch_bytes'])}, "
            f"{int(s['recompute_count'])} steps recomputed"
        )
        notes = " ".join(frames["notes"].note) if "notes" in frames and len(frames["notes"]) else ""
        times = s.get("time_note") or "no time modelled (no profile)"
        self.text.object = (
            f"Peak {format_size(s['peak'])} at {s['peak_layer']} ({s['peak_phase']}), {fits}"
            f"{timing}{moved}. Convolution workspaces and times come from the selected profile. "
            f"{notes}<br><b>Predicted times</b>: {html.escape(times)}"
        )
        self._show_measured(s)
        self._push(self.panel)

    def _show_measured(self, s) -> None:
        """The measured run for these controls beside the prediction, or why there is none."""
        m = self.state.memory_measured()
        self.measured_error.param.update(
            object=literal(f"Measured memory runs not shown: {m.error}"), visible=bool(m.error)
        )
        run = m.run if m.run is not None and not m.run.error else None
        self.plot.mark_measured(
            run.peak if run else None,
            f"{m.runs.provenance_line()}, {run.model} b{run.batch} {run.variant}" if run else "",
        )
        self.measured.object = "" if m.error else measured_html(m, s, self.state.memory_policy)


def _size(v) -> str:
    return "-" if v is None or v != v else format_size(v)


def _ms(v) -> str:
    return "-" if v is None or v != v else f"{v:.1f} ms"


def _count(v) -> str:
    return "-" if v is None or v != v else f"{v:g}"


def _cap(capacity) -> str:
    return f"under a {format_size(capacity)} cap" if capacity else "no memory cap"


def measured_html(m: Measured, s, policy: str) -> str:
    """HTML (every string from the file escaped) of the measured run beside the predictions, or a line saying
    that no run exists for this network, mini-batch and policy and which command makes one."""
    esc = html.escape
    where = f"{esc(str(s['network']))} b{int(s['batch'])} under {esc(policy)}"
    make = (
        f"<code>{MEASURE}</code> on a GPU host writes one (then <code>python benchmarks/memory_training.py "
        f"report</code>); <code>{RESULTS_ENV}=path</code> reads another results file"
    )
    if m.runs is None:
        return f"<b>Measured</b>: no measured run yet ({esc(m.path)} does not exist): {make}."
    prov = esc(m.runs.provenance_line())
    capacity = _capacity_html(m.runs, str(s["network"]))
    r = m.run
    if r is None:
        have = ", ".join(m.runs.scopes()) or "none"
        return (
            f"<b>Measured</b>: no measured run for {where} in {esc(m.path)} ({prov}; it holds "
            f"{esc(have)}, TF32 NCHW): {make}.{capacity}"
        )
    head = f"<b>Measured</b> on {prov}: {esc(r.model)} b{r.batch}, {esc(r.variant)}, {_cap(r.capacity)}" + (
        f", {r.steps} timed steps" if r.steps else ""
    )
    p = r.predicted
    if r.error:
        return (
            f"{head}: the run failed: {esc(r.error)} (the benchmark predicted a peak of "
            f"{_size(p.get('peak'))}).{capacity}"
        )
    spread = (
        f" ({r.step_ms_p10:.1f}-{r.step_ms_p90:.1f})" if r.step_ms_p10 is not None and r.step_ms_p90 is not None else ""
    )
    rows = [
        ("peak", _size(s["peak"]), _size(p.get("peak")), _size(r.peak)),
        ("step time", _ms(s["iteration_ms"]), _ms(p.get("iteration_ms")), _ms(r.step_ms) + spread),
        ("offloaded per step", _size(s["offload_bytes"]), _size(p.get("offload_bytes")), _size(r.offloaded_bytes)),
        (
            "recomputations per step",
            _count(s["recompute_count"]),
            _count(p.get("recompute_count")),
            _count(r.recomputed),
        ),
    ]
    cell = 'style="padding:1px 10px;text-align:right"'
    table = (
        "<table><tr><th></th>"
        + "".join(f"<th {cell}>{h}</th>" for h in ("predicted here", "predicted by the benchmark", "measured"))
        + "</tr>"
        + "".join(
            f"<tr><td>{name}</td>" + "".join(f"<td {cell}>{v}</td>" for v in vals) + "</tr>" for name, *vals in rows
        )
        + "</table>"
    )
    cap = s["capacity"]
    here = (
        f"this tab's plan ({esc(str(s['network']))}, tensors as {esc(str(s.get('convention', '?')))}, workspace "
        f"rule {esc(str(s.get('workspace_rule', '?')))}, capacity "
        f"{format_size(cap) if cap == cap and cap else 'unbounded'})"
    )
    bench = (
        f"torchvision:{esc(r.model)} imported, tensors as {esc(p.get('convention', '?'))}, workspace rule "
        f"{esc(p.get('workspace_rule', '?'))}, {_cap(r.capacity)}"
        + (f"; {esc(p['time_model'])}" if p.get("time_model") else "")
    )
    return (
        f"{head}.{table}Predicted here: {here}. Predicted by the benchmark: {bench}. Measured: "
        f"<code>torch.cuda.max_memory_allocated</code>, the median step (CUDA events, 10-90 % in brackets) and "
        f"the memory runtime's own counters.{capacity}"
    )


def _stock(policy: str) -> bool:
    """A policy PyTorch runs as stock (the registry says so): the benchmark's stock PyTorch case."""
    info = MEMORY_POLICIES.get(policy)
    return info is not None and info.pytorch == "stock"


def _capacity_html(runs, network: str) -> str:
    """The network's capacity searches: largest mini-batch found under each cap, against the prediction."""
    parts = []
    for gib, e in runs.capacity_runs(network):
        if "error" in e:
            parts.append(f"{gib} GiB: the prediction failed ({html.escape(e['error'])})")
            continue
        found = [
            f"{b} for {'stock PyTorch' if _stock(v) else html.escape(v)} (predicted {e['predicted'].get(v) or '-'})"
            for v, b in e["found"].items()
            if b
        ]
        if found:
            parts.append(f"under {gib} GiB the largest mini-batch found is " + ", ".join(found))
    return (" <b>Capacity runs</b>: " + "; ".join(parts) + ".") if parts else ""
