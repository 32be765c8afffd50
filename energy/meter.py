"""Energy over a window of back-to-back calls, read from NVML in the trusted process.

`NvmlMeter` reads the card's total-energy counter (millijoules since the driver
loaded) at the start and the end of a window. Where the counter is missing it
samples the power draw from a thread and integrates it, and says so in `method`.
The window lasts at least `min_window_s` (1 s), longer when the counter updates
too rarely for 1 s to hold many updates. The idle power is measured just before.

NVML is a library boundary: the meter takes the module (`pynvml`) as an argument,
so tests pass a fake with the same functions.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from kernelpro.harness.errors import KernelproError
from kernelpro.harness.toolchain import cuda_available, visible_nvml_handle

MIN_WINDOW_S = 1.0
UPDATES_PER_WINDOW = 20  # the window holds at least this many counter updates
SAMPLE_PERIOD_S = 0.005
IDLE_SETTLE_S = 0.5


class EnergyUnavailable(KernelproError):
    """No NVML, or no GPU it can read."""


@dataclass
class Reading:
    start_s: float
    start_mj: float | None
    sampler: "_PowerSampler | None" = None


class _PowerSampler(threading.Thread):
    def __init__(self, read_w):
        super().__init__(daemon=True, name="kernelpro-power-sampler")
        self.read_w = read_w
        self.samples: list[tuple[float, float]] = []
        self.halt = threading.Event()

    def run(self) -> None:
        while not self.halt.is_set():
            self.samples.append((time.monotonic(), self.read_w()))
            self.halt.wait(SAMPLE_PERIOD_S)

    def joules(self) -> float:
        self.halt.set()
        self.join()
        self.samples.append((time.monotonic(), self.read_w()))
        points = self.samples
        return sum((t1 - t0) * (p0 + p1) / 2 for (t0, p0), (t1, p1) in zip(points, points[1:]))


def load_nvml():
    try:
        import pynvml
    except ImportError as error:
        raise EnergyUnavailable("NVML is not installed (pip install nvidia-ml-py)") from error
    return pynvml


class NvmlMeter:
    """Energy windows on one GPU. `method` says how: the energy counter, or sampled power."""

    def __init__(self, nvml=None, index: int | None = None, min_window_s: float = MIN_WINDOW_S):
        """`index`: NVML's index of the GPU; by default the one this process's CUDA sees first. NVML numbers
        the machine's GPUs and ignores CUDA_VISIBLE_DEVICES, so a bench worker pinned to GPU 1 would
        otherwise read GPU 0's counter, where another worker runs."""
        self.nvml = nvml or load_nvml()
        try:
            self.nvml.nvmlInit()
            self.handle = (visible_nvml_handle(self.nvml) if index is None
                           else self.nvml.nvmlDeviceGetHandleByIndex(index))
        except Exception as error:
            which = "the visible GPU" if index is None else f"GPU {index}"
            raise EnergyUnavailable(f"NVML cannot open {which}: {error}") from error
        self.method = "nvml_energy_counter"
        try:
            self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle)
        except Exception:
            self.method = "nvml_power_sampling"
        self.update_period_s = self._update_period() if self.method == "nvml_energy_counter" else SAMPLE_PERIOD_S
        self.min_window_s = max(min_window_s, UPDATES_PER_WINDOW * self.update_period_s)

    def _counter_mj(self) -> float:
        return float(self.nvml.nvmlDeviceGetTotalEnergyConsumption(self.handle))

    def _power_w(self) -> float:
        return self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1000.0

    def _update_period(self, limit_s: float = 0.5) -> float:
        """How often the counter changes: the time between two changes, polled."""
        began = time.monotonic()
        first = self._counter_mj()
        changes = []
        while time.monotonic() - began < limit_s and len(changes) < 3:
            value = self._counter_mj()
            if value != first:
                changes.append(time.monotonic())
                first = value
            time.sleep(0.0005)
        if len(changes) >= 2:
            return (changes[-1] - changes[0]) / (len(changes) - 1)
        return limit_s  # it barely moved: ask for a long window

    def power_limit_w(self) -> float | None:
        try:
            return self.nvml.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0
        except Exception:
            return None

    def start(self) -> Reading:
        if self.method == "nvml_energy_counter":
            return Reading(time.monotonic(), self._counter_mj())
        sampler = _PowerSampler(self._power_w)
        sampler.start()
        return Reading(time.monotonic(), None, sampler)

    def stop(self, reading: Reading) -> tuple[float, float]:
        """(joules, seconds) since `start`."""
        if reading.sampler is not None:
            joules = reading.sampler.joules()
        else:
            joules = (self._counter_mj() - reading.start_mj) / 1000.0
        return joules, time.monotonic() - reading.start_s

    def idle_power_w(self, seconds: float | None = None, settle_s: float = IDLE_SETTLE_S) -> float:
        """The average power while nothing runs, just before a measurement: after `settle_s` (the
        card's power falls off for a moment after work), over at least 1 s or 10 counter updates."""
        time.sleep(settle_s)
        reading = self.start()
        time.sleep(seconds if seconds is not None else max(1.0, 10 * self.update_period_s))
        joules, elapsed = self.stop(reading)
        return joules / elapsed if elapsed > 0 else 0.0


def open_meter(device: str, gpu_here: Callable[[], bool] | None = None) -> NvmlMeter:
    """The meter for `kernelpro search --objective energy|edp`, or a clear error that says what can be done on
    this machine (`gpu_here`: whether a CUDA GPU is visible; asked only on another device)."""
    if device != "cuda":
        if (gpu_here or cuda_available)():
            raise EnergyUnavailable("energy is measured with NVML on a CUDA device, and this search runs on the "
                                    f"{device}: give --device cuda")
        raise EnergyUnavailable("energy is measured with NVML on a CUDA GPU, and this machine has none: "
                                "--objective energy and edp need a machine with an NVIDIA GPU; here, search "
                                "with --objective time")
    return NvmlMeter()
