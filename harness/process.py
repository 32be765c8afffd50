"""Worker processes, seen from the trusted side.

A worker is a fresh interpreter (spawned, never forked) in the sandbox (`sandbox`:
its own PID, network and mount namespaces), in its own session and process group,
with a scrubbed environment, its own temporary directory, stdin closed, and
stdout/stderr drained by threads into capped buffers. It is used for one candidate
and then killed with its whole process group (nvcc and ninja included); killing the
sandbox's init ends every process inside it, so no candidate can leave anything
behind for the next one.
"""

from __future__ import annotations

import collections
import contextlib
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from kernelpro.harness import channel, memguard, sandbox
from kernelpro.harness.records import CappedLog

#: Variables a worker may see. Everything else (API keys, tokens, cloud
#: credentials) is dropped.
ENV_ALLOWED = {
    "PATH", "LANG", "LANGUAGE", "TERM", "TZ", "USER", "LOGNAME", "SHELL",
    "PYTHONPATH", "VIRTUAL_ENV", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH",
    "CC", "CXX", "CUDA_HOME", "CUDA_PATH", "CUDA_VISIBLE_DEVICES",
    "TORCH_CUDA_ARCH_LIST", "MAX_JOBS", "OMP_NUM_THREADS", "MKL_NUM_THREADS",
    "TRITON_INTERPRET", "NCCL_NVLS_ENABLE", "TORCH_SYMM_MEM_DISABLE_MULTICAST",
    "NVSHMEM_DISABLE_NVLS",
}
ENV_ALLOWED_PREFIXES = ("LC_", "NVIDIA_", "CUDA_")
_SECRET_MARKERS = ("KEY", "TOKEN", "SECRET", "PASSWORD", "CREDENTIAL", "AUTH")
LOG_HEAD_BYTES = 16 * 1024
LOG_TAIL_BYTES = 16 * 1024


def scrubbed_environment(extra: dict[str, str] | None = None,
                         source: dict[str, str] | None = None) -> dict[str, str]:
    """The environment a worker gets: an allowlist, and never anything secret-looking."""
    source = dict(os.environ if source is None else source)
    env = {
        name: value for name, value in source.items()
        if (name in ENV_ALLOWED or name.startswith(ENV_ALLOWED_PREFIXES))
        and not any(marker in name.upper() for marker in _SECRET_MARKERS)
    }
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env["PYTHONUNBUFFERED"] = "1"
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env.update(extra or {})
    return env


class CappedStream:
    """Drains a pipe on a thread, keeping its first and last bytes."""

    def __init__(self, pipe, head_bytes: int = LOG_HEAD_BYTES, tail_bytes: int = LOG_TAIL_BYTES):
        self._head = bytearray()
        self._tail: collections.deque[bytes] = collections.deque()
        self._tail_size = 0
        self._head_bytes = head_bytes
        self._tail_bytes = tail_bytes
        self.total_bytes = 0
        self._thread = threading.Thread(target=self._drain, args=(pipe,), daemon=True)
        self._thread.start()

    def _drain(self, pipe) -> None:
        try:
            while chunk := pipe.read1(1 << 16) if hasattr(pipe, "read1") else pipe.read(1 << 16):
                self._keep(chunk)
        except (OSError, ValueError):
            pass

    def _keep(self, chunk: bytes) -> None:
        self.total_bytes += len(chunk)
        room = self._head_bytes - len(self._head)
        if room > 0:
            self._head.extend(chunk[:room])
            chunk = chunk[room:]
        if chunk:
            self._tail.append(chunk)
            self._tail_size += len(chunk)
            while self._tail_size - len(self._tail[0]) >= self._tail_bytes:
                self._tail_size -= len(self._tail.popleft())

    def log(self, join_timeout_s: float = 1.0) -> CappedLog:
        self._thread.join(join_timeout_s)
        tail = b"".join(self._tail)[-self._tail_bytes:]
        kept = len(self._head) + len(tail)
        return CappedLog(head=self._head.decode(errors="replace"), tail=tail.decode(errors="replace"),
                         total_bytes=self.total_bytes, dropped_bytes=max(0, self.total_bytes - kept))


