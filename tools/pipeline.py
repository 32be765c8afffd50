"""The two-stage invocation: stage 1 always, then only the tools its classes call for.

1. A `torch.profiler` timeline of the program (kernels, time shares, idle gaps) and
   the device's cached ceilings. The kernels that take `share` of the time (default
   80%, cumulative) are the dominant ones. On a GPU with ncu, one ncu pass over the
   dominant kernels of one call (filtered by kernel name and launch count) reads
   the speed of light, DRAM bytes and executed FLOPs. The roofline classifier names
   a class per kernel and for the program.
2. Only tools whose gate matches the dominant kernels' classes (or the objective)
   run, and only on those kernels. `tools=[...]` names the tools to run instead.
   The ncu tools read counters that stage 1's pass already collected: that pass
   also asks for the counters of every ncu tool whose gate the classes the
   timeline leaves open could match, so the profiled program starts under ncu
   once (a process start costs more than a few extra replay passes). A tool the
   timeline did not foresee gets one more pass.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelpro.harness.errors import KernelproError
from kernelpro.tools.api import Target, ToolContext, availability, find_binary
from kernelpro.harness.ceilings import Ceilings
from kernelpro.tools.ceilings import load_or_measure
from kernelpro.tools.ncu import NcuError, base_name
from kernelpro.tools.records import ToolReport
from kernelpro.tools.registry import Registry, load_tools, validate_report
from kernelpro.tools.roofline import DEFAULT_SHARE, STAGE1_METRICS, ProgramProfile, classify
from kernelpro.tools.runner import ProfileError, run_ncu, run_target

MAX_NCU_LAUNCHES = 64
#: The classes ncu's counters decide between for a kernel that is not launch-sized.
OPEN_CLASSES = ("memory_bound", "compute_bound", "latency_bound")


class UnknownToolError(KernelproError):
    """`--tools` named a tool that is not installed."""


@dataclass
class ProfileResult:
    program: ProgramProfile
    reports: list[ToolReport] = field(default_factory=list)
    selected: list[str] = field(default_factory=list)
    skipped: dict[str, str] = field(default_factory=dict)  # tool -> why it did not run
    seconds: dict[str, float] = field(default_factory=dict)  # stage -> wall seconds
    notes: list[str] = field(default_factory=list)


def _matching(all_kernels, wanted: list[str]) -> float:
    """Launches per call that ncu's function-name filter matches (other kernels may share a name)."""
    bases = {base_name(name) for name in wanted}
    return sum(k.launches_per_call for k in all_kernels if base_name(k.name) in bases)


#: Two launches of one kernel whose durations differ by more than this are different instances (shapes).
SAME_INSTANCE = 0.25


def _launches(all_kernels, wanted: list[str], sequence: list[str] | None = None,
              durations_us: list[float] | None = None) -> int:
    """How many launches passing ncu's function-name filter to profile.

    With the timeline's launch order: the shortest start of the call that holds every instance of the
    wanted kernels once, an instance being a kernel at one duration (within SAME_INSTANCE), so a GEMM
    kernel run at two shapes is profiled at both. Repeats, such as a model's identical layers, only cost
    replays; per-call counts are then scaled from the profiled launches by time. Without the order: all
    matching launches. At most MAX_NCU_LAUNCHES."""
    bases, wanted_set = {base_name(name) for name in wanted}, set(wanted)
    durations = durations_us if durations_us and len(durations_us) == len(sequence or []) else None
    seen: dict[str, list[float]] = {}
    count = needed = 0
    for index, name in enumerate(sequence or []):
        if base_name(name) not in bases:
            continue
        count += 1
        if name not in wanted_set:
            continue
        duration = durations[index] if durations else 0.0
        known = seen.setdefault(name, [])
        if not any(abs(duration - d) <= SAME_INSTANCE * max(duration, d) for d in known):
            known.append(duration)
            needed = count
    if sequence and wanted_set <= set(seen):
        return min(MAX_NCU_LAUNCHES, max(1, needed))
    return min(MAX_NCU_LAUNCHES, max(1, math.ceil(_matching(all_kernels, wanted))))


def _keep(folder: Path | None, stage: str, info: dict) -> None:
    """Keep a stage's raw output (ncu CSV and command line, or the timeline JSON) for the user."""
    if folder is None:
        return
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    if "csv" in info:
        (folder / f"{stage}.csv").write_text(info["csv"])
        (folder / f"{stage}.command.txt").write_text(" ".join(info["argv"]) + " -- python -m kernelpro.tools.target "
                                                      "SPEC.json\n")
    if "json" in info:
        (folder / f"{stage}.json").write_text(json.dumps(info["json"], indent=1))


