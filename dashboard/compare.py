"""The same scope on another GPU: which profiles can stand beside this one, and their fronts side by side.

Plans are per GPU model, so comparing GPUs means planning the same network, mini-batch, dtype and layout
from each GPU's own profile. Bundled profiles are named ``<gpu>-<network>-b<batch>-<dtype>-<layout>-<policy>``,
so the candidates are found by name without loading every profile; the choice is then checked on the
profiles themselves (another GPU, the scope covered). Imports no Panel.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import pandas as pd

from engine.errors import EngineError

from .analysis import Analysis


def other_gpus(name: str, names: list[str]) -> list[str]:
    """Profiles named like ``name`` but for another GPU: ``h200-alexnet-b256-...`` beside ``h100-alexnet-b256-...``."""
    gpu, _, rest = name.partition("-")
    return [n for n in names if rest and n != name and n.partition("-")[2] == rest and n.partition("-")[0] != gpu]


def compare_options(name: str, names: list[str]) -> dict[str, str]:
    """The "Compare with" choices for profile ``name``: none, or a profile of the same setting on another GPU."""
    return {"(none)": "", **{n: n for n in other_gpus(name, names)}}


@dataclass(frozen=True)
class Comparison:
    """Both GPUs' WD fronts for one policy, their unlimited optima and their WD times at one total budget."""

    gpu: str  # the other profile's GPU
    here_gpu: str
    front: pd.DataFrame  # the other GPU's front: workspace, workspace_mib, time_ms
    optimum_ms: float
    here_optimum_ms: float
    at_budget_ms: float  # nan where no configuration of the other GPU fits the budget
    here_at_budget_ms: float
    budget: int


def _at(front: pd.DataFrame, total: int) -> float:
    fits = front[front.workspace <= total]
    return float(fits.time_ms.min()) if len(fits) else math.nan


def compare(here: Analysis, there: Analysis, policy: str, total: int) -> Comparison:
    """The other GPU's front for ``policy`` beside this one's; raises EngineError naming what differs."""
    gpus = [a.profile.provenance.get("gpu", "?") for a in (here, there)]
    if gpus[0] == gpus[1]:
        raise EngineError(f"both profiles were measured on {gpus[0]}: choose a profile of another GPU")
    fronts = [a.fronts[a.fronts.policy == policy] for a in (here, there)]
    if not len(fronts[1]):
        raise EngineError(f"the {gpus[1]} profile cannot plan policy {policy}")
    return Comparison(
        gpu=gpus[1],
        here_gpu=gpus[0],
        front=fronts[1].reset_index(drop=True),
        optimum_ms=float(fronts[1].time_ms.min()),
        here_optimum_ms=float(fronts[0].time_ms.min()),
        at_budget_ms=_at(fronts[1], total),
        here_at_budget_ms=_at(fronts[0], total),
        budget=total,
    )
