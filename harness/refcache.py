"""The reference's outputs, kept by the trusted process from one evaluation to the next.

Every evaluation of a search judges a candidate against the same reference outputs: the
same problem, seeds, trials, precision and mode draw the same inputs and weights. A worker
used to run all of the reference's trials and send every output again for each candidate;
at KernelBench's level-1 sizes (6.4 GB per output, five trials) that was 40-60 s of each
evaluation. The first evaluation's outputs are kept here instead, and later workers run the
reference once, for the sizes and output shapes their checks need.

Only outputs a worker sent before it loaded any candidate code get here (the reference
phase), and they stay in this process. What is kept is bounded: payloads held in memory up
to a quarter of the available memory, payloads spilled to files up to half of the temporary
folder's free space; a problem over the bound is not kept, and evaluates as before. An
evaluation spills the trials past the memory share to files (`Evaluator._reference_payload`), so
an entry is in both: KernelBench's level1/87 (five trials of one 8 GiB output) held three in
memory and two in files on a GPU machine of 128 GiB and 64 GiB of disk, over a quarter of the
disk's free space, and each of its evaluations computed the five again (10 s of 20 on an H200).

One evaluation computes a key's outputs at a time (`claim`): a second evaluation of the problem that starts meanwhile
waits for them rather than computing them beside it (at level 1's sizes the second computation ran twice as long as
the first, 39 s against 18 s on an H100, the two sharing the GPU and the disk their outputs spill to).

On a GPU the trusted process compares there, so an entry's outputs are also moved to the GPU once, where they fit
beside the problem's evaluations (`MemoryPlan.keep`), and later evaluations compare against them in place instead
of moving every trial's outputs from host memory again (level 1's: 6 s of each evaluation on an H100).
"""

from __future__ import annotations

import mmap
import shutil
import tempfile
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from kernelpro.harness.payload import available_memory_bytes


@dataclass
class References:
    """One problem's reference outputs under one set of options, as their payloads arrived."""

    payloads: list = field(default_factory=list)  # per trial: bytes, bytearray or mmap
    structures: list = field(default_factory=list)
    degenerate: bool | None = None
    flops: int = 0  # the reference's, counted once (trial 0 of the evaluation that made these)
    memory_bytes: int = 0
    file_bytes: int = 0
    on_device: list | None = None  # per trial: the outputs moved to the comparison GPU (read, never written)
    device_hold: object | None = None  # the memory plan's reservation for them (released with the entry)
    device_tried: bool = False  # whether moving them was decided (once per entry)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False, compare=False)

    def add(self, payload, structure: str, spilled: bool) -> None:
        self.payloads.append(payload)
        self.structures.append(structure)
        if spilled:
            self.file_bytes += len(payload)
        else:
            self.memory_bytes += len(payload)

    def outputs(self, load: Callable, device: str, keep: Callable) -> tuple[list, str]:
        """Every trial's outputs (`load(payload)` reads one trial's), and where they are compared from. On a GPU
        they are moved there by the first evaluation that asks, where `keep(bytes)` grants the memory (a
        reservation, or None), and shared by the later ones; otherwise read from the payloads again."""
        with self.lock:
            if device != "cpu" and not self.device_tried:
                self.device_tried = True
                self.device_hold = keep(self.memory_bytes + self.file_bytes)
                if self.device_hold is not None:
                    try:
                        self.on_device = [[value.to(device) if isinstance(value, torch.Tensor) else value
                                           for value in load(payload)] for payload in self.payloads]
                    except BaseException as error:  # out of memory: from host memory, as before; else it goes on
                        self.device_hold.release()
                        self.device_hold = None
                        if not isinstance(error, torch.OutOfMemoryError):
                            raise
            if self.on_device is not None:
                return list(self.on_device), f"kept on {device}"
        return [load(payload) for payload in self.payloads], "kept in host memory"


