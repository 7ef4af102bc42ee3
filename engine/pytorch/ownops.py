"""The Network's own layers for traced PyTorch operations: the forms the zoo's ops take in torchvision models.

A handler maps one fx node (its module or function) to a ``NetBuilder`` call, or raises ``Unsupported`` when
the op comes in a form its layer cannot express (a Linear over tokens, a softmax over another dim), so the
importer makes it a generic layer; ``Refused`` when nothing may express it (a convolution cuDNN cannot run
as traced). Kept apart from importer.py, which decides between these layers and generic ones.
"""

from __future__ import annotations

import functools
import math
import operator
from dataclasses import dataclass, field

from . import trace as T


class Unsupported(Exception):
    """One node the Network's own layer cannot express; a generic layer can, unless it is ``Refused``."""


class Refused(Unsupported):
    """One node nothing in the Network can express faithfully."""


@dataclass
class Step:
    node: object
    op: str | None  # a NetBuilder method, "generic", or None for an alias of the node's first tensor input
    kwargs: dict = field(default_factory=dict)


def _conv(node, m) -> Step:
    if m.padding_mode != "zeros":
        raise Refused(f"padding_mode={m.padding_mode!r}; only zero padding is a cuDNN convolution")
    r, s = m.kernel_size
    dh, dw = m.dilation
    return Step(
        node,
        "conv",
        dict(
            k=m.out_channels,
            r=r,
            s=s,
            stride=tuple(m.stride),
            pad=_conv_pad(m.padding, r, s, dh, dw),
            dilation=(dh, dw),
            groups=m.groups,
            bias=m.bias is not None,
        ),
    )


