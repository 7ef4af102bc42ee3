"""GPU actions: profile the chosen network, verify the current plan; one job per server, with cancel."""

from __future__ import annotations

import threading
import uuid

import panel as pn

from ..errors import describe_error, literal
from ..gpu import gpu_function, gpu_status
from ..jobs import JobRunner
from ..scopes import network
from .base import StateView

RUNNER_KEY = "ucudnn-explorer-gpu-runner"


def get_runner() -> JobRunner:
    """The process-wide runner: the GPU is per process, so jobs are too (keep ``--num-procs 1``)."""
    return pn.state.as_cached(RUNNER_KEY, JobRunner)


class GPUView(StateView):
    _watch = {"planning": ("result",), "selection": ("network", "batch", "precision", "layout")}

    def __init__(self, runner: JobRunner | None = None, gpu: tuple[bool, str] | None = None, **params):
        self.runner = runner or get_runner()
        self.available, self.reason = gpu if gpu is not None else gpu_status()
        self.token = uuid.uuid4().hex
        super().__init__(**params)
        watcher = self.runner.param.watch(self._from_runner, ["running", "progress", "message", "finished"])
        if self._doc is not None:  # the runner outlives the page: drop this page's watcher (panel#8580)
            pn.state.on_session_destroyed(lambda _ctx: self.runner.param.unwatch(watcher))
        self._on_runner()

    def _build(self) -> None:
        self.profile_btn = pn.widgets.Button(label="Profile on GPU", color="primary", sizing_mode="stretch_width")
        self.verify_btn = pn.widgets.Button(label="Verify plan on GPU", color="primary", sizing_mode="stretch_width")
        self.cancel_btn = pn.widgets.Button(label="Cancel", color="warning", sizing_mode="stretch_width")
        self.progress = pn.indicators.Progress(value=0, max=100, sizing_mode="stretch_width", visible=False)
        self.status = pn.pane.Markdown("", styles={"font-size": "0.85em"}, margin=(0, 10))
        self.profile_btn.on_click(lambda _e: self.locked(self._held, self.start_profile))
        self.verify_btn.on_click(lambda _e: self.locked(self._held, self.start_verify))
        self.cancel_btn.on_click(lambda _e: self.runner.cancel())
        self.panel = pn.Column(
            pn.pane.Markdown("**GPU**", margin=(5, 10, 0, 10)),
            pn.Row(self.profile_btn, self.verify_btn, sizing_mode="stretch_width"),
            self.progress,
            pn.Row(self.cancel_btn, sizing_mode="stretch_width"),
            self.status,
            sizing_mode="stretch_width",
        )

    def _refresh(self, *_events) -> None:
        self._on_runner()

    # --- starting jobs ---------------------------------------------------------------------------
    def start_profile(self) -> bool:
        s = self.state
        if not self.available or s.scope is None:
            return False
        net = network(s.network, int(s.batch))
        policy, precision, layout = s.policy, s.precision, s.layout
        profile_network = gpu_function("profile_network")

        def work(progress, should_stop):
            return profile_network(
                net,
                policy=policy,
                precision=precision,
                layout=layout,
                progress=progress,
                should_stop=should_stop,
                command="dashboard: Profile on GPU",
            )

        return self.runner.start("profile", work, owner=self.token)

    def start_verify(self) -> bool:
        s = self.state
        if not self.available or s.result is None or not s.result.choice.feasible:
            return False
        plan = s.make_plan()
        key = (s.scope, s.policy, s.mode, s.budget)
        verify_plan = gpu_function("verify_plan")

        def work(progress, should_stop):
            return key, verify_plan(plan, progress=progress, should_stop=should_stop)

        return self.runner.start("verify", work, owner=self.token)

    # --- runner -> page ---------------------------------------------------------------------------
    def _from_runner(self, *events) -> None:
        """Runner events arrive on the worker thread, or in another page's callback; the page may only change
        on its own loop, in its own callback."""
        if self._doc is not None and (threading.get_ident() != self._thread or pn.state.curdoc is not self._doc):
            self._doc.add_next_tick_callback(lambda: self.locked(self._held, self._on_runner, *events))
        else:
            self._held(self._on_runner, *events)

    def _on_runner(self, *events) -> None:
        r, s = self.runner, self.state
        mine = r.owner == self.token
        busy = r.running
        can_verify = s.result is not None and s.result.choice.feasible
        self.profile_btn.disabled = not self.available or busy or s.scope is None
        self.verify_btn.disabled = not self.available or busy or not can_verify
        self.cancel_btn.visible = busy and mine
        self.progress.visible = busy or r.status in ("done", "failed", "cancelled") and mine
        self.progress.value = r.progress
        if not self.available:
            self.profile_btn.description = self.verify_btn.description = f"No GPU: {self.reason}"
            self.status.object = literal(f"GPU actions are disabled: {self.reason}")
        elif busy and not mine:
            self.status.object = f"Busy: another page is running a {r.kind} job ({r.progress}%). One GPU job at a time."
        elif r.status != "idle" and mine:
            self.status.object = literal(r.message)
        else:
            self.status.object = literal(f"GPU ready: {self.reason}" if self.reason else "GPU ready.")
        if any(e.name == "finished" for e in events) and mine and r.status == "done":
            self._collect(r.kind, r.result)

    def _collect(self, kind: str, result) -> None:
        """Copy a finished job's result into this page; a bad result is reported, never raised in the thread."""
        try:
            self._apply(kind, result)
        except Exception as err:
            self.status.object = literal(f"{kind} finished, but its result cannot be shown: {describe_error(err)}")

    def _apply(self, kind: str, result) -> None:
        s = self.state
        if kind == "profile":
            gpu = result.provenance.get("gpu", "GPU")
            s.add_profile(f"live: {gpu} {result.provenance.get('date', '')}".strip(), result)
        elif kind == "verify":
            key, report = result
            if key == (s.scope, s.policy, s.mode, s.budget):  # still the plan that was verified
                s.set_verification(report)