def check_tool_names(registry: Registry, names: list[str] | None) -> None:
    unknown = sorted(set(names or ()) - set(registry.tools))
    if unknown:
        raise UnknownToolError(f"unknown tool {', '.join(unknown)}; installed: {', '.join(sorted(registry.tools))}")


def select_tools(registry: Registry, classes: set[str], objective: str,
                 names: list[str] | None = None) -> tuple[list[str], dict[str, str]]:
    """(tools to run, {tool: why not}): by gate, or exactly the named ones."""
    check_tool_names(registry, names)
    chosen, skipped = [], {}
    for name, tool in sorted(registry.tools.items()):
        if names is not None and name not in names:
            continue
        if names is None and not tool.gate.matches(classes, objective):
            skipped[name] = "gate does not match " + ", ".join(sorted(classes)) + f" / objective {objective}"
            continue
        available, reason = availability(tool)
        if not available:
            skipped[name] = reason
            continue
        chosen.append(name)
    return chosen, skipped


@dataclass
class NcuPlan:
    """Stage 1's ncu pass: on which kernels, which counters, and for which stage-2 tools."""

    kernels: list[str]  # the dominant kernels to profile (empty: no pass)
    launch_count: int  # launches that pass ncu's name filter to profile (see _launches)
    measured: list[str]  # those whose class the counters decide (not launch-sized)
    metrics: list[str]
    tools: list[str]  # ncu tools whose counters ride along


def plan_ncu(first: ProgramProfile, registry: Registry, objective: str = "time",
             tools: list[str] | None = None, sequence: list[str] | None = None,
             durations_us: list[float] | None = None) -> NcuPlan:
    """The ncu pass for a program classified from its timeline alone (`first`).

    Time shares, hence the dominant kernels, come from the timeline; a launch-sized kernel is
    overhead-bound whatever its counters say. The other dominant kernels may turn out memory-,
    compute- or latency-bound, so the counters of every ncu tool gated on a class still open
    (or named in `tools`) are collected in the same pass. The plan only runs where ncu does, so
    it goes by gates alone; availability is checked when the tools are chosen."""
    dominant = set(first.dominant)
    measured = [k.name for k in first.kernels if k.name in dominant and k.roofline_class != "overhead_bound"]
    possible = first.classes_of_dominant() | (set(OPEN_CLASSES) if measured else set())
    check_tool_names(registry, tools)
    riders = [name for name, tool in sorted(registry.tools.items()) if getattr(tool, "ncu_metrics", None)
              and (name in tools if tools is not None else tool.gate.matches(possible, objective))]
    extra = sorted({m for name in riders for m in registry.tools[name].ncu_metrics} - set(STAGE1_METRICS))
    kernels = list(first.dominant) if riders else measured
    launch_count = _launches(first.kernels, kernels, sequence, durations_us) if kernels else 0
    return NcuPlan(kernels=kernels, launch_count=launch_count, measured=measured, metrics=STAGE1_METRICS + extra,
                   tools=riders)


