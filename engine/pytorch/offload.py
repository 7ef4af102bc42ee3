"""Moving one storage between the device and the host: vDNN's and SuperNeurons' copy engine.

A ``Stored`` is one storage of the running step that the plan manages (an offloaded activation, or a
checkpoint that re-forwards read). ``Mover`` copies it. On CUDA:

* offload: the side stream waits for an event recorded on the compute stream, copies the storage
  into a pinned host buffer (kept per storage across steps) and records ``offloaded``;
* release: the compute stream waits for ``offloaded`` (the plan's offload deadline) and the
  runtime drops its reference, so the caching allocator may hand the block to the compute stream's
  next allocation: stream order makes that safe without ``record_stream``;
* prefetch: a block is allocated on the compute stream, the side stream waits for the compute
  stream's event and copies the host buffer into it, recording ``prefetched``;
* use (``ready``): the compute stream waits for ``prefetched``. Whether the prefetch was late is
  measured on the GPU's clock: a timing event recorded on the compute stream before that wait is
  compared with ``prefetched`` once the step is over (``late``; both timed from an event recorded
  when the step began). ``event.query()`` at the same
  moment is kept as ``pending_at_unpack``; it is the host's view and counts a prefetch as pending
  whenever the host runs ahead of the GPU, which it normally does.

No call synchronises the host. Without CUDA the same steps are plain copies (the host buffer is a
CPU tensor), so the logic and the gradients can be tested on a CPU.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class View:
    """How a saved tensor sits in its storage."""

    dtype: torch.dtype
    size: tuple[int, ...]
    stride: tuple[int, ...]
    offset: int

    @classmethod
    def of(cls, t: torch.Tensor) -> "View":
        return cls(t.dtype, tuple(t.shape), tuple(t.stride()), t.storage_offset())

    def on(self, storage, device) -> torch.Tensor:
        return torch.empty(0, dtype=self.dtype, device=device).set_(storage, self.offset, self.size, self.stride)


def storage_ptr(t: torch.Tensor) -> int:
    return t.untyped_storage().data_ptr()


class Stored:
    """One runtime storage the plan manages, with its progress through the plan's gaps."""

    def __init__(self, name: str, key: str, tensor: torch.Tensor, mover: "Mover"):
        self.name = name  # plan storage whose gaps it follows
        self.key = key  # host-buffer key (plan storage, and a count if it repeats)
        self.storage = tensor.untyped_storage()
        self.ptr = self.storage.data_ptr()
        self.nbytes = self.storage.nbytes()
        self.version = tensor._version
        self.device = tensor.device
        self.mover = mover
        self.gap = 0  # next gap of the plan storage
        self.stage = 0  # in that gap: 0 resident, 1 offloaded, 2 released
        self.offloaded = None  # events (CUDA) of the last offload and prefetch
        self.prefetched = None
        self.waited = True  # the compute stream waits for ``prefetched``

    @property
    def resident(self) -> bool:
        return self.storage is not None

    def tensor(self, view: View) -> torch.Tensor:
        """The saved tensor, on the device (fetched now if the plan left it on the host)."""
        self.mover.ready(self)
        return view.on(self.storage, self.device)

    def __del__(self):  # a prefetch still writing must finish before its block can be reused
        try:
            if not self.waited and self.prefetched is not None:
                self.mover.compute.wait_event(self.prefetched)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass


class Mover:
    """Copies between a device and the host; counts what it moved."""

    def __init__(self, device: torch.device):
        self.device = device
        self.cuda = device.type == "cuda"
        self.side = torch.cuda.Stream(device) if self.cuda else None
        self.compute = None
        self.host: dict[str, torch.Tensor] = {}
        self.reset()

    def reset(self) -> None:
        """A new step: counters to zero, the compute stream is the caller's current stream."""
        self.compute = torch.cuda.current_stream(self.device) if self.cuda else None
        self.offloaded_bytes = self.prefetched_bytes = 0
        self.offloads = self.prefetches = self.on_demand = self.pending_at_unpack = 0
        self.checks: list = []  # (prefetched, used) timing events
        self.origin = None  # a timing event before them all: times are compared from it
        if self.cuda:
            self.origin = torch.cuda.Event(enable_timing=True)
            self.origin.record(self.compute)

    def _host_buffer(self, s: Stored) -> torch.Tensor:
        buf = self.host.get(s.key)
        if buf is None or buf.numel() != s.nbytes:
            buf = torch.empty(s.nbytes, dtype=torch.uint8, pin_memory=self.cuda)
            self.host[s.key] = buf
        return buf

    def _bytes(self, storage) -> torch.Tensor:
        return torch.empty(0, dtype=torch.uint8, device=self.device).set_(storage)

    def offload(self, s: Stored) -> None:
        host = self._host_buffer(s)
        if self.cuda:
            ready = torch.cuda.Event()
            ready.record(self.compute)
            self.side.wait_event(ready)
            with torch.cuda.stream(self.side):
                host.copy_(self._bytes(s.storage), non_blocking=True)
                s.offloaded = torch.cuda.Event()
                s.offloaded.record(self.side)
        else:
            host.copy_(self._bytes(s.storage))
        self.offloaded_bytes += s.nbytes
        self.offloads += 1

    def release(self, s: Stored) -> None:
        if self.cuda and s.offloaded is not None:
            self.compute.wait_event(s.offloaded)  # after any prefetch of ``s`` too: the side stream is in order
            s.waited = True
        s.storage = None

    def prefetch(self, s: Stored) -> None:
        host = self.host[s.key]
        if self.cuda:
            with torch.cuda.stream(self.compute):
                block = torch.empty(s.nbytes, dtype=torch.uint8, device=self.device)
                free = torch.cuda.Event()
                free.record(self.compute)
            self.side.wait_event(free)
            with torch.cuda.stream(self.side):
                block.copy_(host, non_blocking=True)
                s.prefetched = torch.cuda.Event(enable_timing=True)
                s.prefetched.record(self.side)
            s.waited = False
        else:
            block = host.clone()
        s.storage = block.untyped_storage()
        self.prefetched_bytes += s.nbytes
        self.prefetches += 1

    def ready(self, s: Stored) -> None:
        """Before the compute stream reads ``s``: fetch it now if it is on the host only (a late,
        on-demand fetch), or wait for its prefetch (measuring whether it was late)."""
        if s.storage is None:
            host = self.host[s.key]
            if self.cuda:
                if s.offloaded is not None:
                    self.compute.wait_event(s.offloaded)
                with torch.cuda.stream(self.compute):
                    block = torch.empty(s.nbytes, dtype=torch.uint8, device=self.device)
                    block.copy_(host, non_blocking=True)
            else:
                block = host.clone()
            s.storage = block.untyped_storage()
            self.prefetched_bytes += s.nbytes
            self.on_demand += 1
            return
        if self.cuda and not s.waited:
            self.pending_at_unpack += not s.prefetched.query()
            used = torch.cuda.Event(enable_timing=True)
            used.record(self.compute)
            self.compute.wait_event(s.prefetched)
            s.waited = True
            self.checks.append((s.prefetched, used))

    def late(self) -> int:
        """Prefetches the compute stream reached before they had finished, on the GPU's clock, plus
        on-demand fetches. Waits for the step's events: call it after the step, never inside."""
        late = self.on_demand
        for prefetched, used in self.checks:
            used.synchronize()
            prefetched.synchronize()
            late += self.origin.elapsed_time(prefetched) > self.origin.elapsed_time(used)
        return late
