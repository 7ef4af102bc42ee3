"""Every tensor of one training iteration, as each paper's framework allocates it.

The three papers count memory on three different frameworks, and their numbers only follow from
layer shapes once the framework's tensor rules are fixed. A *convention* holds those rules:

* ``superneurons``: superneurons-release (the code behind SuperNeurons arXiv:1801.04380). Every layer writes its
  own output (ReLU and LRN too); ReLU, LRN and Softmax compute their gradient in place (LRN's
  backward registers that gradient twice, which is why l^b(LRN1) = 4 x 221.56 MiB in Table 1);
  CONV, POOL, FC, BN and Dropout write a new dX, the first CONV included. With these rules the
  AlexNet b200 numbers of Fig. 10 reproduce to the MiB (tests/test_zoo.py, test_memory_superneurons.py).
* ``torch``: Torch7 as vDNN's baseline uses it (arXiv:1602.08124 §II-B footnote 1): activations in place
  (Y = X, dX = dY), everything else out of place.
* ``caffe``: Caffe as Layrub modifies it (doi:10.1145/3243904 §4): blobs carry data and diff; ReLU and
  Dropout in place; a fork keeps one diff per branch (Caffe's Split layer).
* ``pytorch``: autograd's saved tensors, for comparing with ``torch.cuda.max_memory_allocated``:
  in-place ReLU saving its output, max-pool int64 indices, bool dropout masks, BN saved statistics,
  gradients of weights allocated when backward produces them, residual ``+=`` in place.

A ``generic`` layer (any other operation of an imported PyTorch model) takes its rule from what PyTorch was
seen to do there, under every convention (``Convention.layer_rule``): the storage it shares, the inputs and
output autograd keeps, and the extra tensors it keeps (``S:L:saved``).

Names: ``Y:L`` output of layer L, ``G:L`` gradient w.r.t. it, ``G:L@C`` the part consumer C
contributes when L fans out, ``W:L``/``dW:L``/``O:L`` weights, their gradients and optimizer state,
``M:L`` masks and indices, ``S:L`` saved BN statistics, ``R:L`` BN running statistics.
Tensors that share memory (in-place ops) share a *storage*; memory is counted per storage.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from ..errors import EngineError
from ..network import Network

# Classes for stacking memory; the first four live the whole iteration.
CLASSES = (
    "weights",
    "weight_grads",
    "optimizer",
    "bn_stats",
    "input",
    "activations",
    "gradients",
    "masks",
    "workspace",
)
DATA_CLASSES = ("activations", "gradients")  # SuperNeurons' DATA tensors, Layrub's "intermediate data"


@dataclass(frozen=True)
class OpRule:
    """How one op allocates: in place or not, what its backward reads, how it writes dX."""

    inplace: bool = False  # Y shares X's storage
    saves: tuple[str, ...] = ()  # backward reads "X", "Y" and/or named extras
    dx: str = "new"  # new | alias_dy (in place) | alias_y (into Y) | none
    dup_dy: bool = False  # superneurons-release registers dY twice (LRN): counted twice in l^b


@dataclass(frozen=True)
class Extra:
    """A tensor an op keeps besides its output: size per element of X or Y, or per channel."""

    per: str  # "x", "y" or "channel"
    nbytes: float  # bytes per unit (per element or per channel)
    cls: str
    scope: str = "saved"  # saved: forward to backward; persistent: whole iteration; backward: only there
    mode: str | None = None  # only for layers with this params["mode"] (max-pool indices)


@dataclass(frozen=True)
class Convention:
    name: str
    rules: dict[str, OpRule]
    extras: dict[str, dict[str, Extra]] = field(default_factory=dict)  # op -> {name: Extra}
    fork: str = "keep"  # keep: one gradient per branch, summed at the producer; accumulate
    grad_of_input: bool = False  # the first layer computes dX of the input batch anyway
    weight_grads: str = "persistent"  # persistent | from_backward
    optimizer_copies: int = 0  # optimizer state in units of the weights (momentum = 1)
    input_held: bool = False  # the caller holds the input batch for the whole step (a training loop's x)
    source: str = ""

    def rule(self, op: str) -> OpRule:
        return self.rules.get(op, OpRule(saves=("X",)))

    def layer_rule(self, layer) -> OpRule:
        """The op's rule; a generic layer's comes from what PyTorch did there (engine/pytorch/trace.py): it
        writes into the storage it aliases, keeps the inputs (``X<i>``), output and extra it was seen to save,
        and a view passes its gradient through as a view of dY."""
        if layer.op != "generic":
            return self.rule(layer.op)
        p = layer.params
        view = p["alias"] is not None and not p["inplace"]
        return OpRule(
            inplace=p["alias"] is not None,
            saves=tuple(p["saves"]) + ("saved",) * any(p["extra_bytes"]),
            dx="alias_dy" if view else "new",
        )

    def with_options(self, **kw) -> "Convention":
        return replace(self, **kw)


_SN = Convention(
    "superneurons",
    {
        "conv": OpRule(saves=("X",)),
        "fc": OpRule(saves=("X",)),
        "pool": OpRule(saves=("Y", "X")),
        "relu": OpRule(saves=("Y", "X"), dx="alias_dy"),
        "lrn": OpRule(saves=("Y", "X"), dx="alias_dy", dup_dy=True),
        "bn": OpRule(saves=("X",)),
        "dropout": OpRule(saves=("mask",)),
        "softmax": OpRule(saves=("Y", "X"), dx="alias_y"),
        "add": OpRule(dx="alias_dy"),
        "concat": OpRule(dx="alias_dy"),
    },
    {
        "dropout": {"mask": Extra("x", 1, "masks", "persistent")},
        "bn": {"running": Extra("channel", 8, "bn_stats", "persistent")},
    },
    fork="keep",
    grad_of_input=True,
    weight_grads="persistent",
    source="superneurons-release src/layer/*.cpp (forward/backward dependency registration)",
)

_TORCH = Convention(
    "torch",
    {
        "conv": OpRule(saves=("X",)),
        "fc": OpRule(saves=("X",)),
        "pool": OpRule(saves=("X", "Y")),
        "relu": OpRule(inplace=True, saves=("Y",), dx="alias_dy"),
        "lrn": OpRule(saves=("X", "Y")),
        "bn": OpRule(saves=("X", "stats")),
        "dropout": OpRule(saves=("noise",)),
        "softmax": OpRule(saves=("Y",)),
        "add": OpRule(dx="alias_dy"),
        "concat": OpRule(dx="alias_dy"),
    },
    {
        "dropout": {"noise": Extra("x", 4, "masks")},
        "bn": {"stats": Extra("channel", 8, "bn_stats"), "running": Extra("channel", 8, "bn_stats", "persistent")},
    },
    fork="accumulate",
    grad_of_input=False,
    weight_grads="persistent",
    source="Torch7 nn/cudnn as in vDNN arXiv:1602.08124 §II-B and Fig. 2 (in-place ACTV)",
)

_CAFFE = Convention(
    "caffe",
    {
        "conv": OpRule(saves=("X",)),
        "fc": OpRule(saves=("X",)),
        "pool": OpRule(saves=("X", "Y")),
        "relu": OpRule(inplace=True, saves=("Y",), dx="alias_dy"),
        "lrn": OpRule(saves=("X", "Y")),
        "bn": OpRule(inplace=True, saves=("xnorm", "stats")),
        "dropout": OpRule(inplace=True, saves=("mask",), dx="alias_dy"),
        "softmax": OpRule(saves=("Y",)),
        "add": OpRule(),
        "concat": OpRule(),
    },
    {
        "dropout": {"mask": Extra("x", 4, "masks")},
        "bn": {
            "xnorm": Extra("x", 4, "activations"),
            "stats": Extra("channel", 8, "bn_stats"),
            "running": Extra("channel", 8, "bn_stats", "persistent"),
        },
    },
    fork="keep",
    grad_of_input=False,
    weight_grads="persistent",
    source="BVLC Caffe layers (in-place ReLU/Dropout/BatchNorm, Split for fan-out) as Layrub uses it",
)

_PYTORCH = Convention(
    "pytorch",
    {
        "conv": OpRule(saves=("X",)),
        "fc": OpRule(saves=("X",)),
        "pool": OpRule(saves=("X", "indices")),
        "relu": OpRule(inplace=True, saves=("Y",)),
        "lrn": OpRule(saves=("X", "Y")),
        "bn": OpRule(saves=("X", "stats")),
        "dropout": OpRule(saves=("mask",)),
        "softmax": OpRule(saves=("Y", "lossgrad")),
        "add": OpRule(inplace=True, dx="alias_dy"),
        "concat": OpRule(dx="alias_dy"),
    },
    {
        "pool": {"indices": Extra("y", 8, "masks", mode="max")},
        "dropout": {"mask": Extra("x", 1, "masks")},
        "bn": {"stats": Extra("channel", 8, "bn_stats"), "running": Extra("channel", 8, "bn_stats", "persistent")},
        "softmax": {"lossgrad": Extra("y", 4, "gradients", "backward")},
    },
    fork="accumulate",
    grad_of_input=False,
    weight_grads="from_backward",
    input_held=True,
    source="PyTorch autograd saved tensors (torchvision models, cuDNN conv/BN, CrossEntropyLoss); the training "
    "loop holds the input batch",
)

CONVENTIONS = {c.name: c for c in (_SN, _TORCH, _CAFFE, _PYTORCH)}


def get_convention(name: str) -> Convention:
    try:
        return CONVENTIONS[name]
    except KeyError:
        raise EngineError(f"unknown tensor convention {name!r}; known: {', '.join(CONVENTIONS)}") from None


@dataclass(frozen=True)
class Tensor:
    name: str
    cls: str
    nbytes: int
    layer: str
    storage: str
    persistent: bool = False


@dataclass
class Inventory:
    """The tensors of one iteration and, per layer, what its forward and backward read and write.

    ``fwd_uses``/``bwd_uses`` are ordered lists in the order superneurons-release registers its
    dependencies (they may repeat a tensor, see ``OpRule.dup_dy``); residency uses them as sets.
    ``route`` is the forward step order (data layer excluded): layer ``route[i]`` runs forward at
    step i+1 and backward at step 2N-i.
    """

    net: Network
    convention: Convention
    itemsize: int
    route: list[str]
    tensors: dict[str, Tensor]
    fwd_uses: dict[str, list[str]]
    bwd_uses: dict[str, list[str]]

    def storage_bytes(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for t in self.tensors.values():
            out[t.storage] = max(out.get(t.storage, 0), t.nbytes)
        return out

    def storage_class(self) -> dict[str, str]:
        """A storage is stacked under the class of the tensor that creates it."""
        out: dict[str, str] = {}
        for t in self.tensors.values():
            out.setdefault(t.storage, t.cls)
        return out

    def persistent_storages(self) -> set[str]:
        return {t.storage for t in self.tensors.values() if t.persistent}

    def uses_bytes(self, names, classes=DATA_CLASSES) -> int:
        """Bytes of a dependency list as superneurons-release sums it: a tensor listed twice counts
        twice (its LRN registers dY twice), an in-place alias of a listed tensor counts once."""
        total, seen = 0, {}
        for n in names:
            t = self.tensors[n]
            if t.cls not in classes or seen.get(t.storage, n) != n:
                continue
            seen[t.storage] = n
            total += t.nbytes
        return total


def route_construct(net: Network) -> list[str]:
    """SuperNeurons' RouteConstruct (arXiv:1801.04380 Alg. 1): depth-first from the data layer, a
    layer joins the route only when all its inputs have arrived (counter == number of inputs)."""
    counter: dict[str, int] = {}
    route: list[str] = []
    stack: list[str] = [net.layers[0].name]
    # iterative form of the recursion: children pushed in reverse so they are visited in order
    while stack:
        name = stack.pop()
        counter[name] = counter.get(name, 0) + 1
        if counter[name] < len(net.layer(name).inputs):
            continue
        route.append(name)
        stack.extend(reversed(net.consumers[name]))
    if len(route) != len(net.layers):
        missing = [layer.name for layer in net.layers if layer.name not in set(route)]
        raise EngineError(f"network {net.name!r}: layers {missing[:5]} are not reachable from the data layer")
    return [name for name in route if net.layer(name).op != "data"]


def _elems(shape) -> int:
    return math.prod(shape)


def build_inventory(
    net: Network, convention: Convention | str = "superneurons", itemsize: int = 4, framework_bytes: int = 0
) -> Inventory:
    """All tensors of one training iteration of ``net`` under ``convention``."""
    conv = get_convention(convention) if isinstance(convention, str) else convention
    route = route_construct(net)
    N = net.batch
    tensors: dict[str, Tensor] = {}

    sizes: dict[str, int] = {}

    def add(name, cls, nbytes, layer, storage=None, persistent=False):
        st = storage or name
        tensors[name] = Tensor(name, cls, int(nbytes), layer, st, persistent)
        sizes[st] = max(sizes.get(st, 0), int(nbytes))
        return name

    def act_bytes(layer_name) -> int:
        layer = net.layer(layer_name)
        return (
            layer.elems(N) * layer.params.get("itemsize", itemsize)
            if layer.op == "generic"
            else N * _elems(layer.out_shape) * itemsize
        )

    data = net.layers[0]
    add(f"Y:{data.name}", "input", act_bytes(data.name), data.name, persistent=conv.input_held)
    if framework_bytes:  # library workspaces the framework keeps allocated (PyTorch: cuBLAS, cuBLASLt)
        add("L:framework", "workspace", framework_bytes, data.name, persistent=True)
    fwd_uses: dict[str, list[str]] = {}
    bwd_uses: dict[str, list[str]] = {name: [] for name in route}
    extras_of: dict[str, dict[str, str]] = {}

    # forward: outputs, in-place aliases, extras, persistent parameters
    for name in route:
        layer = net.layer(name)
        rule = conv.layer_rule(layer)
        src = layer.inputs[0]
        if layer.op == "generic":  # a view or in-place write shares the storage PyTorch saw it share
            alias = layer.params["alias"]
            y_storage = tensors[f"Y:{layer.inputs[alias]}"].storage if alias is not None else None
        else:
            inplace = rule.inplace and len(net.consumers[src]) == 1 and net.layer(src).op != "data"
            y_storage = tensors[f"Y:{src}"].storage if inplace else None
        nbytes = act_bytes(name) if y_storage is None else min(act_bytes(name), sizes[y_storage])
        add(f"Y:{name}", "activations", nbytes, name, storage=y_storage)
        uses = [f"Y:{s}" for s in layer.inputs] + [f"Y:{name}"]
        ex_names = {}
        if layer.op == "generic" and any(layer.params["extra_bytes"]):
            per, fixed = layer.params["extra_bytes"]
            ex_names["saved"] = add(f"S:{name}:saved", "activations", per * N + fixed, name)
            uses.append(ex_names["saved"])
        for ex_name, ex in conv.extras.get(layer.op, {}).items():
            if ex.mode is not None and layer.params.get("mode", "max") != ex.mode:
                continue
            unit = {"x": N * _elems(net.layer(src).out_shape), "y": N * layer.out_elems, "channel": layer.out_shape[0]}[
                ex.per
            ]
            persistent = ex.scope == "persistent"
            tname = add(
                f"M:{name}:{ex_name}" if ex.cls == "masks" else f"S:{name}:{ex_name}",
                ex.cls,
                math.ceil(unit * ex.nbytes),
                name,
                persistent=persistent,
            )
            ex_names[ex_name] = tname
            if ex.scope == "saved":
                uses.append(tname)
        extras_of[name] = ex_names
        fwd_uses[name] = uses
        if layer.param_count:
            pbytes = layer.param_count * itemsize
            add(f"W:{name}", "weights", pbytes, name, persistent=True)
            add(f"dW:{name}", "weight_grads", pbytes, name, persistent=conv.weight_grads == "persistent")
            for k in range(conv.optimizer_copies):
                add(f"O{k}:{name}", "optimizer", pbytes, name, persistent=True)

    # backward, in reverse route order: gradients and their storages
    grads_of: dict[str, list[str]] = {}  # produced tensor -> gradient tensors its producer reads
    for name in reversed(route):
        layer = net.layer(name)
        rule = conv.layer_rule(layer)
        uses = bwd_uses[name]
        dy = grads_of.get(name, [])
        for s in rule.saves:
            if s == "X":
                uses += [f"Y:{i}" for i in layer.inputs]
            elif s[0] == "X":
                uses.append(f"Y:{layer.inputs[int(s[1:])]}")
            elif s == "Y":
                uses.append(f"Y:{name}")
            elif s in extras_of[name]:
                uses.append(extras_of[name][s])
        uses += dy
        if rule.dup_dy:
            uses += dy
        for ex_name, ex in conv.extras.get(layer.op, {}).items():
            if ex.scope == "backward" and ex_name in extras_of[name]:
                uses.append(extras_of[name][ex_name])
        if layer.param_count:
            uses.append(f"dW:{name}")
        dy_storage = tensors[dy[0]].storage if len(dy) == 1 else None
        for src in layer.inputs:
            if net.layer(src).op == "data" and not conv.grad_of_input:
                continue
            if net.layer(src).op != "data" and not net.needs_grad[src] and not conv.grad_of_input:
                continue
            if rule.dx == "none":
                continue
            if rule.dx == "alias_dy" and dy_storage is not None:
                storage = dy_storage
            elif rule.dx == "alias_y":
                storage = tensors[f"Y:{name}"].storage
            else:
                storage = None
            size = act_bytes(src)
            fan = len(net.consumers[src])
            if fan == 1:
                gname = add(f"G:{src}", "gradients", size, name, storage)
                grads_of[src] = [gname]
                uses.append(gname)
            elif conv.fork == "keep":
                gname = add(f"G:{src}@{name}", "gradients", size, name, storage)
                grads_of.setdefault(src, []).append(gname)
                uses.append(gname)
            else:  # accumulate: the first contribution becomes the buffer, later ones are added into it
                acc = f"G:{src}"
                if acc not in tensors:
                    add(acc, "gradients", size, name, storage)
                    grads_of[src] = [acc]
                    uses.append(acc)
                else:
                    part = add(f"G:{src}@{name}", "gradients", size, name, storage)
                    uses += [acc, part]
        bwd_uses[name] = uses
    return Inventory(net, conv, itemsize, route, tensors, fwd_uses, bwd_uses)
