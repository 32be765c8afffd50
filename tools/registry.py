"""Loading tools from the `kernelpro.tools` entry points: lazily, once, never fatally.

A plugin that fails to import, or whose object is not a tool, is recorded as a
problem and skipped. Reports are validated against the published schema; an
invalid one is dropped with a warning.
"""

from __future__ import annotations

import functools
import importlib.metadata
import logging
from dataclasses import dataclass, field

import jsonschema

from kernelpro.tools.api import ENTRY_POINT_GROUP, availability, is_tool
from kernelpro.tools.records import ToolReport, published_schema

log = logging.getLogger("kernelpro.tools")


@dataclass(frozen=True)
class PluginProblem:
    entry_point: str
    reason: str


@dataclass
class Registry:
    tools: dict[str, object] = field(default_factory=dict)
    sources: dict[str, str] = field(default_factory=dict)  # tool name -> "module:attr"
    problems: list[PluginProblem] = field(default_factory=list)

    def describe(self) -> list[dict]:
        """One row per tool and per broken plugin, for `kernelpro tools list`."""
        rows = []
        for name, tool in sorted(self.tools.items()):
            available, reason = availability(tool)
            rows.append({"name": name, "level": tool.level, "available": available, "reason": reason,
                         "source": self.sources[name], "description": getattr(tool, "description", "")})
        for problem in self.problems:
            rows.append({"name": problem.entry_point, "level": None, "available": False,
                         "reason": problem.reason, "source": problem.entry_point, "description": ""})
        return rows


def _instantiate(loaded: object) -> object:
    if isinstance(loaded, type):
        return loaded()
    if not is_tool(loaded) and callable(loaded):  # a factory function
        return loaded()
    return loaded


def discover(group: str = ENTRY_POINT_GROUP) -> Registry:
    registry = Registry()
    for entry_point in sorted(importlib.metadata.entry_points(group=group), key=lambda e: e.name):
        label = f"{entry_point.name} = {entry_point.value}"
        try:
            tool = _instantiate(entry_point.load())
        except Exception as error:  # a broken plugin is reported, never fatal
            registry.problems.append(PluginProblem(label, f"failed to load: {type(error).__name__}: {error}"))
            continue
        if not is_tool(tool):
            registry.problems.append(PluginProblem(label, "not a tool (needs name, level, requires, gate, run)"))
            continue
        if tool.name in registry.tools:
            registry.problems.append(PluginProblem(label, f"duplicate tool name {tool.name!r}"))
            continue
        registry.tools[tool.name] = tool
        registry.sources[tool.name] = entry_point.value
    return registry


@functools.lru_cache(maxsize=1)
def load_tools() -> Registry:
    """The registry of installed tools, loaded on first use and then kept."""
    return discover()


def validate_report(report: object, tool_name: str) -> ToolReport | None:
    """A tool's report checked against the published schema; None (with a warning) if invalid."""
    document = report.model_dump(mode="json") if isinstance(report, ToolReport) else report
    try:
        jsonschema.validate(document, published_schema())
        return ToolReport.model_validate(document)
    except (jsonschema.ValidationError, ValueError) as error:
        message = getattr(error, "message", str(error)).splitlines()[0]
        log.warning("dropping an invalid report from tool %s: %s", tool_name, message)
        return None
