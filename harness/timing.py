"""Timing inside the worker (raw samples) and statistics in the trusted process.

The worker times the reference and the candidate interleaved (A/B/A/B) in one
process, so a speedup is a back-to-back ratio. Before every timed call, outside the
timed window, it refills the inputs from a rotating pool (so a cache keyed on the
input tensor cannot hit) and, on CUDA, writes a 256 MB buffer to flush L2. On CUDA
a call is timed with events, with a device-wide synchronize before the end event,
and the host wall clock is kept beside it as a cross-check.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence

import torch

from kernelpro.harness import guards
from kernelpro.harness.modelio import set_seed
from kernelpro.harness.records import TimingStats


def _copy_into(destinations: Sequence[object], sources: Sequence[object]) -> None:
    for destination, source in zip(destinations, sources):
        if isinstance(destination, torch.Tensor):
            destination.copy_(source)


def measure_copy_bandwidth_gbps(device: torch.device, nbytes: int = 256 << 20) -> float:
    """Device-to-device copy bandwidth (bytes read plus written), best of five."""
    source = torch.empty(nbytes, dtype=torch.uint8, device=device)
    destination = torch.empty_like(source)
    destination.copy_(source)
    best = float("inf")
    for _ in range(5):
        start, end = guards.CudaEvent(enable_timing=True), guards.CudaEvent(enable_timing=True)
        start.record()
        destination.copy_(source)
        end.record()
        end.synchronize()
        best = min(best, guards.event_elapsed_time(start, end))
    return 2 * nbytes / (best * 1e-3) / 1e9


def measure_matmul_tflops(device: torch.device, dtype: torch.dtype, size: int = 4096) -> float:
    """Fastest dense matrix-product rate a candidate may use in this dtype, best of five.

    At fp32 that is the TF32 tensor-core rate: a candidate may use TF32 (or split-TF32)
    within the tolerance, so the plain-fp32 rate would put the compute floor above what
    such a candidate reaches and stop a search early as "at the floor". torch's flag is
    set for the measurement and put back whatever the candidate left it at.
    """
    matmul_flags = torch.backends.cuda.matmul
    saved = matmul_flags.allow_tf32
    matmul_flags.allow_tf32 = True
    try:
        a = torch.randn(size, size, device=device, dtype=dtype)
        b = torch.randn(size, size, device=device, dtype=dtype)
        a @ b
        best = float("inf")
        for _ in range(5):
            start, end = guards.CudaEvent(enable_timing=True), guards.CudaEvent(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            best = min(best, guards.event_elapsed_time(start, end))
    finally:
        matmul_flags.allow_tf32 = saved
    return 2 * size**3 / (best * 1e-3) / 1e12


class InterleavedTimer:
    """Times several callables A/B/A/B on their own copies of a rotating input pool."""

    def __init__(self, device: torch.device, input_pool: list[list[object]],
                 flush_bytes: int = 256 << 20):
        self.device = device
        self.pool = input_pool
        self.cuda = device.type == "cuda"
        self.flush_buffer = (torch.empty(flush_bytes, dtype=torch.uint8, device=device)
                             if self.cuda and flush_bytes else None)

    def fresh_inputs(self) -> list[object]:
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in self.pool[0]]

    def _sync(self) -> None:
        if self.cuda:
            guards.cuda_synchronize(self.device)

    def _timed_call(self, function: Callable, inputs: list[object]) -> tuple[object, float, float]:
        """One call: (output, device ms, host ms)."""
        self._sync()
        if not self.cuda:
            begin = guards.perf_counter()
            output = function(*inputs)
            host_ms = (guards.perf_counter() - begin) * 1e3
            return output, host_ms, host_ms
        start, end = guards.CudaEvent(enable_timing=True), guards.CudaEvent(enable_timing=True)
        begin = guards.perf_counter()
        start.record()
        output = function(*inputs)
        guards.cuda_synchronize(self.device)
        end.record()
        end.synchronize()
        host_ms = (guards.perf_counter() - begin) * 1e3
        return output, guards.event_elapsed_time(start, end), host_ms

    def run(self, functions: dict[str, Callable], trials: int, budget_s: float, warmup_calls: int,
            seed: int | None = None, stop: Callable[[dict[str, list[float]]], bool] | None = None,
            ) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, object]]:
        """Returns device samples, host samples (ms) and each function's last output. With `seed`, every
        call starts from it (outside the timed window), so the last outputs of models that draw random
        numbers (an active dropout) are comparable. `stop`, asked with the device samples after each round
        of calls, ends the timing early when it says so (adaptive timing, `cannot_reach`); `stopped_early`
        then says it did.

        The functions share one set of input buffers, refilled from the pool before every call
        (warm-up calls included): at KernelBench's sizes a set of inputs is GBs."""
        shared = self.fresh_inputs()
        self.stopped_early = False
        with torch.no_grad():
            for name, function in functions.items():
                for _ in range(warmup_calls):
                    _copy_into(shared, self.pool[0])
                    function(*shared)
            self._sync()
            device_ms = {name: [] for name in functions}
            host_ms = {name: [] for name in functions}
            last: dict[str, object] = {}
            began = guards.perf_counter()
            for trial in range(trials):
                for name, function in functions.items():
                    _copy_into(shared, self.pool[trial % len(self.pool)])
                    if self.flush_buffer is not None:
                        self.flush_buffer.fill_(trial & 0xFF)
                    last.pop(name, None)  # the previous output goes before the next call allocates one
                    if seed is not None:
                        set_seed(seed)
                    output, on_device, on_host = self._timed_call(function, shared)
                    device_ms[name].append(on_device)
                    host_ms[name].append(on_host)
                    last[name] = output
                if stop is not None and stop(device_ms):
                    self.stopped_early = trial + 1 < trials
                    break
                if guards.perf_counter() - began > budget_s * len(functions) and trial >= 4:
                    break
        return device_ms, host_ms, last


