"""Library calls timed in the benchmark scripts' own process (reference code, never candidate code)."""

from __future__ import annotations

import statistics


def median_ms(call, trials: int, warmup: int = 5) -> float:
    """The median of `trials` timings of `call()` after `warmup` calls, autograd off, by the harness's clock
    (`kernelpro.harness.timing.Clock`, its `stream` protocol without an L2 flush: events around the call)."""
    import torch
    from kernelpro.harness.timing import Clock
    clock = Clock(torch.device("cuda"), "stream", flush_bytes=0)
    with torch.no_grad():
        for _ in range(warmup):
            call()
        times = [clock.time(call, ())[1].device_ms for _ in range(trials)]
    return statistics.median(times)
