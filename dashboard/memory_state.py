"""The memory tab's controls: memory policy, GPU capacity and the measured-runs file, over the page's
selection (its scope and profile). Imports no Panel; planned on demand (dashboard/memory.py caches)."""

from __future__ import annotations

import param

from engine.errors import EngineError
from engine.memory import MEMORY_POLICIES
from engine.units import GiB

from .memory import memory_frames
from .memory_runs import RESULTS_ENV, Measured, measured, results_path
from .selection import SelectionState


class MemoryState(param.Parameterized):
    selection = param.ClassSelector(class_=SelectionState, constant=True)
    memory_policy = param.Selector(
        default="superneurons",
        objects=list(MEMORY_POLICIES),
        label="Memory policy",
        doc="engine.memory policy (vDNN, Layrub, SuperNeurons, baselines)",
    )
    capacity = param.Integer(
        default=12 * GiB,
        bounds=(1, None),
        allow_None=True,
        doc="GPU memory capacity in bytes for the memory planner (None: unbounded); the "
        "default is the memory papers' 12 GB GPUs (K40, TITAN X)",
    )
    memory_results = param.String(
        default="",
        doc=f"The memory benchmark's results JSON (benchmarks/memory_training"
        f".py), whose measured runs the memory tab sets beside its prediction; default "
        f"${{{RESULTS_ENV}}}, else benchmarks/reports/memory_training.json",
    )

    def __init__(self, selection: SelectionState, environ=None, **params):
        if not params.get("memory_results"):
            params["memory_results"] = str(results_path(environ))
        super().__init__(selection=selection, **params)

    def frames(self) -> dict:
        """Frames of the memory timeline for the current network and memory controls (dashboard/memory.py);
        computed on demand (the memory tab), not on every budget change."""
        sel = self.selection
        if sel.scope is None:
            raise EngineError(sel.error or "choose a network first")
        profile = sel.analysis.profile if sel.analysis is not None else None
        return memory_frames(profile, sel.scope, self.memory_policy, self.capacity)

    def measured(self) -> Measured:
        """The memory benchmark's measured run for the memory tab's network, mini-batch, policy and capacity
        (dashboard/memory_runs.py); a bad results file is a one-line ``error``, never an exception."""
        scope = self.selection.scope
        if scope is None:
            return measured(self.memory_results, None, None, self.memory_policy, self.capacity)
        return measured(
            self.memory_results,
            scope.network,
            scope.batch,
            self.memory_policy,
            self.capacity,
            scope.precision,
            scope.layout,
        )
