"""The one clock every timed call goes through (`harness.timing.Clock`), its protocols run on a simulated GPU.

The simulation keeps the two clocks that matter: the host's, which every call into the GPU advances by a few
microseconds, and each stream's, where work starts when both the host has issued it and the stream is free. An event
is stamped when its stream reaches it; a synchronize waits for every stream. That is enough to show what each
protocol counts: the host's issue time or not, work on another stream or not, and never the L2 flush."""

from __future__ import annotations

import pytest
import torch

from kernelpro.harness.timing import STEPS, Clock

API_S = 5e-6        # the host's cost of one call into the GPU
FLUSH_S = 55e-6     # the GPU's time to write the flush buffer
CYCLES_PER_S = 1.98e9


class SimulatedGpu:
    """`CudaOps`'s methods over simulated time (seconds)."""

    def __init__(self):
        self.host = 0.0
        self.streams = {"main": 0.0, "side": 0.0}  # when each stream is next free

    def launch(self, seconds: float, stream: str = "main") -> None:
        self.streams[stream] = max(self.host, self.streams[stream]) + seconds
        self.host += API_S

    def now(self) -> float:
        return self.host

    def synchronize(self) -> None:
        self.host = max(self.host, *self.streams.values()) + API_S

    def event(self) -> dict:
        return {}

    def record(self, event: dict) -> None:
        event["at"] = self.streams["main"] = max(self.host, self.streams["main"])
        self.host += API_S

    def elapsed_ms(self, start: dict, end: dict) -> float:
        return (end["at"] - start["at"]) * 1e3

    def sleep(self, cycles: int) -> None:
        self.launch(cycles / CYCLES_PER_S)

    def fill(self, buffer: object, value: int) -> None:
        self.launch(FLUSH_S)


def clock(protocol: str, gpu: SimulatedGpu) -> Clock:
    return Clock(torch.device("cuda"), protocol, flush_buffer=object(), gpu=gpu)


def model(gpu: SimulatedGpu, host_s: float = 0.0, kernel_s: float = 10e-6, side_s: float = 0.0):
    """A forward that works `host_s` on the host, then launches a kernel (and one on a side stream)."""
    def forward():
        gpu.host += host_s
        gpu.launch(kernel_s)
        if side_s:
            gpu.launch(side_s, "side")
        return "output"
    return forward


def timed(protocol: str, **work) -> tuple[float, float]:
    gpu = SimulatedGpu()
    watch = clock(protocol, gpu)
    forward = model(gpu, **work)
    wait = watch.wait_for(forward, ()) if "wait" in STEPS[protocol] else 0
    output, taken = watch.time(forward, (), flush_value=3, wait_cycles=wait)
    assert output == "output"
    return taken.device_ms, taken.issue_ms


def test_no_protocol_times_the_l2_flush():
    for protocol in STEPS:
        device_ms, _ = timed(protocol)
        assert device_ms < FLUSH_S * 1e3 / 2, protocol


def test_only_the_queued_protocol_leaves_the_hosts_issue_time_out():
    queued, issue = timed("queued", host_s=300e-6)
    assert issue == pytest.approx(0.305, abs=0.01)
    assert queued == pytest.approx(0.010, abs=1e-6)  # the kernel alone
    assert timed("synced_end", host_s=300e-6)[0] > 0.3
    assert timed("stream", host_s=300e-6)[0] > 0.2  # the flush hides part of the host's time, not all


def test_only_the_synced_end_protocol_counts_work_on_another_stream():
    assert timed("synced_end", side_s=1e-3)[0] > 1.0
    assert timed("queued", side_s=1e-3)[0] < 0.1
    assert timed("stream", side_s=1e-3)[0] < 0.1


def test_the_queued_wait_outlasts_the_hosts_issue_time():
    gpu = SimulatedGpu()
    watch = clock("queued", gpu)
    assert watch.cycles_per_ms() == pytest.approx(CYCLES_PER_S / 1e3, rel=0.02)  # the host issues the wait late
    slow = watch.wait_for(model(gpu, host_s=2e-3), ()) / CYCLES_PER_S
    quick = watch.wait_for(model(gpu), ()) / CYCLES_PER_S
    assert slow == pytest.approx(4e-3, rel=0.05) and quick == pytest.approx(0.5e-3, rel=0.02)


def test_on_the_cpu_the_hosts_time_stands_in_and_an_unknown_protocol_is_refused():
    output, taken = Clock(torch.device("cpu")).time(lambda x: x + 1, (torch.ones(4),))
    assert torch.equal(output, torch.full((4,), 2.0))
    assert taken.device_ms == taken.wall_ms == taken.issue_ms >= 0
    with pytest.raises(ValueError, match="unknown timing protocol 'fast'"):
        Clock(torch.device("cpu"), "fast")
