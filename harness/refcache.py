"""The reference's outputs, kept by the trusted process from one evaluation to the next.

Every evaluation of a search judges a candidate against the same reference outputs: the
same problem, seeds, trials, precision and mode draw the same inputs and weights. A worker
used to run all of the reference's trials and send every output again for each candidate;
at KernelBench's level-1 sizes (6.4 GB per output, five trials) that was 40-60 s of each
evaluation. The first evaluation's outputs are kept here instead, and later workers run the
reference once, for the sizes and output shapes their checks need.

Only outputs a worker sent before it loaded any candidate code get here (the reference
phase), and they stay in this process. What is kept is bounded: payloads held in memory up
to a quarter of the available memory, payloads spilled to files up to a quarter of the
temporary folder's free space; a problem over the bound is not kept, and evaluates as before.
"""

from __future__ import annotations

import mmap
import shutil
import tempfile
import threading
from collections import OrderedDict
from dataclasses import dataclass, field

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

    def add(self, payload, structure: str, spilled: bool) -> None:
        self.payloads.append(payload)
        self.structures.append(structure)
        if spilled:
            self.file_bytes += len(payload)
        else:
            self.memory_bytes += len(payload)


def reference_key(problem_source: str, seed: int, trials: int, precision: str, model_mode: str) -> tuple:
    """What the reference's outputs depend on (the device is the evaluator's own)."""
    return problem_source, seed, trials, precision, model_mode


class ReferenceCache:
    """Reference outputs by key, the newest kept first when the bound evicts."""

    def __init__(self, memory_share: float = 0.25, file_share: float = 0.25, enabled: bool = True,
                 available=available_memory_bytes):
        self.memory_share, self.file_share, self.enabled = memory_share, file_share, enabled
        self.available = available  # () -> bytes of memory available now
        self._entries: OrderedDict[tuple, References] = OrderedDict()
        self._lock = threading.Lock()
        self.hits = self.misses = 0

    def get(self, key: tuple) -> References | None:
        with self._lock:
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
        free_files = shutil.disk_usage(tempfile.gettempdir()).free if file_bytes else 0
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
    """Drop an entry's payloads (a mapped file's pages go when nothing views them any more)."""
    for payload in entry.payloads:
        if isinstance(payload, mmap.mmap):
            try:
                payload.close()
            except BufferError:
                pass  # an evaluation still views it; it goes with that evaluation
    entry.payloads.clear()
