"""The memory tab's data: ``engine.memory`` (vDNN, Layrub, SuperNeurons) for one scope, as tidy frames,
cached per process (a plan takes up to a second; the tab is drawn on demand). Imports no Panel."""

from __future__ import annotations

import pandas as pd

from engine.memory import memory_frames as engine_memory_frames
from engine.memory import plan_memory
from engine.profile import Profile

from .cache import LRU
from .scopes import Scope, network

MEMORY_FRAMES = LRU(16)


def memory_frames(profile: Profile | None, scope: Scope, policy: str, capacity: int | None) -> dict[str, pd.DataFrame]:
    """``engine.memory.memory_frames`` of one training iteration (cached: 16 most recent per process).

    The profile gives convolution times and workspaces; the capacity bounds dynamic workspace, drives the
    LRU cache and decides whether the plan fits."""
    return MEMORY_FRAMES.get(
        (profile, scope, policy, capacity), lambda: _memory_frames(profile, scope, policy, capacity)
    )


def _memory_frames(profile: Profile | None, scope: Scope, policy: str, capacity: int | None) -> dict[str, pd.DataFrame]:
    result = plan_memory(
        network(scope.network, scope.batch),
        policy,
        capacity=capacity,
        profile=profile,
        precision=scope.precision,
        layout=scope.layout,
    )
    out = engine_memory_frames(result)
    out["notes"] = pd.DataFrame({"note": list(result.notes)})
    # which times are measured and which modelled, and the rules this prediction was made under
    out["summary"] = out["summary"].assign(
        time_note=result.time_note, convention=result.convention, workspace_rule=result.workspace_rule
    )
    return out
