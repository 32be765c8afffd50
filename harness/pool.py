"""The workers that evaluate candidates: one per candidate, forked from a warm parent in the sandbox or spawned
ahead of need, and the CPU workers that build native candidates."""

from __future__ import annotations

import os
import threading
import time
import weakref
from pathlib import Path

from kernelpro.harness.cache import BuildEntry
from kernelpro.harness.errors import KernelproError
from kernelpro.harness.forkserver import ForkedWorker, Zygote, ZygoteGone
from kernelpro.harness.process import ChannelWorker, WorkerProcess

#: how long a worker may take to start and say it is ready (import torch, a CUDA context)
STARTUP_LIMIT_S = 180.0


def worker_start() -> str:
    """How workers start: "fork" (from a warm parent in the sandbox, the default) or "spawn" (a fresh
    interpreter each, booted ahead), from KERNELPRO_WORKER_START."""
    how = os.environ.get("KERNELPRO_WORKER_START", "fork").strip().lower() or "fork"
    if how not in ("fork", "spawn"):
        raise KernelproError(f"KERNELPRO_WORKER_START={how!r}: expected fork or spawn")
    return how


class WorkerPool:
    """Workers for candidates. Each worker serves one candidate, then dies.

    `forked` (the default): workers are forked from a warm parent in the sandbox (`forkserver`),
    which saves each one a fresh interpreter and `import torch`. The parent starts with the pool
    and never touches the GPU; a worker is forked when one is acquired (in milliseconds) and, on
    CUDA, creates its own context (a fraction of a second on an H200). Otherwise (`forked=False`,
    or KERNELPRO_WORKER_START=spawn) each worker is a fresh interpreter booted ahead of need: on
    CUDA a replacement boots while the current worker runs, and the timing phase waits until it
    has its context (about 10 s a candidate on an H200)."""

    def __init__(self, device: str, spares: int = 1, env: dict[str, str] | None = None,
                 build_cache: Path | None = None, forked: bool | None = None):
        self.device = device
        self.build_cache = build_cache  # shown read-only to sandboxed workers
        # On CUDA a replacement boots (spawned) while the current worker runs, and a worker waits for
        # the others' contexts before it times; on CPU a boot would steal a core from the timing phase,
        # so it boots only after the evaluation.
        self.refill_on_acquire = device == "cuda"
        self.env = env or {}
        self.spares = spares
        self.forked = worker_start() == "fork" if forked is None else forked
        self._zygote: Zygote | None = None
        self._ready: list[ChannelWorker] = []
        self._spawned: weakref.WeakSet[ChannelWorker] = weakref.WeakSet()  # for close(): those in use too
        self._candidates: weakref.WeakSet[ChannelWorker] = weakref.WeakSet()  # the candidates' (no builders)
        self._lock = threading.RLock()  # _fill spawns while holding it
        if self.forked:
            self._fork_server()
        else:
            self._fill()

    def _spawn(self) -> ChannelWorker:
        if not self.forked:
            worker = WorkerProcess(self.device, self.env, build_cache=self.build_cache)
        else:
            try:
                worker = ForkedWorker(self._fork_server())
            except ZygoteGone:  # a candidate may have killed the fork server: another starts, once
                worker = ForkedWorker(self._fork_server(replace=True))
        return self._keep(worker, candidate=True)

    def _fork_server(self, replace: bool = False) -> Zygote:
        with self._lock:
            if self._zygote is not None and replace:
                self._zygote.close()
                self._zygote = None
            if self._zygote is None:
                self._zygote = Zygote(self.device, self.env, build_cache=self.build_cache)
            return self._zygote

    def _keep(self, worker: ChannelWorker, candidate: bool = False) -> ChannelWorker:
        with self._lock:
            self._spawned.add(worker)
            if candidate:
                self._candidates.add(worker)
        return worker

    def _fill(self) -> None:
        if self.forked:
            return
        with self._lock:
            while len(self._ready) < self.spares:
                self._ready.append(self._spawn())

    def acquire(self) -> ChannelWorker:
        """A worker for one candidate."""
        with self._lock:
            worker = self._ready.pop(0) if self._ready else None
        worker = worker or self._spawn()
        if self.refill_on_acquire:
            self._fill()
        return worker

    def release(self, worker: ChannelWorker) -> None:
        worker.kill()
        self._fill()

    def settle(self, timeout_s: float, timing: ChannelWorker | None = None) -> None:
        """Waits until every other worker has created its CUDA context (those booted ahead, and forked
        ones another evaluation just acquired): one created on the GPU while `timing` times would
        disturb that timing."""
        with self._lock:
            booting = [worker for worker in self._candidates if worker is not timing]
        deadline = time.monotonic() + timeout_s
        for worker in booting:
            worker.settle(deadline - time.monotonic())

    def builder(self, entry: BuildEntry) -> WorkerProcess:
        """A build worker for one candidate: its own cache entry is the one folder it may write
        besides its working folder."""
        entry.root.mkdir(parents=True, exist_ok=True)
        return self._keep(WorkerProcess("cpu", {**self.env, "CUDA_VISIBLE_DEVICES": ""},
                                        module="kernelpro.harness.builder", writable=(entry.root,)))

    def close(self) -> None:
        """Kills every worker: those booted ahead and those in use (an evaluation still running then
        ends as a crash, e.g. when a search is interrupted)."""
        with self._lock:
            workers, self._ready = list(self._spawned), []
            zygote, self._zygote = self._zygote, None
        for worker in workers:
            worker.kill()
        if zygote is not None:
            zygote.close()
