"""kernelpro.cutlass_index: a searchable index over the CUTLASS/CuTe sources of the installed
nvidia-cutlass wheel (declarations ranked by BM25 with identifier splitting, plus a symbol
table), and the include paths for candidates that use those headers."""

from kernelpro.cutlass_index.index import Hit, Index, by_file, device_arch, load_index
from kernelpro.cutlass_index.source import CutlassMissing, CutlassSource, include_dirs, locate, nvcc_flags

__all__ = ["CutlassMissing", "CutlassSource", "Hit", "by_file", "device_arch", "Index", "include_dirs", "load_index", "locate", "nvcc_flags"]
