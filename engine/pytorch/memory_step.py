"""One training step under a memory plan: what autograd saves, which plan tensor it is, and the plan's clock.

The clock is the plan's tick (schedule.py). Module hooks give a layer's forward start and end, and so
does the runtime's torch-function mode for a functional layer (``functional``: the plan's next layer is
a function and this call is it, by canonical name); hooks on the layer's autograd node (its output's
``grad_fn``) give its backward start and end; re-forwards are ticks the runtime runs itself.
Every plan action whose point has passed runs at the next observed point, so an action planned at a
tick the runtime cannot observe (a functional ``add``, the loss) runs at the next one it can.

A saved tensor is named by value: the plan layer whose output it holds. During a layer's call a
tensor in an input's storage at the input's version is that input's producer (as the plan says);
one in the output's storage is the layer's own output, in place or not (resolved when the call
returns); any other is an extra of the layer (indices, statistics, masks). Outside module calls the
storage's last writer is used. A storage written in place by several layers (a convolution's output
turned into ReLU's) is one storage in PyTorch: it follows the schedule of whichever of its writers'
plan storages the plan offloads (the latest one's if several).

The module is over 300 statements because the clock, the naming of saved tensors and the actions they trigger are
one state machine over one step: each reads and moves the others' state at every hook.
"""

from __future__ import annotations

import weakref

import torch
from torch.utils._pytree import tree_flatten

from ..errors import MemoryRuntimeError

from .layermap import canonical, same_shape
from .offload import Stored, View, storage_ptr
from .recompute import Recomputer, draws_random, out_of_place


class _Writer:
    """The layers that wrote one storage, producer first; its version after the last of them."""

    __slots__ = ("layers", "version", "ref")

    def __init__(self, layers: list[str], version: int, tensor: torch.Tensor):
        self.layers, self.version, self.ref = layers, version, weakref.ref(tensor)

    def valid(self, t: torch.Tensor) -> bool:
        return self.ref() is not None and self.version == t._version


class Packed:
    """What the pack hook hands autograd for a tensor the runtime manages."""

    __slots__ = ("t", "record", "view", "key", "step")

    def __init__(self, t=None):
        self.t, self.record, self.view, self.key, self.step = t, None, None, None, None

    def become(self, other) -> None:
        if isinstance(other, Packed):
            self.t, self.record, self.view, self.key, self.step = (
                other.t,
                other.record,
                other.view,
                other.key,
                other.step,
            )
        else:
            self.t = other

    def unpack(self) -> torch.Tensor:
        if self.record is not None:
            return self.record.tensor(self.view)
        if self.key is not None:
            value = self.step.recompute.value(self.key)
            return self.view.on(value.untyped_storage(), value.device) if self.view is not None else value
        return self.t


def unpack(h):
    return h if isinstance(h, torch.Tensor) else h.unpack()


def _stored(record: Stored, t: torch.Tensor) -> Packed:
    p = Packed()
    p.record, p.view = record, View.of(t)
    return p


def _dropped(step, key: tuple, view: View | None) -> Packed:
    p = Packed()
    p.key, p.view, p.step = key, view, step
    return p


class _Call:
    __slots__ = ("layer", "module", "inputs", "pending", "j", "inplace_off")

    def __init__(self, layer, module, inputs, inplace_off):
        self.layer, self.module, self.inputs, self.inplace_off = layer, module, inputs, inplace_off
        self.pending: list = []
        self.j = 0


