"""Energy: the NVML meter against a fake NVML library, the objectives, and the harness's energy phase."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kernelpro.energy import Measured, NvmlMeter, best_index, ratio
from kernelpro.energy.meter import EnergyUnavailable, open_meter
from kernelpro.energy.objectives import unconfirmed
from kernelpro.harness import EvalOptions
from kernelpro.harness.evaluate import Evaluator
from kernelpro.harness.problem import load_problem


class FakeNVMLError(Exception):
    pass


class FakeNvml:
    """The pynvml functions the meter uses, over a simulated card: `watts` while `busy`, else `idle_w`.
    The energy counter (mJ) advances in steps of `period_s`, as the real one does."""

    NVMLError = FakeNVMLError

    def __init__(self, idle_w=60.0, busy_w=300.0, period_s=0.01, counter=True):
        self.idle_w, self.busy_w, self.period_s, self.counter = idle_w, busy_w, period_s, counter
        self.busy = False
        self.energy_j = 0.0
        self.last = time.monotonic()
        self.initialized = False
        self.step, self.reported_j = -1, 0.0

    def _advance(self) -> None:
        now = time.monotonic()
        self.energy_j += (self.busy_w if self.busy else self.idle_w) * (now - self.last)
        self.last = now

    def nvmlInit(self):
        self.initialized = True

    def nvmlDeviceGetHandleByIndex(self, index):
        if not self.initialized:
            raise FakeNVMLError("not initialized")
        return ("gpu", index)

    def nvmlDeviceGetHandleByUUID(self, uuid):
        return ("gpu", uuid)

    def nvmlDeviceGetTotalEnergyConsumption(self, handle):
        if not self.counter:
            raise FakeNVMLError("Not Supported")
        self._advance()
        step = int(self.last / self.period_s)  # the counter only moves once a period
        if step != self.step:
            self.step, self.reported_j = step, self.energy_j
        return int(self.reported_j * 1000)  # mJ

    def nvmlDeviceGetPowerUsage(self, handle):
        return int((self.busy_w if self.busy else self.idle_w) * 1000)  # mW

    def nvmlDeviceGetEnforcedPowerLimit(self, handle):
        return 700_000


def test_counter_meter_measures_idle_and_busy_windows():
    nvml = FakeNvml()
    meter = NvmlMeter(nvml, min_window_s=0.2)
    assert meter.method == "nvml_energy_counter" and meter.min_window_s >= 0.2
    assert meter.idle_power_w(0.2) == pytest.approx(60.0, rel=0.1)
    nvml.busy = True
    reading = meter.start()
    time.sleep(0.3)
    joules, seconds = meter.stop(reading)
    assert joules / seconds == pytest.approx(300.0, rel=0.1)
    assert meter.power_limit_w() == 700.0


def test_meter_reads_the_gpu_this_process_sees(monkeypatch):
    """NVML numbers every GPU of the machine; a bench worker pinned with CUDA_VISIBLE_DEVICES must read its own."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")
    assert NvmlMeter(FakeNvml(), min_window_s=0.2).handle == ("gpu", 1)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5d3c,GPU-77aa")
    assert NvmlMeter(FakeNvml(), min_window_s=0.2).handle == ("gpu", "GPU-5d3c")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert NvmlMeter(FakeNvml(), min_window_s=0.2).handle == ("gpu", 0)
    assert NvmlMeter(FakeNvml(), index=3, min_window_s=0.2).handle == ("gpu", 3)


def test_missing_counter_falls_back_to_sampled_power_and_says_so():
    nvml = FakeNvml(counter=False, busy_w=200.0)
    meter = NvmlMeter(nvml, min_window_s=0.2)
    assert meter.method == "nvml_power_sampling"
    nvml.busy = True
    reading = meter.start()
    time.sleep(0.3)
    joules, seconds = meter.stop(reading)
    assert joules / seconds == pytest.approx(200.0, rel=0.1)


def test_meter_errors_are_clear():
    class Broken(FakeNvml):
        def nvmlInit(self):
            raise FakeNVMLError("Driver Not Loaded")

    with pytest.raises(EnergyUnavailable, match="Driver Not Loaded"):
        NvmlMeter(Broken())
    with pytest.raises(EnergyUnavailable, match="on the cpu: give --device cuda"):
        open_meter("cpu", gpu_here=lambda: True)
    # without a GPU, no dead end: it says what to do on this machine instead
    with pytest.raises(EnergyUnavailable, match="this machine has none.*--objective time") as refused:
        open_meter("cpu", gpu_here=lambda: False)
    assert "--device cuda" not in str(refused.value)


