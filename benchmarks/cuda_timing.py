"""Library calls timed in the benchmark scripts' own process (reference code, never candidate code)."""

from __future__ import annotations

import statistics


def median_ms(call, trials: int, warmup: int = 5) -> float:
    """The median of `trials` CUDA-event timings of `call()` after `warmup` calls, autograd off."""
    import torch
    with torch.no_grad():
        for _ in range(warmup):
            call()
        times = []
        for _ in range(trials):
            start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            call()
            stop.record()
            stop.synchronize()
            times.append(start.elapsed_time(stop))
    return statistics.median(times)
