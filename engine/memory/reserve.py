"""The capacity a plan is made for: what a memory cap leaves to PyTorch's caching allocator.

A plan that fills the capacity it is given (SuperNeurons' LRU tensor cache keeps tensors resident up to it,
vDNN_dyn picks the first pass that fits it, a dynamic workspace rule gives free(s) to convolutions) leaves
nothing beside its tensors. Under ``torch.cuda.set_per_process_memory_fraction`` the cap counts PyTorch's
reserved memory, and the caching allocator's reserved-but-unallocated blocks need room: measured on an H100
(benchmarks/reports/memory_training.md), ResNet-50 under SuperNeurons planned for the whole 16 GiB came
within 34 MB of the cap and trained only up to batch 211 of the 426 predicted; planned for 95 % of it, the
largest batch found was 415 against 405 predicted. So such plans are made for (1 - reserve) of the cap.

The reserve is PyTorch's: plans in the ``pytorch`` convention (tensors as PyTorch allocates them) take
``RESERVE`` unless told otherwise; the papers' own conventions (their frameworks' pools) plan for the whole
capacity, as the papers do.
"""

from __future__ import annotations

from ..errors import EngineError

RESERVE = 0.05
RESERVED_CONVENTIONS = ("pytorch",)


def default_reserve(convention: str) -> float:
    """The reserve of a plan in ``convention``: RESERVE for PyTorch's caching allocator, else 0."""
    return RESERVE if convention in RESERVED_CONVENTIONS else 0.0


def check_reserve(reserve: float) -> float:
    if isinstance(reserve, bool) or not isinstance(reserve, (int, float)) or not 0 <= reserve < 1:
        raise EngineError(f"reserve must be a fraction of the capacity in [0, 1), e.g. 0.05, got {reserve!r}")
    return float(reserve)


def planning_capacity(capacity: int | None, reserve: float) -> int | None:
    """The capacity a plan that fills its capacity is made for: (1 - reserve) x ``capacity``."""
    return int(capacity * (1 - reserve)) if capacity is not None else None
