"""The system tool: launches, GPU idle gaps, host overhead and host<->device copies.

nsys is not everywhere (the lent H100 has none), so this tool reads the
`torch.profiler` timeline that stage 1 already recorded (`target.timeline`); run
on its own, it records one.
"""

from __future__ import annotations

from kernelpro.tools.api import Gate, Requirements, Tool, ToolContext
from kernelpro.tools.records import Evidence, Finding, Metric, ToolReport

MANY_LAUNCHES = 8
IDLE_ABOVE = 0.3


def system_findings(timeline: dict) -> tuple[list[Metric], list[Finding]]:
    wall, busy, host = timeline["wall_ms"], timeline["busy_ms"], timeline["host_ms"]
    launches = sum(k["launches_per_call"] for k in timeline["kernels"])
    idle = max(0.0, 1.0 - busy / wall) if wall else 0.0
    copies = timeline.get("copies_per_call", {})
    metrics = [Metric(name="launches_per_call", value=launches, unit="count"),
               Metric(name="wall_ms", value=wall, unit="ms"), Metric(name="busy_ms", value=busy, unit="ms"),
               Metric(name="host_ms", value=host, unit="ms"), Metric(name="idle_fraction", value=idle, unit="ratio"),
               Metric(name="gaps_per_call", value=timeline.get("gaps_per_call", 0.0), unit="count")]
    metrics += [Metric(name=f"copies_{kind}_per_call", value=n, unit="count") for kind, n in sorted(copies.items())]
    findings = []
    mean_us = 1e3 * busy / launches if launches else 0.0
    if launches > MANY_LAUNCHES and idle > IDLE_ABOVE:
        findings.append(Finding(
            severity="critical" if idle > 0.7 else "warning", time_share=min(1.0, idle),
            evidence=[Evidence(metric="launches_per_call", value=round(launches, 1), unit="count",
                               threshold=MANY_LAUNCHES, ideal=1),
                      Evidence(metric="idle_fraction", value=round(idle, 3), unit="ratio", threshold=IDLE_ABOVE),
                      Evidence(metric="mean_kernel_us", value=round(mean_us, 2), unit="us")],
            advice=f"{launches:.0f} launches of {mean_us:.1f} us on average leave the GPU idle {100 * idle:.0f}% of "
                   "each call. Fuse the chain into one kernel, or capture the call in a CUDA graph.",
            techniques=["fuse_elementwise", "reduce_launches", "cuda_graphs"]))
    elif idle > IDLE_ABOVE:
        findings.append(Finding(
            severity="warning", time_share=min(1.0, idle),
            evidence=[Evidence(metric="idle_fraction", value=round(idle, 3), unit="ratio", threshold=IDLE_ABOVE),
                      Evidence(metric="host_ms", value=round(host, 4), unit="ms", ideal=round(busy, 4))],
            advice=f"The GPU is idle {100 * idle:.0f}% of each call while the host prepares work. Move host-side "
                   "work out of forward, or capture the call in a CUDA graph.",
            techniques=["cuda_graphs", "constant_fold"]))
    transfers = copies.get("HtoD", 0.0) + copies.get("DtoH", 0.0)
    if transfers > 0:
        findings.append(Finding(
            severity="warning", time_share=min(1.0, idle) if idle else None,
            evidence=[Evidence(metric="host_device_copies_per_call", value=round(transfers, 2), unit="count",
                               ideal=0)],
            advice="Each call copies between host and device (a .item(), .cpu() or a tensor built from Python "
                   "values). Keep the data on the device and build constants once in __init__.",
            techniques=["constant_fold"]))
    return metrics, findings


class SystemTool(Tool):
    name = "system"
    level = "system"
    requires = Requirements()
    gate = Gate(classes=frozenset({"overhead_bound"}))
    description = "launch count, GPU idle gaps, host overhead, host<->device copies (torch.profiler)"

    def run(self, context: ToolContext) -> ToolReport:
        timeline, notes = context.timeline, ["torch.profiler timeline (no nsys)"]
        if timeline is None:
            from kernelpro.tools.runner import run_target
            timeline, _ = run_target(context.target, "timeline", time_limit_s=context.time_limit_s)
        metrics, findings = system_findings(timeline)
        return ToolReport(tool=self.name, level="system", metrics=metrics, findings=findings, notes=notes)
