"""PyTorch models by network name, so every place that takes a network name takes a model too.

The names (``torchvision:NAME``, ``package.module:callable``, each optionally ``@CxHxW``) are parsed by
engine.netnames; here they are built. A ``package.module:callable`` is imported (from ``sys.path`` or
the current directory) and called with no arguments, and must return an ``nn.Module``, but only once the
user has named it (``trust``): a name read from a file is data. Models are built on the meta device: the
import needs shapes only, so no weights are allocated or initialised (a builder that computes on tensors
is built on the CPU with its parameters moved to meta as they are registered). ``torch`` is imported only
when a model is built.
"""

from __future__ import annotations

import contextlib
import copy
import difflib
import functools
import importlib
import os
import sys
import warnings

from ..errors import ModelImportError, UntrustedModelError
from ..netnames import canonical_name, is_torch_name, split_name

# ``package.module:callable`` sources the user named, on the command line or by calling trust(): only
# these are imported and called. A name read from a plan, profile or upload is data, and data must not
# run code (an uploaded plan naming ``os:abort`` would otherwise stop the dashboard).
_TRUSTED: set[str] = set()


def trust(name: str) -> None:
    """Allow ``name``'s module:callable to be imported and called (the CLI does this for ``--network``)."""
    if is_torch_name(name):
        _TRUSTED.add(split_name(name)[0])


def load_model(name: str, device=None):
    """(``nn.Module``, per-sample input shape) for a torch network name, built on ``device``
    (default: torch's default device)."""
    source, shape = split_name(name)
    module, attr = source.split(":")
    if module != "torchvision" and source not in _TRUSTED:
        raise UntrustedModelError(
            f"network {source!r} names Python code to run; a name read from a file or an upload may "
            f"only be a zoo or torchvision: network. Name your own model with --network {source} "
            f"(or engine.pytorch.loader.trust({source!r}) in Python)",
            source,
        )
    torch = _torch(name)

    def build():
        return _torchvision(attr) if module == "torchvision" else _call(module, attr)

    try:
        with torch.device(device) if device is not None else contextlib.nullcontext():
            model = build()
    except Exception:  # noqa: BLE001 - the builder computes on tensors (regnet's widths): parameters to meta instead
        if device is None or torch.device(device).type != "meta":
            raise
        with _parameters_on_meta(torch):
            model = build()
    if not isinstance(model, torch.nn.Module):
        raise ModelImportError(f"{source} returned a {type(model).__name__}, not a torch.nn.Module")
    return model, shape


@contextlib.contextmanager
def _parameters_on_meta(torch):
    """Build on the CPU but move every parameter and buffer to meta as it is registered: for builders that
    cannot run with meta as the default device (torchvision's regnet_* compute their widths with tensors,
    "Cannot copy out of meta tensor"). Initialisation then runs on meta, so no weights are filled."""
    module = torch.nn.Module
    register_parameter, register_buffer = module.register_parameter, module.register_buffer

    def parameter(self, name, param):
        if param is not None and param.device.type != "meta":
            param = torch.nn.Parameter(param.to("meta"), requires_grad=param.requires_grad)
        register_parameter(self, name, param)

    def buffer(self, name, tensor, persistent=True):
        register_buffer(self, name, tensor.to("meta") if tensor is not None else None, persistent)

    module.register_parameter, module.register_buffer = parameter, buffer
    try:
        yield
    finally:
        module.register_parameter, module.register_buffer = register_parameter, register_buffer


def load_network(name: str, batch: int):
    """The ``Network`` of a torch network name at mini-batch ``batch`` (``engine.zoo.get_network`` picks
    the default batch)."""
    from ..network import Network

    net = _imported(canonical_name(*split_name(name)))
    return Network(net.name, batch, copy.deepcopy(net.layers), net.description)


@functools.lru_cache(maxsize=16)
def _imported(name: str):
    """One import per name: searches such as the largest fitting mini-batch rebuild a network many times,
    and only the batch changes (Python caches the imported module anyway)."""
    from .importer import import_model

    source, shape = split_name(name)
    model, _ = load_model(name, device="meta")
    return import_model(model, shape, 1, name, f"{source} imported from PyTorch, input {'x'.join(map(str, shape))}")


def _torch(name: str):
    try:
        import torch
    except ImportError:
        raise ModelImportError(f'{name} needs PyTorch: python3 -m pip install -e ".[torch]"') from None
    return torch


def _torchvision(model: str):
    try:
        import torchvision
    except ImportError:
        raise ModelImportError(f'torchvision:{model} needs torchvision: python3 -m pip install -e ".[torch]"') from None
    known = torchvision.models.list_models(module=torchvision.models)
    segmentation = torchvision.models.list_models(module=torchvision.models.segmentation)
    if model not in known + segmentation:
        near = difflib.get_close_matches(model, known + segmentation, n=3)
        raise ModelImportError(
            f"unknown torchvision model {model!r}"
            + (f" (did you mean {', '.join(near)}?)" if near else "")
            + f"; torchvision.models.list_models() names its {len(known)} classification models, "
            "list_models(module=torchvision.models.segmentation) its segmentation models"
        )
    with warnings.catch_warnings():  # weight-initialisation notices: the weights are never used
        warnings.simplefilter("ignore")
        # a segmentation model's backbone would otherwise download ImageNet weights
        return torchvision.models.get_model(
            model, weights=None, **({"weights_backbone": None} if model in segmentation else {})
        )


def _call(module_name: str, attr: str):
    added = os.getcwd() not in sys.path
    if added:  # python -m puts the current directory on the path; panel serve does not
        sys.path.append(os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except SystemExit as err:
        raise ModelImportError(
            f"importing {module_name!r} for {module_name}:{attr} called sys.exit({err.code!r})"
        ) from None
    except Exception as err:  # noqa: BLE001 - the user's module: its own error, on one line
        raise ModelImportError(
            f"cannot import {module_name!r} for {module_name}:{attr}: "
            f"{type(err).__name__}: {' '.join(str(err).split())}"
        ) from None
    finally:
        if added:
            sys.path.remove(os.getcwd())
    target = module
    for part in attr.split("."):
        if not hasattr(target, part):
            raise ModelImportError(f"{module_name}:{attr}: module {module_name!r} has no attribute {attr!r}")
        target = getattr(target, part)
    if not callable(target):
        raise ModelImportError(f"{module_name}:{attr} is a {type(target).__name__}, not a callable returning a model")
    try:
        return target()
    except SystemExit as err:  # a builder that exits would end the command with its status, silently
        raise ModelImportError(
            f"{module_name}:{attr}() called sys.exit({err.code!r}) instead of returning a model"
        ) from None
    except Exception as err:  # noqa: BLE001 - the user's builder failed: report it in one line
        raise ModelImportError(
            f"{module_name}:{attr}() failed: {type(err).__name__}: {' '.join(str(err).split())}"
        ) from None
