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
        try:
            covered, _ = _covered(profile, name, entry)
        except EngineError:  # a model this process may not import (untrusted module:callable, no torch)
            continue
        out.extend(s for s in covered if s not in out)
    return out


def _covered(profile: Profile, name: str, entry: dict) -> tuple[list[Scope], tuple[int, int]]:
    """The scopes of ``name`` at one profiled configuration of ``entry`` (batch, precision, layout) whose
    every kernel the profile measured, and (kernels measured, kernels) at the profiled batch."""
    prec, layout, batch = entry.get("precision", "tf32"), entry.get("layout", "NCHW"), int(entry.get("batch", 0))
    if batch < 1:
        return [], (0, 0)
    keys = network(name, batch).unique_kernels(prec, layout)
    have = sum(profile.has(k) for k in keys)
    if not keys or have < len(keys):
        return [], (have, len(keys))
    common = set.intersection(*(set(profile.sizes(k)) for k in keys))
    return [Scope(name, b, prec, layout) for b in sorted(s for s in common if 2 <= s <= batch)], (have, len(keys))


def model_scopes(profile: Profile, name: str) -> tuple[list[Scope], str]:
    """(scopes, note) of a model the profile does not list: planned wherever the profile measured every
    one of its kernels (``torchvision:resnet101`` from a ResNet-50 profile), else a note of what to profile."""
    entries = [e for e in profile.networks if int(e.get("batch", 0)) >= 1] or [{}]
    out, counts = [], []
    for entry in entries:
        covered, count = _covered(profile, name, entry)
        out.extend(s for s in covered if s not in out)
        counts.append((count, entry))
    if out:
        return out, ""
    (have, total), entry = max(counts, key=lambda c: c[0][0] / max(c[0][1], 1))
    batch = int(entry.get("batch", 0)) or 32
    prec, layout = entry.get("precision", "tf32"), entry.get("layout", "NCHW")
    return [], (
        f"this profile measured {have} of the {total} kernels of {name} at b{batch} {prec} {layout}: profile it "
        f"on a GPU host (Profile button, or python -m engine profile --network {name} --batch {batch} "
        f"--dtype {prec} --layout {layout} --policy powerOfTwo) and open that profile"
    )


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
