"""The two-stage invocation: stage 1 always, then only the tools its classes call for.

1. A `torch.profiler` timeline of the program (kernels, time shares, idle gaps) and
   the device's cached ceilings; on a GPU with ncu, one small ncu pass (speed of
   light, DRAM bytes, executed FLOPs) over the kernels of one call. The roofline
   classifier names a class per kernel and for the program.
2. The kernels that take `share` of the time (default 80%, cumulative) are the
   dominant ones. Only tools whose gate matches their classes (or the objective)
   run, and only on them: the ncu tools share a single ncu pass filtered by kernel
   name and launch count. `tools=[...]` names the tools to run instead.
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
from kernelpro.tools.ceilings import Ceilings, load_or_measure
from kernelpro.tools.ncu import NcuError, base_name
from kernelpro.tools.records import ToolReport
from kernelpro.tools.registry import Registry, load_tools, validate_report
from kernelpro.tools.roofline import DEFAULT_SHARE, STAGE1_METRICS, ProgramProfile, classify
from kernelpro.tools.runner import ProfileError, run_ncu, run_target

MAX_NCU_LAUNCHES = 64


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


def _launches(all_kernels, wanted: list[str]) -> int:
    """Launches per call that ncu's function-name filter will match (other kernels may share a name)."""
    bases = {base_name(name) for name in wanted}
    launches = sum(k.launches_per_call for k in all_kernels if base_name(k.name) in bases)
    return min(MAX_NCU_LAUNCHES, max(1, math.ceil(launches)))


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
    rows = None
    if use_ncu is None:
        use_ncu = target.device == "cuda" and find_binary("ncu") is not None
    # The timeline alone already names the dominant kernels and the launch-sized ones (overhead-bound
    # whatever their counters say): only the other dominant kernels need ncu's speed of light.
    first = classify(timeline, ceilings, None, share=share, device=target.device)
    wanted = [k for k in first.kernels if k.name in set(first.dominant) and k.roofline_class != "overhead_bound"]
    if use_ncu and wanted:
        progress(f"stage 1: ncu speed of light on {len(wanted)} of {len(first.kernels)} kernel(s)")
        try:
            rows, info = run_ncu(target, metrics=STAGE1_METRICS, kernels=[k.name for k in wanted],
                                 launch_count=_launches(first.kernels, [k.name for k in wanted]), time_limit_s=time_limit_s,
                                 device_key=timeline["device_name"])
            seconds["stage1_ncu"] = info["seconds"]
            notes += info["notes"]
            _keep(keep_dir, "stage1_ncu", info)
        except (NcuError, ProfileError) as error:  # NcuPermissionError says how to enable counters
            notes.append(f"stage 1 ncu failed, analytic fallback: {error}")
    elif use_ncu:
        notes.append("stage 1 ran no ncu pass: every dominant kernel is launch-sized")
    program = classify(timeline, ceilings, rows, share=share, device=target.device) if rows is not None else first
    if rows is not None:
        program.notes = [n for n in program.notes if not n.startswith("ncu rows matched")]
        program.notes.append(f"ncu measured {len(wanted)} dominant kernel(s); the others use timeline and "
                             "analytic counts")
    classes = program.classes_of_dominant()
    selected, skipped = select_tools(registry, classes, objective, tools)
    result = ProfileResult(program=program, selected=selected, skipped=skipped, seconds=seconds,
                           notes=notes + program.notes)
    context = ToolContext(
        target=target, device=target.device, binaries=[Path(b) for b in timeline["binaries"]],
        kernels=program.dominant, classes={k.name: k.roofline_class for k in program.kernels},
        time_shares={k.name: k.time_share for k in program.kernels}, objective=objective,
        time_limit_s=time_limit_s, timeline=timeline, ceilings=ceilings)
    ncu_tools = [registry.tools[name] for name in selected if getattr(registry.tools[name], "ncu_metrics", None)]
    if ncu_tools and program.dominant:
        metrics = [m for tool in ncu_tools for m in tool.ncu_metrics]
        progress(f"stage 2: one ncu pass for {', '.join(t.name for t in ncu_tools)} on "
                 f"{len(program.dominant)} kernel(s)")
        started = time.perf_counter()
        try:
            context.ncu, info = run_ncu(target, metrics=metrics, kernels=program.dominant,
                                        launch_count=_launches(program.kernels, program.dominant),
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
