"""Training graphs: layers, tensor shapes, and the convolution kernels they yield.

A ``Network`` is a DAG of ``Layer``s in a valid topological order. Every layer produces one
output tensor (named after the layer) whose per-sample shape is ``out_shape``: (C, H, W) for
feature maps, (F,) for flat vectors. The mini-batch size is a property of the network, so tensor
bytes are ``batch * prod(out_shape) * itemsize``. The memory planner walks this graph; the
optimizers only see ``kernels()``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

from .kernels import KINDS, KernelKind, KernelSignature
from .precision import DEFAULT_PRECISION

# Operations a layer may have. "data" is the input image batch; "generic" is any other operation of an imported
# PyTorch model, carrying what PyTorch did there (engine/pytorch/trace.py, ``NetBuilder.generic``).
OPS = ("data", "conv", "relu", "lrn", "pool", "bn", "fc", "concat", "add", "dropout", "softmax", "generic")


@dataclass
class Layer:
    name: str
    op: str
    inputs: tuple[str, ...]
    out_shape: tuple[int, ...]
    params: dict = field(default_factory=dict)

    @property
    def out_elems(self) -> int:
        return math.prod(self.out_shape)

    def elems(self, batch: int) -> int:
        """Output elements at mini-batch ``batch``: per sample, plus a generic layer's batch-free part."""
        return batch * self.out_elems + self.params.get("fixed_elems", 0)

    @property
    def param_count(self) -> int:
        """Trainable parameters as torchvision counts them (BN running stats are buffers, not parameters)."""
        p = self.params
        if self.op == "generic":
            return p["param_count"]
        if self.op == "conv":
            n = p["k"] * (p["c"] // p.get("groups", 1)) * p["r"] * p["s"]
            return n + (p["k"] if p.get("bias", True) else 0)
        if self.op == "fc":
            return p["in_features"] * p["out_features"] + (p["out_features"] if p.get("bias", True) else 0)
        if self.op == "bn":
            return 2 * self.out_shape[0] if p.get("affine", True) else 0
        return 0


@dataclass(frozen=True)
class Kernel:
    """One (layer, direction) of a network, with the signature that keys its profile."""

    layer: str
    kind: KernelKind
    signature: KernelSignature

    @property
    def id(self) -> str:
        return f"{self.layer}:{self.kind.short}"


@dataclass
class Network:
    name: str
    batch: int
    layers: list[Layer]
    description: str = ""
    # what rebuilds it where its name does not (a spec file's path; the name is the spec's own): for commands
    # that a message suggests
    source: str = field(default="", compare=False)

    def __post_init__(self):
        seen: set[str] = set()
        for layer in self.layers:
            if layer.op not in OPS:
                raise ValueError(f"layer {layer.name!r}: unknown op {layer.op!r}; expected one of {OPS}")
            if layer.name in seen:
                raise ValueError(f"duplicate layer name {layer.name!r}")
            for src in layer.inputs:
                if src not in seen:
                    raise ValueError(f"layer {layer.name!r} reads {src!r}, which is not an earlier layer")
            seen.add(layer.name)

    @cached_property
    def by_name(self) -> dict[str, Layer]:
        return {layer.name: layer for layer in self.layers}

    def layer(self, name: str) -> Layer:
        return self.by_name[name]

    @cached_property
    def consumers(self) -> dict[str, list[str]]:
        out: dict[str, list[str]] = {layer.name: [] for layer in self.layers}
        for layer in self.layers:
            for src in layer.inputs:
                out[src].append(layer.name)
        return out

    @cached_property
    def needs_grad(self) -> dict[str, bool]:
        """Whether a layer's output needs a gradient: true iff it depends on a trainable parameter."""
        ng: dict[str, bool] = {}
        for layer in self.layers:
            ng[layer.name] = layer.param_count > 0 or any(ng[s] for s in layer.inputs)
        return ng

    @property
    def param_count(self) -> int:
        return sum(layer.param_count for layer in self.layers)

    def conv_layers(self) -> list[Layer]:
        return [layer for layer in self.layers if layer.op == "conv"]

    def signature(
        self, layer: Layer, kind: KernelKind, precision: str = DEFAULT_PRECISION, layout: str = "NCHW"
    ) -> KernelSignature:
        p = layer.params
        src = self.layer(layer.inputs[0])
        c, h, w = src.out_shape
        return KernelSignature(
            kind,
            self.batch,
            c,
            h,
            w,
            p["k"],
            p["r"],
            p["s"],
            p.get("pad_h", 0),
            p.get("pad_w", 0),
            p.get("stride_h", 1),
            p.get("stride_w", 1),
            p.get("dil_h", 1),
            p.get("dil_w", 1),
            p.get("groups", 1),
            precision,
            layout,
        )

    def kernels(self, precision: str = DEFAULT_PRECISION, layout: str = "NCHW") -> list[Kernel]:
        """All convolution kernels in forward order: F, BD, BF per conv layer. A conv whose input
        needs no gradient (the first conv) has no BackwardData kernel. Built once per variant: planning asks
        for them several times, and the layers do not change after construction (as ``needs_grad`` assumes)."""
        cache = self.__dict__.setdefault("_kernels", {})
        if (precision, layout) not in cache:
            cache[precision, layout] = tuple(
                Kernel(layer.name, kind, self.signature(layer, kind, precision, layout))
                for layer in self.conv_layers()
                for kind in KINDS
                if kind is not KernelKind.BACKWARD_DATA or self.needs_grad[layer.inputs[0]]
            )
        return list(cache[precision, layout])

    def unique_kernels(self, precision: str = DEFAULT_PRECISION, layout: str = "NCHW") -> dict[str, list[Kernel]]:
        """Kernels grouped by signature key, in first-appearance order."""
        groups: dict[str, list[Kernel]] = {}
        for kernel in self.kernels(precision, layout):
            groups.setdefault(kernel.signature.key, []).append(kernel)
        return groups


class NetBuilder:
    """Appends layers while tracking per-sample shapes, so zoo definitions read like the papers' tables."""

    def __init__(self, name: str, batch: int, input_shape: tuple[int, int, int], description: str = ""):
        self.name, self.batch, self.description = name, batch, description
        self.layers: list[Layer] = [Layer("data", "data", (), tuple(input_shape))]
        self._names: dict[str, int] = {}

    @property
    def last(self) -> str:
        return self.layers[-1].name

    def shape(self, name: str) -> tuple[int, ...]:
        return next(layer.out_shape for layer in reversed(self.layers) if layer.name == name)

    def _name(self, op: str, name: str | None) -> str:
        if name:
            return name
        self._names[op] = self._names.get(op, 0) + 1
        return f"{op}{self._names[op]}"

    def _add(self, op, inputs, shape, name=None, **params) -> str:
        name = self._name(op, name)
        if any(d < 1 for d in shape):
            raise ValueError(f"layer {name!r} ({op}): output shape {tuple(shape)} is empty; the input is too small")
        self.layers.append(Layer(name, op, tuple(inputs), tuple(shape), params))
        return name

    def conv(self, k, r, s=None, stride=1, pad=0, dilation=1, groups=1, bias=True, src=None, name=None) -> str:
        src = src or self.last
        s = s or r
        c, h, w = self.shape(src)
        name = self._name("conv", name)
        if c % groups or k % groups:
            raise ValueError(f"layer {name!r} (conv): channels {c}->{k} not divisible by groups {groups}")
        sh, sw = (stride, stride) if isinstance(stride, int) else stride
        ph, pw = (pad, pad) if isinstance(pad, int) else pad
        dh, dw = (dilation, dilation) if isinstance(dilation, int) else dilation
        oh = (h + 2 * ph - dh * (r - 1) - 1) // sh + 1
        ow = (w + 2 * pw - dw * (s - 1) - 1) // sw + 1
        return self._add(
            "conv",
            [src],
            (k, oh, ow),
            name,
            c=c,
            k=k,
            r=r,
            s=s,
            pad_h=ph,
            pad_w=pw,
            stride_h=sh,
            stride_w=sw,
            dil_h=dh,
            dil_w=dw,
            groups=groups,
            bias=bias,
        )

    def relu(self, src=None, name=None) -> str:
        src = src or self.last
        return self._add("relu", [src], self.shape(src), name)

    def lrn(self, size=5, alpha=1e-4, beta=0.75, k=1.0, src=None, name=None) -> str:
        src = src or self.last
        return self._add("lrn", [src], self.shape(src), name, size=size, alpha=alpha, beta=beta, k=k)

    def bn(self, src=None, name=None, eps=1e-5, affine=True) -> str:
        """``affine=False`` (no scale and shift) is recorded only when set, as ``param_count`` reads it."""
        src = src or self.last
        return self._add("bn", [src], self.shape(src), name, eps=eps, **({} if affine else {"affine": False}))

    def pool(self, size, stride=None, pad=0, mode="max", ceil_mode=False, src=None, name=None) -> str:
        """``mode`` is max or avg; ``size=None`` with mode avg is global average pooling."""
        src = src or self.last
        c, h, w = self.shape(src)
        if size is None:
            size, stride, pad = (h, w), 1, 0
        kh, kw = (size, size) if isinstance(size, int) else size
        stride = stride or kh
        rnd = math.ceil if ceil_mode else math.floor
        oh = int(rnd((h + 2 * pad - kh) / stride)) + 1
        ow = int(rnd((w + 2 * pad - kw) / stride)) + 1
        if ceil_mode:  # PyTorch/Caffe rule: the last window must start inside the (left-padded) input
            if (oh - 1) * stride >= h + pad:
                oh -= 1
            if (ow - 1) * stride >= w + pad:
                ow -= 1
        return self._add(
            "pool", [src], (c, oh, ow), name, mode=mode, kh=kh, kw=kw, stride=stride, pad=pad, ceil_mode=ceil_mode
        )

    def fc(self, out_features, bias=True, src=None, name=None) -> str:
        """Fully connected; a feature-map input is flattened implicitly (no extra layer, as in Caffe)."""
        src = src or self.last
        in_features = math.prod(self.shape(src))
        return self._add(
            "fc", [src], (out_features,), name, in_features=in_features, out_features=out_features, bias=bias
        )

    def dropout(self, p=0.5, src=None, name=None) -> str:
        src = src or self.last
        return self._add("dropout", [src], self.shape(src), name, p=p)

    def concat(self, srcs, name=None) -> str:
        shapes = [self.shape(s) for s in srcs]
        if len({s[1:] for s in shapes}) != 1:
            raise ValueError(f"concat of mismatched spatial shapes {shapes}")
        return self._add("concat", srcs, (sum(s[0] for s in shapes),) + shapes[0][1:], name)

    def add(self, srcs, name=None) -> str:
        shapes = {self.shape(s) for s in srcs}
        if len(shapes) != 1:
            raise ValueError(f"add of mismatched shapes {shapes}")
        return self._add("add", srcs, shapes.pop(), name)

    def softmax(self, src=None, name=None) -> str:
        src = src or self.last
        return self._add("softmax", [src], self.shape(src), name)

    def generic(
        self,
        srcs,
        out_shape,
        op: str,
        name=None,
        *,
        param_count=0,
        fixed_elems=0,
        itemsize=None,
        alias=None,
        inplace=False,
        saves=(),
        extra_bytes=(0, 0),
        flops=(0, 0),
        random=False,
    ) -> str:
        """Any other operation, as PyTorch ran it: ``out_shape`` per sample (flat where the output is not a
        batch of samples, with ``fixed_elems`` independent of the batch), ``itemsize`` for a non-float output,
        ``alias`` the input whose storage the output shares (a view, or ``inplace``), ``saves`` what autograd
        keeps (``X<i>`` inputs, ``Y`` the output), ``extra_bytes`` and ``flops`` per sample and fixed, and
        ``random`` (it draws random numbers: not re-forwarded). Not a recomputation checkpoint only when it is
        deterministic and does no matmul or convolution (SuperNeurons' cost-aware rule: cheap to re-forward)."""
        if not srcs:
            raise ValueError("an operation on the input batch reads at least one layer")
        params = dict(
            op=op,
            param_count=int(param_count),
            alias=alias,
            inplace=bool(inplace),
            saves=list(saves),
            extra_bytes=list(extra_bytes),
            flops=list(flops),
            random=bool(random),
            checkpoint=bool(random or flops[0] > 0 or flops[1] > 0),
        )
        if fixed_elems:
            params["fixed_elems"] = int(fixed_elems)
        if itemsize is not None:
            params["itemsize"] = int(itemsize)
        name = self._name("generic", name)
        self.layers.append(Layer(name, "generic", tuple(srcs), tuple(out_shape), params))
        return name

    def build(self) -> Network:
        return Network(self.name, self.batch, self.layers, self.description)
