"""Torchvision models as the same function in two runs, for GPU tests and benchmarks that compare gradients.

A rounding difference of 1e-7 in one convolution flips some max-pool choices and ReLU signs, which moves whole
gradient entries (measured on the H100: stock PyTorch's own gradients differ from a float64 run of the same
model by 2e-3 in strict fp32 to 0.12 in TF32), so whole-model gradients are compared on *smooth* variants: the
convolutions untouched, every kink and every random draw removed. torch is imported inside the function.
"""

from __future__ import annotations


def smooth(model):
    """``model`` with ReLU and ReLU6 -> Softplus, max-pool -> average-pool, Hardswish -> SiLU, Hardsigmoid ->
    Sigmoid, and dropout and stochastic depth off (modules only: a functional ``F.relu`` stays)."""
    from torch import nn

    try:
        from torchvision.ops import StochasticDepth
    except ImportError:  # no torchvision: no such module to switch off
        StochasticDepth = ()
    swaps = {
        nn.ReLU: lambda m: nn.Softplus(),
        nn.ReLU6: lambda m: nn.Softplus(),
        nn.MaxPool2d: lambda m: nn.AvgPool2d(m.kernel_size, m.stride, m.padding, ceil_mode=m.ceil_mode),
        nn.Hardswish: lambda m: nn.SiLU(),
        nn.Hardsigmoid: lambda m: nn.Sigmoid(),
    }
    for mod in list(model.modules()):
        for child_name, child in list(mod.named_children()):
            swap = swaps.get(type(child))
            if swap is not None:
                setattr(mod, child_name, swap(child))
            elif isinstance(child, (nn.modules.dropout._DropoutNd, StochasticDepth)):
                child.p = 0.0
    return model
