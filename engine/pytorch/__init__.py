"""PyTorch side: import an ``nn.Module`` as a Network, run its convolutions with a plan, run a memory plan.

Importing this package does not import ``torch``; the functions below do, when called, so the CPU
paths and CI work without it. Each is its implementation's signature over a lazy import, and
tests/test_torch_api.py checks the two signatures are equal, so no argument can go missing here.
"""

from __future__ import annotations

import functools
import importlib
import inspect

from ..errors import check_call


def _lazy(module: str):
    """Forward every argument, as given, to the function of the same name in ``engine.pytorch.<module>``."""

    def wrap(stub):
        signature = inspect.signature(stub)

        @functools.wraps(stub)
        def call(*args, **kwargs):
            check_call(stub.__name__, signature, args, kwargs)  # a misspelt keyword: one line naming the nearest
            return getattr(importlib.import_module(f"{__name__}.{module}"), stub.__name__)(*args, **kwargs)

        call.implementation = f"{__name__}.{module}.{stub.__name__}"
        return call

    return wrap


@_lazy("autoplan")
def optimize(
    model,
    budget=None,
    mode="wr",
    *,
    policy="powerOfTwo",
    engines="sweep",
    max_workspace="1GiB",
    cache=None,
    workspace="per-call",
    max_shapes=8,
    progress=True,
    keep_stock=True,
    graphs=True,
):
    """Plan the model's convolutions at its first forward, per input shape (engine.pytorch.autoplan.optimize)."""


@_lazy("apply")
def apply_plan(model, plan, input_shape=None, workspace=None, keep_stock=True, graphs=True):
    """Swap the convolutions a plan covers for its planned kernels (engine.pytorch.apply.apply_plan)."""


@_lazy("apply")
def remove_plan(model):
    """Turn planned convolutions back into stock ``nn.Conv2d`` (engine.pytorch.apply.remove_plan)."""


@_lazy("memory")
def apply_memory_policy(model, result, example_input=None):
    """Run a memory planner's plan in training steps (engine.pytorch.memory.apply_memory_policy)."""
