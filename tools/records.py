"""Records of the profiling tools: metrics, findings with evidence, and reports.

A report is validated against its published JSON Schema (`schemas/tool_report.schema.json`)
whichever tool made it, third-party ones included; an invalid report is dropped with a
warning by the registry.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

LEVELS = ("kernel", "instruction", "system", "energy")
ROOFLINE_CLASSES = ("memory_bound", "compute_bound", "latency_bound", "overhead_bound")
#: The design's technique vocabulary (extend with care, one name per idea).
TECHNIQUES = (
    "fuse_elementwise", "fuse_epilogue", "fuse_reduction", "algebraic_simplify", "constant_fold",
    "vectorize_memory", "coalesce_memory", "shared_memory_tiling", "register_tiling", "use_tensor_cores",
    "reduce_precision", "increase_occupancy", "reduce_registers", "tune_launch_config", "warp_reduction",
    "cuda_graphs", "channels_last", "library_call", "cute_gemm", "persistent_kernel", "reduce_launches",
)

Level = Literal["kernel", "instruction", "system", "energy"]
Severity = Literal["info", "warning", "critical"]
Technique = Literal[TECHNIQUES]  # type: ignore[valid-type]


class _Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Metric(_Record):
    name: str
    value: float
    unit: str = Field(description="e.g. 'count', 'bytes', '%', 'GB/s', 'registers'")
    kernel: str | None = None


class Evidence(_Record):
    """A measured value and what it was compared with."""

    metric: str
    value: float
    unit: str
    threshold: float | None = Field(None, description="the limit that triggered the finding")
    ideal: float | None = Field(None, description="the value a good kernel would show")


class Finding(_Record):
    severity: Severity
    kernel: str | None = None
    evidence: list[Evidence] = Field(min_length=1)
    advice: str = Field(min_length=1, max_length=400, description="one or two plain sentences")
    techniques: list[Technique] = []
    time_share: float | None = Field(None, ge=0, le=1, description="share of program time in this kernel")


class ToolReport(_Record):
    tool: str
    level: Level
    kernels: list[str] = []
    metrics: list[Metric] = []
    findings: list[Finding] = []
    notes: list[str] = Field([], description="e.g. which fallback was used")


SCHEMA_PATH = Path(__file__).parent / "schemas" / "tool_report.schema.json"


def tool_report_schema() -> dict:
    schema = ToolReport.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["$id"] = "https://kernelpro.dev/schemas/tool_report.schema.json"
    return schema


def published_schema() -> dict:
    return json.loads(SCHEMA_PATH.read_text())


if __name__ == "__main__":  # regenerate the published schema: python -m kernelpro.tools.records
    SCHEMA_PATH.write_text(json.dumps(tool_report_schema(), indent=2, sort_keys=True) + "\n")
