"""The plugin API: what a profiling tool declares and what it is given.

A tool is any object with `name`, `level`, `requires`, `gate` and `run(context)`;
subclassing `Tool` is the easy way. Third-party packages register one under the
entry-point group `kernelpro.tools` (see the README); the built-in tools register
the same way, in kernelpro's own `pyproject.toml`.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelpro.tools.records import LEVELS, ToolReport

ENTRY_POINT_GROUP = "kernelpro.tools"


@dataclass(frozen=True)
class Requirements:
    binaries: tuple[str, ...] = ()  # found on PATH or in the nvidia-* wheels' bin folders
    gpu: bool = False
    packages: tuple[str, ...] = ()  # importable Python packages


@dataclass(frozen=True)
class Gate:
    """When the search runs the tool: None means any class / objective."""

    classes: frozenset[str] | None = None
    objectives: frozenset[str] | None = None

    def matches(self, classes: set[str], objective: str) -> bool:
        class_ok = self.classes is None or bool(self.classes & classes)
        return class_ok and (self.objectives is None or objective in self.objectives)


@dataclass(frozen=True)
class Target:
    """The program to profile: a problem file, and optionally a candidate that replaces its Model."""

    problem_path: Path
    candidate_path: Path | None = None
    device: str = "cpu"
    precision: str = "fp32"
    seed: int = 42
    model_mode: str = "train"  # as the harness runs models: train (KernelBench's way) or eval


@dataclass
class ToolContext:
    """What a tool gets: the program, its built binaries, the kernels that matter and what
    stage 1 already measured (so a tool need not run the program again)."""

    target: Target | None = None
    candidate_source: str = ""
    device: str = "cpu"
    binaries: list[Path] = field(default_factory=list)  # .so / .cubin files to inspect
    kernels: list[str] = field(default_factory=list)  # the kernels that dominate time (all if empty)
    classes: dict[str, str] = field(default_factory=dict)  # kernel -> roofline class
    time_shares: dict[str, float] = field(default_factory=dict)  # kernel -> share of time
    objective: str = "time"
    time_limit_s: float = 120.0
    workdir: Path | None = None
    timeline: dict | None = None  # stage 1's timeline (see kernelpro.tools.target)
    ncu: list | None = None  # stage 2's shared ncu pass: NcuKernel rows for the kernels above
    ceilings: Any = None  # kernelpro.harness.ceilings.Ceilings of this device
    #: kernel launches per call of the program, all kernels (on the CPU: top-level operators per call)
    launches_per_call: float = 0.0
    extra: dict[str, Any] = field(default_factory=dict)  # anything a caller adds (also launches_per_call)


class Tool:
    """Base class for tools: set the class attributes and implement `run`."""

    name: str = ""
    level: str = "kernel"
    requires: Requirements = Requirements()
    gate: Gate = Gate()
    description: str = ""

    def run(self, context: ToolContext) -> ToolReport:
        raise NotImplementedError


def is_tool(candidate: object) -> bool:
    return (isinstance(getattr(candidate, "name", None), str) and bool(candidate.name)
            and getattr(candidate, "level", None) in LEVELS and callable(getattr(candidate, "run", None))
            and isinstance(getattr(candidate, "requires", None), Requirements)
            and isinstance(getattr(candidate, "gate", None), Gate))


def find_binary(name: str) -> Path | None:
    """A CUDA binary on PATH, or shipped by an nvidia-* wheel (nvidia-cuda-cuobjdump, ...)."""
    found = shutil.which(name)
    if found:
        return Path(found)
    spec = importlib.util.find_spec("nvidia")
    roots = list(spec.submodule_search_locations or []) if spec else []
    roots += [os.path.join(p, "nvidia") for p in sys.path if p]
    for root in roots:
        for candidate in sorted(Path(root).glob(f"*/bin/{name}")):
            if os.access(candidate, os.X_OK):
                return candidate
    return None


def availability(tool: object) -> tuple[bool, str]:
    """(available, reason): why a tool cannot run on this machine, in words."""
    requires: Requirements = tool.requires
    for binary in requires.binaries:
        if find_binary(binary) is None:
            return False, f"{binary} not found"
    for package in requires.packages:
        if importlib.util.find_spec(package) is None:
            return False, f"package {package} missing"
    if requires.gpu:
        from kernelpro.harness.toolchain import cuda_available
        if not cuda_available():
            return False, "no CUDA device"
    return True, ""
