"""The SASS tool: what the compiler actually emitted, per kernel.

It runs `cuobjdump --dump-resource-usage` and `cuobjdump --dump-sass` on the
candidate's compiled binaries (a `load_inline` .so, a Triton .cubin) and reports
the instruction mix, tensor-core instructions (HGMMA/HMMA, or only FFMA), the width
of global loads and stores (LDG.E.128 or narrower), local-memory spills (LDL/STL),
and registers, stack and shared memory per kernel. cuobjdump comes from CUDA or
the `nvidia-cuda-cuobjdump` wheel.
"""

from __future__ import annotations

import re
import subprocess
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from kernelpro.tools.api import Gate, Requirements, Tool, ToolContext, find_binary
from kernelpro.tools.records import Evidence, Finding, Metric, ToolReport

_FUNCTION = re.compile(r"^\s*Function\s*:\s*(\S+)")
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]{4,}\*/\s+(?:@!?U?P\w+\s+)?([A-Z][A-Z0-9_.]*)")
_RESOURCE_FUNCTION = re.compile(r"^\s*Function\s+(\S+):")
_RESOURCE_FIELDS = re.compile(r"(REG|STACK|SHARED|LOCAL):(\d+)")
TENSOR_CORE_OPCODES = ("HGMMA", "HMMA", "QGMMA", "IMMA", "DMMA", "BMMA")


@dataclass
class KernelSass:
    name: str
    opcodes: Counter = field(default_factory=Counter)  # full opcode with modifiers -> count
    registers: int | None = None
    stack_bytes: int | None = None
    shared_bytes: int | None = None
    local_bytes: int | None = None

    def base_count(self, *bases: str) -> int:
        return sum(n for op, n in self.opcodes.items() if op.split(".")[0] in bases)

    @property
    def total(self) -> int:
        return sum(self.opcodes.values())

    def global_access_widths(self) -> Counter:
        """Bits per global load/store: LDG.E.128 -> 128; no width suffix means 32."""
        widths: Counter = Counter()
        for opcode, count in self.opcodes.items():
            parts = opcode.split(".")
            if parts[0] in ("LDG", "STG"):
                sizes = [int(p) for p in parts[1:] if p.isdigit()]
                widths[sizes[0] if sizes else 32] += count
        return widths


def parse_sass(text: str) -> dict[str, KernelSass]:
    """Per-kernel opcode counts from `cuobjdump --dump-sass` output."""
    kernels: dict[str, KernelSass] = {}
    current: KernelSass | None = None
    for line in text.splitlines():
        function = _FUNCTION.match(line)
        if function:
            current = kernels.setdefault(function.group(1), KernelSass(function.group(1)))
            continue
        instruction = _INSTRUCTION.match(line)
        if instruction and current is not None:
            current.opcodes[instruction.group(1)] += 1
    return kernels


def parse_resource_usage(text: str, kernels: dict[str, KernelSass]) -> None:
    """Fill registers, stack, shared and local bytes from `--dump-resource-usage`."""
    current = None
    for line in text.splitlines():
        function = _RESOURCE_FUNCTION.match(line)
        if function:
            current = kernels.setdefault(function.group(1), KernelSass(function.group(1)))
            continue
        if current is not None and "REG:" in line:
            fields = dict(_RESOURCE_FIELDS.findall(line))
            current.registers = int(fields.get("REG", 0))
            current.stack_bytes = int(fields.get("STACK", 0))
            current.shared_bytes = int(fields.get("SHARED", 0))
            current.local_bytes = int(fields.get("LOCAL", 0))
            current = None


def _readable(mangled: str) -> str:
    try:
        done = subprocess.run(["c++filt", mangled], capture_output=True, text=True, timeout=10)
        return done.stdout.strip() or mangled
    except (OSError, subprocess.SubprocessError):
        return mangled


