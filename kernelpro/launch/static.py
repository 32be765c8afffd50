"""Static features of a compiled kernel, for the launch model: what the compiler made of one configuration.

From the kernel's SASS and resource usage (`kernelpro.tools.sass`, cuobjdump): registers per thread, shared memory
per block, spilled (local-memory) instructions, and the instruction mix, counted in the binary: instructions in
all, global loads and stores and their mean width, shared-memory loads and stores, barriers, branches, FFMAs and
tensor-core instructions. Counts are of the code, not of what runs (a loop's body counts once).

The collection's timing child (`kernelpro.launch.timing`, on the GPU) takes them from the Triton kernels each
candidate compiled (`of_triton_module`); the dataset stores them per row (`static`), and the model reads them as
`static_*` inputs (`kernelpro.launch.features`).
"""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

from kernelpro.tools.sass import TENSOR_CORE_OPCODES, KernelSass, SassTool


def from_sass(kernel: KernelSass) -> dict[str, float]:
    """The named static features of one kernel's SASS and resource usage."""
    widths = kernel.global_access_widths()
    loads = kernel.base_count("LDG")
    out = {"instructions": kernel.total, "global_loads": loads, "global_stores": kernel.base_count("STG"),
           "shared_loads": kernel.base_count("LDS", "LDSM"), "shared_stores": kernel.base_count("STS"),
           "barriers": kernel.base_count("BAR"), "branches": kernel.base_count("BRA"),
           "ffma": kernel.base_count("FFMA"), "tensor_core": kernel.base_count(*TENSOR_CORE_OPCODES),
           "local_memory": kernel.base_count("LDL", "STL"),
           "access_bits": (sum(bits * count for bits, count in widths.items()) / sum(widths.values())) if widths
           else 0.0}
    for name in ("registers", "shared_bytes"):
        value = getattr(kernel, name)
        if value is not None:
            out[name] = value
    return {key: float(value) for key, value in out.items()}


def of_binary(path: Path) -> dict[str, dict[str, float]]:
    """Each kernel of a cubin (or any binary cuobjdump reads), by name: its static features."""
    return {name: from_sass(kernel) for name, kernel in SassTool().inspect(path).items()}


def of_triton_module(module, folder: Path | None = None) -> dict[str, dict[str, float]]:
    """The static features of every Triton kernel a candidate module compiled (its JIT functions' caches, after the
    candidate ran), by the kernel's function name. Triton's own count of spilled registers joins cuobjdump's."""
    from kernelpro.harness import tritonwarm  # torch with it, only when a module is read
    out: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="kernelpro-static-", dir=folder) as scratch:
        for name, compiled in tritonwarm.compiled(module):
            cubin = (getattr(compiled, "asm", None) or {}).get("cubin")
            if not cubin:
                continue
            path = Path(scratch) / f"{name}_{len(out)}.cubin"
            path.write_bytes(cubin)
            for found in of_binary(path).values():  # one kernel per Triton cubin
                spills = getattr(compiled, "n_spills", None)
                if isinstance(spills, int):
                    found["spills"] = float(spills)
                out[name] = found
    return out


PER_LAUNCH = ("registers", "shared_bytes", "access_bits")  # the largest over a configuration's kernels; the rest add up


def part_of(function: str, kernel_name: str) -> bool:
    """Whether a compiled function belongs to the generated kernel `kernel_name`: its `<name>_kernel`, or a pass of
    it (`<name>_pass1_kernel`, `<name>_partial_kernel`); not another kernel whose name starts the same way."""
    return function in (kernel_name, f"{kernel_name}_kernel") or \
        re.fullmatch(re.escape(kernel_name) + r"_[a-z]+\d*_kernel", function) is not None


def for_kernel(found: dict[str, dict[str, float]], kernel_name: str) -> dict[str, float]:
    """The static features of the generated kernel `kernel_name`: its Triton function (`<name>_kernel`), together with
    the other passes of the same configuration (a split row's `<name>_pass1_kernel`, a split-K GEMM's
    `<name>_partial_kernel`): counts added up, registers, shared memory and access width the largest, and
    `kernels`, how many there are. {} where none was compiled under that name."""
    parts = [features for name, features in found.items() if part_of(name, kernel_name)]
    out: dict[str, float] = {}
    for features in parts:
        for key, value in features.items():
            out[key] = max(out.get(key, 0.0), value) if key in PER_LAUNCH else out.get(key, 0.0) + value
    if parts:
        out["kernels"] = float(len(parts))
    return out
