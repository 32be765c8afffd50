"""The semantic feedback operator: stage-1 classes and stage-2 findings become guidance.

Every finding gets a weight: the share of time of the kernel it concerns times its
severity (critical 3, warning 2, info 1). The guidance lists the heaviest findings
first, each with its evidence numbers, after one line for the program and one per
dominant kernel (class, fraction of the ceiling, floor). Contradictions are
resolved before ranking: advice that cannot help a kernel already near a ceiling
(occupancy, launch shapes or tensor cores for a kernel at its memory roofline;
memory-access advice for one at its compute roofline) is dropped and said so. On a device
other than a GPU, techniques that exist only on GPUs (tensor cores, warps, shared memory,
launch shapes, CUDA graphs) are never suggested.

Two outputs: `text` for an LLM (short: at most `MAX_ITEMS` findings), and
`techniques`, the design vocabulary ranked by score in [0, 1] (the sum of the
weights of the findings that suggest each, plus a smaller prior from each dominant
kernel's class), for MCTS priors and the offline coder. The operator is a pure
function of its inputs: the same profile always gives the same guidance.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from kernelpro.tools.ncu import base_name
from kernelpro.tools.records import ToolReport
from kernelpro.tools.roofline import ProgramProfile, placement_cost

SEVERITY_WEIGHT = {"critical": 3.0, "warning": 2.0, "info": 1.0}
AT_ROOF_PCT = 80.0
CLASS_PRIOR_WEIGHT = 0.5
MAX_ITEMS = 6
#: What usually helps each class, strongest first (a prior; findings outweigh it).
CLASS_TECHNIQUES = {
    "memory_bound": ("fuse_elementwise", "vectorize_memory", "reduce_precision", "coalesce_memory"),
    "compute_bound": ("use_tensor_cores", "library_call", "cute_gemm", "register_tiling", "reduce_precision"),
    "latency_bound": ("tune_launch_config", "increase_occupancy", "warp_reduction", "persistent_kernel"),
    "overhead_bound": ("fuse_elementwise", "cuda_graphs", "reduce_launches"),
}
#: Advice that cannot help a kernel that already saturates one ceiling.
USELESS_AT_MEMORY_ROOF = frozenset({"increase_occupancy", "tune_launch_config", "use_tensor_cores", "register_tiling",
                                    "persistent_kernel", "warp_reduction", "cute_gemm"})
USELESS_AT_COMPUTE_ROOF = frozenset({"vectorize_memory", "coalesce_memory", "increase_occupancy",
                                     "tune_launch_config", "reduce_registers"})
#: Techniques of GPU hardware and launches, which a program profiled on the CPU cannot use.
GPU_ONLY = frozenset({"use_tensor_cores", "coalesce_memory", "shared_memory_tiling", "increase_occupancy",
                      "reduce_registers", "tune_launch_config", "warp_reduction", "cuda_graphs", "cute_gemm",
                      "persistent_kernel"})


class GuidanceItem(BaseModel):
    model_config = ConfigDict(frozen=True)

    weight: float
    tool: str
    kernel: str | None
    advice: str
    evidence: str
    techniques: list[str]


class TechniqueScore(BaseModel):
    model_config = ConfigDict(frozen=True)

    technique: str
    score: float


class Guidance(BaseModel):
    classification: str
    text: str
    items: list[GuidanceItem]
    techniques: list[TechniqueScore]
    resolved: list[str]


def _number(value: float) -> str:
    if value == 0:
        return "0"
    if abs(value) >= 1e9:
        return f"{value / 1e9:.2f}G"
    if abs(value) >= 1e6:
        return f"{value / 1e6:.2f}M"
    if abs(value) >= 1e3:
        return f"{value / 1e3:.1f}k"
    return f"{value:.3g}"


def _evidence_text(finding) -> str:
    parts = []
    for e in finding.evidence:
        text = f"{e.metric}={_number(e.value)}{'' if e.unit in ('count', 'ratio') else ' ' + e.unit}"
        if e.threshold is not None:
            text += f" (limit {_number(e.threshold)})"
        elif e.ideal is not None:
            text += f" (ideal {_number(e.ideal)})"
        parts.append(text)
    return "; ".join(parts)


def _roof(program: ProgramProfile) -> dict[str, str]:
    """Kernels near a ceiling: name -> 'memory' or 'compute'."""
    roofs = {}
    for kernel in program.kernels:
        if (kernel.memory_pct or 0) >= AT_ROOF_PCT and kernel.roofline_class == "memory_bound":
            roofs[kernel.name] = "memory"
        elif (kernel.compute_pct or 0) >= AT_ROOF_PCT and kernel.roofline_class == "compute_bound":
            roofs[kernel.name] = "compute"
    return roofs


def _headline(program: ProgramProfile) -> list[str]:
    above = program.wall_ms / program.floor_ms if program.floor_ms > 0 else float("inf")
    busy = f"; GPU busy {100 * (1 - program.idle_fraction):.0f}% of the call" if program.device == "cuda" else ""
    lines = [f"Program: {program.classification}; {program.wall_ms:.4g} ms per call, floor {program.floor_ms:.4g} ms "
             f"({above:.1f}x above it){busy}."]
    shares = {k.name: k for k in program.kernels}
    for name in program.dominant[:3]:
        kernel = shares[name]
        reach = []
        if kernel.memory_pct is not None:
            reach.append(f"{kernel.memory_pct:.0f}% of memory bandwidth")
        if kernel.compute_pct is not None:
            reach.append(f"{kernel.compute_pct:.0f}% of compute")
        floor = f", floor {kernel.floor_ms:.3g} ms" if kernel.floor_ms else ""
        if placement_cost(kernel):
            floor += f"; {kernel.alone_ms_per_call:.3g} ms alone under ncu, the rest is its place in the program"
        lines.append(f"- {base_name(name)} ({100 * kernel.time_share:.0f}% of time, {kernel.launches_per_call:.3g} "
                     f"launch(es)): {kernel.roofline_class}, {', '.join(reach) or 'no counters'}{floor}.")
    if program.floor_ms > 0 and above < 1.25:
        lines.append("Within 25% of the floor: only doing less work (fusion, algebra, lower precision) can help.")
    return lines


def build_guidance(program: ProgramProfile, reports: list[ToolReport]) -> Guidance:
    roofs = _roof(program)
    shares = {k.name: k.time_share for k in program.kernels}
    items, resolved = [], []
    unusable = GPU_ONLY if program.device != "cuda" else frozenset()
    for report in sorted(reports, key=lambda r: r.tool):
        for finding in report.findings:
            techniques = [t for t in finding.techniques if t not in unusable]
            if finding.techniques and not techniques:
                resolved.append(f"dropped {report.tool} advice ({', '.join(finding.techniques)}) for "
                                f"{base_name(finding.kernel)}: GPU techniques, and this ran on {program.device}")
                continue
            roof = roofs.get(finding.kernel or "")
            useless = USELESS_AT_MEMORY_ROOF if roof == "memory" else USELESS_AT_COMPUTE_ROOF if roof else frozenset()
            kept = [t for t in techniques if t not in useless]
            if techniques and not kept:
                resolved.append(f"dropped {report.tool} advice ({', '.join(techniques)}) for "
                                f"{base_name(finding.kernel)}: already at its {roof} roofline")
                continue
            share = finding.time_share if finding.time_share is not None else shares.get(finding.kernel or "", 1.0)
            items.append(GuidanceItem(weight=round(share * SEVERITY_WEIGHT[finding.severity], 6), tool=report.tool,
                                      kernel=finding.kernel, advice=finding.advice,
                                      evidence=_evidence_text(finding), techniques=kept))
    items.sort(key=lambda item: (-item.weight, item.kernel or "", item.tool, item.advice))
    scores: dict[str, float] = {}
    for item in items:
        for technique in item.techniques:
            scores[technique] = scores.get(technique, 0.0) + item.weight
    for kernel in program.kernels:
        if kernel.name not in program.dominant and program.dominant:
            continue
        roof = roofs.get(kernel.name)
        for rank, technique in enumerate(CLASS_TECHNIQUES.get(kernel.roofline_class, ())):
            if technique in unusable or \
                    (roof and technique in (USELESS_AT_MEMORY_ROOF if roof == "memory" else USELESS_AT_COMPUTE_ROOF)):
                continue
            scores[technique] = scores.get(technique, 0.0) + CLASS_PRIOR_WEIGHT * kernel.time_share / (rank + 1)
    for rank, technique in enumerate(CLASS_TECHNIQUES.get(program.classification, ())):
        if technique not in unusable:
            scores[technique] = scores.get(technique, 0.0) + CLASS_PRIOR_WEIGHT / (rank + 1)
    if unusable:
        classes = {program.classification} | {k.roofline_class for k in program.kernels if k.name in program.dominant}
        left_out = sorted({t for c in classes for t in CLASS_TECHNIQUES.get(c, ())} & unusable)
        if left_out:
            resolved.append(f"left out on {program.device}, which has no GPU: {', '.join(left_out)}")
    top = max(scores.values(), default=1.0) or 1.0
    ranked = [TechniqueScore(technique=t, score=round(s / top, 3))
              for t, s in sorted(scores.items(), key=lambda pair: (-pair[1], pair[0]))]
    lines = _headline(program)
    if items:
        lines.append("What to fix, most time first:")
    for number, item in enumerate(items[:MAX_ITEMS], 1):
        where = f"[{base_name(item.kernel)}] " if item.kernel else ""
        lines.append(f"{number}. {where}{item.advice} ({item.evidence}; {item.tool})")
    if len(items) > MAX_ITEMS:
        lines.append(f"({len(items) - MAX_ITEMS} smaller findings left out.)")
    lines += [f"Note: {line}." for line in resolved[:2]]
    if ranked:
        lines.append("Try: " + ", ".join(t.technique for t in ranked[:5]) + ".")
    return Guidance(classification=program.classification, text="\n".join(lines), items=items, techniques=ranked,
                    resolved=resolved)
