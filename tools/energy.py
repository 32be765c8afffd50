"""The energy tool: NVML around a window of repeated calls, read by the harness's own meter.

It gives joules per call and the average power, and says when the card runs at its power limit (then only doing
less work saves energy). The window is read as the harness reads its energy windows (`kernelpro.energy.meter`:
the energy counter, or sampled power where the card has none); the verdict's energy, with the idle baseline and
interleaved windows, is the harness's (`--objective energy`).
"""

from __future__ import annotations

from kernelpro.tools.api import Gate, Requirements, Tool, ToolContext
from kernelpro.tools.records import Evidence, Finding, Metric, ToolReport

NEAR_LIMIT = 0.85


class EnergyTool(Tool):
    name = "energy"
    level = "energy"
    requires = Requirements(gpu=True, packages=("pynvml",))
    gate = Gate(objectives=frozenset({"energy", "edp"}))
    description = "joules per call and average power from the NVML energy counter"

    def run(self, context: ToolContext) -> ToolReport:
        from kernelpro.tools.runner import run_target
        result, _ = run_target(context.target, "energy", time_limit_s=context.time_limit_s)
        return energy_report(result)


def energy_report(result: dict) -> ToolReport:
    joules_per_call = result["joules"] / result["calls"]
    watts = result["joules"] / result["seconds"] if result["seconds"] else 0.0
    metrics = [Metric(name="joules_per_call", value=joules_per_call, unit="J"),
               Metric(name="average_power", value=watts, unit="W"),
               Metric(name="calls", value=result["calls"], unit="count")]
    findings = []
    limit = result.get("power_limit_w")
    if limit:
        metrics.append(Metric(name="power_limit", value=limit, unit="W"))
        if watts > NEAR_LIMIT * limit:
            findings.append(Finding(
                severity="info",
                evidence=[Evidence(metric="average_power", value=round(watts, 1), unit="W",
                                   threshold=round(NEAR_LIMIT * limit, 1))],
                advice=f"The card draws {watts:.0f} W of its {limit:.0f} W limit: it is power-capped, so only less "
                       "work per call (fewer bytes, lower precision, fused passes) lowers the energy.",
                techniques=["reduce_precision", "fuse_elementwise"]))
    return ToolReport(tool="energy", level="energy", metrics=metrics, findings=findings,
                      notes=[f"{_METHODS.get(result.get('method'), 'NVML')} over {result['calls']} calls in "
                             f"{result['seconds']:.2f} s"])


_METHODS = {"nvml_energy_counter": "NVML energy counter", "nvml_power_sampling": "NVML power, sampled"}
