"""Plan table, JSON export (download) and load of a plan file (validated by engine.plan)."""

from __future__ import annotations

import io
import threading
from dataclasses import dataclass, field
from pathlib import Path

import panel as pn
import param

from engine.errors import EngineError
from engine.fileio import MAX_FILE_BYTES
from engine.plan import plan_from_bytes
from engine.units import MiB, format_size

from ..errors import describe_error, literal
from ..frames import plan_frame_columns
from .base import StateView
from .busy import SLOW

COLUMNS = {
    "kernel": "Kernel",
    "division": "Micro-batches",
    "engines": "Engines",
    "time_ms": "Time [ms]",
    "baseline_ms": "Undivided [ms]",
    "workspace_mib": "Workspace [MiB]",
    "plans": "Plans (pieces x size)",
}


CHUNK_BYTES = 4 * MiB  # one websocket message per chunk: well under Tornado's 20 MB default message limit


class PlanDropper(pn.widgets.FileDropper):
    """Panel's chunked upload: a file crosses the websocket in ``CHUNK_BYTES`` messages, so plain ``panel serve``
    takes files past Tornado's 20 MB message limit (one ``FileInput`` message that size drops the session).
    Bounded on the server as well as in the browser: a file past ``MAX_FILE_BYTES`` (what the engine reads)
    is dropped chunk by chunk as it arrives, whatever the client claims. A completed file is handed over once
    as ``file`` = (name, bytes), or (name, None) when it was too large, and not kept in ``value``.

    Chunks are kept by their number and joined in order once all have come, under a lock: with Panel's thread
    pool (``--num-threads``, which the app now turns off: dashboard/threads.py) chunk events ran at once and out
    of order, and FileDropper's own buffer raised KeyError (or would have joined them in arrival order)."""

    file = param.Parameter(default=None, doc="(name, bytes or None) of the last upload; set on every upload")
    _rename = {**pn.widgets.FileDropper._rename, "file": None}  # server-side only, no Bokeh property

    def __init__(self, **params):
        params.setdefault("chunk_size", CHUNK_BYTES)
        # the browser refuses a larger file up front; its uploader counts 1000-byte KB, so the limit is rounded up
        # (a file above MAX_FILE_BYTES still gets the server's alert), never down below a valid file
        params.setdefault("max_file_size", f"{-(-MAX_FILE_BYTES // 1000)}KB")
        super().__init__(multiple=False, previews=[], **params)
        self._uploads: dict[str, Upload] = {}  # name -> its chunks so far
        self._lock = threading.Lock()

    def _process_event(self, event) -> None:  # Panel's FileDropper hook (private in Panel 1.9)
        data = event.data
        if event.event_name != "upload_event":
            super()._process_event(event)  # the browser removed a file: nothing to do here
            return
        name, part, handed = data["name"], data["data"] or b"", None
        with self._lock:
            up = self._uploads.setdefault(name, Upload())
            up.seen += 1
            if not up.refused:
                up.chunks[data["chunk"]] = chunk = part.encode() if isinstance(part, str) else bytes(part)
                up.size += len(chunk)
                if up.size > MAX_FILE_BYTES:  # told at once; its other chunks are counted, not kept
                    up.refused, up.chunks, handed = True, {}, (name, None)
            if up.seen == data["total_chunks"]:
                del self._uploads[name]
                if not up.refused:
                    handed = (name, b"".join(up.chunks[i] for i in sorted(up.chunks)))
        if handed is not None:
            if self.file == handed:  # the same file again (a reload after changing the controls): param sends
                self.param.trigger("file")  # no event for an equal value
            else:
                self.param.update(file=handed)


@dataclass
class Upload:
    """One file's chunks while they arrive (PlanDropper)."""

    chunks: dict[int, bytes] = field(default_factory=dict)
    size: int = 0
    seen: int = 0
    refused: bool = False


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
        self.upload = PlanDropper(
            accepted_filetypes=[".json", ".gz", "application/json", "application/gzip"],
            label="Load a plan file (JSON)",
            sizing_mode="stretch_width",
            css_classes=[SLOW],  # a plan of another profile switches the page to it: seconds
        )
        self.listen(self.upload, "file", self._load)
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

    def _refresh_hidden(self, *_events) -> None:
        """The export button lives in the sidebar, shown whichever tab is open."""
        result = self.state.result
        self.download.disabled = result is None or not result.choice.feasible

    def _refresh(self, *_events) -> None:
        self._refresh_hidden()
        result = self.state.result
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
                f"{format_size(s.budget).replace(' ', '')}"
                + ("" if s.selection.engines == "all" else f"-{s.selection.engines}")
                + ".plan.json"
            )
        try:
            text = self.state.plan_json()
        except (EngineError, ValueError, KeyError) as err:
            self.show("danger", f"Export failed: {describe_error(err)}")
            self.download.filename = "plan-export-error.txt"
            return io.StringIO(f"export failed: {describe_error(err)}\n")
        self.show("success", f"Exported {self.download.filename}.")
        return io.StringIO(text)

    def _load(self, event) -> None:
        """Validate an uploaded plan in memory (bounded like any plan file), then show it; every failure is one
        line in the alert, since an exception escaping a widget callback reaches only the server log."""
        if event.new is None:
            return
        name, data = event.new
        name = Path(name or "plan.json").name
        if data is None:
            self.show(
                "danger", f"Cannot load {name}: larger than {MAX_FILE_BYTES // MiB} MiB, the most a plan file may be"
            )
            return
        if not data:
            self.show("danger", f"Cannot load {name}: the file is empty")
            return
        try:
            plan = plan_from_bytes(data, name)
        except (EngineError, ValueError, KeyError) as err:
            self.show("danger", f"Cannot load {name}: {describe_error(err)}")
            return
        try:
            text = self.state.apply_plan(plan)
        except Exception as err:  # noqa: BLE001 - the user must see why the plan cannot be shown
            self.show("warning", f"Cannot show {name} (the page is unchanged): {describe_error(err)}")
            return
        self.show("success", f"Loaded {name}: {text}")

    def show(self, level: str, text: str) -> None:
        self.alert.param.update(object=literal(text), alert_type=level, visible=True)
