"""Memory policies of vDNN, Layrub and SuperNeurons as transformations of the tick timeline.

Each builder takes an ``Inventory`` (tensors.py) and returns a ``MemoryPlan`` (timeline.py): the ticks,
the residency of every storage, and the copies. Rules are cited to the papers (file + section);
choices the papers leave open are keyword switches whose defaults are documented here and in
docs/reproduction.md. vDNN_dyn tries several of these plans under a capacity (a ``search``).

The module is over 300 statements because every builder of the three papers sits beside the registry
(``MEMORY_POLICIES``) that names it, and says what it needs, for every reader: a new memory policy is one
builder and one ``register`` line here.
"""

from __future__ import annotations

import inspect
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from ..errors import EngineError
from .tensors import DATA_CLASSES, Inventory, Tensor
from .timeline import Copy, MemoryPlan, Tick, base_ticks, cut, liveness_intervals, merge, whole_iteration

SN_CHECKPOINTS = ("conv", "fc", "softmax", "data")  # superneurons-release recompute.h is_checkpoint


# ----------------------------------------------------------------------------------- baselines


def baseline_superneurons(inv: Inventory) -> MemoryPlan:
    """SuperNeurons' baseline (arXiv:1801.04380 §3, "naive network-wide tensor allocation"): one
    tensor per request, all resident all iteration: peak = sum l^f + sum l^b."""
    ticks = base_ticks(inv)
    return MemoryPlan("baseline-superneurons", inv, ticks, whole_iteration(inv, ticks), workspace_rule="per-kernel-p")


def baseline_vdnn(inv: Inventory, algo: str = "p") -> MemoryPlan:
    """vDNN's baseline (arXiv:1602.08124 §II-C, Fig. 2, §IV-A): Torch's network-wide allocation with all
    W and X resident, dX and dY as two buffers sized to the largest dY and reused by every layer,
    and one workspace buffer sized to the largest workspace. Static: max = average."""
    ticks = base_ticks(inv)
    classes = inv.storage_class()
    intervals = {st: spans for st, spans in whole_iteration(inv, ticks).items() if classes[st] != "gradients"}
    grads = [t.nbytes for t in inv.tensors.values() if t.cls == "gradients"]
    plan = MemoryPlan(f"baseline-vdnn-{algo}", inv, ticks, intervals, workspace_rule=f"shared-{algo}")
    plan.class_override["gradients"] = 2 * max(grads, default=0)
    return plan


def baseline_caffe(inv: Inventory) -> MemoryPlan:
    """Layrub's baseline (doi:10.1145/3243904 §5.1): Caffe allocates data and diff
    of every blob for the whole network, statically; each conv layer keeps its own workspace."""
    ticks = base_ticks(inv)
    return MemoryPlan("baseline-caffe", inv, ticks, whole_iteration(inv, ticks), workspace_rule="per-layer-heuristic")


def liveness(inv: Inventory, workspace: str = "fit") -> MemoryPlan:
    """SuperNeurons' liveness analysis (arXiv:1801.04380 §3.2): a tensor lives from its first to its
    last use; peak = sum l^f + l^b_N for a chain."""
    ticks = base_ticks(inv)
    return MemoryPlan("liveness", inv, ticks, liveness_intervals(inv, ticks), workspace_rule=workspace)


# --------------------------------------------------------------------------- offload machinery


@dataclass
class _Offload:
    storage: str
    release: int  # last tick on the GPU before the gap
    prefetch: int  # first tick back on the GPU
    off_issue: int
    off_at: str
    off_deadline: int | None
    pre_deadline: int | None
    pre_reason: str


def _apply_offloads(plan: MemoryPlan, offloads: list[_Offload]) -> None:
    inv = plan.inventory
    sizes = inv.storage_bytes()
    for o in offloads:
        if o.prefetch <= o.release + 1:
            continue  # no gap: the reuse is immediate, nothing to gain
        plan.intervals[o.storage] = cut(plan.intervals[o.storage], (o.release + 1, o.prefetch - 1))
        plan.copies.append(
            Copy(o.storage, "offload", sizes[o.storage], o.off_issue, o.off_at, o.off_deadline, "offload")
        )
        plan.copies.append(
            Copy(o.storage, "prefetch", sizes[o.storage], o.prefetch, "start", o.pre_deadline, o.pre_reason)
        )