def test_objectives():
    fast_hungry = Measured(candidate_ms=1.0, reference_ms=2.0, candidate_j=4.0, reference_j=8.0)
    slow_frugal = Measured(candidate_ms=1.5, reference_ms=2.0, candidate_j=2.0, reference_j=8.0)
    matched = Measured(candidate_ms=1.04, reference_ms=2.0, candidate_j=3.0, reference_j=8.0)
    assert ratio("time", fast_hungry) == 2.0
    assert ratio("edp", fast_hungry) == pytest.approx(4.0)
    assert ratio("energy", matched, fastest_ms=1.0) == pytest.approx(8 / 3)
    # 1.5 ms misses the matched-speed bound (1.05 ms): discounted by (1.05 / 1.5)^2.
    assert ratio("energy", slow_frugal, fastest_ms=1.0) == pytest.approx(4.0 * (1.05 / 1.5) ** 2)
    assert best_index("energy", [fast_hungry, slow_frugal, matched]) == 2
    assert best_index("time", [fast_hungry, slow_frugal, matched]) == 0
    with pytest.raises(ValueError, match="needs the energy"):
        ratio("energy", Measured(candidate_ms=1.0, reference_ms=1.0))
    with pytest.raises(ValueError, match="unknown objective"):
        ratio("speed", fast_hungry)


class FakeMeter:
    """A meter at the harness's boundary: constant power, so J/call = power x window / calls."""

    method = "fake_constant_power"
    min_window_s = 0.3

    def __init__(self, watts=100.0, idle_w=20.0):
        self.watts, self.idle_w = watts, idle_w

    def idle_power_w(self):
        return self.idle_w

    def start(self):
        return time.monotonic()

    def stop(self, began):
        seconds = time.monotonic() - began
        return self.watts * seconds, seconds


def test_harness_measures_energy_after_timing_for_correct_candidates():
    problem = load_problem(Path(__file__).parent / "data" / "problems" / "linear_relu_residual.py")
    options = EvalOptions(device="cpu", measure_energy=True, timing_trials=5, timing_budget_s=0.5)
    with Evaluator("cpu", spares=0, energy_meter=FakeMeter()) as evaluator:
        good = evaluator.evaluate(problem, problem.source + "\nModelNew = Model\n", options)
        bad = evaluator.evaluate(problem, problem.source.replace("torch.relu", "torch.sigmoid") + "\nModelNew = Model\n",
                                 options)
    assert good.ok and good.energy is not None, good.reason
    energy = good.energy
    assert energy.method == "fake_constant_power" and energy.idle_power_w == 20.0
    assert energy.windows == 3 and energy.reference_spread >= 0 and energy.difference in ("lower", "higher", "none")
    for window in (energy.reference, energy.candidate):
        assert window.window_s >= 0.3 and window.calls >= 8
        assert window.power_w == pytest.approx(100.0)
        assert window.j_per_call == pytest.approx(100.0 * window.window_s / window.calls)
        assert window.j_per_call_above_idle == pytest.approx(80.0 * window.window_s / window.calls)
    assert "energy" in good.phase_s
    assert not bad.ok and bad.energy is None


def _window(j):
    from kernelpro.harness.records import EnergyWindow
    return EnergyWindow(j_per_call=j, j_per_call_above_idle=j / 2, power_w=100.0, calls=10, window_s=1.0)


def test_a_difference_within_the_windows_spread_is_no_difference():
    """Each model's median window stands for it; a difference counts only where the windows do not overlap."""
    from kernelpro.energy import describe
    from kernelpro.harness.readings import energy_stats
    apart = energy_stats("m", 50.0, None, [_window(v) for v in (1.00, 1.02, 0.99)], [_window(v) for v in (0.80, 0.82, 0.81)])
    assert apart.difference == "lower" and apart.windows == 3
    assert apart.reference.j_per_call == 1.00 and apart.candidate.j_per_call == 0.81
    assert apart.reference_spread == pytest.approx(0.03) and apart.candidate_spread == pytest.approx(0.02 / 0.81)
    close = energy_stats("m", 50.0, None, [_window(v) for v in (1.00, 1.05, 0.95)], [_window(v) for v in (0.97, 0.99, 1.01)])
    assert close.difference == "none"
    assert "no difference beyond the windows' spread" in describe(close.model_dump())
    assert energy_stats("m", 50.0, None, [_window(1.0)], [_window(1.2)]).difference == "higher"
    assert "lower (3 windows each, spread 2.5% and 3.0%" in describe(apart.model_dump())


