"""What native builds of candidates get from the machine: the arch target and the CUTLASS headers.

Both the CPU build pool and the GPU workers build with the same environment, so an
extension built in the pool is found (not rebuilt) by the worker that loads it:

- `TORCH_CUDA_ARCH_LIST` from the device's compute capability, with the arch-specific
  target where the tensor-core instructions need it (`9.0a` on an H100: wgmma exists
  only there);
- `CPATH` with the CUTLASS/CuTe include folders of the installed `nvidia-cutlass` wheel,
  so a candidate that includes `cute/tensor.hpp` or `cutlass/gemm/...` compiles through
  `load_inline` without naming the paths itself (gcc and nvcc's preprocessing read CPATH).
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

#: Devices whose tensor-core instructions (wgmma on Hopper, tcgen05 on Blackwell) exist only in the
#: arch-specific target: builds there use it (sm_90a), which runs on that exact device.
ARCH_SPECIFIC = {(9, 0), (10, 0), (10, 3)}


def arch_for(major: int, minor: int) -> str:
    """The TORCH_CUDA_ARCH_LIST entry for a compute capability: `9.0a` on an H100, `8.0` on an A100."""
    return f"{major}.{minor}" + ("a" if (major, minor) in ARCH_SPECIFIC else "")


def nvidia_driver_present() -> bool:
    """Whether this machine has NVIDIA's kernel driver (its device files or /proc entry): without it no process
    can see a CUDA device, and that is known without importing torch."""
    return Path("/proc/driver/nvidia").exists() or any(Path("/dev").glob("nvidia[0-9]*"))


def cuda_available() -> bool:
    """Whether torch sees a CUDA device, asked through NVML (torch's PYTORCH_NVML_BASED_CUDA_CHECK)
    so that the asking process does not initialize CUDA, seconds on a large GPU, when only its
    worker processes will use the device."""
    if not nvidia_driver_present():
        return False
    import torch
    previous = os.environ.get("PYTORCH_NVML_BASED_CUDA_CHECK")
    os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = "1"
    try:
        return torch.cuda.is_available()
    finally:
        if previous is None:
            os.environ.pop("PYTORCH_NVML_BASED_CUDA_CHECK", None)
        else:
            os.environ["PYTORCH_NVML_BASED_CUDA_CHECK"] = previous


def visible_nvml_handle(pynvml):
    """The NVML handle of the GPU this process sees first (CUDA_VISIBLE_DEVICES: an index or a UUID);
    NVML must be initialized."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",")[0].strip()
    if visible.startswith(("GPU-", "MIG-")):
        return pynvml.nvmlDeviceGetHandleByUUID(visible)
    return pynvml.nvmlDeviceGetHandleByIndex(int(visible) if visible.isdigit() else 0)


def visible_capability() -> tuple[int, int] | None:
    """The compute capability of the GPU this process sees first, through NVML (no CUDA context made
    here); None without a GPU or NVML."""
    try:
        import pynvml
        pynvml.nvmlInit()
        try:
            major, minor = pynvml.nvmlDeviceGetCudaComputeCapability(visible_nvml_handle(pynvml))
            return int(major), int(minor)
        finally:
            pynvml.nvmlShutdown()
    except Exception:
        return None


def cuda_arch_list() -> str | None:
    import torch
    if not torch.cuda.is_available():
        return None
    return arch_for(*torch.cuda.get_device_capability(0))


def cutlass_source_root() -> Path | None:
    """`.../cutlass_library/source` of the installed nvidia-cutlass wheel (located, not imported), or None."""
    spec = importlib.util.find_spec("cutlass_library")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(list(spec.submodule_search_locations)[0]) / "source"


def cutlass_include_dirs(root: Path | None = None) -> list[Path]:
    """The wheel's header folders (CUTLASS with CuTe, and CUTLASS's utilities); [] without the wheel."""
    root = root or cutlass_source_root()
    if root is None or not (root / "include").is_dir():
        return []
    util = root / "tools" / "util" / "include"
    return [root / "include"] + ([util] if util.is_dir() else [])


def build_environment(device: str, base: dict[str, str] | None = None) -> dict[str, str]:
    """Variables every build and worker process of an evaluator gets."""
    base = os.environ if base is None else base
    env = {}
    arch = cuda_arch_list() if device == "cuda" else None
    if arch:
        env["TORCH_CUDA_ARCH_LIST"] = arch
    includes = [str(p) for p in cutlass_include_dirs()]
    if includes:
        env["CPATH"] = os.pathsep.join(([base["CPATH"]] if base.get("CPATH") else []) + includes)
    return env
