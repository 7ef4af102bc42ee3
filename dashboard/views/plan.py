"""Plan table, JSON export (download) and load of a plan file (validated by engine.plan)."""

from __future__ import annotations

import io
from pathlib import Path

import panel as pn

from engine.errors import EngineError
from engine.plan import plan_from_bytes
from engine.units import format_size

from ..errors import describe_error
from ..frames import plan_frame_columns
from .base import StateView

COLUMNS = {
    "kernel": "Kernel",
    "division": "Micro-batches",
    "engines": "Engines",
    "time_ms": "Time [ms]",
    "baseline_ms": "Undivided [ms]",
    "workspace_mib": "Workspace [MiB]",
    "plans": "Plans (pieces x size)",
}


class PlanView(StateView):
    def _build(self) -> None:
        self.table = pn.widgets.Tabulator(
            plan_frame_columns(),
            disabled=True,
            selectable=1,
            show_index=False,
            height=420,
            sizing_mode="stretch_width",
            titles=COLUMNS,
            hidden_columns=["layer", "kind"],
            formatters={
                "time_ms": {"type": "money", "precision": 3, "symbol": ""},
                "baseline_ms": {"type": "money", "precision": 3, "symbol": ""},
                "workspace_mib": {"type": "money", "precision": 2, "symbol": ""},
            },
            header_tooltips={"baseline_ms": "undivided policy at the same budget and mode"},
            layout="fit_data",
        )
        self.listen(self.table, "selection", self._selected)
        self.download = pn.widgets.FileDownload(
            callback=self._export,
            filename="plan.json",
            label="Export plan (JSON)",
            color="primary",
            embed=False,
            auto=True,
            sizing_mode="stretch_width",
        )
        self.upload = pn.widgets.FileInput(
            accept=".json,.gz", multiple=False, label="Load a plan file (JSON)", sizing_mode="stretch_width"
        )
        self.listen(self.upload, ["value", "filename"], self._load)
        self.alert = pn.pane.Alert("", alert_type="info", visible=False, sizing_mode="stretch_width")
        self._syncing = False
        # export/load stay in reach (the sidebar); the table goes where there is room (a tab)
        self.files = pn.Column(
            pn.pane.Markdown("**Plan file**", margin=(5, 10, 0, 10)),
            self.download,
            self.upload,
            self.alert,
            sizing_mode="stretch_width",
        )
        self.panel = pn.Column(self.table, sizing_mode="stretch_width")

    def _refresh(self, *_events) -> None:
        result = self.state.result
        feasible = result is not None and result.choice.feasible
        self.download.disabled = not feasible
        if result is None:
            return
        frame = result.plan
        self._syncing = True
        try:
            self.table.value = frame
            rows = frame.index[frame.kernel == result.kernel].tolist()[:1]
            if list(self.table.selection) != rows:
                self.table.selection = rows
        finally:
            self._syncing = False

    def _selected(self, event) -> None:
        if self._syncing or not event.new:
            return
        frame = self.table.value
        self.state.kernel = str(frame.kernel.iloc[event.new[0]])

    def _export(self):
        """FileDownload callback: the engine's plan for the current controls, as JSON."""
        s, sc = self.state, self.state.scope
        if sc is not None:  # named here, not per budget change: a filename change costs a browser re-layout
            self.download.filename = (
                f"{sc.network}-b{sc.batch}-{sc.precision}-{sc.layout}-{s.mode}-{s.policy}-"
                f"{format_size(s.budget).replace(' ', '')}.plan.json"
            )
        try:
            text = self.state.plan_json()
        except (EngineError, ValueError, KeyError) as err:
            self.show("danger", f"Export failed: {describe_error(err)}")
            self.download.filename = "plan-export-error.txt"
            return io.StringIO(f"export failed: {describe_error(err)}\n")
        self.show("success", f"Exported {self.download.filename}.")
        return io.StringIO(text)

    def _load(self, *events) -> None:
        """Validate an uploaded plan in memory (bounded like any plan file), then show it; every failure is one
        line in the alert, since an exception escaping a widget callback reaches only the server log. An empty
        file may arrive as a new file name with no content (the browser sends nothing to decode)."""
        data, name = self.upload.value, self.upload.filename
        if not any(e.name == "value" and e.new is not None for e in events) and not (
            any(e.name == "filename" for e in events) and name
        ):
            return  # cleared
        name = Path(name or "plan.json").name
        if not data:
            self.show("danger", f"Cannot load {name}: the file is empty")
            return
        try:
            plan = plan_from_bytes(bytes(data), name)
        except (EngineError, ValueError, KeyError) as err:
            self.show("danger", f"Cannot load {name}: {describe_error(err)}")
            return
        try:
            text = self.state.apply_plan(plan)
        except Exception as err:  # noqa: BLE001 - the user must see why the plan cannot be shown
            self.show("warning", f"Loaded {name}, but cannot show it with this profile: {describe_error(err)}")
            return
        self.show("success", f"Loaded {name}: {text}")

    def show(self, level: str, text: str) -> None:
        self.alert.param.update(object=text, alert_type=level, visible=True)
