"""Memory planner: the training timeline under vDNN, Layrub and SuperNeurons policies.

``plan_memory`` (iteration.py) is the entry point; ``memory_frames`` (frames.py) turns its result
into tidy frames for the dashboard; ``memory_snapshot`` (snapshot.py) into a PyTorch memory snapshot
for memory_viz; capacity.py answers "what fits" (reserve.py: the capacity a plan that fills it is made
for); ``step_plan`` (steps.py) turns a ``wr``-rule result into a per-step Plan for
``engine.pytorch.apply_plan``; ``python -m engine memory`` is engine/commands/memory.py. See
docs/reproduction.md for the papers' numbers set beside ours.
"""

from .capacity import deepest, max_batch, smallest_capacity
from .frames import memory_frames
from .iteration import MemoryResult, format_table, plan_memory
from .policies import MEMORY_POLICIES
from .reserve import RESERVE, planning_capacity
from .snapshot import memory_snapshot
from .steps import step_limits, step_plan
from .tensors import CONVENTIONS, build_inventory, route_construct
from .timemodel import TimeParams

__all__ = [
    "CONVENTIONS",
    "MEMORY_POLICIES",
    "RESERVE",
    "MemoryResult",
    "TimeParams",
    "build_inventory",
    "deepest",
    "format_table",
    "max_batch",
    "memory_frames",
    "memory_snapshot",
    "plan_memory",
    "planning_capacity",
    "route_construct",
    "smallest_capacity",
    "step_limits",
    "step_plan",
]
