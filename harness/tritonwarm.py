"""A candidate's Triton kernels compiled before it reaches the GPU, in the build worker.

Triton compiles a kernel at its first call. On the GPU worker that is the correctness phase, where each of level 2's
GEMM candidates spent 1.5 to 2 s compiling on an H200 while the other evaluations in flight waited to be timed. The
build worker sees no GPU, but Triton compiles without one: `precompile` runs the candidate's forward on the meta
device, with Triton's launches turned into compilations (`run(..., warmup=True)`) for the GPU the candidate will run
on, through a driver that answers Triton's questions for it (`CompileOnlyDriver`). The kernels land in the
candidate's own Triton cache (`BuildEntry.triton_cache_dir`), which the GPU worker starts from. Triton keys a
compiled kernel on its source, its arguments' types and specializations (a pointer's alignment, an integer's
divisibility by 16 or being 1), its constants, its options and the target: the same on the meta device, where a
tensor's address is its offset from an aligned base, as a GPU allocation's is.

The forward's launches only queue their compilations: Triton compiles them in a pool of threads
(`triton.AsyncCompileMode`, where the installed Triton has it), `compile_threads()` at a time, since its compiler and
`ptxas` run outside Python's lock (level3/3_DeepNarrowMLP's 17 GEMM kernels for sm_90 on a 2-core machine: 14.5 s in
one thread, 7.6 s in two). Each candidate's kernels still compile into its own cache, in its own build worker.

Best effort: what the forward cannot do on the meta device (a CUDA graph, a native extension, data-dependent
control flow) ends the warm-up there, and the GPU worker compiles the rest at its first call, as before. Nothing here
decides a verdict.

Triton's CUDA driver helper (`DriverHelper`) is built once per installation instead of once per candidate: the first
time a process uses Triton's driver, Triton compiles a small C module of its own (`cuda_utils`) with gcc into that
process's cache, and since every candidate has its own cache, every Triton candidate's GPU worker compiled it again
in its correctness phase. A process of the trusted side that runs Triton's code and no candidate's builds it into
kernelpro's cache; each candidate's cache starts with a copy (a candidate that spoils its copy spoils only its own).
"""

from __future__ import annotations

import contextlib
import inspect
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import types
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from kernelpro.harness import sandbox
from kernelpro.harness.modelio import DTYPES, build_model, cast_to, set_seed


def target_for(device: str) -> tuple[str, int, int] | None:
    """What Triton compiles for on the evaluator's GPU, as its CUDA driver names it (backend, major * 10 + minor,
    warp size); None on the CPU or without Triton."""
    import importlib.util
    if device != "cuda" or importlib.util.find_spec("triton") is None:
        return None
    major, minor = torch.cuda.get_device_capability(0)
    return "cuda", major * 10 + minor, 32


class CompileOnlyDriver:
    """What Triton's JIT asks of a driver to compile, not launch, for a GPU this process does not see."""

    def __init__(self, target):
        self.target = target

    @staticmethod
    def is_active() -> bool:
        return True

    def get_current_target(self):
        return self.target

    @staticmethod
    def get_current_device() -> int:
        return 0

    @staticmethod
    def get_current_stream(device=None) -> int:
        return 0


def compile_only(backend: str, arch: int, warp_size: int) -> None:
    """Turn this process's Triton into a compiler for that target, for good (a build worker's last act): every
    `kernel[grid](...)` compiles the kernel for its arguments and launches nothing."""
    from triton.backends.compiler import GPUTarget
    from triton.runtime import driver
    from triton.runtime.jit import KernelInterface
    driver.set_active(CompileOnlyDriver(GPUTarget(backend, arch, warp_size)))
    KernelInterface.__getitem__ = lambda self, grid: (
        lambda *args, **kwargs: self.run(*args, grid=grid, warmup=True, **kwargs))


def compiled(module: types.ModuleType) -> list[tuple[str, object]]:
    """(function name, compiled kernel) for every kernel the module's Triton functions hold compiled, in name order
    (per device, Triton keeps a tuple whose first element maps keys to compiled kernels)."""
    found = []
    for name, value in sorted(vars(module).items()):
        caches = getattr(value, "device_caches", None)
        if isinstance(caches, dict):
            for entry in list(caches.values()):
                if isinstance(entry, tuple) and entry and isinstance(entry[0], dict):
                    found += [(name, kernel) for kernel in entry[0].values()]
    return found


def meta_inputs(get_inputs, seed: int) -> list:
    """The problem's inputs on the meta device (shapes and dtypes, no storage: KernelBench's are GBs). Input code
    that cannot run there raises: the warm-up then stops, rather than drawing GBs on the CPU."""
    set_seed(seed)
    with torch.device("meta"):
        return list(get_inputs())


#: at most this many threads compile one candidate's kernels: two candidates build at once beside the GPU worker
#: that times a third, and a 16-core host keeps cores for that worker's launches
COMPILE_THREADS_MAX = 6


