"""GPU: the launch collection's timing (`kernelpro.launch.timing.time_models`) measures the GPU's time, not the host's.

A model that spends 300 us on the host before it launches a tiny kernel: without the wait (protocol v2)
the host time counts; v3 queues the call behind a GPU-side wait first, so only the kernel
counts."""

from __future__ import annotations

import time

import pytest
import torch

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]


class SlowToIssue(torch.nn.Module):
    def forward(self, x):
        began = time.perf_counter()
        while time.perf_counter() - began < 300e-6:  # the host's work before the launch (a busy wait: exact)
            pass
        return x + 1


def test_queued_timing_leaves_the_hosts_issue_time_out():
    from kernelpro.harness.timing import Clock
    from kernelpro.launch.timing import time_models
    x = torch.randn(1024, device="cuda")
    model = SlowToIssue()
    assert Clock(x.device, "queued").issue_ms(model, [x]) >= 0.3
    queued, flushed = time_models([model], [x], 10)[0], time_models([model], [x], 10, queued=False)[0]
    print(f"a 4 KB add after 300 us on the host: queued {queued * 1e3:.1f} us, v2 {flushed * 1e3:.1f} us")
    assert queued < 0.05 and flushed > 0.15
