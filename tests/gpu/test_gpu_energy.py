"""GPU: the NVML meter on the real card, and the harness's energy phase through it."""

from __future__ import annotations

import pytest
import torch

from conftest import DATA

pytestmark = pytest.mark.gpu


def test_nvml_meter_sees_work_above_idle():
    from kernelpro.energy import NvmlMeter
    meter = NvmlMeter()
    idle = meter.idle_power_w()
    assert 0 < idle < 1500
    a = torch.randn(8192, 8192, device="cuda")
    reading = meter.start()
    while True:
        for _ in range(20):
            a @ a
        torch.cuda.synchronize()
        joules, seconds = meter.stop(reading)
        if seconds >= meter.min_window_s:
            break
    print(f"meter: {meter.method}, counter period {meter.update_period_s * 1000:.1f} ms, window "
          f"{meter.min_window_s:.2f} s, idle {idle:.0f} W, busy {joules / seconds:.0f} W")
    assert joules / seconds > idle


def test_harness_energy_phase_on_the_gpu():
    from kernelpro.energy import NvmlMeter
    from kernelpro.harness import EvalOptions
    from kernelpro.harness.evaluate import Evaluator
    from kernelpro.harness.problem import load_problem
    problem = load_problem(DATA / "problems" / "linear_relu_residual.py")
    with Evaluator("cuda", spares=0, energy_meter=NvmlMeter()) as evaluator:
        result = evaluator.evaluate(problem, problem.source + "\nModelNew = Model\n",
                                    EvalOptions(device="cuda", measure_energy=True, timing_budget_s=1.0))
    assert result.ok, result.reason
    energy = result.energy
    print(f"energy: {energy.method}, idle {energy.idle_power_w:.0f} W, reference "
          f"{energy.reference.j_per_call * 1e6:.1f} uJ/call at {energy.reference.power_w:.0f} W over "
          f"{energy.reference.calls} calls, candidate {energy.candidate.j_per_call * 1e6:.1f} uJ/call")
    assert energy.reference.window_s >= 1.0 and energy.candidate.window_s >= 1.0
    assert energy.reference.j_per_call > 0 and energy.candidate.j_per_call > 0
