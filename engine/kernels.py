"""Convolution kernels and their signatures.

A *kernel* is one (layer, direction): Forward, BackwardData or BackwardFilter (mu-cuDNN §III).
A ``KernelSignature`` holds everything that changes the work, so identical kernels (the many
repeated 3x3 convolutions of a ResNet, say) share one profile entry. ``signature.key`` leaves the
mini-batch size out: measurements are stored per (key, micro-batch size) and reused across N,
unlike mu-cuDNN's cache, whose key holds N and omits dilation and groups.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from enum import Enum
from functools import cached_property

from .errors import ProfileFormatError
from .precision import DEFAULT_PRECISION, LAYOUTS, PRECISIONS


class KernelKind(str, Enum):
    FORWARD = "Forward"
    BACKWARD_DATA = "BackwardData"
    BACKWARD_FILTER = "BackwardFilter"

    @property
    def short(self) -> str:
        return {"Forward": "F", "BackwardData": "BD", "BackwardFilter": "BF"}[self.value]


KINDS = (KernelKind.FORWARD, KernelKind.BACKWARD_DATA, KernelKind.BACKWARD_FILTER)


@dataclass(frozen=True, order=True)
class KernelSignature:
    kind: KernelKind
    n: int
    c: int
    h: int
    w: int
    k: int
    r: int
    s: int
    pad_h: int = 0
    pad_w: int = 0
    stride_h: int = 1
    stride_w: int = 1
    dil_h: int = 1
    dil_w: int = 1
    groups: int = 1
    precision: str = DEFAULT_PRECISION  # a name in engine.precision.PRECISIONS
    layout: str = "NCHW"

    def __post_init__(self):
        object.__setattr__(self, "kind", KernelKind(self.kind))
        if self.precision not in PRECISIONS:
            raise ValueError(f"unknown precision {self.precision!r}; expected one of {sorted(PRECISIONS)}")
        if self.layout not in LAYOUTS:
            raise ValueError(f"unknown layout {self.layout!r}; expected one of {LAYOUTS}")
        if self.c % self.groups or self.k % self.groups:
            raise ValueError(f"channels {self.c}->{self.k} not divisible by groups {self.groups}")
        if self.out_h < 1 or self.out_w < 1:
            raise ValueError(f"convolution output would be empty for {self}")

    @property
    def itemsize(self) -> int:
        return PRECISIONS[self.precision].itemsize

    @property
    def aten_depthwise(self) -> bool:
        """Whether stock PyTorch runs this convolution with ATen's depthwise kernels (no cuDNN, no workspace): ATen's
        ``is_depthwise`` (groups = input channels > 1, output channels a multiple) without ``use_cudnn_depthwise``
        (channels_last or half precision)."""
        single = not PRECISIONS[self.precision].reduced  # fp32 operands (TF32 or strict), not half precision
        return self.layout == "NCHW" and single and self.groups == self.c > 1 and self.k % self.c == 0

    @property
    def out_h(self) -> int:
        return (self.h + 2 * self.pad_h - self.dil_h * (self.r - 1) - 1) // self.stride_h + 1

    @property
    def out_w(self) -> int:
        return (self.w + 2 * self.pad_w - self.dil_w * (self.s - 1) - 1) // self.stride_w + 1

    @cached_property
    def key(self) -> str:
        """Canonical identity without the mini-batch size, e.g.
        ``Forward/tf32/NCHW/c96h27w27/k256r5s5/p2x2/s1x1/d1x1/g1`` (computed once: every lookup of a
        kernel's measurements and desirable set goes through it)."""
        return (
            f"{self.kind.value}/{self.precision}/{self.layout}/c{self.c}h{self.h}w{self.w}/"
            f"k{self.k}r{self.r}s{self.s}/p{self.pad_h}x{self.pad_w}/s{self.stride_h}x{self.stride_w}/"
            f"d{self.dil_h}x{self.dil_w}/g{self.groups}"
        )

    @classmethod
    def from_key(cls, key: str, n: int = 1) -> KernelSignature:
        try:
            kind, precision, layout, chw, krs, pad, stride, dil, g = key.split("/")
            c, hw = chw[1:].split("h")
            h, w = hw.split("w")
            k, rs = krs[1:].split("r")
            r, s = rs.split("s")
            ph, pw = pad[1:].split("x")
            sh, sw = stride[1:].split("x")
            dh, dw = dil[1:].split("x")
            return cls(
                KernelKind(kind),
                n,
                int(c),
                int(h),
                int(w),
                int(k),
                int(r),
                int(s),
                int(ph),
                int(pw),
                int(sh),
                int(sw),
                int(dh),
                int(dw),
                int(g[1:]),
                precision,
                layout,
            )
        except (ValueError, TypeError) as err:
            raise ProfileFormatError(f"malformed kernel signature {key!r}: {err}") from None

    def with_batch(self, n: int) -> KernelSignature:
        return replace(self, n=n)

    def as_dict(self) -> dict:
        d = asdict(self)
        d["kind"] = self.kind.value
        return d

    @property
    def flops(self) -> int:
        """Multiply-adds x 2 of the whole kernel at batch n (same count for all three directions)."""
        return 2 * self.n * self.k * (self.c // self.groups) * self.r * self.s * self.out_h * self.out_w

    # Element counts of the operands at batch n (x: input, y: output, w: filter).
    @property
    def x_elems(self) -> int:
        return self.n * self.c * self.h * self.w

    @property
    def y_elems(self) -> int:
        return self.n * self.k * self.out_h * self.out_w

    @property
    def w_elems(self) -> int:
        return self.k * (self.c // self.groups) * self.r * self.s
