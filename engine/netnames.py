"""The torch network-name grammar: which names stand for PyTorch models, and what they say.

A torch network name is ``SOURCE[@CxHxW]``:

- ``torchvision:NAME``: ``torchvision.models.get_model(NAME, weights=None)``;
- ``package.module:callable``: the callable (called with no arguments) returns an ``nn.Module``;
- ``@CxHxW``: the per-sample input shape, default ``3x224x224`` (then left out of the name).

``canonical_name`` is what ``Network.name`` records, so profiles, plans and the dashboard name the same
network the same way. This module sits below both the zoo (which resolves every network name) and
engine.pytorch.loader (which builds the models): parsing a name needs neither torch nor the zoo.
"""

from __future__ import annotations

import re
from collections.abc import Mapping

from .errors import ModelImportError

DEFAULT_INPUT = (3, 224, 224)
DEFAULT_BATCH = 32  # like a spec file; a torchvision model with a zoo twin takes the twin's default
SYNTAX = "torchvision:NAME or package.module:callable, optionally with @CxHxW (default 3x224x224)"
_NAME_RE = re.compile(r"^(?P<module>[A-Za-z_][\w.]*):(?P<attr>[A-Za-z_][\w.]*)(?:@(?P<input>[^@]*))?$")


def is_torch_name(name) -> bool:
    """Whether ``name`` is a torch network name."""
    return isinstance(name, str) and _NAME_RE.match(name) is not None


def parse_input(text: str) -> tuple[int, int, int]:
    """``3x224x224`` -> (3, 224, 224)."""
    parts = str(text).lower().split("x")
    if len(parts) != 3 or not all(p.isdigit() and int(p) > 0 for p in parts):
        raise ModelImportError(f"input shape {text!r} is not CxHxW with positive integers, e.g. 3x224x224")
    return tuple(int(p) for p in parts)


def split_name(name: str) -> tuple[str, tuple[int, int, int]]:
    """(source, input shape) of a torch network name."""
    m = _NAME_RE.match(name) if isinstance(name, str) else None
    if m is None:
        raise ModelImportError(f"{name!r} is not a torch network name; use {SYNTAX}")
    source = f"{m.group('module')}:{m.group('attr')}"
    return source, DEFAULT_INPUT if m.group("input") is None else parse_input(m.group("input"))


def canonical_name(source: str, input_shape) -> str:
    """The name a network is recorded under: the input shape only when not the default."""
    shape = tuple(input_shape)
    return source if shape == DEFAULT_INPUT else f"{source}@{'x'.join(map(str, shape))}"


def with_input(name: str, input_text: str) -> str:
    """``name`` with the input shape replaced by ``input_text`` (the CLI's ``--input``)."""
    source, _ = split_name(name)
    return canonical_name(source, parse_input(input_text))


def default_batch(name: str, twins: Mapping[str, int]) -> int:
    """The mini-batch a torch network is built with when none is given: for ``torchvision:NAME`` its zoo
    twin's (``twins``, the zoo's defaults: resnet50 -> 64), else ``DEFAULT_BATCH``."""
    source, _ = split_name(name)
    module, attr = source.split(":")
    return twins.get(attr, DEFAULT_BATCH) if module == "torchvision" else DEFAULT_BATCH
