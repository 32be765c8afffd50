"""Where the CUTLASS/CuTe sources are: the installed `nvidia-cutlass` wheel, never a vendored copy.

The wheel's `cutlass_library` package carries the C++ headers (CuTe included) under
`source/include` and the examples under `source/examples`. The package is located
without importing it (its `__init__` loads the whole generator).
"""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass
from pathlib import Path

from kernelpro.harness.errors import KernelproError
from kernelpro.harness.toolchain import arch_for, cutlass_include_dirs, cutlass_source_root

EXTRA = "pip install 'kernelpro[cutlass]'  (the nvidia-cutlass wheel and bm25s)"


class CutlassMissing(KernelproError):
    """The nvidia-cutlass wheel (or the index's ranking library) is not installed."""

    def __init__(self, what: str):
        super().__init__(f"{what}; install it with: {EXTRA}")


@dataclass(frozen=True)
class CutlassSource:
    root: Path  # .../cutlass_library/source
    version: str

    @property
    def include(self) -> Path:
        return self.root / "include"

    @property
    def folders(self) -> list[Path]:
        """What the index reads: the headers (cutlass/, cute/) and the examples."""
        return [p for p in (self.root / "include", self.root / "examples") if p.is_dir()]

    def include_dirs(self) -> list[Path]:
        """Include paths for a candidate that uses CUTLASS or CuTe headers (the harness puts them on CPATH)."""
        return cutlass_include_dirs(self.root)


def locate() -> CutlassSource:
    root = cutlass_source_root()
    if root is None:
        raise CutlassMissing("the CUTLASS/CuTe sources come from the nvidia-cutlass wheel, which is not installed")
    if not (root / "include" / "cute").is_dir():
        raise CutlassMissing(f"the installed cutlass_library has no CuTe headers under {root / 'include'}")
    try:
        version = importlib.metadata.version("nvidia-cutlass")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown"
    return CutlassSource(root, version)


def include_dirs() -> list[Path]:
    return locate().include_dirs()


def nvcc_flags(capability: tuple[int, int]) -> list[str]:
    """nvcc flags for a CUTLASS/CuTe translation unit on a device of this compute capability.

    C++17 and relaxed constexpr (CuTe's layouts are constexpr all the way down), and the
    arch-specific target where the tensor-core instructions need it (`sm_90a` for wgmma);
    the include paths come from `include_dirs()`.
    """
    arch = arch_for(*capability).replace(".", "")
    return ["-std=c++17", "--expt-relaxed-constexpr", f"-gencode=arch=compute_{arch},code=sm_{arch}"]