class Step:
    """The state of one forward and its backward (``active``), or of a shape check (not active)."""

    def __init__(self, runtime, mover, active: bool):
        self.schedule = runtime.schedule
        self.net = runtime.schedule.plan.inventory.net
        self.layers = runtime.layers
        self.model = runtime.model
        self.mover = mover
        self.active = active
        self.clock = (-1, 1)
        self.next = 0
        self.calls: dict = {}
        self.writers: dict[int, _Writer] = {}
        self.cur: _Call | None = None
        self.last: str | None = None  # the plan layer that ran last in forward
        self.ran: set[str] = set()  # functional layers whose call the runtime saw
        self.produced: dict[str, int] = {}  # layer -> the storage of the output its call returned
        self.drops: list = []  # drop actions due, run at the next point observed after theirs
        self.records: dict[str, list] = {}
        self.held: dict[str, tuple[Stored, View]] = {}
        self.held_ptrs: dict[int, str] = {}
        self.recompute = Recomputer(self)
        self.recomputing = False
        self.hooked: set[str] = set()
        self.seen = (-1, 1)  # the latest point a hook observed (actions due earlier run there)
        self.trace: list[tuple[str, str, tuple[int, int], tuple[int, int]]] = []
        self.deviations: list[str] = []
        self.done = False
        self.params: set[int] = set()
        # runtime.trace_memory(): (tick, 0 start / 1 end, allocated now, peak since the previous point)
        self.memory: list | None = [] if runtime.tracing_memory and mover is not None and mover.cuda else None

    # ----------------------------------------------------------------------------------- logging

    def log(self, kind: str, target: str, planned: tuple[int, int]) -> None:
        """Record an action with its planned point and the point it ran at: its own when every tick between
        the two is a re-forward still to run (the runtime runs those itself, after it), else the hook's."""
        first = planned[0] + planned[1]
        ticks = self.schedule.plan.ticks
        on_time = all(ticks[t].phase == "R" for t in range(first, min(self.seen[0] + self.seen[1], len(ticks))))
        self.trace.append((kind, target, planned, planned if on_time else max(self.seen, planned)))

    def deviation(self, text: str) -> None:
        if text not in self.deviations:
            self.deviations.append(text)

    # ----------------------------------------------------------------------------------- forward

    def begin(self, x: torch.Tensor) -> None:
        if not self.active:
            return
        self.params = {storage_ptr(p) for p in self.model.parameters()}
        self.params |= {storage_ptr(b) for b in self.model.buffers()}
        data = self.layers.data
        ptr = storage_ptr(x)
        self.writers[ptr] = _Writer([data], x._version, x)
        if f"Y:{data}" in self.schedule.held:
            self._hold(data, x, ptr)

    def pre(self, module, args) -> tuple | None:
        """A module layer starts; returns the arguments it runs on where the runtime changes them (a random
        in-place layer whose output the plan drops runs on a copy of its input, recompute.on_a_copy)."""
        if self.recomputing:
            return None
        k = self.calls.get(module, 0)
        self.calls[module] = k + 1
        names = self.layers.names[module]
        if k >= len(names):
            raise MemoryRuntimeError(
                f"module {names[0]} runs {k + 1} times in one forward but the plan has "
                f"{len(names)} layer(s) for it ({', '.join(names)})"
            )
        name = names[k]
        xs = [a for a in args if isinstance(a, torch.Tensor)]
        inplace_off, changed = False, None
        spec = self.net.layer(name)
        if self.active and self.schedule.dropped(name):
            self.recompute.record_call(name, module, xs)
            if getattr(module, "inplace", False):  # keep the checkpoint it reads (see recompute.py)
                if draws_random(spec):
                    i = next(i for i, a in enumerate(args) if isinstance(a, torch.Tensor))
                    changed = (*args[:i], args[i].clone(), *args[i + 1 :])
                else:
                    inplace_off = True
                    module.inplace = False
        self._enter(name, module, list(zip(xs, spec.inputs)), inplace_off)
        return changed

    def functional(self, func, args: tuple, kwargs: dict):
        """A function or tensor method called in forward outside the plan's modules (memory.py's observer): when
        it is the plan's next layer and that layer is functional, it runs as that layer (its saved tensors
        named, its ticks observed, its call recorded for re-forwards); any other call runs as it is."""
        name = self.layers.next_functional(self.last)
        if name is None or self.recomputing or canonical(getattr(func, "__name__", "")) != self.layers.calls[name]:
            return func(*args, **kwargs)
        srcs = set(self.net.layer(name).inputs)
        leaves, spec = tree_flatten((args, kwargs))
        reads = []
        for x in leaves:
            if isinstance(x, torch.Tensor) and x.layout == torch.strided:
                w = self.writers.get(storage_ptr(x))
                src = next((n for n in reversed(w.layers) if n in srcs), None) if w and w.valid(x) else None
                if src is not None:
                    reads.append((x, src))
        if self.active and self.schedule.dropped(name):
            self.recompute.record_function(name, func, leaves, spec, {id(x): src for x, src in reads})
            if any(f"Y:{src}" in self.schedule.held for _, src in reads):  # keep the checkpoint it reads
                func, kwargs = out_of_place(func, args, kwargs, draws_random(self.net.layer(name)))
        self.ran.add(name)
        self._enter(name, None, reads, False)
        out = func(*args, **kwargs)
        self.post(None, out)
        return out

    def _enter(self, name: str, module, reads: list, inplace_off: bool) -> None:
        """A layer starts: its inputs (tensor, plan layer) recorded as their storages' writers."""
        inputs = []
        if self.active:
            for x, src in reads:
                ptr = storage_ptr(x)
                if self.produced.get(src, ptr) != ptr and ptr not in self.writers:
                    self.deviation(
                        f"{name} reads a tensor that is not {src}'s output (made by an operation the trace did not "
                        f"have: a copy, or a dropout whose training flag the eval trace froze); kept as it is"
                    )
                    continue
                self._wrote(ptr, x, src)
                inputs.append((ptr, x._version, src))
                if src in self.layers.functional:
                    self._hook_backward(src, x)
            self.advance((self.schedule.tick_f[name], 0))
        self.cur = _Call(name, module, inputs, inplace_off)
        self.last = name

    def post(self, module, out) -> None:
        if self.recomputing:
            return
        cur, self.cur = self.cur, None
        if cur is None or cur.module is not module:
            return
        if cur.inplace_off:
            module.inplace = True
        name = cur.layer
        spec = self.net.layer(name)
        if not isinstance(out, torch.Tensor):
            for index, piece in self.layers.pieces.get(name, ()):  # taken out of the tuple in Python, unseen
                if isinstance(out, (tuple, list)) and index < len(out) and isinstance(out[index], torch.Tensor):
                    self.ran.add(piece)
                    self._enter(piece, None, [], False)
                    self.post(None, out[index])
            return
        if not same_shape(spec, tuple(out.shape[1:])):
            raise MemoryRuntimeError(
                f"layer {name}: the model gives {tuple(out.shape[1:])} per sample but the plan "
                f"has {spec.out_shape}; was the plan made for another input shape?"
            )
        if not self.active:
            return
        optr = storage_ptr(out)
        w = self.writers.get(optr)
        same = [v for p, v, _ in cur.inputs if p == optr]
        if same and w is not None:
            if out._version != same[0]:  # written in place (a view leaves the version as it was)
                self._check_held(optr, name)
            w.layers.append(name)
            w.version, w.ref = out._version, weakref.ref(out)
        else:
            self.writers[optr] = _Writer([name], out._version, out)
        self.produced[name] = optr
        if f"Y:{name}" in self.schedule.held:
            self._hold(name, out, optr)
        dropped = self.schedule.dropped(name)
        for t, h, j in cur.pending:
            if storage_ptr(t) == optr:
                h.become(self._value(t, name, optr))
            elif dropped:
                h.become(_dropped(self, ("X", name, j), None))
                self.recompute.dropped_extra(name, j)
        self._hook_backward(name, out)
        self.advance((self.schedule.tick_f[name], 1))

    def end_forward(self) -> None:
        self.cur = None
        missing = [names[k] for m, names in self.layers.names.items() for k in range(self.calls.get(m, 0), len(names))]
        unseen = [n for n in self.layers.functional if n not in self.ran and self._needs(n)]
        if unseen:
            raise MemoryRuntimeError(
                f"the runtime did not see the call of functional layer(s) {', '.join(unseen[:5])} in forward "
                f"(it re-forwards them or holds their output): each must be one torch function or tensor "
                f"method call, as torch.fx traced it"
            )
        if missing:
            more = ", ..." if len(missing) > 5 else ""
            raise MemoryRuntimeError(
                f"the forward did not run plan layer(s) {', '.join(missing[:5])}{more}; the plan "
                f"was made for another model or another forward path"
            )
        if self.active:
            for st in self.schedule.gaps:
                if not self.records.get(st):
                    self.deviation(f"{st}: offloaded by the plan, but autograd saved no tensor of it here")

    def _needs(self, layer: str) -> bool:
        """Whether the runtime must see a functional layer's call: it is re-forwarded, or a re-forward reads it."""
        return self.schedule.dropped(layer) or f"Y:{layer}" in self.schedule.held

    def _wrote(self, ptr: int, x: torch.Tensor, src: str) -> None:
        """A layer reads ``x`` as the output of ``src``: record ``src`` as its storage's writer."""
        w = self.writers.get(ptr)
        if w is not None and w.valid(x):
            return
        if w is not None and w.ref() is not None:  # changed in place by a function the hooks do not see
            self._check_held(ptr, src)
            w.layers.append(src)
            w.version = x._version
        else:
            self.writers[ptr] = _Writer([src], x._version, x)

    def _check_held(self, ptr: int, by: str) -> None:
        held = self.held.get(f"Y:{self.held_ptrs.get(ptr)}")
        if held is not None and held[0].storage is not None and held[0].ptr == ptr:  # still this storage
            raise MemoryRuntimeError(
                f"{by} changes the checkpoint {self.held_ptrs[ptr]} in place, but the plan's "
                f"re-forwards read its value; make that operation out of place"
            )

    # -------------------------------------------------------------------------------- saved tensors

    def pack(self, t: torch.Tensor):
        if self.recomputing or not self.active or self.done:
            return t
        try:
            ptr = storage_ptr(t)
        except (RuntimeError, NotImplementedError):  # no storage (meta, subclass wrappers): autograd keeps it
            return t
        cur = self.cur
        j = 0
        if cur is not None:
            j, cur.j = cur.j, cur.j + 1
        if ptr in self.params:
            return t
        if cur is not None:
            for iptr, version, src in cur.inputs:
                if iptr == ptr and t._version == version:
                    return self._value(t, src, ptr)
            h = Packed(t)
            cur.pending.append((t, h, j))
            return h
        w = self.writers.get(ptr)
        if w is None or w.ref() is None:
            return t
        if w.version == t._version:
            return self._value(t, w.layers[-1], ptr)
        # written in place since by a function the hooks do not see (a functional in-place ReLU): the value's
        # layer is unknown, but the storage is the same, so it follows its writers' offloads (never a drop)
        record = self._record_for(t, ptr, w.layers)
        return _stored(record, t) if record is not None else t

    def _value(self, t: torch.Tensor, layer: str, ptr: int):
        """The packed form of ``t``, which holds ``layer``'s output."""
        if self.schedule.dropped(layer):
            return _dropped(self, ("Y", layer), View.of(t))
        w = self.writers.get(ptr)
        chain = w.layers if w is not None and w.valid(t) else [layer]
        record = self._record_for(t, ptr, chain)
        return _stored(record, t) if record is not None else t

    def _record_for(self, t: torch.Tensor, ptr: int, chain: list[str], hold: bool = False) -> Stored | None:
        storages = [s for s in (self.schedule.storage_of(f"Y:{w}") for w in chain) if s]
        for s in reversed(storages):
            for ref in self.records.get(s, ()):
                rec = ref()
                if rec is None or rec.ptr != ptr:
                    continue
                if rec.version != t._version:
                    if rec.gap or rec.stage:
                        continue  # copied before this change: a new record
                    rec.version = t._version
                return rec
        offloaded = [s for s in storages if s in self.schedule.gaps]
        if not offloaded and not hold:
            return None
        s = offloaded[-1] if offloaded else storages[-1]
        mine = self.records.setdefault(s, [])
        rec = Stored(s, f"{s}#{len(mine)}", t, self.mover)
        mine.append(weakref.ref(rec))
        self._progress(rec)
        return rec

    def _hold(self, layer: str, t: torch.Tensor, ptr: int) -> None:
        rec = self._record_for(t, ptr, [layer], hold=True)
        self.held[f"Y:{layer}"] = (rec, View.of(t))
        self.held_ptrs[ptr] = layer

    # ------------------------------------------------------------------------------------ the clock

    def _hook_backward(self, layer: str, t: torch.Tensor) -> None:
        node = t.grad_fn
        tick = self.schedule.tick_b.get(layer)
        if node is None or tick is None or layer in self.hooked:
            return
        self.hooked.add(layer)
        ref = weakref.ref(self)

        def start(_grads):
            step = ref()
            if step is not None:
                step.event((tick, 0))

        def end(_grads_in, _grads_out):
            step = ref()
            if step is not None:
                step.event((tick, 1))

        node.register_prehook(start)
        node.register_hook(end)

    def event(self, point: tuple[int, int]) -> None:
        if self.done or not self.active:
            return
        self.advance(point)
        if point >= (self.schedule.last_tick, 1):
            self.finish()

    def finish(self) -> None:
        self.advance((self.schedule.last_tick + 1, 1))
        self.recompute.cache.clear()
        self.held.clear()
        self.done = True

    def advance(self, point: tuple[int, int]) -> None:
        # a traced point brackets the layer's own work: a start is measured after the plan's actions due
        # before the layer (releases, prefetches), an end before those due after it
        measure = self.memory is not None and point > self.seen
        if measure and point[1] == 1:
            self._measure(point)
        self.seen = max(self.seen, point)
        while self.drops and self.drops[0].point < point:
            self.recompute.drop(self.drops.pop(0).target)
        actions = self.schedule.actions
        while self.next < len(actions) and actions[self.next].point <= point:
            a = actions[self.next]
            self.next += 1
            self.clock = max(self.clock, a.point)
            if a.kind == "progress":
                for ref in self.records.get(a.target, ()):
                    rec = ref()
                    if rec is not None:
                        self._progress(rec)
            elif a.kind == "recompute":
                self.recompute.run(a.target)
            elif a.kind == "drop":  # at the next point: a layer of several autograd nodes (a Linear over tokens:
                # matmul, then a view) ends its observed backward before its first node has read its saved input
                self.drops.append(a)
            elif a.kind == "unhold":
                rec, _ = self.held.pop(a.target, (None, None))
                if rec is not None:
                    self.held_ptrs.pop(rec.ptr, None)
        self.clock = max(self.clock, point)
        if measure and point[1] == 0:
            self._measure(point)

    def _measure(self, point: tuple[int, int]) -> None:
        """Allocator counters at a new point (host-side, no sync); the peak is reset, so each covers its interval."""
        dev = self.mover.device
        self.memory.append((point[0], point[1], torch.cuda.memory_allocated(dev), torch.cuda.max_memory_allocated(dev)))
        torch.cuda.reset_peak_memory_stats(dev)

    def _progress(self, rec: Stored) -> None:
        """Run the gaps' offload, release and prefetch that are due at the clock, in order."""
        gaps = self.schedule.gaps.get(rec.name, ())
        while rec.gap < len(gaps):
            g = gaps[rec.gap]
            if rec.stage == 0:
                if self.clock < g.offload:
                    return
                self.mover.offload(rec)
                rec.stage = 1
                self.log("offload", rec.name, g.offload)
            if rec.stage == 1:
                if self.clock < g.release:
                    return
                self.mover.release(rec)
                rec.stage = 2
                self.log("release", rec.name, g.release)
            if self.clock < g.prefetch:
                return
            if rec.storage is None:  # not already fetched on demand
                self.mover.prefetch(rec)
                self.log("prefetch", rec.name, g.prefetch)
            rec.stage = 0
            rec.gap += 1