def kill_tree(pid: int) -> None:
    """SIGKILL to a process's group and to every descendant that left it (a sandbox's init
    included: the kernel then kills everything in its PID namespace)."""
    if pid <= 1:
        raise ValueError(f"kill_tree({pid}) would reach processes that are not a worker's")
    stragglers = memguard.tree(pid)[1:]
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    send_signal(stragglers)


def signal_of(code: int | None, sandboxed: bool = True) -> int | None:
    """The signal that ended a child with this exit code, or None: a negative code is one (Python's way), and from
    a sandbox so is 128 + N (bubblewrap's init passes on its child's death by signal N that way, as shells do)."""
    if code is None:
        return None
    if code < 0:
        return -code
    if sandboxed and code > 128 and code - 128 in signal.valid_signals():
        return code - 128
    return None


def exit_description(code: int | None) -> str:
    """How a child ended, in words: `exit 1`, `killed by SIGKILL (exit -9)`, `killed by SIGKILL (exit 137)`
    (a sandbox's or a shell's 128 + N, see `signal_of`)."""
    number = signal_of(code)
    try:
        return f"killed by {signal.Signals(number).name} (exit {code})" if number else f"exit {code}"
    except ValueError:
        return f"exit {code}"


def send_signal(pids: list[int], number: int = signal.SIGKILL) -> None:
    """The signal (SIGKILL unless told) to each, skipping those gone meanwhile or out of reach."""
    for pid in pids:
        try:
            os.kill(pid, number)
        except (ProcessLookupError, PermissionError):
            pass


def _stopped(pid: int) -> bool:
    """Whether every thread of the process is stopped, or gone (nothing of it runs either way)."""
    try:
        tasks = list(Path(f"/proc/{pid}/task").iterdir())
    except OSError:
        return True
    for task in tasks:
        try:
            if memguard.stat_fields(task / "stat")[0] not in "TtXZ":
                return False
        except (OSError, IndexError):
            pass  # the thread ended meanwhile
    return True


class ChannelWorker:
    """What the evaluator talks to: a private channel, capped logs and a process tree to kill.

    `WorkerProcess` starts a fresh interpreter; `forkserver.ForkedWorker` forks one from a warm parent.
    Subclasses set `_sock`, `stdout`, `stderr` and `_root` (the host PID whose tree `kill_tree` ends)."""

    _sock: socket.socket
    stdout: CappedStream
    stderr: CappedStream
    _root: int | None  # None: it ended before its host PID was found, nothing is left to kill

    def _start_channel(self, watch_memory: bool = True) -> None:
        self.started_at = time.monotonic()
        self._killed = False
        self._read_lock = threading.Lock()
        self._early: list[tuple[dict, bytes]] = []  # the first message, read by settle() ahead of receive()
        self._heard = False
        #: why the trusted side killed it, when it did so before the evaluation ended (see `memguard`)
        self.killed_for: str | None = None
        watched = watch_memory and self._root is not None
        self._memory_watch = memguard.watch(self._root, self._over_memory) if watched else None

    def _over_memory(self, used: int, limit: int) -> None:
        self.killed_for = memguard.describe(used, limit)
        kill_tree(self._root)

    @property
    def pid(self) -> int | None:
        return self._root

    @property
    def channel_socket(self) -> socket.socket:
        """The trusted end of its channel."""
        return self._sock

    def send(self, header: dict, payload: bytes = b"") -> None:
        channel.send(self._sock, header, payload)

    def receive(self, timeout_s: float | None) -> tuple[dict, bytes]:
        with self._read_lock:
            if self._early:
                return self._early.pop(0)
            deadline = None if timeout_s is None else time.monotonic() + timeout_s
            message = channel.receive(self._sock, deadline)
            self._heard = True
            return message

    def settle(self, timeout_s: float) -> None:
        """Waits, up to timeout_s, until a booting worker has said it is ready (on CUDA: once its
        context exists), keeping that message for receive(). A worker that dies meanwhile is left for
        its user to find out about."""
        if self._heard or self._killed:
            return  # it booted already (its user may be reading it), or it is gone
        if not self._read_lock.acquire(timeout=max(timeout_s, 0.0)):
            return  # its user is reading it: it booted already
        try:
            if self._heard or self._early:
                return
            readable, _, _ = select.select([self._sock], [], [], max(timeout_s, 0.0))
            if readable:
                self._early.append(channel.receive(self._sock, time.monotonic() + 5.0))
                self._heard = True
        except (channel.ChannelClosed, channel.ChannelTimeout, OSError):
            pass
        finally:
            self._read_lock.release()

    def exit_status(self, wait_s: float = 2.0) -> int | None:
        """The worker's return code (negative: killed by that signal), or None if alive."""
        raise NotImplementedError

    @contextlib.contextmanager
    def paused(self, settle_s: float = 0.5):
        """Every process of the worker's tree stopped (SIGSTOP) for the block, and continued after: while the
        trusted side reads memory the worker can write (its output slot, `outputslots`), none of its threads
        runs. It waits, up to `settle_s`, until each is seen stopped."""
        pids = memguard.tree(self._root) if self._root is not None and not self._killed else []
        send_signal(pids, signal.SIGSTOP)
        deadline = time.monotonic() + settle_s
        while pids and not all(_stopped(pid) for pid in pids) and time.monotonic() < deadline:
            time.sleep(0.001)
        try:
            yield
        finally:
            send_signal(pids, signal.SIGCONT)

    def kill(self) -> None:
        """Kill the whole process group and any descendant that left it."""
        if self._killed:
            return
        self._killed = True
        memguard.unwatch(self._memory_watch)
        if self._root is not None:
            kill_tree(self._root)
        self._after_kill()

    def _after_kill(self) -> None:
        pass

    def logs(self) -> tuple[CappedLog, CappedLog]:
        return self.stdout.log(), self.stderr.log()