def _conv_pad(padding, r, s, dh, dw) -> tuple[int, int]:
    if padding == "valid":
        return (0, 0)
    if padding == "same":
        totals = (dh * (r - 1), dw * (s - 1))
        if any(t % 2 for t in totals):
            raise Refused(
                f"padding='same' with kernel {r}x{s} and dilation {dh}x{dw} pads asymmetrically "
                f"(one more row/column after than before); pad explicitly with symmetric padding"
            )
        return (totals[0] // 2, totals[1] // 2)
    return _pair(padding)


def _pair(v) -> tuple[int, int]:
    return (v, v) if isinstance(v, int) else tuple(v)


def functional_conv(node) -> Step | None:
    """``F.conv2d(x, weight, bias, stride, padding, dilation, groups)`` with a parameter as weight (and bias):
    the same conv layer as the ``nn.Conv2d`` it spells out; None for any other form."""
    import torch
    import torch.nn.functional as F

    if node.op != "call_function" or node.target not in (F.conv2d, torch.conv2d):
        return None
    weight, bias = _arg(node, 1, "weight", None), _arg(node, 2, "bias", None)
    params = [p for p in (weight, bias) if p is not None]
    if not all(getattr(p, "op", None) == "get_attr" for p in params) or len(weight.meta.get(T.SHAPE, ())) != 4:
        return None
    k, _, r, s = weight.meta[T.SHAPE]
    dh, dw = _pair(_arg(node, 5, "dilation", 1))
    return Step(
        node,
        "conv",
        dict(
            k=k,
            r=r,
            s=s,
            stride=_pair(_arg(node, 3, "stride", 1)),
            pad=_conv_pad(_arg(node, 4, "padding", 0), r, s, dh, dw),
            dilation=(dh, dw),
            groups=_arg(node, 6, "groups", 1),
            bias=bias is not None,
        ),
    )


def _same(name, value):
    """A square 2-D window parameter as one int (NetBuilder pools take one stride and one pad)."""
    a, b = (value, value) if isinstance(value, int) else tuple(value)
    if a != b:
        raise Unsupported(f"{name} {a}x{b} differs per dimension")
    return a


def _pool(node, mode, kernel, stride, padding, dilation, ceil_mode) -> Step:
    if _same("dilation", dilation) != 1 or len(node.meta[T.SHAPE]) != 4:
        raise Unsupported("dilated or not 2-D")
    size = (kernel, kernel) if isinstance(kernel, int) else tuple(kernel)
    stride = _same("stride", stride if stride else size)  # torch: stride None or [] means the kernel size
    return Step(
        node,
        "pool",
        dict(size=size, stride=stride, pad=_same("padding", padding), mode=mode, ceil_mode=bool(ceil_mode)),
    )


def _adaptive(node, mode, output_size) -> Step:
    """Adaptive pooling is a plain pooling when the windows are even: global, or a divisor kernel."""
    h, w = node.args[0].meta[T.SHAPE][2:]
    oh, ow = (output_size, output_size) if isinstance(output_size, int) else output_size
    oh, ow = oh or h, ow or w
    if (oh, ow) == (1, 1):
        return Step(node, "pool", dict(size=(h, w), stride=1, mode=mode))
    if h % oh or w % ow or h // oh != w // ow:
        raise Unsupported(f"adaptive pooling of {h}x{w} to {oh}x{ow} has uneven windows")
    return Step(node, "pool", dict(size=h // oh, stride=h // oh, mode=mode))


def _flat_alias(node) -> Step:
    """Flatten, view and reshape are free when they only flatten each sample."""
    src = tensor_args(node)[0]
    before, after = src.meta[T.SHAPE], node.meta[T.SHAPE]
    if after not in (before, (before[0], math.prod(before[1:]))):
        raise Unsupported(f"reshapes {before} to {after}")
    return Step(node, None)


def is_tensor(value) -> bool:
    return isinstance(getattr(value, "meta", {}).get(T.SHAPE), (tuple, str))


def tensor_args(node) -> list:
    return [a for a in node.args if is_tensor(a)]


def _binary_add(node) -> Step:
    tensors = tensor_args(node)
    if (
        len(tensors) != 2
        or len(node.args) != 2
        or node.kwargs
        or any(t.meta[T.SHAPE] != node.meta[T.SHAPE] for t in tensors)
    ):
        raise Unsupported("not the sum of two tensors of one shape")
    return Step(node, "add", {"srcs": tensors})


def _cat(node) -> Step:
    srcs = node.args[0] if node.args else node.kwargs.get("tensors")
    dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim", 0)
    if dim % len(node.meta[T.SHAPE]) != 1 or not all(is_tensor(s) for s in srcs):
        raise Unsupported(f"concatenates along dim {dim}")
    return Step(node, "concat", {"srcs": list(srcs)})


def _softmax(node, dim) -> Step:
    if dim is None or dim % len(node.meta[T.SHAPE]) != 1:
        raise Unsupported(f"softmax over dim {dim}")
    return Step(node, "softmax")


def _fc(node, m) -> Step:
    if len(tensor_args(node)[0].meta[T.SHAPE]) != 2:
        raise Unsupported("a Linear over more than one dimension")
    return Step(node, "fc", dict(out_features=m.out_features, bias=m.bias is not None, in_features=m.in_features))


def _arg(node, index, key, default):
    return node.args[index] if len(node.args) > index else node.kwargs.get(key, default)


def _no_indices(m):
    if m.return_indices:
        raise Unsupported("return_indices=True")


@functools.cache
def module_handlers() -> dict:
    import torch.nn as nn

    return {
        nn.Conv2d: _conv,
        nn.ReLU: lambda node, m: Step(node, "relu"),
        nn.BatchNorm2d: lambda node, m: Step(node, "bn", dict(eps=m.eps, affine=m.affine)),
        nn.MaxPool2d: lambda node, m: (
            _no_indices(m) or _pool(node, "max", m.kernel_size, m.stride, m.padding, m.dilation, m.ceil_mode)
        ),
        nn.AvgPool2d: lambda node, m: _pool(node, "avg", m.kernel_size, m.stride, m.padding, 1, m.ceil_mode),
        nn.AdaptiveAvgPool2d: lambda node, m: _adaptive(node, "avg", m.output_size),
        nn.AdaptiveMaxPool2d: lambda node, m: _no_indices(m) or _adaptive(node, "max", m.output_size),
        nn.Linear: _fc,
        nn.Dropout: lambda node, m: Step(node, "dropout", dict(p=m.p)),
        nn.LocalResponseNorm: lambda node, m: Step(node, "lrn", dict(size=m.size, alpha=m.alpha, beta=m.beta, k=m.k)),
        nn.Softmax: lambda node, m: _softmax(node, m.dim),
        nn.Flatten: lambda node, m: _flat_alias(node),
        nn.Identity: lambda node, m: Step(node, None),
    }


@functools.cache
def function_handlers() -> dict:
    import torch
    import torch.nn.functional as F

    relu = lambda node: Step(node, "relu")  # noqa: E731
    pool = {
        F.max_pool2d: lambda n: _pool(
            n,
            "max",
            _arg(n, 1, "kernel_size", None),
            _arg(n, 2, "stride", None),
            _arg(n, 3, "padding", 0),
            _arg(n, 4, "dilation", 1),
            _arg(n, 5, "ceil_mode", False),
        ),
        F.avg_pool2d: lambda n: _pool(
            n,
            "avg",
            _arg(n, 1, "kernel_size", None),
            _arg(n, 2, "stride", None),
            _arg(n, 3, "padding", 0),
            1,
            _arg(n, 4, "ceil_mode", False),
        ),
        F.adaptive_avg_pool2d: lambda n: _adaptive(n, "avg", _arg(n, 1, "output_size", None)),
    }
    return {
        operator.add: _binary_add,
        operator.iadd: _binary_add,
        torch.add: _binary_add,
        "add": _binary_add,
        "add_": _binary_add,
        torch.cat: _cat,
        torch.concat: _cat,
        F.relu: relu,
        torch.relu: relu,
        torch.relu_: relu,
        "relu": relu,
        "relu_": relu,
        F.dropout: lambda n: Step(n, "dropout", dict(p=_arg(n, 1, "p", 0.5))),
        F.softmax: lambda n: _softmax(n, _arg(n, 1, "dim", None)),
        torch.softmax: lambda n: _softmax(n, _arg(n, 1, "dim", None)),
        "softmax": lambda n: _softmax(n, _arg(n, 1, "dim", None)),
        torch.flatten: _flat_alias,
        "flatten": _flat_alias,
        "view": _flat_alias,
        "reshape": _flat_alias,
        torch.reshape: _flat_alias,
        "contiguous": _flat_alias,
        **pool,
    }