def test_the_worker_interleaves_the_energy_windows():
    """Three rounds of the reference's window then the candidate's: the fake meter sees six windows."""
    problem = load_problem(Path(__file__).parent / "data" / "problems" / "linear_relu_residual.py")
    meter = FakeMeter()
    started = []
    meter.start = lambda: started.append(time.monotonic()) or started[-1]
    options = EvalOptions(device="cpu", measure_energy=True, timing_trials=5, timing_budget_s=0.5, energy_windows=3)
    with Evaluator("cpu", spares=0, energy_meter=meter) as evaluator:
        result = evaluator.evaluate(problem, problem.source + "\nModelNew = Model\n", options)
    # five timed calls of the same model on a loaded machine can read as a speedup over 10x, which evaluates it
    # once more (re-verification): six windows each time
    evaluations = 2 if "suspicious_speedup_reverified" in result.flags else 1
    assert result.ok and len(started) == 6 * evaluations and result.energy.windows == 3


def _stats(ours: float, theirs: float, difference: str) -> dict:
    return {"candidate": {"j_per_call": ours}, "reference": {"j_per_call": theirs}, "difference": difference}


def test_a_re_measured_best_is_confirmed_under_each_objective():
    assert unconfirmed("time", 1.01, None) is None and "0.990x vs eager" in unconfirmed("time", 0.99, None)
    # energy: a saving beyond the spread stands even if slower; no difference stands only if not slower
    assert unconfirmed("energy", 0.9, _stats(0.8, 1.0, "lower")) is None
    assert unconfirmed("energy", 1.0, _stats(1.01, 1.0, "none")) is None
    assert "and slower" in unconfirmed("energy", 0.99, _stats(0.97, 1.0, "none"))
    assert "more energy, beyond" in unconfirmed("energy", 1.3, _stats(1.2, 1.0, "higher"))
    assert unconfirmed("energy", 0.5, None) is None  # no energy in the re-measurement: it cannot say
    assert unconfirmed("edp", 0.9, _stats(0.8, 1.0, "none")) is None  # 0.9 x 1.25 = 1.125
    assert "energy x delay" in unconfirmed("edp", 0.8, _stats(0.9, 1.0, "lower"))  # 0.8 x 1.11 = 0.89


def test_the_objectives_read_the_typed_result_and_a_run_stored_by_an_earlier_version():
    """objectives.normalized takes an EvalResult: times on the baseline's scale, energies from its windows. A result
    as a run stored it reads back typed, and one with a field this version no longer has still reads."""
    from kernelpro.energy.objectives import normalized
    from kernelpro.harness.records import EnergyStats, EvalResult, Phase, Verdict, stored_result
    result = EvalResult(verdict=Verdict.CORRECT, phase=Phase.DONE, reason="correct", speedup=4.0, tolerance=1e-4,
                        device="cuda", precision="fp32", policy="relaxed",
                        energy=EnergyStats(method="nvml_energy_counter", idle_power_w=50.0, reference=_window(2.0),
                                           candidate=_window(0.5)))
    measured = normalized(result, {"eager_ms": 8.0})
    assert measured == Measured(candidate_ms=2.0, reference_ms=8.0, candidate_j=0.5, reference_j=2.0)
    assert ratio("energy", measured) == 4.0
    stored = result.model_dump(mode="json")
    assert stored_result(stored) == result
    assert stored_result({**stored, "retired_field": 1}) == result
    with pytest.raises(ValueError):
        stored_result({**stored, "speedup": "fast"})  # a wrong value is still refused
    assert normalized(result.model_copy(update={"energy": None}), {"eager_ms": 8.0}).candidate_j is None


def test_the_energy_tool_reads_its_window_with_the_harness_meter():
    """The profiling tool's window (tools.target.energy_window) is read by the same NvmlMeter as the verdicts'
    energy: here a simulated card drawing 300 W while the calls run, read from its counter or, where it has none,
    from sampled power."""
    from kernelpro.tools.energy import energy_report
    from kernelpro.tools.target import energy_window

    class Calls:
        """A program whose calls keep the simulated card busy for 2 ms each."""
        def __init__(self, nvml):
            self.nvml, self.calls = nvml, 0

        def warm_up(self, calls):
            pass

        def call(self):
            self.nvml.busy = True
            time.sleep(0.002)
            self.calls += 1

        def sync(self):
            pass

    for counter, method in ((True, "nvml_energy_counter"), (False, "nvml_power_sampling")):
        nvml = FakeNvml(counter=counter)
        meter = NvmlMeter(nvml, index=0, min_window_s=0.3)
        program = Calls(nvml)
        result = energy_window(program, {"min_calls": 10}, meter)
        assert result["method"] == method and result["calls"] == program.calls >= 10
        assert result["seconds"] >= 0.3 and result["power_limit_w"] == pytest.approx(700.0)
        assert result["joules"] / result["seconds"] == pytest.approx(300.0, rel=0.15)
        report = energy_report(result)
        assert report.notes[0].startswith("NVML energy counter" if counter else "NVML power, sampled")
