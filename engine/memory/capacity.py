"""Capacity questions: what fits a GPU of capacity C under each policy (the papers' tables).

* ``max_batch``: the largest mini-batch (SuperNeurons Table 5, Layrub Table 7).
* ``deepest``: the deepest ResNet-N / VGG-N (SuperNeurons Table 4, Layrub Table 6, vDNN Fig. 15).
* ``smallest_capacity``: per policy, the least capacity that trains one network.

All searches assume memory grows with batch and depth (true of every policy here) and bisect.
Without a profile, convolution workspace is taken as 0 (memory-optimal algorithms), so the
answers are the most a policy could reach. Plans that fill the capacity are made for (1 - reserve) of it
(reserve.py): ``plan_memory``'s rule, which every search here goes through.
"""

from __future__ import annotations

from collections.abc import Callable

from ..errors import EngineError
from ..network import Network
from ..profile import Profile
from ..policies import MAX_BATCH
from ..units import format_size
from ..zoo import MAX_DEPTH
from .iteration import plan_memory
from .policies import MEMORY_POLICIES

MAX_CAPACITY = 1 << 50  # 1 PiB: thousands of today's GPUs; beyond it a capacity is a typo (or units)


def check_capacity(capacity: int) -> int:
    """A capacity the searches can answer in seconds: positive and at most MAX_CAPACITY."""
    if isinstance(capacity, bool) or not isinstance(capacity, int) or not 0 < capacity <= MAX_CAPACITY:
        shown = (
            format_size(capacity)
            if isinstance(capacity, (int, float)) and not isinstance(capacity, bool)
            else repr(capacity)
        )
        raise EngineError(
            f"capacity {shown} is not a GPU memory size: give a positive size up to "
            f"{format_size(MAX_CAPACITY)}, e.g. 12GiB"
        )
    return capacity


def fits(
    network: str | Network | Callable[[], Network],
    policy: str,
    capacity: int,
    batch: int | None = None,
    profile: Profile | None = None,
    **options,
) -> bool:
    net = network() if callable(network) else network
    return plan_memory(net, policy, batch=batch, capacity=capacity, profile=profile, **options).fits


def _bisect(ok: Callable[[int], bool], lo: int, limit: int) -> int:
    """Largest k in [lo, limit] with ok(k), given ok is monotone decreasing; lo - 1 if none."""
    if not ok(lo):
        return lo - 1
    hi = lo
    while hi < limit:
        nxt = min(limit, hi * 2)
        if not ok(nxt):
            break
        hi = nxt
    else:
        return hi
    good, bad = hi, nxt
    while bad - good > 1:
        mid = (good + bad) // 2
        if ok(mid):
            good = mid
        else:
            bad = mid
    return good


def max_batch(
    network: str, policy: str, capacity: int, profile: Profile | None = None, limit: int = 1 << 16, **options
) -> int:
    """Largest mini-batch of ``network`` that fits ``capacity`` under ``policy`` (0: not even 1)."""
    from ..zoo import get_network

    check_capacity(capacity)
    limit = min(limit, MAX_BATCH)
    return max(
        0,
        _bisect(
            lambda b: fits(get_network(network, b, trusted=True), policy, capacity, profile=profile, **options),
            1,
            limit,
        ),
    )


def _family(family: str) -> tuple[Callable[[int], int], Callable[[int, int], Network]]:
    """(index -> depth, (depth, batch) -> network) for a depth family."""
    from .. import zoo

    if family == "resnet":  # bottleneck ResNets: 3 * blocks + 2 layers (zoo.resnet_stages)
        return (lambda k: 50 + 3 * k), (lambda d, b: zoo.get_network(f"resnet-{d}", b))
    if family == "resnet-sn":  # SuperNeurons Table 4: n1 = 6, n2 = 32, n4 = 6, n3 grows
        return (lambda k: 3 * (44 + k + 1) + 2), (lambda d, b: zoo.resnet(d, b, stages=(6, 32, (d - 2) // 3 - 44, 6)))
    if family == "vgg":  # vDNN Fig. 15: +20 convs per group per +100 layers
        return (lambda k: 16 + 100 * k), (lambda d, b: zoo.get_network(f"vgg-{d}", b))
    raise EngineError(f"unknown depth family {family!r}; expected resnet, resnet-sn or vgg")


def deepest(
    family: str, policy: str, capacity: int, batch: int, profile: Profile | None = None, limit: int = 4096, **options
) -> int:
    """Deepest network of ``family`` (resnet, resnet-sn, vgg) that fits; 0 if the shallowest does not.
    The search stops at the zoo's deepest generated network (``zoo.MAX_DEPTH``)."""
    check_capacity(capacity)
    depth, build = _family(family)
    limit = max(1, _bisect(lambda k: depth(k) <= MAX_DEPTH, 1, limit))
    k = _bisect(lambda k: fits(build(depth(k), batch), policy, capacity, profile=profile, **options), 1, limit)
    if k >= 1:
        return depth(k)
    return depth(0) if fits(build(depth(0), batch), policy, capacity, profile=profile, **options) else 0


def deepest_limit(family: str, limit: int = 4096) -> int:
    """The deepest network of ``family`` that ``deepest`` tries: an answer equal to it may be short of the truth."""
    depth, _ = _family(family)
    return depth(max(1, _bisect(lambda k: depth(k) <= MAX_DEPTH, 1, limit)))


def smallest_capacity(
    network: str | Network, batch: int | None = None, policies=None, profile: Profile | None = None
) -> dict[str, float]:
    """The least capacity each policy needs for one iteration (its peak with the smallest workspace
    its rule allows; for the LRU cache, with everything evictable evicted)."""
    out = {}
    for name in policies or MEMORY_POLICIES:
        cap = (1 << 62) if MEMORY_POLICIES[name].takes_capacity else None  # its floor is computed under one
        res = plan_memory(network, name, batch=batch, capacity=cap, profile=profile)
        out[name] = res.summary["min_capacity"]
    return out