def profile(target: Target, *, tools: list[str] | None = None, objective: str = "time",
            share: float = DEFAULT_SHARE, use_ncu: bool | None = None, remeasure: bool = False,
            registry: Registry | None = None, time_limit_s: float = 600.0, keep_dir: Path | None = None,
            progress: Callable[[str], None] = lambda message: None) -> ProfileResult:
    registry = registry or load_tools()
    check_tool_names(registry, tools)  # an unknown --tools name fails before any run
    seconds: dict[str, float] = {}
    notes: list[str] = []
    progress("timeline (torch.profiler)")
    timeline, seconds["timeline"] = run_target(target, "timeline", time_limit_s=time_limit_s)
    _keep(keep_dir, "timeline", {"json": timeline})
    started = time.perf_counter()
    progress("device ceilings (cached after the first run)")
    ceilings: Ceilings = load_or_measure(target.device, timeline["device_name"], remeasure=remeasure)
    seconds["ceilings"] = time.perf_counter() - started
    if use_ncu is None:
        use_ncu = target.device == "cuda" and find_binary("ncu") is not None
    # The timeline alone already names the dominant kernels (time shares do not depend on counters) and the
    # launch-sized ones (overhead-bound whatever their counters say). One ncu pass over the dominant kernels
    # collects stage 1's speed of light and, with it, the counters of every ncu tool whose gate the
    # remaining classes could still match, so a profile starts the profiled program under ncu once.
    first = classify(timeline, ceilings, None, share=share, device=target.device)
    plan = plan_ncu(first, registry, objective, tools, timeline.get("sequence"), timeline.get("sequence_us"))
    rows = None
    if use_ncu and plan.kernels:
        progress(f"ncu: speed of light{' and ' + ', '.join(plan.tools) if plan.tools else ''} "
                 f"on {len(plan.kernels)} of {len(first.kernels)} kernel(s)")
        try:
            rows, info = run_ncu(target, metrics=plan.metrics, kernels=plan.kernels,
                                 launch_count=plan.launch_count, time_limit_s=time_limit_s,
                                 device_key=timeline["device_name"])
            matching = _matching(first.kernels, plan.kernels)
            if plan.launch_count < matching:
                notes.append(f"ncu profiled the first {plan.launch_count} of {matching:g} launches per call that "
                             "match the dominant kernels' names, every instance (kernel and duration) at least once; "
                             "per-call counts are scaled from them by time")
            seconds["ncu"] = info["seconds"]
            notes += info["notes"]
            _keep(keep_dir, "ncu", info)
        except (NcuError, ProfileError) as error:  # NcuPermissionError says how to enable counters
            notes.append(f"ncu failed, analytic fallback: {error}")
    elif use_ncu:
        notes.append("no ncu pass: every dominant kernel is launch-sized")
    program = classify(timeline, ceilings, rows, share=share, device=target.device) if rows is not None else first
    if rows is not None:
        program.notes = [n for n in program.notes if not n.startswith("ncu rows matched")]
        program.notes.append(f"ncu measured {len(plan.measured)} dominant kernel(s); the others use timeline and "
                             "analytic counts")
    classes = program.classes_of_dominant()
    selected, skipped = select_tools(registry, classes, objective, tools)
    result = ProfileResult(program=program, selected=selected, skipped=skipped, seconds=seconds,
                           notes=notes + program.notes)
    context = ToolContext(
        target=target, device=target.device, binaries=[Path(b) for b in timeline["binaries"]],
        kernels=program.dominant, classes={k.name: k.roofline_class for k in program.kernels},
        time_shares={k.name: k.time_share for k in program.kernels}, objective=objective,
        time_limit_s=time_limit_s, timeline=timeline, ceilings=ceilings,
        launches_per_call=sum(k.launches_per_call for k in program.kernels))
    context.extra.setdefault("launches_per_call", context.launches_per_call)
    ncu_tools = [registry.tools[name] for name in selected if getattr(registry.tools[name], "ncu_metrics", None)]
    wanted = list(dict.fromkeys(m for tool in ncu_tools for m in tool.ncu_metrics))
    if ncu_tools and program.dominant and rows is not None and set(wanted) <= set(plan.metrics):
        context.ncu = rows
    elif ncu_tools and program.dominant:  # a tool the timeline did not foresee (or the first pass failed)
        progress(f"stage 2: one more ncu pass for {', '.join(t.name for t in ncu_tools)} on "
                 f"{len(program.dominant)} kernel(s)")
        started = time.perf_counter()
        try:
            context.ncu, info = run_ncu(target, metrics=wanted, kernels=program.dominant,
                                        launch_count=_launches(program.kernels, program.dominant,
                                                               timeline.get("sequence"), timeline.get("sequence_us")),
                                        time_limit_s=time_limit_s, device_key=timeline["device_name"])
            result.notes += info["notes"]
            _keep(keep_dir, "stage2_ncu", info)
        except (NcuError, ProfileError) as error:
            for tool in ncu_tools:
                result.skipped[tool.name] = f"ncu failed: {error}"
                result.selected.remove(tool.name)
        seconds["stage2_ncu"] = time.perf_counter() - started
    for name in list(result.selected):
        progress(f"stage 2: {name}")
        started = time.perf_counter()
        try:
            report = registry.tools[name].run(context)
        except Exception as error:  # a tool's failure is reported, never fatal
            result.skipped[name] = f"failed: {type(error).__name__}: {error}"
            result.selected.remove(name)
            continue
        finally:
            seconds[f"tool:{name}"] = time.perf_counter() - started
        checked = validate_report(report, name)
        if checked is None:
            result.skipped[name] = "its report did not match the published schema"
            result.selected.remove(name)
        else:
            result.reports.append(checked)
    return result


def profile_all_sections(target: Target, time_limit_s: float = 600.0, keep_dir: Path | None = None) -> float:
    """The ungated reference: every ncu section (`--set full`) on every kernel of one call. Seconds."""
    _, info = run_ncu(target, set_name="full", time_limit_s=time_limit_s)
    _keep(keep_dir, "all_sections", info)
    return info["seconds"]
