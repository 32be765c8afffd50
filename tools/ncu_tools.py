"""Stage-2 ncu tools: memory, occupancy and warp stalls, on the kernels that dominate time.

Each tool lists the ncu metrics it reads (`ncu_metrics`). The pipeline collects the
metrics of every selected ncu tool into one ncu pass over the dominant kernels and
hands the rows over in `context.ncu`; a tool run on its own profiles by itself.
The analysis functions take parsed rows, so tests feed them real captures.
"""

from __future__ import annotations

from kernelpro.tools.api import Gate, Requirements, Tool, ToolContext
from kernelpro.tools.ncu import NcuKernel
from kernelpro.tools.records import Evidence, Finding, Metric, ToolReport
from kernelpro.tools.roofline import match_ncu


def _mean(rows: list[NcuKernel], metric: str) -> float | None:
    values = [r.get(metric) for r in rows if r.get(metric) is not None]
    return sum(values) / len(values) if values else None


def _sum(rows: list[NcuKernel], metric: str) -> float | None:
    values = [r.get(metric) for r in rows if r.get(metric) is not None]
    return sum(values) if values else None


class NcuTool(Tool):
    """Shared plumbing: find the rows of each dominant kernel, then `analyze` them."""

    level = "kernel"
    requires = Requirements(binaries=("ncu",), gpu=True)
    ncu_metrics: list[str] = []

    def rows(self, context: ToolContext) -> tuple[dict[str, list[NcuKernel]], list[str]]:
        rows, notes = context.ncu, []
        if rows is None:
            from kernelpro.tools.runner import run_ncu
            rows, info = run_ncu(context.target, metrics=self.ncu_metrics, kernels=context.kernels,
                                 time_limit_s=context.time_limit_s)
            notes = info["notes"]
        names = context.kernels or sorted({r.name for r in rows})
        return match_ncu(names, rows, (context.timeline or {}).get("sequence")), notes

    def analyze(self, kernel: str, rows: list[NcuKernel], context: ToolContext) -> tuple[list[Metric], list[Finding]]:
        raise NotImplementedError

    def run(self, context: ToolContext) -> ToolReport:
        by_kernel, notes = self.rows(context)
        metrics, findings = [], []
        for kernel, rows in sorted(by_kernel.items()):
            more_metrics, more_findings = self.analyze(kernel, rows, context)
            metrics += more_metrics
            findings += more_findings
        return ToolReport(tool=self.name, level=self.level, kernels=sorted(by_kernel), metrics=metrics,
                          findings=findings, notes=notes)


