"""Every fact about a precision, in one record per precision.

A precision is how a convolution's operands are stored and computed: ``tf32`` (fp32 data, TF32
tensor cores allowed: cuDNN's and PyTorch's default), ``fp32`` (strict), ``fp16`` and ``bf16``
(16-bit data, fp32 compute). Kernel signatures, profiles, plans, the GPU and PyTorch runtimes, the
CLI and the dashboard read these records and keep no table of their own (``tests/test_structure.py``
checks). Library types are names, resolved by the reader (``getattr(cudnn.data_type, p.cudnn_type)``,
``getattr(torch, p.torch_dtype)``, ``buf.view(p.array_dtype)``), so this module imports none of them.

A new precision is one more entry in ``PRECISIONS``. Beside it, the CuPy kernels of
``engine/gpu/executor.py`` (adding dW pieces, widening to float32) are written per storage type, and
``fill_random`` in ``engine/gpu/profiler.py`` converts by hand to a type NumPy lacks (bf16): a precision stored
otherwise needs code there too (docs/architecture.md, "A dtype").
"""

from __future__ import annotations

from dataclasses import dataclass

from .errors import EngineError

LAYOUTS = ("NCHW", "NHWC")  # NHWC is PyTorch's channels_last


@dataclass(frozen=True)
class Precision:
    name: str  # as in kernel signatures, profiles, plans and --precision
    label: str  # one line for help texts
    itemsize: int  # bytes per element of every operand (x, w, y)
    torch_dtype: str  # the operands' torch dtype (attribute of ``torch``)
    array_dtype: str  # NumPy/CuPy dtype a buffer is viewed as; bfloat16, which NumPy lacks, as uint16
    cudnn_type: str  # cudnn.data_type of the operands (intermediate and compute types are FLOAT)
    layout: str  # default layout: what frameworks run this precision in
    deselect_notes: tuple[str, ...]  # cudnn.numerical_note of plans that are not this precision: never planned
    tolerance: float  # verification: largest relative L2 error from a float64 reference
    allow_tf32: bool  # torch.backends.cudnn.allow_tf32 when PyTorch runs it

    def __post_init__(self):
        if self.layout not in LAYOUTS:
            raise ValueError(f"precision {self.name}: layout {self.layout!r} is not one of {LAYOUTS}")

    @property
    def reduced(self) -> bool:
        """Narrower than fp32: sums of micro-batch pieces (dW) go through an fp32 accumulator."""
        return self.itemsize < 4


# Tolerances (relative L2 error from a float64 reference that verification accepts): TF32 rounds operands
# to 10 mantissa bits inside the tensor cores; fp16 (10 bits) and bf16 (7 bits) operands are rounded in memory
# and outputs again on store. TF32 and strict fp32 deselect down-converting plans, which flush gradients below
# fp16's range to zero (measured: a whole dW of zeros in an AlexNet training step).
PRECISIONS: dict[str, Precision] = {
    p.name: p
    for p in (
        Precision(
            "tf32",
            "fp32 data on TF32 tensor cores (cuDNN's and PyTorch's default)",
            4,
            "float32",
            "float32",
            "FLOAT",
            "NCHW",
            ("DOWN_CONVERT_INPUTS",),
            5e-3,
            True,
        ),
        Precision(
            "fp32",
            "strict fp32: no tensor cores, no down-conversion",
            4,
            "float32",
            "float32",
            "FLOAT",
            "NCHW",
            ("TENSOR_CORE", "DOWN_CONVERT_INPUTS"),
            1e-5,
            False,
        ),
        Precision(
            "fp16", "fp16 data, fp32 compute (mixed precision)", 2, "float16", "float16", "HALF", "NHWC", (), 2e-2, True
        ),
        Precision(
            "bf16",
            "bfloat16 data, fp32 compute (mixed precision)",
            2,
            "bfloat16",
            "uint16",
            "BFLOAT16",
            "NHWC",
            (),
            2e-2,
            True,
        ),
    )
}
DEFAULT_PRECISION = "tf32"


def get_precision(name: str) -> Precision:
    """The record of ``name``, or an EngineError naming the choices."""
    try:
        return PRECISIONS[name]
    except (KeyError, TypeError):
        raise EngineError(f"unknown precision {name!r}; expected one of {', '.join(PRECISIONS)}") from None


def check_layout(layout: str) -> str:
    if layout not in LAYOUTS:
        raise EngineError(f"unknown layout {layout!r}; expected one of {', '.join(LAYOUTS)}")
    return layout