class WorkerProcess(ChannelWorker):
    """One spawned worker: a process group, a private channel and capped logs."""

    def __init__(self, device: str, env_extra: dict[str, str] | None = None,
                 module: str = "kernelpro.harness.worker", writable: tuple[Path, ...] = (),
                 build_cache: Path | None = None, socket_type: int = socket.SOCK_STREAM,
                 watch_memory: bool = True):
        """In the sandbox (`sandbox.wrap`) where there is one: `writable` folders besides its own
        working folder, and the build cache shown read-only (see `sandbox.wrap`). `watch_memory`:
        kill it when its tree passes the memory limit (`memguard`); a fork server's workers are
        watched one by one instead."""
        self.device = device
        self.workdir = Path(tempfile.mkdtemp(prefix="kernelpro-worker-"))
        self._sock, child_sock = socket.socketpair(socket.AF_UNIX, socket_type)
        child_fd = child_sock.fileno()
        env = scrubbed_environment({"HOME": str(self.workdir), "TMPDIR": str(self.workdir),
                                    **(env_extra or {})})
        self.sandboxed = sandbox.isolation().active
        if build_cache is not None and self.sandboxed:
            env["KERNELPRO_BUILD_SHADOW"] = "1"
            env["KERNELPRO_BUILD_ROOT"] = str(build_cache)  # a private tmpfs there (see `sandbox.wrap`)
        if self.sandboxed:
            env["KERNELPRO_SANDBOXED"] = "1"
        self.process = subprocess.Popen(
            sandbox.wrap([sys.executable, "-m", module, str(child_fd), device], self.workdir, writable,
                         build_cache),
            pass_fds=(child_fd,), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, start_new_session=True, env=env, cwd=self.workdir,
        )
        child_sock.close()
        self.stdout = CappedStream(self.process.stdout)
        self.stderr = CappedStream(self.process.stderr)
        self._root = self.process.pid
        self._start_channel(watch_memory)

    def exit_status(self, wait_s: float = 2.0) -> int | None:
        """The worker's return code (negative: killed by that signal), or None if alive."""
        try:
            status = self.process.wait(wait_s)
        except subprocess.TimeoutExpired:
            return None
        number = signal_of(status, self.sandboxed)
        return -number if number else status

    def _after_kill(self) -> None:
        try:
            self.process.wait(10)
        except subprocess.TimeoutExpired:
            pass
        self._sock.close()
        subprocess.run(["rm", "-rf", str(self.workdir)], check=False)