class NcuMemoryTool(NcuTool):
    name = "ncu_memory"
    gate = Gate(classes=frozenset({"memory_bound", "latency_bound"}))
    description = "coalescing, L1/L2 hit rates, DRAM bytes against the ideal, shared-memory bank conflicts"
    ncu_metrics = [
        "gpu__time_duration.sum",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_ld.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_ld.sum",
        "l1tex__t_sectors_pipe_lsu_mem_global_op_st.sum", "l1tex__t_requests_pipe_lsu_mem_global_op_st.sum",
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_ld.pct",
        "smsp__sass_average_data_bytes_per_sector_mem_global_op_st.pct",
        "l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct",
        "dram__bytes_read.sum", "dram__bytes_write.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_ld.sum",
        "l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_st.sum",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum",
        "l1tex__data_pipe_lsu_wavefronts_mem_shared_op_st.sum",
    ]
    coalescing_below_pct = 60.0
    excess_traffic_above = 1.5
    bank_conflicts_above = 0.1

    def analyze(self, kernel, rows, context):
        share = context.time_shares.get(kernel)
        metrics, findings = [], []
        for op in ("ld", "st"):
            sectors = _sum(rows, f"l1tex__t_sectors_pipe_lsu_mem_global_op_{op}.sum")
            requests = _sum(rows, f"l1tex__t_requests_pipe_lsu_mem_global_op_{op}.sum")
            used = _mean(rows, f"smsp__sass_average_data_bytes_per_sector_mem_global_op_{op}.pct")
            if sectors and requests:
                metrics.append(Metric(name=f"global_{op}_sectors_per_request", value=sectors / requests,
                                      unit="sectors", kernel=kernel))
            if used is not None:
                metrics.append(Metric(name=f"global_{op}_bytes_used_per_sector", value=used, unit="%", kernel=kernel))
                if used < self.coalescing_below_pct and (requests or 0) > 0:
                    findings.append(Finding(
                        severity="warning", kernel=kernel, time_share=share,
                        evidence=[Evidence(metric=f"global_{op}_bytes_used_per_sector", value=round(used, 1),
                                           unit="%", threshold=self.coalescing_below_pct, ideal=100.0)],
                        advice=f"Only {used:.0f}% of each 32-byte sector the {'loads' if op == 'ld' else 'stores'} "
                               "fetch is used: neighbouring threads should touch neighbouring addresses (make the "
                               "fastest-varying thread index walk the contiguous dimension).",
                        techniques=["coalesce_memory", "vectorize_memory"]))
        for metric in ("l1tex__t_sector_hit_rate.pct", "lts__t_sector_hit_rate.pct"):
            value = _mean(rows, metric)
            if value is not None:
                metrics.append(Metric(name="l1_hit_rate" if metric.startswith("l1") else "l2_hit_rate",
                                      value=value, unit="%", kernel=kernel))
        dram = (_sum(rows, "dram__bytes_read.sum") or 0.0) + (_sum(rows, "dram__bytes_write.sum") or 0.0)
        metrics.append(Metric(name="dram_bytes", value=dram, unit="bytes", kernel=kernel))
        ideal = (context.timeline or {}).get("analytic", {}).get("bytes")
        if ideal and share and dram > self.excess_traffic_above * ideal:
            l2 = _mean(rows, "lts__t_sector_hit_rate.pct")
            evidence = [Evidence(metric="dram_bytes", value=dram, unit="bytes", ideal=float(ideal),
                                 threshold=self.excess_traffic_above * ideal)]
            if l2 is not None:
                evidence.append(Evidence(metric="l2_hit_rate", value=round(l2, 1), unit="%"))
            findings.append(Finding(
                severity="warning", kernel=kernel, time_share=share, evidence=evidence,
                advice=f"This kernel moves {dram / ideal:.1f}x the bytes the whole problem needs: data is read more "
                       "than once. Keep reused tiles in shared memory or registers, or fuse the producer in.",
                techniques=["shared_memory_tiling", "fuse_elementwise", "register_tiling"]))
        conflicts = sum(_sum(rows, f"l1tex__data_bank_conflicts_pipe_lsu_mem_shared_op_{op}.sum") or 0.0
                        for op in ("ld", "st"))
        wavefronts = sum(_sum(rows, f"l1tex__data_pipe_lsu_wavefronts_mem_shared_op_{op}.sum") or 0.0
                         for op in ("ld", "st"))
        if wavefronts:
            ratio = conflicts / wavefronts
            metrics.append(Metric(name="shared_bank_conflict_ratio", value=ratio, unit="ratio", kernel=kernel))
            if ratio > self.bank_conflicts_above:
                findings.append(Finding(
                    severity="warning", kernel=kernel, time_share=share,
                    evidence=[Evidence(metric="shared_bank_conflict_ratio", value=round(ratio, 3), unit="ratio",
                                       threshold=self.bank_conflicts_above, ideal=0.0)],
                    advice=f"{100 * ratio:.0f}% of shared-memory wavefronts are bank conflicts. Pad each shared row "
                           "by one element (or swizzle) so a warp's accesses land in different banks.",
                    techniques=["shared_memory_tiling"]))
        return metrics, findings


