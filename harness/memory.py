"""The device-memory plan: how many evaluations may hold a problem's tensors on one GPU at once.

At KernelBench's sizes one problem's inputs and outputs take GBs (level 1's elementwise problems
6 GB each), so evaluations that run side by side (`--parallel`) could together need more than the
GPU has. Each evaluation reserves what its problem needs before its worker gets the problem; one
that does not fit waits until others finish. What a problem needs is estimated from what its
reference held in its first evaluation (`MemorySizes`); until then, an evaluation of it reserves
the whole budget. Workers booted ahead hold only a CUDA context until they get a problem, and the
budget leaves room for those contexts and for the trusted process's chunked comparisons.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kernelpro.harness.cache import source_hash

#: device memory a worker's CUDA context takes before it holds anything (H100, torch 2.11: ~0.5 GB)
CONTEXT_BYTES = 600 << 20
#: the free memory is read again, when no evaluation holds any, at most this often (s; an NVML reading takes ~0.1 s)
REMEASURE_S = 2.0
#: what the trusted process's chunked comparisons hold at most (compare.CHUNK_ELEMENTS, float64 temporaries)
COMPARISON_BYTES = 1 << 30


def needed_bytes(sizes: dict, timed_models: int = 3) -> int:
    """What one evaluation of a problem holds at its peak (the timing phase): the reference's peak,
    three input sets plus the shared buffers, one output per timed model, and the snapshot and
    clone the correctness checks make."""
    inputs, outputs = sizes.get("input_bytes", 0), sizes.get("output_bytes", 0)
    return (sizes.get("peak_bytes", 0) + sizes.get("parameter_bytes", 0) + 4 * inputs
            + (timed_models + 1) * outputs + CONTEXT_BYTES)


class Reservation:
    """Bytes of the plan held: by an evaluation (`MemoryPlan.reserve`, counted among the holders) or kept between
    evaluations (`MemoryPlan.keep`)."""

    def __init__(self, plan: "MemoryPlan", size: int, alone: bool = False):
        self.plan, self.size = plan, size
        self.alone = alone  # the whole budget, whatever the problem needs: no other evaluation beside it
        self.crowded = False  # another evaluation held memory beside this one at some time

    def resize(self, size: int) -> None:
        """Now that the problem's needs are known: shrink (or grow) to them; never waits. One made `alone` keeps the
        whole budget."""
        if not self.alone:
            self.plan._resize(self, size)

    def release(self) -> None:
        self.plan._resize(self, 0)


class MemoryPlan:
    """A byte budget shared by the evaluations of one Evaluator (one GPU)."""

    def __init__(self, budget_bytes: int | None, measure: Callable[[], int | None] | None = None):
        self.budget = budget_bytes  # None: no limit (the CPU, or a GPU whose memory is unknown)
        # `measure` reads the budget at the first reservation instead: a bench's next search builds its evaluator
        # while the search before it still holds the GPU's memory (kernelpro.devicegate); and again whenever no
        # evaluation holds any, since the search before may still have been letting go of its memory at the first
        self._measure = measure
        self._measured_at: float | None = None  # monotonic s of the last reading
        self.used = 0
        self.known: dict[str, int] = {}  # problem key -> bytes it needs
        self.waiting_alone = 0  # evaluations waiting to have the device to themselves: no other starts meanwhile
        self._live: list[Reservation] = []  # the evaluations' reservations held now
        self._changed = threading.Condition()

    @property
    def holders(self) -> int:
        """The evaluations holding a reservation now."""
        return len(self._live)

    @classmethod
    def for_device(cls, device: str, spares: int) -> "MemoryPlan":
        if device != "cuda":
            return cls(None)
        def measure() -> int | None:
            free = free_device_bytes()
            return None if free is None else max(0, free - spares * CONTEXT_BYTES - COMPARISON_BYTES)
        return cls(None, measure)

    def estimate(self, problem, sizes: dict, extra: int = 0, timed_models: int = 3) -> int:
        """What an evaluation of the problem needs (kept for its next reservations): `needed_bytes` and `extra`
        (its output slot, which the trusted process holds)."""
        need = needed_bytes(sizes, timed_models) + extra
        self.known[_key(problem)] = need
        return need

    def need(self, problem) -> int:
        """What an evaluation of the problem reserves: its estimate, or the whole budget until there is one."""
        with self._changed:
            return self.known.get(_key(problem), self.budget or 0)

    def room(self, reservation: "Reservation | None", sizes: dict, timed_models: int = 3) -> int | None:
        """Bytes left for an evaluation holding `reservation` besides what its problem needs (`needed_bytes`) and
        what the others hold; None where the budget is unknown (the CPU)."""
        with self._changed:
            if self.budget is None:
                return None
            others = self.used - (reservation.size if reservation is not None else 0)
            return self.budget - others - needed_bytes(sizes, timed_models)

    def reserve(self, problem, alone: bool = False) -> Reservation:
        """Waits until this problem's needs fit beside the evaluations running now; one evaluation may
        always run (it then meets the device's own limit, and an out-of-memory becomes its verdict). `alone`: waits
        until no other evaluation runs, and takes all that is left, so that none starts beside it; evaluations
        that come meanwhile wait behind it."""
        with self._changed:
            if self._measure is not None and not self._live and (
                    self._measured_at is None or time.monotonic() - self._measured_at >= REMEASURE_S):
                self._remeasure()
            need = self.known.get(_key(problem), self.budget or 0)
            if self.budget is not None and alone:
                self.waiting_alone += 1
                try:
                    self._changed.wait_for(lambda: self.holders == 0)
                finally:
                    self.waiting_alone -= 1
                need = max(0, self.budget - self.used)
            elif self.budget is not None:
                self._changed.wait_for(lambda: not self.waiting_alone and (
                    self.holders == 0 or self.used + need <= self.budget))
            self.used += need
            reservation = Reservation(self, need, alone=alone and self.budget is not None)
            reservation.crowded = bool(self._live)
            for other in self._live:
                other.crowded = True
            self._live.append(reservation)
        return reservation

    def _remeasure(self) -> None:
        """The budget from the device's free memory now, with no evaluation holding any: what this plan keeps
        between evaluations counts as its own. It only grows after the first reading: memory that was still being
        let go of then (a search before that had just ended, on level 1's sizes tens of GB) is free now, while
        memory that looks taken now may be an evaluation's worker still exiting."""
        free = self._measure()
        budget = None if free is None else free + self.used
        if self._measured_at is None:
            self.budget = budget
        elif budget is not None and (self.budget is None or budget > self.budget):
            self.budget = budget
        self._measured_at = time.monotonic()

    def keep(self, size: int, beside: int) -> Reservation | None:
        """Hold `size` bytes for as long as the trusted process keeps something on the device between evaluations
        (a problem's reference outputs), if they fit beside what is held now, and beside `beside` more (another
        evaluation's need) where that would fit now: keeping them never stops two evaluations from running side by
        side, but where one fills the device anyway (level 1's sizes) it may. Never waits; None where they do not fit
        or the budget is unknown."""
        with self._changed:
            if self.budget is None:
                return None
            room = self.budget - self.used - size
            if room < 0 or (self.used + beside <= self.budget and room < beside):
                return None
            self.used += size
            return Reservation(self, size)

    def _resize(self, reservation: Reservation, size: int) -> None:
        with self._changed:
            if size == 0 and reservation in self._live:  # released (a second release changes nothing)
                self._live.remove(reservation)
            self.used += size - reservation.size
            reservation.size = size
            self._changed.notify_all()


def _key(problem) -> str:
    return source_hash(problem.source)


def free_device_bytes() -> int | None:
    """Free memory on the GPU this process sees first, through NVML (no CUDA context made here);
    None where NVML cannot tell."""
    try:
        import pynvml

        from kernelpro.harness.toolchain import visible_nvml_handle
        pynvml.nvmlInit()
        try:
            return int(pynvml.nvmlDeviceGetMemoryInfo(visible_nvml_handle(pynvml)).free)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None
