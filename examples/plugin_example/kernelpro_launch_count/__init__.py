"""An example kernelpro tool plugin.

It reads the number of kernel launches per call of the profiled program
(`context.launches_per_call`, which the profiling pipeline fills from its timeline) and
advises fusing when there are many.
"""

from kernelpro.tools import Evidence, Finding, Gate, Metric, Requirements, Tool, ToolContext, ToolReport


class LaunchCountTool(Tool):
    name = "launch_count"
    level = "system"
    requires = Requirements()  # nothing beyond kernelpro itself
    gate = Gate(classes=frozenset({"overhead_bound", "latency_bound"}))
    description = "flags programs that launch many small kernels per call"
    threshold = 8

    def run(self, context: ToolContext) -> ToolReport:
        launches = int(context.launches_per_call or context.extra.get("launches_per_call", 0))
        findings = []
        if launches > self.threshold:
            findings.append(Finding(
                severity="warning",
                evidence=[Evidence(metric="launches_per_call", value=launches, unit="count",
                                   threshold=self.threshold, ideal=1)],
                advice=f"{launches} kernel launches per call: fuse the elementwise chain or capture a CUDA graph.",
                techniques=["fuse_elementwise", "cuda_graphs", "reduce_launches"]))
        return ToolReport(tool=self.name, level="system",
                          metrics=[Metric(name="launches_per_call", value=launches, unit="count")],
                          findings=findings)