class NcuOccupancyTool(NcuTool):
    name = "ncu_occupancy"
    gate = Gate(classes=frozenset({"latency_bound", "compute_bound"}))
    description = "theoretical vs achieved occupancy, the limiter, waves per SM"
    ncu_metrics = [
        "sm__warps_active.avg.pct_of_peak_sustained_active", "sm__maximum_warps_per_active_cycle_pct",
        "launch__occupancy_limit_registers", "launch__occupancy_limit_shared_mem",
        "launch__occupancy_limit_warps", "launch__occupancy_limit_blocks",
        "launch__registers_per_thread", "launch__block_size", "launch__grid_size",
        "launch__waves_per_multiprocessor", "launch__sm_count",
    ]
    low_theoretical_pct = 50.0
    achieved_ratio_below = 0.7
    few_waves_below = 1.0
    LIMITERS = {
        "registers": ("registers per thread", ["reduce_registers", "tune_launch_config"]),
        "shared_mem": ("shared memory per block", ["tune_launch_config", "shared_memory_tiling"]),
        "warps": ("the block size (warps per SM)", ["tune_launch_config"]),
        "blocks": ("the block count per SM (blocks too small)", ["tune_launch_config"]),
    }

    def analyze(self, kernel, rows, context):
        share = context.time_shares.get(kernel)
        achieved = _mean(rows, "sm__warps_active.avg.pct_of_peak_sustained_active")
        theoretical = _mean(rows, "sm__maximum_warps_per_active_cycle_pct")
        waves = _mean(rows, "launch__waves_per_multiprocessor")
        limits = {key: _mean(rows, f"launch__occupancy_limit_{key}") for key in self.LIMITERS}
        limits = {key: value for key, value in limits.items() if value is not None}
        limiter = min(sorted(limits), key=lambda key: limits[key]) if limits else None
        grid, sms = _mean(rows, "launch__grid_size"), _mean(rows, "launch__sm_count")
        if grid and sms and limiter and limits[limiter] > 0:  # ncu prints waves with 2 decimals: recompute
            waves = grid / (sms * limits[limiter])
        metrics = [Metric(name=name, value=value, unit=unit, kernel=kernel) for name, value, unit in (
            ("achieved_occupancy", achieved, "%"), ("theoretical_occupancy", theoretical, "%"),
            ("waves_per_sm", waves, "waves"),
            ("registers_per_thread", _mean(rows, "launch__registers_per_thread"), "registers"),
            ("block_size", _mean(rows, "launch__block_size"), "threads"),
            ("grid_size", _mean(rows, "launch__grid_size"), "blocks")) if value is not None]
        findings = []
        if waves is not None and waves < self.few_waves_below:
            findings.append(Finding(
                severity="critical" if waves < 0.25 else "warning", kernel=kernel, time_share=share,
                evidence=[Evidence(metric="waves_per_sm", value=float(f"{waves:.3g}"), unit="waves",
                                   threshold=self.few_waves_below)],
                advice=f"The grid fills only {100 * waves:.2g}% of one wave: most SMs sit idle. Split the work "
                       "into more blocks (e.g. split the reduction dimension) or use smaller blocks.",
                techniques=["tune_launch_config", "warp_reduction"]))
        if theoretical is not None and theoretical < self.low_theoretical_pct and limiter:
            what, techniques = self.LIMITERS[limiter]
            findings.append(Finding(
                severity="warning", kernel=kernel, time_share=share,
                evidence=[Evidence(metric="theoretical_occupancy", value=round(theoretical, 1), unit="%",
                                   threshold=self.low_theoretical_pct),
                          Evidence(metric=f"occupancy_limit_{limiter}", value=limits[limiter], unit="blocks")],
                advice=f"Occupancy is capped at {theoretical:.0f}% by {what}. Lower that use or change the block "
                       "shape so more warps fit on each SM to hide latency.",
                techniques=techniques))
        if (achieved is not None and theoretical and waves is not None and waves >= self.few_waves_below
                and achieved < self.achieved_ratio_below * theoretical):
            findings.append(Finding(
                severity="info", kernel=kernel, time_share=share,
                evidence=[Evidence(metric="achieved_occupancy", value=round(achieved, 1), unit="%",
                                   ideal=round(theoretical, 1))],
                advice=f"Achieved occupancy {achieved:.0f}% is well under the theoretical {theoretical:.0f}%: "
                       f"uneven blocks or a partial last wave ({waves:.2f} waves). Balance the work per block.",
                techniques=["tune_launch_config", "persistent_kernel"]))
        return metrics, findings


