"""Micro-configurations and configurations: the plain data profiles, optimizers and plans share
(mu-cuDNN's vocabulary). It sits beside the profile, not in the optimizer package, so that reading a
profile or a plan never imports the optimizers (and their ILP solver).

* micro-configuration: one cuDNN execution plan run on a micro-batch of ``batch`` samples;
* configuration: micro-configurations whose sizes sum to the mini-batch B. They run one after
  another and share one workspace, so time = sum of times and workspace = max of workspaces.

A micro-configuration names its cuDNN execution plan (``parse_plan_name`` reads the name), which is
what profiles, plans and the GPU runtime rebuild it from.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cached_property
from typing import NamedTuple

_PLAN_NAME = re.compile(r"^eng(\d+)((?:_k\d+=-?\d+)*)$")  # cuDNN plan names, as engine.gpu.graphs writes them


def parse_plan_name(name: str) -> tuple[int, dict[str, int]] | None:
    """``eng38_k2=0_k13=2`` -> (38, {"2": 0, "13": 2}): the engine id and knobs a cuDNN plan name spells;
    None for a name not of that form."""
    m = _PLAN_NAME.match(name)
    if not m:
        return None
    return int(m.group(1)), {k: int(v) for k, v in (p.split("=") for p in m.group(2).split("_k")[1:])}


class MicroConfig(NamedTuple):
    batch: int  # micro-batch size b
    plan: str  # plan identity (cuDNN engine/knob name); unique per profiled plan
    time_ms: float  # measured median time of this plan at size b
    workspace: int  # bytes


@dataclass(frozen=True)
class Configuration:
    micro: tuple[MicroConfig, ...]  # in execution order; canonical order is descending batch, then plan

    # computed once: the optimizers and the ILP read them for every configuration of every kernel
    @cached_property
    def time_ms(self) -> float:
        return sum(m.time_ms for m in self.micro)

    @cached_property
    def workspace(self) -> int:
        return max((m.workspace for m in self.micro), default=0)

    @property
    def batch(self) -> int:
        return sum(m.batch for m in self.micro)

    @property
    def division(self) -> str:
        """Human-readable micro-batch division, e.g. ``2x128`` or ``96+96+64``."""
        sizes = [m.batch for m in self.micro]
        if len(set(sizes)) == 1:
            return f"{len(sizes)}x{sizes[0]}"
        return "+".join(str(s) for s in sizes)
