"""The memory tab's data: ``engine.memory`` (vDNN, Layrub, SuperNeurons) for one scope, as tidy frames,
cached per process (a plan takes up to a second; the tab is drawn on demand). Imports no Panel."""

from __future__ import annotations

import threading
from collections import OrderedDict

import pandas as pd

from engine.memory import memory_frames as engine_memory_frames
from engine.memory import plan_memory
from engine.profile import Profile

from .scopes import Scope, network

_CACHE: OrderedDict = OrderedDict()
_LOCK = threading.Lock()


def memory_frames(profile: Profile | None, scope: Scope, policy: str, capacity: int | None) -> dict[str, pd.DataFrame]:
    """``engine.memory.memory_frames`` of one training iteration (cached: 16 most recent per process).

    The profile gives convolution times and workspaces; the capacity bounds dynamic workspace, drives the
    LRU cache and decides whether the plan fits."""
    key = (id(profile), scope, policy, capacity)
    with _LOCK:
        if key in _CACHE:
            _CACHE.move_to_end(key)
            return _CACHE[key][1]
    result = plan_memory(network(scope.network, scope.batch), policy, capacity=capacity, profile=profile,
                         precision=scope.precision, layout=scope.layout)
    out = engine_memory_frames(result)
    out["notes"] = pd.DataFrame({"note": list(result.notes)})
    # which times are measured and which modelled, and the rules this prediction was made under
    out["summary"] = out["summary"].assign(time_note=result.time_note, convention=result.convention,
                                           workspace_rule=result.workspace_rule)
    with _LOCK:
        _CACHE[key] = (profile, out)  # keep the profile alive so its id stays unique
        while len(_CACHE) > 16:
            _CACHE.popitem(last=False)
    return out