def _uses_by_storage(inv: Inventory, ticks: list[Tick]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for t in ticks:
        for st in {inv.tensors[n].storage for n in t.uses}:
            out.setdefault(st, []).append(t.index)
    return out


def _fwd_bwd_split(uses: list[int], n_fwd: int) -> tuple[int | None, int | None]:
    fwd = [u for u in uses if u < n_fwd]
    bwd = [u for u in uses if u >= n_fwd]
    return (max(fwd) if fwd else None), (min(bwd) if bwd else None)


# ------------------------------------------------------------------------------------- vDNN


def feature_extractor(inv: Inventory) -> list[str]:
    """Layers before the first FC in the route: vDNN manages only these (arXiv:1602.08124 §III intro)."""
    out = []
    for name in inv.route:
        if inv.net.layer(name).op == "fc":
            break
        out.append(name)
    return out


def vdnn(inv: Inventory, offload: str = "all", algo: str = "p") -> MemoryPlan:
    """vDNN_all / vDNN_conv (arXiv:1602.08124 §III-A..C).

    * Offload: X of layer n (every feature-extraction layer but the in-place ACTV for ``all``,
      CONV only for ``conv``), started with layer n's forward and synchronised at its end, only
      when n is the last consumer of X (refcnt); X is released before layer n+1.
    * Prefetch: before layer m's backward, ``findPrefetchLayer(m)`` walks m-1, m-2, ... and returns
      the first offloaded, not yet prefetched layer, stopping at the nearest CONV; the copy overlaps
      bwd(m) and is synchronised at its end. (The pseudo-code figure is missing from the text; this
      reconstruction is ours.) An X still on the host when its layer's backward
      starts is fetched on demand [assume].
    * Everything else is layer-wise (liveness); the input batch counts as layer 1's X.
    """
    if offload not in ("all", "conv"):
        raise EngineError(f"vDNN offload set must be 'all' or 'conv', got {offload!r}")
    ticks = base_ticks(inv)
    n = len(inv.route)
    plan = MemoryPlan(f"vdnn-{offload}-{algo}", inv, ticks, liveness_intervals(inv, ticks), workspace_rule=algo)
    uses = _uses_by_storage(inv, ticks)
    pos = {name: i for i, name in enumerate(inv.route)}
    offloaded_x: dict[str, list[str]] = {}  # layer -> storages of its X it offloads
    persistent = inv.persistent_storages()
    for name in feature_extractor(inv):
        layer = inv.net.layer(name)
        if offload == "conv" and layer.op != "conv":
            continue
        if offload == "all" and layer.op == "relu":
            continue  # in place, only Y and dY are used (vDNN arXiv:1602.08124 §III-B)
        for src in layer.inputs:
            st = inv.tensors[f"Y:{src}"].storage
            last_f, first_b = _fwd_bwd_split(uses[st], n)
            if last_f != pos[name] or first_b is None or st in persistent:
                continue  # not the last consumer, or never reused: released, not offloaded
            offloaded_x.setdefault(name, []).append(st)
    prefetched: set[str] = set()
    prefetch_at: dict[str, int] = {}
    for tick in ticks[n:]:
        m = pos[tick.layer]
        for cand in range(m - 1, -1, -1):
            cname = inv.route[cand]
            if cname in offloaded_x and cname not in prefetched:
                prefetched.add(cname)
                for st in offloaded_x[cname]:
                    prefetch_at[st] = tick.index
                break
            if inv.net.layer(cname).op == "conv":
                break
    offs = []
    for name, sts in offloaded_x.items():
        for st in sts:
            _, first_b = _fwd_bwd_split(uses[st], n)
            p = prefetch_at.get(st)
            if p is None or p > first_b:
                offs.append(_Offload(st, pos[name], first_b, pos[name], "start", pos[name] + 1, first_b, "on demand"))
            else:
                offs.append(_Offload(st, pos[name], p, pos[name], "start", pos[name] + 1, p + 1, "findPrefetchLayer"))
    _apply_offloads(plan, offs)
    plan.options.update(offload=offload, algo=algo)
    return plan


# ------------------------------------------------------------------------------------ Layrub

LAYRUB_INTRA_CONSUMERS = ("conv", "fc")


def layrub_alias(
    inv: Inventory, relu_mask_bytes: float = 1.0, consumers: tuple[str, ...] = LAYRUB_INTRA_CONSUMERS
) -> tuple[Inventory, list[str]]:
    """Layrub's intra-layer reuse (doi:10.1145/3243904 §3.1-3.2, §4.2): with wgrad before dgrad, a CONV or FC
    writes dX into X's buffer once no later backward reads X's data. ReLU keeps a 1-byte sign mask
    ("char") instead of its data so its blob qualifies. An input that fans out, or whose data a later
    backward still reads (a POOL or LRN producer needs its output), is not aliased [assume: the
    paper discusses neither]."""
    tensors = dict(inv.tensors)
    bwd = {k: list(v) for k, v in inv.bwd_uses.items()}
    fwd = {k: list(v) for k, v in inv.fwd_uses.items()}
    n_items = inv.net.batch
    for name in inv.route:
        layer = inv.net.layer(name)
        if layer.op == "relu" and f"Y:{name}" in bwd[name]:
            mname = f"M:{name}:sign"
            nbytes = int(n_items * layer.out_elems * relu_mask_bytes)
            tensors[mname] = Tensor(mname, "masks", nbytes, name, mname)
            fwd[name].append(mname)
            bwd[name] = [mname if u == f"Y:{name}" else u for u in bwd[name]]
    storage = {k: t.storage for k, t in tensors.items()}
    members: dict[str, list[str]] = {}
    for k, st in storage.items():
        members.setdefault(st, []).append(k)
    order = list(reversed(inv.route))
    last_read: dict[str, int] = {}  # storage -> last position in backward order that reads it
    for j, name in enumerate(order):
        for u in bwd[name]:
            last_read[storage[u]] = j
    aliased = []
    for j, name in enumerate(order):
        layer = inv.net.layer(name)
        if layer.op not in consumers or len(layer.inputs) != 1:
            continue
        src = layer.inputs[0]
        g = f"G:{src}"
        if g not in tensors or len(inv.net.consumers[src]) != 1 or inv.net.layer(src).op == "data":
            continue
        x_st = storage[f"Y:{src}"]
        if last_read.get(x_st, -1) > j:
            continue
        old = storage[g]
        for k in members.pop(old):
            storage[k] = x_st
            members[x_st].append(k)
        last_read[x_st] = max(last_read.get(x_st, -1), last_read.get(old, -1))
        aliased.append(name)
    new_tensors = {k: Tensor(t.name, t.cls, t.nbytes, t.layer, storage[k], t.persistent) for k, t in tensors.items()}
    out = Inventory(inv.net, inv.convention, inv.itemsize, inv.route, new_tensors, fwd, bwd)
    return out, aliased


def layrub(inv: Inventory, mode: str = "hybrid", buffers: str = "constant", relu_mask_bytes: float = 1.0) -> MemoryPlan:
    """Layrub (doi:10.1145/3243904 §3-4, Alg. 1).

    * intra: ``layrub_alias`` on Caffe's network-wide allocation.
    * inter: a Tracer counts each blob's forward consumers; when the count hits 0 after a layer's
      forward the blob's data (and a ReLU's sign mask, kept "in CPU memory", §4.2) is offloaded on
      ``migrate_stream``, overlapped with that layer and
      synchronised at its end. During bwd(l) the data bwd(l-1) needs is loaded (one-layer
      lookahead), synchronised per layer; data still on the host is loaded on demand [assume].
      A blob that no backward reads is released, not copied [assume].
    * hybrid: both (the paper's default, §3.4).
    ``buffers="constant"``: Layrub reuses "a constant set of the largest buffers" (§3.3): activation
    and gradient memory is the largest number of blobs resident at once times the largest blob;
    ``"exact"`` counts the resident bytes.
    """
    if mode not in ("intra", "inter", "hybrid"):
        raise EngineError(f"Layrub mode must be intra, inter or hybrid, got {mode!r}")
    if buffers not in ("constant", "exact"):
        raise EngineError(f"Layrub buffers must be 'constant' or 'exact', got {buffers!r}")
    aliased: list[str] = []
    if mode in ("intra", "hybrid"):
        inv, aliased = layrub_alias(inv, relu_mask_bytes)
    ticks = base_ticks(inv)
    n = len(inv.route)
    if mode == "intra":
        plan = MemoryPlan("layrub-intra", inv, ticks, whole_iteration(inv, ticks), workspace_rule="per-layer-heuristic")
    else:
        plan = MemoryPlan(
            f"layrub-{mode}", inv, ticks, liveness_intervals(inv, ticks), workspace_rule="per-layer-heuristic"
        )
        uses = _uses_by_storage(inv, ticks)
        classes = inv.storage_class()
        offs = []
        loaded_by: dict[str, int] = {}
        for tick in ticks[n:-1]:  # during bwd(l), load what the next backward tick needs
            for u in ticks[tick.index + 1].uses:
                loaded_by.setdefault(inv.tensors[u].storage, tick.index)
        persistent = inv.persistent_storages()
        for st, us in uses.items():
            if classes[st] not in ("activations", "input", "masks") or st in persistent:
                continue
            last_f, first_b = _fwd_bwd_split(us, n)
            if last_f is None or first_b is None:
                continue
            p = loaded_by.get(st, first_b)
            if p <= last_f + 1:
                continue
            reason = "Loadin (l-1)" if p < first_b else "on demand"
            offs.append(_Offload(st, last_f, p, last_f, "start", last_f + 1, p + 1 if p < first_b else p, reason))
        _apply_offloads(plan, offs)
        if buffers == "constant":
            _constant_buffers(plan)
    plan.options.update(mode=mode, buffers=buffers if mode != "intra" else "static", aliased=aliased)
    plan.notes.append(f"intra-layer dX->X aliasing on {len(aliased)} layers" if aliased else "no intra-layer aliasing")
    return plan


def _constant_buffers(plan: MemoryPlan) -> None:
    """Replace activation and gradient memory by a constant pool: K buffers of the largest size,
    K the most activation/gradient storages resident at once (split by class as at that tick)."""
    inv = plan.inventory
    sizes = inv.storage_bytes()
    classes = inv.storage_class()
    n = len(plan.ticks)
    diff = {cls: [0] * (n + 1) for cls in DATA_CLASSES}
    for st, spans in plan.intervals.items():
        if classes[st] in diff:
            for a, b in spans:
                diff[classes[st]][a] += 1
                diff[classes[st]][b + 1] -= 1
    biggest = max((sizes[st] for st in plan.intervals if classes[st] in diff), default=0)
    run = {cls: 0 for cls in DATA_CLASSES}
    best = {cls: 0 for cls in DATA_CLASSES}
    for i in range(n):
        for cls in DATA_CLASSES:
            run[cls] += diff[cls][i]
        if sum(run.values()) > sum(best.values()):
            best = dict(run)
    for cls in DATA_CLASSES:
        plan.class_override[cls] = best[cls] * biggest


# ------------------------------------------------------------------------------- SuperNeurons


def _sn_conv_outputs(inv: Inventory) -> list[str]:
    return [inv.tensors[f"Y:{n}"].storage for n in inv.route if inv.net.layer(n).op == "conv"]


def _sn_offload(plan: MemoryPlan, storages: list[str]) -> None:
    """UTP offload/prefetch of CONV outputs (SuperNeurons arXiv:1801.04380 §3.3.1): the copy starts when the CONV
    has produced its output and overlaps the layers up to the next CONV; the GPU copy is freed when
    it completes [assume: by the end of that window; a late copy stalls the next CONV]. In backward,
    at each CONV the tensors needed up to the previous CONV are prefetched; tensors needed before
    the first backward CONV are prefetched when backward starts [assume]."""
    inv = plan.inventory
    ticks = plan.ticks
    uses = _uses_by_storage(inv, ticks)
    conv_f = [t.index for t in ticks if t.phase == "F" and inv.net.layer(t.layer).op == "conv"]
    conv_b = [t.index for t in ticks if t.phase == "B" and inv.net.layer(t.layer).op == "conv"]
    first_bwd = next(t.index for t in ticks if t.phase != "F")
    offs = []
    for st in storages:
        if st not in uses:
            continue
        last_f, first_b = _fwd_bwd_split(uses[st], first_bwd)
        if last_f is None or first_b is None:
            continue
        produced = min(uses[st])
        nxt = [c for c in conv_f if c > produced]
        window_end = (nxt[0] - 1) if nxt else first_bwd - 1
        release = max(last_f, window_end)
        starts = [c for c in conv_b if c < first_b]
        p = starts[-1] if starts else first_bwd
        offs.append(
            _Offload(
                st,
                release,
                p,
                produced,
                "end",
                release + 1,
                first_b,
                "prefetch at backward CONV" if starts else "prefetch at backward start",
            )
        )
    _apply_offloads(plan, offs)


def sn_offload(inv: Inventory, workspace: str = "fit") -> MemoryPlan:
    """Liveness + UTP offload of every CONV output (SuperNeurons Fig. 10b)."""
    plan = liveness(inv, workspace)
    plan.policy = "sn-offload"
    _sn_offload(plan, _sn_conv_outputs(inv))
    return plan


def is_checkpoint(layer, checkpoints=SN_CHECKPOINTS) -> bool:
    """A layer recomputation never re-forwards: a checkpoint op, or a generic layer that is not deterministic
    and cheap (it draws random numbers or runs a matmul/convolution: ``NetBuilder.generic``), the cost-aware
    rule of superneurons.txt §3.4 (recompute the cheap layers, keep the expensive ones)."""
    return layer.op in checkpoints or (layer.op == "generic" and layer.params["checkpoint"])


def sn_segments(inv: Inventory, checkpoints=SN_CHECKPOINTS) -> dict[str, list[str]]:
    """Recomputation segments (SuperNeurons arXiv:1801.04380 §3.4): for every non-checkpoint layer, the chain of
    non-checkpoint layers from the one after its checkpoint up to it, following first inputs."""
    net = inv.net
    out = {}
    for name in inv.route:
        if is_checkpoint(net.layer(name), checkpoints):
            continue
        chain = [name]
        cur = net.layer(name).inputs[0]
        while not is_checkpoint(net.layer(cur), checkpoints):
            chain.append(cur)
            cur = net.layer(cur).inputs[0]
        out[name] = list(reversed(chain))
    return out


def sn_bottleneck(inv: Inventory) -> tuple[str, int]:
    """l_peak = max_i l_i over backward dependency lists, summed as superneurons-release's
    ``find_bottleneck`` sums them (DATA tensors, duplicates counted)."""
    best = max(inv.route, key=lambda n: inv.uses_bytes(inv.bwd_uses[n]))
    return best, inv.uses_bytes(inv.bwd_uses[best])


def sn_segment_memory_centric(inv: Inventory, rule: str = "code", checkpoints=SN_CHECKPOINTS) -> dict[str, bool]:
    """Cost-aware recomputation's choice per segment: True = memory-centric.

    ``code`` (default): superneurons-release ``scan_checkpoint``: the segment's summed forward
    dependencies (inputs and outputs) exceed l_peak. ``paper``: SuperNeurons arXiv:1801.04380 §3.4 step 2,
    sum_seg l^f + l^b_seg > l_peak with l^f a layer's output and l^b_seg the backward memory of the
    segment's last layer. Both give Table 1's 17 re-forwards for AlexNet (only LRN1's segment
    goes memory-centric).
    """
    segs = sn_segments(inv, checkpoints)
    _, peak = sn_bottleneck(inv)
    longest: dict[str, list[str]] = {}  # segment start -> its full chain
    for chain in segs.values():
        if len(chain) > len(longest.get(chain[0], [])):
            longest[chain[0]] = chain
    out = {}
    for name, chain in segs.items():
        full = longest[chain[0]]
        if rule == "code":
            mem = sum(inv.uses_bytes(inv.fwd_uses[n]) for n in full)
        elif rule == "paper":
            mem = sum(inv.tensors[f"Y:{n}"].nbytes for n in full) + inv.uses_bytes(inv.bwd_uses[full[-1]])
        else:
            raise EngineError(f"cost-aware rule must be 'code' or 'paper', got {rule!r}")
        out[name] = mem > peak
    return out


def sn_recompute_ticks(
    inv: Inventory, strategy: str = "cost-aware", rule: str = "code", checkpoints=SN_CHECKPOINTS
) -> tuple[list[Tick], dict[str, list[tuple[int, int]]]]:
    """The tick list with re-forwards, and the residency of the dropped (non-checkpoint) outputs.

    Follows superneurons-release ``recompute.cpp``: in forward, a non-checkpoint output is freed
    after its consumers ran; before a backward layer that needs a freed tensor (its input or its
    output), the segment is re-forwarded from the checkpoint up to that layer (up to its input for
    a checkpoint), skipping layers whose output is still resident. Speed-centric keeps what it
    recomputed until liveness frees it; memory-centric frees each re-forwarded layer's
    non-checkpoint inputs unless the backward layer needs them; cost-aware picks per segment.
    """
    if strategy not in ("speed", "memory", "cost-aware"):
        raise EngineError(f"recomputation strategy must be speed, memory or cost-aware, got {strategy!r}")
    net = inv.net
    segs = sn_segments(inv, checkpoints)
    # an output that shares its storage (an in-place layer, or the layer an in-place one writes over) cannot be
    # dropped and re-forwarded alone: the storage holds the in-place result, which autograd keeps
    per_storage = Counter(t.storage for t in inv.tensors.values())
    droppable = {f"Y:{n}" for n in segs if per_storage[inv.tensors[f"Y:{n}"].storage] == 1}
    mem_mode = (
        sn_segment_memory_centric(inv, rule, checkpoints)
        if strategy == "cost-aware"
        else {n: strategy == "memory" for n in segs}
    )
    base = base_ticks(inv)
    n = len(inv.route)
    # last backward use of each dropped output in the original schedule (liveness frees after it)
    last_b: dict[str, int] = {}
    last_f: dict[str, int] = {}
    for t in base:
        for u in t.uses:
            if u in droppable:
                (last_f if t.phase == "F" else last_b)[u] = t.index
    freed_after: dict[int, list[str]] = {}  # original tick -> dropped outputs whose last use it is
    for last in (last_f, last_b):
        for u, i in last.items():
            freed_after.setdefault(i, []).append(u)
    ticks: list[Tick] = []
    resident: dict[str, int] = {}
    spans: dict[str, list[tuple[int, int]]] = {u: [] for u in droppable}

    def close(u, at):
        spans[u].append((resident.pop(u), at))

    def free_after(t):  # liveness: what tick t of the original schedule used last is freed
        for u in freed_after.get(t.index, ()):
            if u in resident and (last_f if t.phase == "F" else last_b).get(u) == t.index:
                close(u, ticks[-1].index)

    for t in base[:n]:
        ticks.append(Tick(len(ticks), t.step, t.layer, "F", t.uses))
        for u in t.uses:
            if u in droppable and u not in resident:
                resident[u] = ticks[-1].index
        free_after(t)
    pos = {name: i for i, name in enumerate(inv.route)}
    dropped_in = {a: [x for x in net.layer(a).inputs if f"Y:{x}" in droppable] for a in inv.route}

    def closure(names):
        """Layers to re-forward so that the outputs of ``names`` exist: each, and recursively the
        producers of its dropped inputs (all inputs: a join needs every branch [assume])."""
        out, todo = set(), list(names)
        while todo:
            a = todo.pop()
            if a not in out:
                out.add(a)
                todo.extend(dropped_in[a])
        return sorted(out, key=pos.get)

    for t in base[n:]:
        name = t.layer
        layer = net.layer(name)
        needs = set(t.uses)
        dropped_inputs = [x for x in layer.inputs if f"Y:{x}" in droppable and f"Y:{x}" in needs]
        own = f"Y:{name}" in droppable and f"Y:{name}" in needs
        if dropped_inputs or own:
            for a in closure(([name] if name in segs else []) + dropped_inputs):
                out = f"Y:{a}"
                if out in resident or out not in droppable:  # kept by liveness: nothing to re-forward
                    continue
                ticks.append(Tick(len(ticks), t.step, a, "R", tuple(inv.fwd_uses[a])))
                resident[out] = ticks[-1].index
                if mem_mode.get(a, False):
                    for u in inv.fwd_uses[a]:
                        if u in droppable and u != out and u in resident and u not in needs:
                            close(u, ticks[-1].index)
        ticks.append(Tick(len(ticks), t.step, name, "B", t.uses))
        free_after(t)
    for u in list(resident):
        close(u, len(ticks) - 1)
    return ticks, spans


def _recompute_plan(name: str, inv: Inventory, strategy: str, rule: str, workspace: str) -> MemoryPlan:
    """Liveness over the recomputation schedule: re-forwarded tensors live in their recompute spans; a
    storage they share with other tensors (an in-place convention) also holds those tensors' own uses."""
    ticks, spans = sn_recompute_ticks(inv, strategy, rule)
    intervals = liveness_intervals(inv, ticks)
    shared: dict[str, list[tuple[int, int]]] = {}
    for u, sp in spans.items():
        shared.setdefault(inv.tensors[u].storage, []).extend(sp)
    for st, sp in shared.items():
        for name, t in inv.tensors.items():
            if t.storage == st and name not in spans:
                used = [i for i, tick in enumerate(ticks) if name in tick.uses]
                sp.extend([(used[0], used[-1])] if used else [])
        intervals[st] = merge(sp)
    _reforwarded_extras(inv, ticks, spans, intervals)
    return MemoryPlan(
        name, inv, ticks, intervals, workspace_rule=workspace, recompute_count=sum(t.phase == "R" for t in ticks)
    )


def _reforwarded_extras(
    inv: Inventory,
    ticks: list[Tick],
    spans: dict[str, list[tuple[int, int]]],
    intervals: dict[str, list[tuple[int, int]]],
) -> None:
    """A re-forwarded layer's saved extras (max-pool indices, dropout masks, batch-norm statistics) are not kept
    from its forward: each re-forward makes them again, and they live as long as the output it makes or up to
    their own last use (the layer's backward), as the PyTorch runtime keeps them (engine/pytorch/recompute.py).
    Counted from the forward instead, AlexNet's max-pool indices stood 0.09 GiB per 256 samples above the
    measured step through conv2's backward."""
    fwd = {t.layer: t.index for t in ticks if t.phase == "F"}
    per_storage = Counter(t.storage for t in inv.tensors.values())
    for layer in {t.layer for t in ticks if t.phase == "R"}:
        again = [(a, b) for a, b in spans.get(f"Y:{layer}", []) if ticks[a].phase == "R" and ticks[a].layer == layer]
        starts = [a for a, _ in again] + [len(ticks)]
        for u in inv.fwd_uses[layer]:
            t = inv.tensors[u]
            if (
                t.layer != layer
                or u == f"Y:{layer}"
                or t.cls in ("activations", "input")
                or t.persistent
                or per_storage[t.storage] > 1
                or not again
            ):
                continue
            used = [tick.index for tick in ticks if u in tick.uses]
            # each re-forward's extras: up to the output's span end or their last use before the next re-forward
            intervals[t.storage] = merge(
                [(fwd[layer], fwd[layer])]
                + [(a, max([b] + [i for i in used if a <= i < nxt])) for (a, b), nxt in zip(again, starts[1:])]
            )


def sn_recompute(
    inv: Inventory, strategy: str = "cost-aware", rule: str = "code", offload: bool = True, workspace: str = "fit"
) -> MemoryPlan:
    """Liveness + UTP offload of CONV outputs + recomputation (SuperNeurons Fig. 10c, Table 1)."""
    plan = _recompute_plan("sn-recompute", inv, strategy, rule, workspace)
    if offload:
        _sn_offload(plan, _sn_conv_outputs(inv))
    plan.options.update(strategy=strategy, rule=rule, offload=offload)
    return plan


def superneurons(
    inv: Inventory,
    capacity: int | None = None,
    strategy: str = "cost-aware",
    rule: str = "code",
    workspace: str = "fit",
) -> MemoryPlan:
    """The full SuperNeurons runtime: liveness, cost-aware recomputation, and the LRU Tensor Cache
    (SuperNeurons arXiv:1801.04380 §3.3.2, Alg. 2): CONV outputs stay on the GPU and are offloaded only when an
    allocation would exceed the capacity, least recently used first, never one the running layer
    locks; an evicted tensor is fetched back when a layer needs it (a miss) [assume: on demand]."""
    plan = _recompute_plan("superneurons", inv, strategy, rule, workspace)
    if capacity is not None:
        _lru(plan, set(_sn_conv_outputs(inv)), capacity)
    plan.options.update(strategy=strategy, rule=rule, lru_capacity=capacity)
    return plan


def _lru(plan: MemoryPlan, candidates: set[str], capacity: int) -> None:
    inv = plan.inventory
    sizes = inv.storage_bytes()
    ticks = plan.ticks
    uses = _uses_by_storage(inv, ticks)
    n = len(ticks)
    live = [0.0] * (n + 1)  # resident bytes per tick before any eviction (workspace excluded)
    starts: dict[int, list[str]] = {}
    ends: dict[int, list[str]] = {}
    for st, sp in plan.intervals.items():
        for a, b in sp:
            live[a] += sizes[st]
            live[b + 1] -= sizes[st]
            if st in candidates:
                starts.setdefault(a, []).append(st)
                ends.setdefault(b + 1, []).append(st)
    for i in range(1, n + 1):
        live[i] += live[i - 1]
    adjust, restore = 0.0, [0.0] * (n + 2)  # evicted bytes, and when they come back
    resident: set[str] = set()
    last_use: dict[str, int] = {}
    evicted: set[str] = set()
    for t in ticks:
        k = t.index
        adjust += restore[k]
        for st in ends.get(k, []):
            resident.discard(st)
        for st in starts.get(k, []):
            resident.add(st)
        locked = {inv.tensors[u].storage for u in t.uses}
        for st in evicted & locked:  # a miss: fetch back what this tick needs
            evicted.discard(st)
            resident.add(st)
            plan.copies.append(Copy(st, "prefetch", sizes[st], k, "start", k, "LRU miss"))
        while live[k] + adjust > capacity:
            cands = [st for st in resident if st not in locked]
            if not cands:
                break
            victim = min(cands, key=lambda st: (last_use.get(st, -1), st))
            span_end = next(b for a, b in plan.intervals[victim] if a <= k <= b)
            nxt = next((u for u in uses[victim] if u > k), None)
            reused = nxt is not None and nxt <= span_end
            end = nxt - 1 if reused else span_end
            plan.intervals[victim] = cut(plan.intervals[victim], (k, end))
            resident.discard(victim)
            adjust -= sizes[victim]
            restore[end + 1] += sizes[victim]
            if reused:
                evicted.add(victim)
                plan.copies.append(Copy(victim, "offload", sizes[victim], k, "start", k, "LRU eviction"))
        for st in locked:
            last_use[st] = k


# -------------------------------------------------------------------------------------- vDNN_dyn


def vdnn_dyn(inv: Inventory, evaluate: Callable, capacity: int | None, workspace: str | None):
    """vDNN_dyn (arXiv:1602.08124 §III-C): profiling passes under the capacity. (1) vDNN_all with memory-optimal
    convolutions must fit, else the network is untrainable; (2) no offload, then vDNN_conv, then vDNN_all, all
    with the fastest algorithms; (3) greedy per-layer downgrade of the algorithm to what fits, with vDNN_conv
    then vDNN_all; (4) else back to pass (1). ``evaluate(plan)`` is iteration.py's: a plan's MemoryResult."""

    def run(offload, rule, label):
        plan = liveness(inv, rule) if offload is None else vdnn(inv, offload=offload, algo="p")
        plan.policy = "vdnn-dyn"
        plan.workspace_rule = rule
        res = evaluate(plan)
        res.notes.append(f"vDNN_dyn pass: {label}")
        res.options.update(offload=offload or "none", algo=rule)
        return res

    def done(res):
        res.summary["min_capacity"] = first.summary["min_capacity"]  # pass (1) is the floor
        return res

    first = run("all", "m", "vDNN_all(m)")
    if capacity is None:
        return done(run(None, "p", "no offload, fastest algorithms (no capacity given)"))
    if not first.fits:
        first.notes.append("untrainable: vDNN_all(m) does not fit")
        return first
    for offload, label in ((None, "no offload"), ("conv", "vDNN_conv"), ("all", "vDNN_all")):
        res = run(offload, "p", f"{label}, fastest algorithms")
        if res.fits:
            return done(res)
    for offload, label in (("conv", "vDNN_conv"), ("all", "vDNN_all")):
        res = run(offload, workspace or "fit-seq", f"{label}, greedy algorithm downgrade")
        if res.fits:
            return done(res)
    first.notes.append("fell back to vDNN_all(m)")
    return first


# -------------------------------------------------------------------------------- registry

# How PyTorch (engine.pytorch.apply_memory_policy) executes a policy's plan; the runtime reads this, never names.
PYTORCH = {
    "runs": "the runtime executes the plan's copies and re-forwards",
    "stock": "nothing to execute: autograd already frees each saved tensor after its last use (stock PyTorch)",
    "static": "a framework's static allocation (tensors resident the whole iteration); PyTorch's caching allocator "
    "frees tensors by liveness, so there is nothing to execute",
    "aliasing": "refused: intra-layer reuse (dX written into X's buffer) has no PyTorch form",
}


@dataclass(frozen=True)
class PolicyInfo:
    """A memory policy and what it needs: the readers (plan_memory, the capacity searches, the CLI, the dashboard,
    the PyTorch runtime, the benchmarks) ask these fields, never the policy's name."""

    name: str
    paper: str
    convention: str
    build: Callable[..., MemoryPlan] | None  # None: a ``search`` over other plans
    kwargs: dict
    description: str
    takes_capacity: bool = False  # the builder plans under the capacity (an LRU cache): gets ``capacity=``
    fills_capacity: bool = False  # keeps tensors resident up to the capacity: planned for (1 - reserve) of it
    search: Callable | None = None  # (inv, evaluate, capacity, workspace) -> MemoryResult: passes of other plans
    pytorch: str = "runs"  # a key of PYTORCH: how engine.pytorch.apply_memory_policy treats its plans

    def options(self) -> list[str]:
        """The switches a caller may set: the builder's keywords but those the registry fixes for this policy."""
        if self.build is None:
            return []
        params = list(inspect.signature(self.build).parameters)[1:]  # the first is the Inventory
        return [p for p in params if p not in self.kwargs and p != "capacity"]

    def check_options(self, options: dict) -> None:
        """Strict keywords: a misspelt or foreign switch is an error, never silently ignored."""
        allowed = self.options()
        for key in options:
            if key not in allowed:
                raise EngineError(
                    f"memory policy {self.name!r} has no option {key!r}; it takes "
                    f"{', '.join(allowed) if allowed else 'none'}"
                )

    def make(self, inv: Inventory, capacity: int | None = None, **options) -> MemoryPlan:
        """The policy's plan of ``inv`` with the registry's switches and the caller's ``options`` (and the
        capacity, for a policy that plans under one)."""
        self.check_options(options)
        if self.takes_capacity:
            options["capacity"] = capacity
        return self.build(inv, **self.kwargs, **options)


MEMORY_POLICIES: dict[str, PolicyInfo] = {}


def register(
    name: str,
    paper: str,
    convention: str,
    build,
    description: str,
    *,
    takes_capacity: bool = False,
    fills_capacity: bool = False,
    search=None,
    pytorch: str = "runs",
    **kwargs,
) -> PolicyInfo:
    """Add a memory policy (docs/architecture.md, "A memory policy"); ``kwargs`` are switches fixed for it."""
    if pytorch not in PYTORCH:
        raise EngineError(f"memory policy {name!r}: pytorch must be one of {', '.join(PYTORCH)}, got {pytorch!r}")
    if (build is None) == (search is None):
        raise EngineError(f"memory policy {name!r} needs a builder or a search, not both or neither")
    info = MEMORY_POLICIES[name] = PolicyInfo(
        name, paper, convention, build, kwargs, description, takes_capacity, fills_capacity, search, pytorch
    )
    return info


register(
    "baseline-superneurons",
    "superneurons",
    "superneurons",
    baseline_superneurons,
    "SuperNeurons' baseline: every tensor allocated for the whole iteration",
    pytorch="static",
)
register(
    "baseline-vdnn-m",
    "vdnn",
    "torch",
    baseline_vdnn,
    "vDNN's Torch baseline, memory-optimal convolutions",
    pytorch="static",
    algo="m",
)
register(
    "baseline-vdnn-p",
    "vdnn",
    "torch",
    baseline_vdnn,
    "vDNN's Torch baseline, performance-optimal convolutions",
    pytorch="static",
    algo="p",
)
register(
    "baseline-caffe",
    "layrub",
    "caffe",
    baseline_caffe,
    "Layrub's Caffe baseline: data and diff of every blob",
    pytorch="static",
)
register("liveness", "superneurons", "superneurons", liveness, "SuperNeurons liveness analysis", pytorch="stock")
for _off in ("all", "conv"):
    for _algo in ("m", "p"):
        register(
            f"vdnn-{_off}-{_algo}",
            "vdnn",
            "torch",
            vdnn,
            f"vDNN_{_off} with {'memory' if _algo == 'm' else 'performance'}-optimal convolutions",
            offload=_off,
            algo=_algo,
        )
register(
    "vdnn-dyn",
    "vdnn",
    "torch",
    None,
    "vDNN_dyn: profiling passes pick offloads and algorithms under the capacity",
    search=vdnn_dyn,
    fills_capacity=True,
)
for _mode in ("intra", "inter", "hybrid"):
    register(
        f"layrub-{_mode}",
        "layrub",
        "caffe",
        layrub,
        f"Layrub {_mode}-layer memory reuse",
        mode=_mode,
        pytorch="runs" if _mode == "inter" else "aliasing",
    )
register("sn-offload", "superneurons", "superneurons", sn_offload, "SuperNeurons liveness + offload of CONV outputs")
register(
    "sn-recompute",
    "superneurons",
    "superneurons",
    sn_recompute,
    "SuperNeurons liveness + offload + cost-aware recomputation",
)
register(
    "superneurons",
    "superneurons",
    "superneurons",
    superneurons,
    "SuperNeurons runtime: liveness, LRU tensor cache, cost-aware recomputation, dynamic workspace",
    takes_capacity=True,
    fills_capacity=True,
)


def get_policy(name: str) -> PolicyInfo:
    try:
        return MEMORY_POLICIES[name]
    except KeyError:
        raise EngineError(f"unknown memory policy {name!r}; known: {', '.join(MEMORY_POLICIES)}") from None


def persistent_bytes(inv: Inventory) -> int:
    sizes = inv.storage_bytes()
    return sum(sizes[st] for st in inv.persistent_storages())
