"""PyTorch side: import an ``nn.Module`` as a Network, run its convolutions with a plan, run a memory plan.

Importing this package does not import ``torch``; the functions below do, when called, so the CPU
paths and CI work without it.
"""


def apply_plan(model, plan, input_shape=None):
    """See engine.pytorch.apply.apply_plan."""
    from .apply import apply_plan as impl
    return impl(model, plan, input_shape)


def remove_plan(model):
    """See engine.pytorch.apply.remove_plan."""
    from .apply import remove_plan as impl
    return impl(model)


def apply_memory_policy(model, result, example_input=None):
    """See engine.pytorch.memory.apply_memory_policy."""
    from .memory import apply_memory_policy as impl
    return impl(model, result, example_input)
