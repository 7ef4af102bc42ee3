"""What the controls fix before the budget (a scope: network, mini-batch, dtype, layout), and which
scopes and batch-size policies a profile can plan."""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache

from engine.precision import LAYOUTS, PRECISIONS
from engine.network import Network
from engine.policies import POLICIES, batch_sizes
from engine.profile import Profile
from engine.netnames import is_torch_name
from engine.errors import EngineError
from engine.zoo import DEFAULT_BATCH, NETWORKS, get_network


@lru_cache(maxsize=64)
def network(name: str, batch: int) -> Network:
    """A zoo network, built once per process (networks are read-only)."""
    return get_network(name, batch)


@dataclass(frozen=True)
class Scope:
    """What the controls fix before the budget: one network at one mini-batch, dtype and layout."""

    network: str
    batch: int
    precision: str
    layout: str


def profile_scopes(profile: Profile) -> list[Scope]:
    """Every (network, mini-batch, precision, layout) this profile can plan.

    Networks come from the profile's ``networks`` list (zoo names and PyTorch model names such as
    ``torchvision:resnet50``). Besides the profiled mini-batch, any smaller size measured for every kernel is
    offered too: measurements are per micro-batch size, so a profile taken at B=256 under powerOfTwo also
    covers B=128 (engine/kernels.py docstring).
    """
    out: list[Scope] = []
    for entry in profile.networks:
        name = entry.get("name")
        if name not in NETWORKS and not is_torch_name(name):
            continue
        prec, layout, batch = entry.get("precision", "tf32"), entry.get("layout", "NCHW"), int(entry.get("batch", 0))
        if batch < 1:
            continue
        try:
            keys = network(name, batch).unique_kernels(prec, layout)
        except EngineError:  # a model this process may not import (untrusted module:callable, no torch)
            continue
        if not keys or not all(profile.has(k) for k in keys):
            continue
        common = set.intersection(*(set(profile.sizes(k)) for k in keys))
        for b in sorted(s for s in common if 2 <= s <= batch):
            scope = Scope(name, b, prec, layout)
            if scope not in out:
                out.append(scope)
    return out


def zoo_scopes() -> list[Scope]:
    """Without any profile: every zoo network at a few mini-batch sizes, for profiling from scratch."""
    out = []
    for name in NETWORKS:
        for batch in sorted({32, 64, 128, 256, DEFAULT_BATCH[name]}):
            for precision in PRECISIONS:
                for layout in LAYOUTS:
                    out.append(Scope(name, batch, precision, layout))
    return out


def complete_policies(profile: Profile, scope: Scope) -> list[str]:
    """Policies whose every micro-batch size was measured for every kernel of the scope.

    A powerOfTwo profile cannot stand in for ``all``: that would silently plan with fewer sizes.
    """
    keys = network(scope.network, scope.batch).unique_kernels(scope.precision, scope.layout)
    ok = []
    for policy in POLICIES:
        need = set(batch_sizes(policy, scope.batch))
        if all(need <= set(profile.sizes(k)) for k in keys):
            ok.append(policy)
    return ok
