"""The device's ceilings, measured (never datasheet numbers): what a roofline floor is made of.

- bandwidth: a large device-to-device copy (CPU: a large tensor copy), counting bytes read plus bytes written;
- fp32: square fp32 matrix products with TF32 off (FFMA on a GPU), from 256 a side doubled up to 8192 (GPU) or
  1024 (CPU) while one product takes under 20 ms, the best rate of them;
- tf32: the same with TF32 allowed (tensor cores);
- bf16, fp16: the same in those types;
- on a GPU, also what the device reports of itself: SMs, L2 bytes, shared memory per SM.

Each is the best of five timed repeats after a warm-up, by the harness's clock (`timing.best_ms`). The harness
measures them in the reference's own evaluation where no one gave them (`CeilingsStore`); the profiling tools keep
them per device (`kernelpro.tools.ceilings`), and a search hands those to its evaluator, so a device is measured
once, not once per problem.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Protocol

import torch

from kernelpro.harness.timing import best_ms

#: The matrix products' sizes: from SMALLEST a side, doubled while a product takes under LONG_ENOUGH_MS.
SMALLEST = 256
LONG_ENOUGH_MS = 20.0


@dataclass(frozen=True)
class Ceilings:
    device_name: str
    bandwidth_gbps: float
    fp32_tflops: float
    tf32_tflops: float
    bf16_tflops: float
    fp16_tflops: float
    measured_at: str = ""
    sm_count: int | None = None  # queried from the device (torch.cuda.get_device_properties), GPU only
    l2_bytes: int | None = None
    smem_per_sm_bytes: int | None = None
    method: str = "measured: copy bandwidth and matrix-product rates, best of repeats"

    def rate_tflops(self, precision: str = "fp32", tensor_cores: bool = False) -> float:
        """The compute ceiling for work in this precision."""
        if precision in ("bf16", "fp16"):
            return getattr(self, f"{precision}_tflops")
        return self.tf32_tflops if tensor_cores else self.fp32_tflops

    def fastest_tflops(self, precision: str) -> float:
        """The fastest dense rate a candidate may use at this precision. At fp32 that is TF32's: a candidate may use
        TF32 (or split TF32) within the tolerance, so the plain fp32 rate would put the compute floor above what such
        a candidate reaches, and stop a search early as "at the floor"."""
        if precision in ("bf16", "fp16"):
            return self.rate_tflops(precision)
        return max(self.fp32_tflops, self.tf32_tflops)

    def floor_ms(self, flops: float, nbytes: float, precision: str = "fp32", tensor_cores: bool = False) -> float:
        """The least time this work can take: bytes over bandwidth or FLOPs over rate, the larger."""
        memory = nbytes / (self.bandwidth_gbps * 1e9)
        compute = flops / (self.rate_tflops(precision, tensor_cores) * 1e12)
        return max(memory, compute) * 1e3


class CeilingsStore(Protocol):
    """Where an evaluator finds a device's ceilings by its name, and keeps those it measured."""

    def get(self, device_name: str) -> Ceilings | None: ...

    def put(self, ceilings: Ceilings) -> None: ...


class KeptCeilings:
    """An evaluator's own store, in memory: each device measured once per evaluator."""

    def __init__(self):
        self.kept: dict[str, Ceilings] = {}

    def get(self, device_name: str) -> Ceilings | None:
        return self.kept.get(device_name)

    def put(self, ceilings: Ceilings) -> None:
        self.kept.setdefault(ceilings.device_name, ceilings)


def settle(store: CeilingsStore, device_name: str, measured: dict | None, trusted: bool) -> Ceilings | None:
    """The device's ceilings as the store has them, else those a timing phase just measured (kept in the store only
    from a worker that ran no candidate code, the reference's own evaluation: a candidate could slow its worker's
    measurement down and so lower every later evaluation's floor)."""
    known = store.get(device_name)
    if known is not None or not measured:
        return known
    found = Ceilings(**measured)
    if trusted:
        store.put(found)
    return found


def measured_if_room(device_name: str) -> Ceilings | None:
    """`measure`, or None where the device has no room for its tensors (GBs) beside what the caller holds (a timing's
    input pool at level 1's sizes): the verdict then has no floor, and a later evaluation measures them."""
    try:
        return measure(device_name)
    except torch.OutOfMemoryError:
        torch.cuda.empty_cache()
        return None


def measure(device_name: str = "cpu") -> Ceilings:
    """This device's ceilings ("cuda": the first GPU), measured now."""
    cuda = device_name == "cuda"
    device = torch.device("cuda", 0) if cuda else torch.device("cpu")

    nbytes = (1 << 30) if cuda else (256 << 20)
    source = torch.empty(nbytes, dtype=torch.uint8, device=device).random_(0, 255)
    destination = torch.empty_like(source)
    bandwidth = 2 * nbytes / (best_ms(device, lambda: destination.copy_(source)) * 1e-3) / 1e9
    del source, destination

    def matmul_tflops(dtype, tf32: bool) -> float:
        """The best rate of square products, from `SMALLEST` a side doubling up to the device's largest size while
        one product takes under `LONG_ENOUGH_MS` (a CPU multiplies bf16 hundreds of times slower than fp32: the
        largest size would take seconds a product there, for a rate the smaller one already shows). torch's TF32
        flag is put back afterwards, whatever it was."""
        previous = torch.backends.cuda.matmul.allow_tf32
        torch.backends.cuda.matmul.allow_tf32 = tf32
        try:
            best, size = 0.0, SMALLEST
            while True:
                a = torch.randn(size, size, device=device, dtype=dtype)  # random data: zeros run faster
                b = torch.randn(size, size, device=device, dtype=dtype)
                milliseconds = best_ms(device, lambda: a @ b)
                best = max(best, 2 * size**3 / (milliseconds * 1e-3) / 1e12)
                if size >= largest or milliseconds >= LONG_ENOUGH_MS:
                    return best
                size = min(2 * size, largest)
        finally:
            torch.backends.cuda.matmul.allow_tf32 = previous

    largest = 8192 if cuda else 1024
    fp32 = matmul_tflops(torch.float32, False)
    tf32 = matmul_tflops(torch.float32, True) if cuda else fp32
    bf16 = matmul_tflops(torch.bfloat16, False)
    fp16 = matmul_tflops(torch.float16, False)
    name = torch.cuda.get_device_name(device) if cuda else f"cpu ({torch.get_num_threads()} threads)"
    properties = {}
    if cuda:
        reported = torch.cuda.get_device_properties(device)
        properties = {"sm_count": reported.multi_processor_count,
                      "l2_bytes": getattr(reported, "L2_cache_size", None),
                      "smem_per_sm_bytes": getattr(reported, "shared_memory_per_multiprocessor", None)}
    return Ceilings(device_name=name, bandwidth_gbps=bandwidth, fp32_tflops=fp32, tf32_tflops=tf32,
                    bf16_tflops=bf16, fp16_tflops=fp16, measured_at=time.strftime("%Y-%m-%dT%H:%M:%S"),
                    **properties)
