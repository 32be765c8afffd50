"""kernelpro.tools: the plugin API for micro-profiling tools and the built-in tools.

`api` (what a tool declares and gets), `records` (reports and their published schema),
`registry` (entry-point loading) and the built-in tools, which register through the
same entry points as third-party ones.
"""

from kernelpro.tools.api import (ENTRY_POINT_GROUP, Gate, Requirements, Tool, ToolContext, availability,
                                 find_binary, is_tool)
from kernelpro.tools.records import (LEVELS, ROOFLINE_CLASSES, TECHNIQUES, Evidence, Finding, Metric,
                                     ToolReport, tool_report_schema)
from kernelpro.tools.registry import PluginProblem, Registry, discover, load_tools, validate_report

__all__ = [
    "ENTRY_POINT_GROUP", "Gate", "Requirements", "Tool", "ToolContext", "availability", "find_binary", "is_tool",
    "LEVELS", "ROOFLINE_CLASSES", "TECHNIQUES", "Evidence", "Finding", "Metric", "ToolReport",
    "tool_report_schema", "PluginProblem", "Registry", "discover", "load_tools", "validate_report",
]
