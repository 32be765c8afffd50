"""Timing inside the worker (raw samples) and statistics in the trusted process.

Every timed call in kernelpro goes through one `Clock`: the harness's verdicts, the launch collector's labels
(`kernelpro.launch.timing`), the profiling tools' wall and host times (`kernelpro.tools.target`), the device
ceilings and the KernelBench-method times beside a verdict. A clock's protocol is a named sequence of steps around
the call (`STEPS`), so how one protocol differs from another is read off one table:

- `synced_end` (the harness, the profiling tools): L2 flushed, device synchronized, start event, the call, device
  synchronized, end event. Work a candidate puts on another stream counts, and so does the host's time to issue
  the call where it outlasts the GPU's work (a launch-bound candidate is slow for a user too).
- `queued` (the launch collector): L2 flushed, then a GPU-side wait longer than the host takes to issue the call,
  start event, the call, end event on its stream. The call is queued before its start event runs, so the time is
  the GPU's alone (protocol v3 of the launch datasets).
- `stream` (KernelBench's `cuda_event` method; the ceilings, without a flush): device synchronized, L2 flushed,
  start event, the call, end event.

The host's wall clock is kept beside the events: the time to issue the call and the time until the device is done.
On the CPU the host's time stands in for the events. The harness times the reference and the candidate interleaved
(A/B/A/B) in one process, so a speedup is a back-to-back ratio; before every timed call, outside the timed window,
it refills the inputs from a rotating pool (so a cache keyed on the input tensor cannot hit).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from typing import NamedTuple

import torch

from kernelpro.harness import guards
from kernelpro.harness.modelio import set_seed
from kernelpro.harness.records import TimingStats

#: Each protocol's steps around the call; after the last one the device is synchronized and the host clock read.
STEPS: dict[str, tuple[str, ...]] = {
    "synced_end": ("flush", "sync", "start", "call", "sync", "end"),
    "queued": ("flush", "sync", "wait", "start", "call", "end"),
    "stream": ("sync", "flush", "start", "call", "end"),
}

#: The L2 flush: a buffer this large is written before each timed call.
FLUSH_BYTES = 256 << 20
#: The queued protocol's GPU-side wait lasts twice the host's issue time, and at least this long.
MIN_WAIT_MS = 0.5


class CallTime(NamedTuple):
    """One timed call, in ms: between the events (the host's wall clock on the CPU), the host's time to issue
    the call, and the host's time until the device was done."""
    device_ms: float
    issue_ms: float
    wall_ms: float


class CudaOps:
    """What a clock does on a GPU, through the functions the harness saved before any candidate ran (`guards`).
    Tests hand a clock a fake with the same methods, a simulated GPU."""

    def __init__(self, device: torch.device):
        self.device = device

    def now(self) -> float:
        return guards.perf_counter()

    def synchronize(self) -> None:
        guards.cuda_synchronize(self.device)

    def event(self) -> object:
        return guards.CudaEvent(enable_timing=True)

    def record(self, event: object) -> None:
        event.record()

    def elapsed_ms(self, start: object, end: object) -> float:
        return guards.event_elapsed_time(start, end)

    def sleep(self, cycles: int) -> None:
        guards.cuda_sleep(cycles)

    def fill(self, buffer: torch.Tensor, value: int) -> None:
        guards.fill(buffer, value)


class Clock:
    """Times calls on `device` by one protocol of `STEPS`, with an L2 flush of `flush_bytes` (0: none) or of
    another clock's `flush_buffer` (at KernelBench's sizes memory is short)."""

    def __init__(self, device: torch.device, protocol: str = "synced_end", flush_bytes: int = FLUSH_BYTES,
                 flush_buffer: torch.Tensor | None = None, gpu: CudaOps | None = None):
        if protocol not in STEPS:
            raise ValueError(f"unknown timing protocol {protocol!r}; known: {', '.join(STEPS)}")
        self.device, self.protocol = device, protocol
        self.cuda = device.type == "cuda"
        self.gpu = gpu or CudaOps(device)
        if flush_buffer is None and self.cuda and flush_bytes:
            flush_buffer = guards.torch_empty(flush_bytes, dtype=guards.uint8, device=device)
        self.flush_buffer = flush_buffer
        self._cycles_per_ms: float | None = None

    def sync(self) -> None:
        if self.cuda:
            self.gpu.synchronize()

    def time(self, function: Callable, inputs: Sequence[object], flush_value: int = 0,
             wait_cycles: int = 0) -> tuple[object, CallTime]:
        """One call of `function(*inputs)`: its output and its times. `flush_value` is written over the flush
        buffer (vary it from call to call); `wait_cycles` is the queued protocol's wait (`wait_for`)."""
        if not self.cuda:
            begin = guards.perf_counter()
            output = function(*inputs)
            host_ms = (guards.perf_counter() - begin) * 1e3
            return output, CallTime(host_ms, host_ms, host_ms)
        gpu = self.gpu
        start, end = gpu.event(), gpu.event()
        output, begin, issued = None, 0.0, 0.0
        for step in STEPS[self.protocol]:
            if step == "flush":
                if self.flush_buffer is not None:
                    gpu.fill(self.flush_buffer, flush_value & 0xFF)
            elif step == "sync":
                gpu.synchronize()
            elif step == "wait":
                if wait_cycles:
                    gpu.sleep(wait_cycles)
            elif step == "start":
                begin = gpu.now()
                gpu.record(start)
            elif step == "call":
                output = function(*inputs)
                issued = gpu.now()
            elif step == "end":
                gpu.record(end)
        gpu.synchronize()
        done = gpu.now()
        return output, CallTime(gpu.elapsed_ms(start, end), (issued - begin) * 1e3, (done - begin) * 1e3)

    def issue_ms(self, function: Callable, inputs: Sequence[object], calls: int = 3) -> float:
        """The host's time to issue one call (the longest of `calls`, each from an idle device), in ms."""
        longest = 0.0
        for _ in range(calls):
            self.sync()
            began = self.gpu.now()
            function(*inputs)
            longest = max(longest, (self.gpu.now() - began) * 1e3)
        self.sync()
        return longest

    def wait_for(self, function: Callable, inputs: Sequence[object]) -> int:
        """The queued protocol's wait before `function`'s calls, in GPU cycles: twice its host issue time, at
        least MIN_WAIT_MS."""
        if self._cycles_per_ms is None:
            self._cycles_per_ms = self.cycles_per_ms()
        return int(self._cycles_per_ms * max(MIN_WAIT_MS, 2 * self.issue_ms(function, inputs)))

    def cycles_per_ms(self) -> float:
        """GPU clock cycles of the GPU-side wait per millisecond, measured."""
        gpu = self.gpu
        gpu.sleep(1000)
        start, end = gpu.event(), gpu.event()
        gpu.record(start)
        gpu.sleep(1_000_000)
        gpu.record(end)
        gpu.synchronize()
        return 1_000_000 / max(gpu.elapsed_ms(start, end), 1e-3)


def _copy_into(destinations: Sequence[object], sources: Sequence[object]) -> None:
    for destination, source in zip(destinations, sources):
        if isinstance(destination, torch.Tensor):
            destination.copy_(source)


def best_ms(device: torch.device, function: Callable, repeats: int = 5) -> float:
    """The fastest of `repeats` calls of `function()` after one untimed call, by the `stream` protocol without a
    flush: the device ceilings' measure (a copy's bandwidth, a matrix product's rate)."""
    clock = Clock(device, "stream", flush_bytes=0)
    function()
    return min(clock.time(function, ())[1].device_ms for _ in range(repeats))


class InterleavedTimer:
    """Times several callables A/B/A/B on their own copies of a rotating input pool, by the `synced_end`
    protocol."""

    def __init__(self, device: torch.device, input_pool: list[list[object]],
                 flush_bytes: int = FLUSH_BYTES):
        self.device = device
        self.pool = input_pool
        self.clock = Clock(device, "synced_end", flush_bytes)
        self.flush_buffer = self.clock.flush_buffer

    def fresh_inputs(self) -> list[object]:
        return [x.clone() if isinstance(x, torch.Tensor) else x for x in self.pool[0]]

    def run(self, functions: dict[str, Callable], trials: int, budget_s: float, warmup_calls: int,
            seed: int | None = None, stop: Callable[[dict[str, list[float]]], bool] | None = None,
            ) -> tuple[dict[str, list[float]], dict[str, list[float]], dict[str, object]]:
        """Returns device samples, host samples (ms, until the device was done) and each function's last
        output. With `seed`, every call starts from it (outside the timed window), so the last outputs of models
        that draw random numbers (an active dropout) are comparable. `stop`, asked with the device samples after
        each round of calls, ends the timing early when it says so (adaptive timing, `cannot_reach`);
        `stopped_early` then says it did.

        The functions share one set of input buffers, refilled from the pool before every call
        (warm-up calls included): at KernelBench's sizes a set of inputs is GBs."""
        shared = self.fresh_inputs()
        self.stopped_early = False
        with torch.no_grad():
            for name, function in functions.items():
                for _ in range(warmup_calls):
                    _copy_into(shared, self.pool[0])
                    function(*shared)
            self.clock.sync()
            device_ms = {name: [] for name in functions}
            host_ms = {name: [] for name in functions}
            last: dict[str, object] = {}
            began = guards.perf_counter()
            for trial in range(trials):
                for name, function in functions.items():
                    _copy_into(shared, self.pool[trial % len(self.pool)])
                    last.pop(name, None)  # the previous output goes before the next call allocates one
                    if seed is not None:
                        set_seed(seed)
                    output, taken = self.clock.time(function, shared, flush_value=trial)
                    device_ms[name].append(taken.device_ms)
                    host_ms[name].append(taken.wall_ms)
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
    """One callable timed the way KernelBench's evaluator times it (its `cuda_event` method, the `stream`
    protocol): autograd left on (no `no_grad`), `warmup` calls each followed by a synchronize, then `discard` +
    `trials` calls on the same inputs, each after a synchronize and an L2 flush, between events recorded on the
    current stream; the first `discard` samples are dropped. KernelBench reports the mean. On the CPU, host time
    stands in for the events."""
    clock = Clock(device, "stream", flush_bytes=0, flush_buffer=flush_buffer)
    for _ in range(warmup):
        function(*inputs)
        clock.sync()
    if clock.cuda:
        torch.cuda.empty_cache()
    samples = [clock.time(function, inputs, flush_value=trial)[1].device_ms for trial in range(trials + discard)]
    return samples[discard:]


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


def launch_profile(model, inputs: list, sync: Callable[[], None], calls: int = 3) -> dict:
    """One profiler pass over `calls` calls of a model (after one outside it, which builds and JIT-compiles): the
    names of the GPU kernels it launches (for the strict policy), its launches per call and their summed time per
    call in ms (the launch profile). `sync` waits for the device."""
    import warnings
    from torch.profiler import ProfilerActivity, profile
    warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
    own = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    with torch.no_grad():
        model(*own)
        sync()
        with profile(activities=[ProfilerActivity.CUDA]) as profiler:
            for _ in range(calls):
                model(*own)
            sync()
    kernels = [event for event in profiler.events()
               if getattr(event, "device_type", None) == torch.autograd.DeviceType.CUDA]
    return {"names": sorted({event.name for event in kernels}), "launches_per_call": len(kernels) / calls,
            "busy_ms_per_call": sum(e.time_range.end - e.time_range.start for e in kernels) / calls / 1e3}
