"""Warm CPU workers, seen from the trusted side: a fork server in the sandbox, a fresh process per candidate.

`Zygote` starts `kernelpro.harness.zygote` in the sandbox like any worker (`process.WorkerProcess`).
`ForkedWorker` asks it for one child: the trusted side makes the child's channel and log pipes and
sends their descriptors over the control socket, so the child talks to the evaluator exactly as a
spawned worker does. The child leads its own session; the trusted side finds its host PID (from
`NSpid` in /proc) to watch its memory and to kill its tree. Each child serves one candidate and is
then killed; the zygote cleans the sandbox before the next (see its docstring).

Without it every worker pays for a fresh interpreter and `import torch`. On CUDA the fork server
never creates a context (one cannot cross a fork): each child creates its own, a fraction of a second,
where a worker booted ahead cost about 10 s that the timing phase had to wait for (no context may
start on the GPU while a candidate is timed).
"""

from __future__ import annotations

import json
import os
import socket
import threading
import time
from pathlib import Path

from kernelpro.harness import memguard
from kernelpro.harness.process import CappedStream, ChannelWorker, WorkerProcess

_ANSWER_BYTES = 1 << 16


class ZygoteGone(RuntimeError):
    """The fork server died (a candidate may kill it): the pool starts another."""


class Zygote:
    def __init__(self, device: str, env: dict[str, str] | None = None, build_cache: Path | None = None,
                 startup_s: float = 180.0):
        self.device = device
        self.process = WorkerProcess(device, env, module="kernelpro.harness.zygote", build_cache=build_cache,
                                     socket_type=socket.SOCK_SEQPACKET, watch_memory=False)
        self._control = self.process.channel_socket
        self._lock = threading.Lock()
        self._ready = False
        self._startup_s = startup_s

    def request(self, message: dict, fds: list[int] = ()) -> dict:
        with self._lock:
            try:
                if not self._ready:
                    self._answer(self._startup_s)
                    self._ready = True
                socket.send_fds(self._control, [json.dumps(message).encode()], list(fds))
                return self._answer(60.0 + float(message.get("wait_s", 0.0)))
            except (OSError, ValueError) as error:
                raise ZygoteGone(f"the fork server is gone: {error}") from error

    def _answer(self, timeout_s: float) -> dict:
        self._control.settimeout(timeout_s)
        data = self._control.recv(_ANSWER_BYTES)
        if not data:
            raise ZygoteGone("the fork server closed its socket")
        return json.loads(data)

    def close(self) -> None:
        self.process.kill()


class ForkedWorker(ChannelWorker):
    """One worker forked by a `Zygote`: the same channel and logs as a `WorkerProcess`."""

    def __init__(self, zygote: Zygote):
        self.device = zygote.device
        self.sandboxed = zygote.process.sandboxed
        self._zygote = zygote
        self._sock, child_sock = socket.socketpair()
        out_read, out_write = os.pipe()
        err_read, err_write = os.pipe()
        try:
            answer = zygote.request({"cmd": "fork"}, [child_sock.fileno(), out_write, err_write])
            if "error" in answer:
                raise ZygoteGone(answer["error"])
        except ZygoteGone:
            self._sock.close()
            for fd in (out_read, err_read):
                os.close(fd)
            raise
        finally:
            child_sock.close()
            os.close(out_write)
            os.close(err_write)
        self.inner_pid = int(answer["pid"])  # as the sandbox's PID namespace numbers it
        self.workdir = Path(answer["workdir"])
        self.stdout = CappedStream(os.fdopen(out_read, "rb"))
        self.stderr = CappedStream(os.fdopen(err_read, "rb"))
        self._root = host_pid(zygote.process.pid, self.inner_pid) if self.sandboxed else self.inner_pid
        self._start_channel()

    def exit_status(self, wait_s: float = 2.0) -> int | None:
        try:
            return self._zygote.request({"cmd": "status", "pid": self.inner_pid, "wait_s": wait_s})["status"]
        except ZygoteGone:
            return None

    def _after_kill(self) -> None:
        self._sock.close()
        try:
            self._zygote.request({"cmd": "release", "pid": self.inner_pid})
        except ZygoteGone:
            pass


def host_pid(sandbox_pid: int, inner_pid: int, wait_s: float = 2.0) -> int | None:
    """The host PID of the process that the sandbox started as `sandbox_pid` numbers `inner_pid`; None
    when it is not there (it ended already)."""
    deadline = time.monotonic() + wait_s
    while True:
        for pid in memguard.tree(sandbox_pid)[1:]:
            if _innermost_pid(pid) == inner_pid:
                return pid
        if time.monotonic() > deadline:
            return None
        time.sleep(0.01)


def _innermost_pid(pid: int) -> int | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("NSpid:"):
                return int(line.split()[-1])
    except (OSError, ValueError, IndexError):
        pass
    return None