#: Adaptive timing decides nothing before this many interleaved calls of each model.
ADAPTIVE_MIN_TRIALS = 10


def speedup_upper_bound(eager_ms: Sequence[float], candidate_ms: Sequence[float]) -> float | None:
    """The 95% upper bound of the candidate's speedup over eager from paired, interleaved calls: the mean of
    log(eager / candidate) over the pairs plus Student's t (two-sided 95%) standard errors, exponentiated. None
    before ADAPTIVE_MIN_TRIALS pairs."""
    pairs = min(len(eager_ms), len(candidate_ms))
    if pairs < ADAPTIVE_MIN_TRIALS:
        return None
    logs = [math.log(e / c) for e, c in zip(eager_ms, candidate_ms) if e > 0 and c > 0]
    if len(logs) < ADAPTIVE_MIN_TRIALS:
        return None
    freedom = len(logs) - 1
    z = 1.959964  # the t quantile from the normal one (Cornish-Fisher, two terms): within 0.01 of it from 9 on
    t = z + (z ** 3 + z) / (4 * freedom) + (5 * z ** 5 + 16 * z ** 3 + 3 * z) / (96 * freedom ** 2)
    return math.exp(statistics.fmean(logs) + t * statistics.stdev(logs) / math.sqrt(len(logs)))


def cannot_reach(target_speedup: float) -> Callable[[dict[str, list[float]]], bool]:
    """`InterleavedTimer.run`'s `stop` for adaptive timing: true once the candidate's speedup over eager cannot
    reach `target_speedup` (its 95% upper bound is below it)."""
    def stop(device_ms: dict[str, list[float]]) -> bool:
        bound = speedup_upper_bound(device_ms["eager"], device_ms["candidate"])
        return bound is not None and bound < target_speedup
    return stop


def kernelbench_times(function: Callable, inputs: list[object], device: torch.device,
                      flush_buffer: torch.Tensor | None, warmup: int = 3, trials: int = 100,
                      discard: int = 1) -> list[float]:
    """One callable timed the way KernelBench's evaluator times it (its `cuda_event` method): autograd
    left on (no `no_grad`), `warmup` calls each followed by a synchronize, then `discard` + `trials`
    calls on the same inputs, each after a synchronize and an L2 flush, between events recorded on
    the current stream; the first `discard` samples are dropped. KernelBench reports the mean. On
    the CPU, host time stands in for the events."""
    cuda = device.type == "cuda"
    samples: list[float] = []
    for _ in range(warmup):
        function(*inputs)
        if cuda:
            guards.cuda_synchronize(device)
    if cuda:
        torch.cuda.empty_cache()
    for trial in range(trials + discard):
        if cuda:
            guards.cuda_synchronize(device)
            start, end = guards.CudaEvent(enable_timing=True), guards.CudaEvent(enable_timing=True)
            if flush_buffer is not None:
                flush_buffer.fill_(trial & 0xFF)
            start.record()
            function(*inputs)
            end.record()
            guards.cuda_synchronize(device)
            elapsed = guards.event_elapsed_time(start, end)
        else:
            began = guards.perf_counter()
            function(*inputs)
            elapsed = (guards.perf_counter() - began) * 1e3
        if trial >= discard:
            samples.append(elapsed)
    return samples


def summarize(device_ms: list[float], host_ms: list[float]) -> TimingStats:
    """Median, IQR and coefficient of variation of one model's samples."""
    if not device_ms:
        raise ValueError("no timing samples")
    ordered = sorted(device_ms)
    if len(ordered) >= 2:
        q1, _, q3 = statistics.quantiles(ordered, n=4, method="inclusive")
    else:
        q1 = q3 = ordered[0]
    mean = statistics.fmean(ordered)
    deviation = statistics.pstdev(ordered) if len(ordered) > 1 else 0.0
    return TimingStats(
        median_ms=statistics.median(ordered), iqr_ms=q3 - q1,
        cv=deviation / mean if mean > 0 else 0.0, mean_ms=mean,
        min_ms=ordered[0], max_ms=ordered[-1], trials=len(ordered),
        host_median_ms=statistics.median(host_ms) if host_ms else statistics.median(ordered),
    )