def reference_key(problem_source: str, seed: int, trials: int, precision: str, model_mode: str) -> tuple:
    """What the reference's outputs depend on (the device is the evaluator's own)."""
    return problem_source, seed, trials, precision, model_mode


class ReferenceCache:
    """Reference outputs by key, the newest kept first when the bound evicts."""

    def __init__(self, memory_share: float = 0.25, file_share: float = 0.5, enabled: bool = True,
                 available=available_memory_bytes, free_space=None):
        self.memory_share, self.file_share, self.enabled = memory_share, file_share, enabled
        self.available = available  # () -> bytes of memory available now
        self.free_space = free_space or (lambda: shutil.disk_usage(tempfile.gettempdir()).free)  # () -> bytes
        self._entries: OrderedDict[tuple, References] = OrderedDict()
        self._lock = threading.Lock()
        self._settled = threading.Condition(self._lock)  # a key's computation ended (kept or not)
        self._computing: set[tuple] = set()
        self.hits = self.misses = 0

    def claim(self, key: tuple, wait_s: float = 900.0) -> tuple[References | None, bool]:
        """(the kept outputs or None, whether the caller is now the one computing them). Where another evaluation is
        computing them, waits until it is done (up to `wait_s`: then the caller computes them too, unclaimed). The
        claimer calls `release(key)` once its outputs are complete, or when it ends without them."""
        deadline = time.monotonic() + wait_s
        with self._settled:
            while self.enabled and key not in self._entries and key in self._computing:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._settled.wait(left)
            entry = self._lookup(key)
            if entry is not None or not self.enabled or key in self._computing:
                return entry, False
            self._computing.add(key)
            return None, True

    def release(self, key: tuple) -> None:
        """The claimer is done computing `key`'s outputs (kept by `put`, or not): whoever waits for them goes on."""
        with self._settled:
            self._computing.discard(key)
            self._settled.notify_all()

    def get(self, key: tuple) -> References | None:
        with self._lock:
            return self._lookup(key)

    def _lookup(self, key: tuple) -> References | None:
        """The entry, counted as a hit or a miss (the lock held)."""
        entry = self._entries.get(key) if self.enabled else None
        if entry is None:
            self.misses += 1
            return None
        self._entries.move_to_end(key)
        self.hits += 1
        return entry

    def fits(self, memory_bytes: int, file_bytes: int) -> bool:
        """Whether outputs of these sizes, already held (so no longer counted as available memory or
        free space), may stay: each within its share of what there would be without them."""
        if not self.enabled:
            return False
        free_files = self.free_space() if file_bytes else 0
        return memory_bytes <= (self.available() + memory_bytes) * self.memory_share and \
            file_bytes <= (free_files + file_bytes) * self.file_share

    def put(self, key: tuple, entry: References) -> bool:
        """Keep an evaluation's complete reference outputs, evicting older ones to stay in bounds."""
        if not self.fits(entry.memory_bytes, entry.file_bytes):
            return False
        with self._lock:
            self._entries.pop(key, None)
            while self._entries and not self.fits(
                    entry.memory_bytes + sum(e.memory_bytes for e in self._entries.values()),
                    entry.file_bytes + sum(e.file_bytes for e in self._entries.values())):
                _, old = self._entries.popitem(last=False)
                _release(old)
            self._entries[key] = entry
        return True

    def clear(self) -> None:
        with self._lock:
            for entry in self._entries.values():
                _release(entry)
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


def _release(entry: References) -> None:
    """Drop an entry's payloads (a mapped file's pages go when nothing views them any more) and its outputs on
    the GPU (their memory goes back to the plan)."""
    with entry.lock:
        entry.on_device = None
        if entry.device_hold is not None:
            entry.device_hold.release()
            entry.device_hold = None
    for payload in entry.payloads:
        if isinstance(payload, mmap.mmap):
            try:
                payload.close()
            except BufferError:
                pass  # an evaluation still views it; it goes with that evaluation
    entry.payloads.clear()