#: What each warp-stall reason means and what fixes it.
STALL_REASONS = {
    "long_scoreboard": ("waiting for global or local memory", "put more independent loads in flight, stage reused "
                        "data in shared memory, load 16 bytes per thread", ["shared_memory_tiling", "vectorize_memory"]),
    "short_scoreboard": ("waiting for shared memory or special-function results", "avoid bank conflicts and replace "
                         "transcendental calls with cheaper algebra", ["shared_memory_tiling", "algebraic_simplify"]),
    "mio_throttle": ("the shared-memory instruction queue is full", "use fewer, wider shared-memory accesses and keep "
                     "values in registers", ["register_tiling", "vectorize_memory"]),
    "lg_throttle": ("the global/local memory queue is full", "issue fewer, wider global accesses (16 bytes per thread)",
                    ["vectorize_memory", "coalesce_memory"]),
    "math_pipe_throttle": ("the math units are saturated", "move the arithmetic to tensor cores or a lower precision",
                           ["use_tensor_cores", "reduce_precision"]),
    "barrier": ("waiting at __syncthreads", "synchronize less often and balance the work between warps; reduce "
                "with warp shuffles", ["warp_reduction"]),
    "membar": ("waiting at memory fences", "drop fences that are not needed, or use narrower scopes",
               ["algebraic_simplify"]),
    "branch_resolving": ("resolving divergent branches", "make branches uniform across a warp",
                         ["algebraic_simplify"]),
    "wait": ("fixed-latency dependencies between instructions", "give each thread independent work (more outputs per "
             "thread) so instructions overlap", ["register_tiling"]),
    "no_instruction": ("instruction-cache misses", "shrink the code: less unrolling, fewer template instances",
                       ["tune_launch_config"]),
    "dispatch_stall": ("the dispatcher was busy", "usually transient; look at the other reasons first", []),
    "imc_miss": ("constant-cache misses", "keep per-thread-varying values out of constant memory",
                 ["algebraic_simplify"]),
    "tex_throttle": ("the texture unit is saturated", "use plain global loads", ["coalesce_memory"]),
    "drain": ("draining memory stores at exit", "usually small; write outputs earlier and wider", ["vectorize_memory"]),
    "sleeping": ("warps sleeping (nanosleep, barriers)", "avoid spin-waiting", ["persistent_kernel"]),
    "misc": ("miscellaneous hardware stalls", "look at the other reasons first", []),
}
_NOT_STALLS = {"selected", "not_selected"}  # an issuing or eligible warp is not stalled


class NcuStallsTool(NcuTool):
    name = "ncu_stalls"
    gate = Gate(classes=frozenset({"latency_bound", "compute_bound"}))
    description = "the top warp-stall reasons, in words, with what fixes each"
    ncu_metrics = [f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio"
                   for reason in sorted(STALL_REASONS) + sorted(_NOT_STALLS)]
    top = 3
    significant_above = 0.5  # stalled warps per issued instruction

    def analyze(self, kernel, rows, context):
        share = context.time_shares.get(kernel)
        values = {}
        for reason in list(STALL_REASONS) + sorted(_NOT_STALLS):
            value = _mean(rows, f"smsp__average_warps_issue_stalled_{reason}_per_issue_active.ratio")
            if value is not None:
                values[reason] = value
        metrics = [Metric(name=f"stall_{reason}", value=value, unit="warps per issue", kernel=kernel)
                   for reason, value in sorted(values.items())]
        stalls = sorted(((v, r) for r, v in values.items() if r in STALL_REASONS), reverse=True)
        total = sum(v for v, _ in stalls) or 1.0
        findings = []
        for value, reason in stalls[: self.top]:
            if value < self.significant_above:
                continue
            meaning, fix, techniques = STALL_REASONS[reason]
            findings.append(Finding(
                severity="warning" if value / total > 0.3 else "info", kernel=kernel, time_share=share,
                evidence=[Evidence(metric=f"stall_{reason}", value=round(value, 2), unit="warps per issue",
                                   threshold=self.significant_above)],
                advice=f"{100 * value / total:.0f}% of stalls: {meaning}. Fix: {fix}.",
                techniques=techniques))
        return metrics, findings
