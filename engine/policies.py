"""Batch-size policies (mu-cuDNN §III-D): which micro-batch sizes are profiled and offered to the DP."""

from __future__ import annotations

from collections.abc import Sequence

from .errors import PolicyError
from .fileio import short

POLICIES = ("undivided", "powerOfTwo", "all")
MAX_BATCH = 1 << 20  # mini-batch sizes beyond this are a mistake, and would make ``all`` list a million sizes


def batch_sizes(policy: str | Sequence[int], batch: int) -> list[int]:
    """Micro-batch sizes, ascending, for a policy name or an explicit list.

    ``undivided``: B only (plain cuDNN within the limit, the baseline); ``powerOfTwo``: 1, 2, 4, ... <= B,
    plus B; ``all``: 1..B; a list: its sizes <= B (B is always added so the undivided option exists).
    """
    _check_batch(batch)
    if isinstance(policy, str):
        if policy == "undivided":
            return [batch]
        if policy == "powerOfTwo":
            sizes = {1 << i for i in range(batch.bit_length()) if 1 << i <= batch}
            return sorted(sizes | {batch})
        if policy == "all":
            return list(range(1, batch + 1))
        if "," in policy or policy.strip().isdigit():
            return batch_sizes(parse_size_list(policy), batch)
        raise PolicyError(
            f"unknown batch-size policy {policy!r}; expected one of {', '.join(POLICIES)} "
            f"or a comma-separated list of sizes"
        )
    _check_kind(policy)
    return sorted({s for s in policy if s <= batch} | {batch})


def offers(policy: str, batch: int, size: int) -> bool:
    """Whether ``policy`` offers micro-batch ``size`` at mini-batch ``batch``, without listing its sizes."""
    _check_batch(batch)
    if policy in ("undivided", "powerOfTwo", "all"):
        if size == batch:
            return True
        return size >= 1 and size < batch and (policy == "all" or (policy == "powerOfTwo" and size & (size - 1) == 0))
    return size in batch_sizes(policy, batch)


def _check_batch(batch: int) -> None:
    if isinstance(batch, bool) or not isinstance(batch, int) or batch < 1:
        raise PolicyError(f"mini-batch size must be >= 1, got {batch!r}")
    if batch > MAX_BATCH:
        raise PolicyError(f"mini-batch size {batch} is above {MAX_BATCH}, the largest this engine plans")


def parse_size_list(text: str) -> list[int]:
    try:
        return [int(t) for t in text.split(",")]  # an empty item (1,,2) is refused: a size typed wrong
    except ValueError:
        raise PolicyError(f"invalid micro-batch size list {short(text)}; expected e.g. 1,2,4,8,256") from None


def _check_kind(policy) -> None:
    """A policy name, or a list of positive integer sizes (checked here, before anything sorts them)."""
    if not isinstance(policy, str | Sequence):
        raise PolicyError(
            f"a batch-size policy is one of {', '.join(POLICIES)} or a list of sizes, got {type(policy).__name__}"
        )
    if not isinstance(policy, str):
        for s in policy:
            if isinstance(s, bool) or not isinstance(s, int) or s < 1:
                raise PolicyError(f"micro-batch sizes must be positive integers, got {s!r}")


def policy_name(policy: str | Sequence[int]) -> str:
    _check_kind(policy)
    return policy if isinstance(policy, str) else ",".join(str(s) for s in sorted(policy))