def compile_threads() -> int:
    """How many of one candidate's kernels compile at once: half the cores this process may run on, at most
    COMPILE_THREADS_MAX (1 on a 2-core machine: no pool)."""
    return max(1, min(COMPILE_THREADS_MAX, sandbox.usable_cores() // 2))


@contextlib.contextmanager
def compiling_in(threads: int):
    """Within it, a Triton launch queues its compilation in a pool of `threads` threads; on leaving, every queued
    compilation has finished (one that failed is left for the GPU worker's first call, which reports it). Plain
    compilation at each launch where `threads` is 1 or the installed Triton has no `AsyncCompileMode`."""
    import triton
    mode = getattr(triton, "AsyncCompileMode", None)
    if threads <= 1 or mode is None:
        yield
        return
    quiet = {"ignore_errors": True} if "ignore_errors" in inspect.signature(mode).parameters else {}
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="kernelpro-triton") as pool, mode(pool, **quiet):
        yield


def precompile(candidate: types.ModuleType, problem: types.ModuleType, target: tuple[str, int, int],
               precision: str, model_mode: str, seed: int, threads: int | None = None) -> dict:
    """Compile the candidate's Triton kernels for `target` (backend, arch, warp size) by running its forward on the
    meta device at the evaluated precision, `threads` kernels at a time (default `compile_threads()`):
    {"kernels": how many were compiled, "stopped": why the forward stopped early, or ""}."""
    compile_only(*target)
    dtype, meta = DTYPES[precision], torch.device("meta")
    stopped = ""
    try:
        with compiling_in(compile_threads() if threads is None else threads):
            model = build_model(candidate.ModelNew, seed, list(problem.get_init_inputs()), meta, dtype, model_mode)
            inputs = [cast_to(value, meta, dtype) for value in meta_inputs(problem.get_inputs, seed)]
            with torch.no_grad():
                model(*inputs)
    except Exception as error:  # noqa: BLE001 - best effort: the GPU worker compiles what is left
        stopped = f"{type(error).__name__}: {(str(error).strip().splitlines() or [''])[0]}"[:300]
    return {"kernels": len(compiled(candidate)), "stopped": stopped}


log = logging.getLogger("kernelpro.harness")

#: what builds the helper: Triton's own code (it compiles and loads `cuda_utils` into TRITON_CACHE_DIR; no GPU call)
_BUILD_HELPER = "from triton.backends.nvidia.driver import CudaUtils\nCudaUtils()\n"


class DriverHelper:
    """Triton's CUDA driver helper, built in the background into `folder` (a Triton cache holding only it) and copied
    into candidates' Triton caches once it is there."""

    def __init__(self, folder: Path):
        self.folder = folder
        self._thread: threading.Thread | None = None

    @classmethod
    def for_device(cls, device: str, root: Path) -> "DriverHelper | None":
        """The helper for this Python and Triton under `root`, building unless built before; None off CUDA or
        without Triton."""
        from importlib.metadata import PackageNotFoundError, version
        if device != "cuda":
            return None
        try:
            installed = version("triton")
        except PackageNotFoundError:
            return None
        helper = cls(Path(root) / f"triton-driver-{installed}-{sys.implementation.cache_tag}")
        helper.start()
        return helper

    def start(self) -> None:
        if not self.ready and self._thread is None:
            self._thread = threading.Thread(target=self.build, name="kernelpro-triton-driver", daemon=True)
            self._thread.start()

    @property
    def ready(self) -> bool:
        return self.folder.is_dir()

    def build(self) -> bool:
        """Build it in a fresh Triton cache and move that into place whole (two processes building at once: the first
        to finish wins); whether it is there now. Its load failing does not matter where the module was made (the GPU
        worker loads it where the driver is)."""
        self.folder.parent.mkdir(parents=True, exist_ok=True)
        scratch = Path(tempfile.mkdtemp(prefix=".building-", dir=self.folder.parent))
        try:
            done = subprocess.run([sys.executable, "-c", _BUILD_HELPER], capture_output=True, text=True, timeout=600,
                                  env={**os.environ, "TRITON_CACHE_DIR": str(scratch)})
            if not any(scratch.rglob("cuda_utils*")):
                log.info("Triton's driver helper was not built (each candidate builds its own): %s",
                         (done.stderr.strip().splitlines() or ["no message"])[-1][:300])
                return False
            os.rename(scratch, self.folder)
        except (OSError, subprocess.SubprocessError) as error:
            if not self.ready:
                log.info("Triton's driver helper was not built (each candidate builds its own): %s", error)
        finally:
            shutil.rmtree(scratch, ignore_errors=True)
        return self.ready

    def seed(self, triton_cache_dir: Path) -> bool:
        """Copy the helper into a candidate's Triton cache where it is built by now; whether it was."""
        if not self.ready:
            return False
        shutil.copytree(self.folder, triton_cache_dir, dirs_exist_ok=True)
        return True
