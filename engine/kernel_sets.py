"""Each kernel of a network with its desirable set under a batch-size policy, read from a profile.

Desirable sets do not depend on the budget, so they are computed once per (profile, kernel signature,
mini-batch, micro-batch sizes) and kept as long as the profile lives: every plan, front and dashboard
view of that profile reads the same lists. Also the profile queries that decide what to plan: which
precision and layout a network was profiled at, and its recorded mini-batch.
"""

from __future__ import annotations

import bisect
import weakref
from pathlib import Path

from .configuration import Configuration
from .errors import EngineError, InfeasibleBudgetError
from .network import Kernel, Network
from .optimize.desirable import desirable_set
from .policies import batch_sizes, policy_name
from .precision import check_layout, get_precision
from .profile import Profile

KernelSets = list[tuple[Kernel, list[Configuration]]]

# per profile: {(signature key, batch, sizes): desirable set}; weak so a dropped profile frees its sets
_SETS: "weakref.WeakKeyDictionary[Profile, dict]" = weakref.WeakKeyDictionary()


def profile_label(profile: Profile) -> str:
    """How messages name a profile: its file name, or that it lives only in memory."""
    return repr(Path(profile.source).name) if profile.source else "(in-memory profile)"


def network_variant(
    profile: Profile, network: str, precision: str | None = None, layout: str | None = None
) -> tuple[str, str]:
    """The (precision, layout) to plan ``network`` at: the given ones, else the profile's record of it."""
    if precision is not None:
        get_precision(precision)
    if layout is not None:
        check_layout(layout)
    recorded = {(n.get("precision"), n.get("layout")) for n in profile.networks if n.get("name") == network}
    if not recorded:  # no record of this network: whatever variants the profile's signatures hold
        recorded = {tuple(key.split("/")[1:3]) for key in profile.signatures()}
    options = sorted(
        v for v in recorded if (precision is None or v[0] == precision) and (layout is None or v[1] == layout)
    )
    if precision is not None and layout is not None:
        return precision, layout
    if len(options) == 1:
        return options[0]
    if not options:
        raise EngineError(
            f"profile {profile_label(profile)} holds no {precision or '*'}/{layout or '*'} "
            f"measurements for {network}; it has "
            f"{', '.join('/'.join(v) for v in sorted(recorded)) or 'none'}"
        )
    raise EngineError(
        f"profile {profile_label(profile)} records {network} at "
        f"{', '.join('/'.join(v) for v in options)}; choose one with --precision and --layout"
    )


def default_batch(profile: Profile, network: str) -> int | None:
    """The mini-batch size the profile was made for, when it records exactly one for ``network``."""
    sizes = {n.get("batch") for n in profile.networks if n.get("name") == network}
    return sizes.pop() if len(sizes) == 1 else None


def kernel_set(profile: Profile, kernel: Kernel, sizes: list[int], batch: int) -> list[Configuration]:
    """The desirable set of one kernel from the micro-batch ``sizes`` (cached); EngineError when the profile
    lacks the kernel or its sizes cannot make ``batch``."""
    key = kernel.signature.key
    cache = _SETS.setdefault(profile, {})
    ck = (key, batch, tuple(sizes))
    if ck not in cache:
        if not profile.has(key):
            recorded = (
                ", ".join(
                    f"{n.get('name')} b{n.get('batch')} {n.get('precision')}/{n.get('layout')}"
                    for n in profile.networks
                )
                or "no networks"
            )
            raise EngineError(
                f"profile {profile_label(profile)} has no measurements for kernel {kernel.id} "
                f"(signature {key}); it records {recorded}: profile this network first"
            )
        try:
            sets = desirable_set(profile.candidates(key, sizes), batch)
        except InfeasibleBudgetError:  # the measured sizes cannot partition the mini-batch
            sets = []
        if not sets:
            raise EngineError(
                f"profile {profile_label(profile)} cannot make mini-batch {batch} for kernel "
                f"{kernel.id} from micro-batch sizes {sizes}: it measured only "
                f"{profile.sizes(key)}"
            )
        cache[ck] = sets
    return cache[ck]


def fastest_within(confs: list[Configuration], limit: float) -> Configuration | None:
    """The last (fastest) element of a desirable set whose workspace fits ``limit``; None when none does.
    This is WR's answer at that limit (engine/optimize/desirable.py), of exact time ties the one needing
    least workspace: the one per-kernel WR rule of make_plan and of the memory planner's ``wr`` workspace."""
    i = bisect.bisect_right([c.workspace for c in confs], limit) - 1
    return confs[i] if i >= 0 else None


def kernel_sets(
    profile: Profile, network: Network, policy, precision: str | None = None, layout: str | None = None
) -> KernelSets:
    """Each kernel of ``network`` (execution order) with its desirable set under ``policy``
    (mu-cuDNN §III-C1): ascending workspace, strictly decreasing time."""
    precision, layout = network_variant(profile, network.name, precision, layout)
    profile.require_kernels(network, precision, layout, policy_name(policy))
    sizes = batch_sizes(policy, network.batch)
    return [(k, kernel_set(profile, k, sizes, network.batch)) for k in network.kernels(precision, layout)]