def _findings(kernel: KernelSass, share: float | None) -> list[Finding]:
    findings = []
    name = _readable(kernel.name)
    spills = kernel.base_count("LDL", "STL")
    if spills or (kernel.stack_bytes or 0) > 0:
        findings.append(Finding(
            severity="warning", kernel=name, time_share=share,
            evidence=[Evidence(metric="local_memory_instructions", value=spills, unit="count", ideal=0),
                      Evidence(metric="stack_frame", value=kernel.stack_bytes or 0, unit="bytes", ideal=0)],
            advice="Values live in local memory (LDL/STL): an array indexed at run time or too many live "
                   "registers. Index register arrays only with compile-time constants, or shrink the tile.",
            techniques=["reduce_registers", "register_tiling"]))
    widths = kernel.global_access_widths()
    narrow = sum(n for bits, n in widths.items() if bits < 128)
    if widths and narrow and not widths.get(128):
        findings.append(Finding(
            severity="info", kernel=name, time_share=share,
            evidence=[Evidence(metric="global_accesses_128bit", value=0, unit="count", threshold=1),
                      Evidence(metric="global_accesses_narrow", value=narrow, unit="count", ideal=0)],
            advice="No 16-byte global loads or stores (LDG.E.128/STG.E.128). Where the data is contiguous "
                   "and aligned, load float4 (or 8 halves) per thread.",
            techniques=["vectorize_memory"]))
    fma = kernel.base_count("FFMA")
    tensor = kernel.base_count(*TENSOR_CORE_OPCODES)
    if fma >= 64 and tensor == 0:
        findings.append(Finding(
            severity="info", kernel=name, time_share=share,
            evidence=[Evidence(metric="ffma_instructions", value=fma, unit="count"),
                      Evidence(metric="tensor_core_instructions", value=0, unit="count", threshold=1)],
            advice="The arithmetic runs on FFMA only, no tensor-core instructions (HGMMA/HMMA). A matrix "
                   "product in bf16/fp16/tf32 on tensor cores is many times faster.",
            techniques=["use_tensor_cores", "reduce_precision"]))
    return findings


class SassTool(Tool):
    name = "sass"
    level = "instruction"
    requires = Requirements(binaries=("cuobjdump",))
    gate = Gate()  # cheap and device-free: any class, any objective
    description = "instruction mix, vector widths, tensor cores, spills and resources from cuobjdump"

    def inspect(self, binary: Path, time_limit_s: float = 120.0) -> dict[str, KernelSass]:
        cuobjdump = str(find_binary("cuobjdump"))
        sass = subprocess.run([cuobjdump, "--dump-sass", str(binary)], capture_output=True, text=True,
                              timeout=time_limit_s)
        usage = subprocess.run([cuobjdump, "--dump-resource-usage", str(binary)], capture_output=True,
                               text=True, timeout=time_limit_s)
        kernels = parse_sass(sass.stdout)
        parse_resource_usage(usage.stdout, kernels)
        return kernels

    def run(self, context: ToolContext) -> ToolReport:
        kernels: dict[str, KernelSass] = {}
        notes = []
        for binary in context.binaries:
            found = self.inspect(Path(binary), context.time_limit_s)
            if not found:
                notes.append(f"{Path(binary).name}: no device code")
            kernels.update(found)
        if context.kernels:
            wanted = set(context.kernels)
            kernels = {k: v for k, v in kernels.items() if k in wanted or _readable(k) in wanted}
        metrics, findings = [], []
        for mangled, kernel in sorted(kernels.items()):
            name = _readable(mangled)
            share = context.time_shares.get(name, context.time_shares.get(mangled))
            metrics += [Metric(name="instructions", value=kernel.total, unit="count", kernel=name),
                        Metric(name="ffma", value=kernel.base_count("FFMA"), unit="count", kernel=name),
                        Metric(name="tensor_core", value=kernel.base_count(*TENSOR_CORE_OPCODES), unit="count",
                               kernel=name),
                        Metric(name="local_memory", value=kernel.base_count("LDL", "STL"), unit="count",
                               kernel=name)]
            for bits, count in sorted(kernel.global_access_widths().items()):
                metrics.append(Metric(name=f"global_access_{bits}bit", value=count, unit="count", kernel=name))
            for field_name, unit in (("registers", "registers"), ("stack_bytes", "bytes"),
                                     ("shared_bytes", "bytes")):
                value = getattr(kernel, field_name)
                if value is not None:
                    metrics.append(Metric(name=field_name, value=value, unit=unit, kernel=name))
            findings += _findings(kernel, share)
        return ToolReport(tool=self.name, level="instruction", kernels=[_readable(k) for k in sorted(kernels)],
                          metrics=metrics, findings=findings, notes=notes)
