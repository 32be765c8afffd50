"""The CPU build pool: each candidate's native extensions (nvcc/ninja through `load_inline`) and, where asked, its
Triton kernels compiled for the evaluator's GPU, built in a build worker that sees no GPU (`harness/builder.py`)
while earlier candidates hold the GPU. One build per source: a second request for the same source joins the first,
and a source built before is answered from the build cache (`harness/cache.py`) at once."""

from __future__ import annotations

import functools
import logging
import os
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor

from kernelpro.harness import channel, tritonwarm
from kernelpro.harness.cache import BuildCache, needs_native_build, source_hash
from kernelpro.harness.pool import STARTUP_LIMIT_S, WorkerPool
from kernelpro.harness.problem import Problem
from kernelpro.harness.records import EvalOptions

log = logging.getLogger("kernelpro.harness")

#: with KERNELPRO_TRITON_PRECOMPILE unset, a source's Triton kernels are compiled ahead where it has at least this many:
#: the build worker's fixed cost (6.1 s on an H200, off the GPU's clock) against about 0.5 s of the GPU worker's first
#: call per kernel, on its clock (level3/3_DeepNarrowMLP's 17 GEMM kernels: 10.3 s of its correctness phase, H100)
PRECOMPILE_FROM_KERNELS = 8


class BuildQueue:
    """Builds for one evaluator: `submit(source, ...)` starts or joins a source's build; its future gives (was cached,
    seconds, failure), failure a verdict header or None."""

    def __init__(self, device: str, cache: BuildCache, pool: WorkerPool, workers: int = 2):
        self.device, self.cache, self.pool = device, cache, pool
        self.executor = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="kernelpro-build")
        self._builds: dict[str, Future] = {}
        self._lock = threading.Lock()

    def close(self) -> None:
        self.executor.shutdown(wait=False, cancel_futures=True)

    def submit(self, source: str, options: EvalOptions, problem: Problem | None = None) -> Future:
        """Start (or join) the build of a source in the CPU pool: its native extensions, and with the problem on a
        GPU, its Triton kernels compiled for that GPU (`harness/tritonwarm.py`)."""
        key = source_hash(source)
        with self._lock:
            if key not in self._builds:
                precompile = self.precompile(source, options, problem)
                if needs_native_build(source) or precompile:
                    self._builds[key] = self.executor.submit(self._build, source, options.limits.build_s, precompile)
                else:  # nothing to build: answered here, not queued behind other candidates' nvcc runs
                    self._builds[key] = Future()
                    self._builds[key].set_result(self._build(source, options.limits.build_s))
            return self._builds[key]

    @functools.cached_property
    def triton_target(self) -> tuple[str, int, int] | None:
        """The GPU the build workers compile candidates' Triton kernels for (harness/tritonwarm.py), asked of the
        device only where a precompile is asked for."""
        return tritonwarm.target_for(self.device)

    def precompile(self, source: str, options: EvalOptions, problem: Problem | None) -> dict | None:
        """What the build worker needs to compile the source's Triton kernels ahead of the GPU worker, or None: not
        on a GPU, no Triton kernel in the source, or a native build in it (whose calls on the meta device would hand
        null pointers to code we did not write); with KERNELPRO_TRITON_PRECOMPILE unset, fewer than
        PRECOMPILE_FROM_KERNELS kernels (on an H200 a level-2 GEMM candidate's build worker took 6.1 s to save 0.5 s
        of its first call); =1 always, =0 never."""
        switch = os.environ.get("KERNELPRO_TRITON_PRECOMPILE", "")
        if switch == "0" or (switch != "1" and source.count("@triton.jit") < PRECOMPILE_FROM_KERNELS) \
                or problem is None or "@triton.jit" not in source or needs_native_build(source) \
                or self.triton_target is None:
            return None
        return {"target": list(self.triton_target), "problem_source": problem.source, "precision": options.precision,
                "model_mode": options.model_mode, "seed": options.seed}

    def _build(self, source: str, limit_s: float, precompile: dict | None = None) -> tuple[bool, float, dict | None]:
        """(was cached, seconds, failure) — failure is a verdict header or None."""
        entry = self.cache.entry(source)
        failure = entry.failure()
        if failure:
            return True, 0.0, {"verdict": "compile_error", **failure}
        if entry.built or not (needs_native_build(source) or precompile):
            return entry.built, 0.0, None
        began = time.monotonic()
        builder = self.pool.builder(entry)
        try:
            builder.receive(STARTUP_LIMIT_S)
            builder.send({"candidate_source": source, "extensions_dir": str(entry.extensions_dir),
                          "triton_cache_dir": str(entry.triton_cache_dir), "precompile": precompile})
            reply, _ = builder.receive(limit_s)
        except channel.ChannelTimeout:
            return False, time.monotonic() - began, {"verdict": "timeout", "phase": "build",
                                                     "reason": f"the build ran past {limit_s:g} s"}
        except channel.ChannelClosed:
            return False, time.monotonic() - began, None  # let the worker report it
        finally:
            builder.kill()
        seconds = time.monotonic() - began
        if reply["type"] == "built":
            entry.mark_built(seconds, reply.get("precompiled"))
            if reply.get("precompiled"):
                log.info("%s: %d Triton kernels compiled ahead in %.1f s%s", entry.root.name,
                         reply["precompiled"]["kernels"], seconds, f" (stopped: {reply['precompiled']['stopped']})"
                         if reply["precompiled"]["stopped"] else "")
        elif reply["type"] == "build_failed":
            stdout, stderr = builder.logs()
            text = (stderr.text() + stdout.text())[-8000:] + "\n" + reply.get("log", "")
            entry.mark_failed(reply["reason"], text)
            return False, seconds, {"verdict": "compile_error", "reason": reply["reason"], "log": text}
        return False, seconds, None
