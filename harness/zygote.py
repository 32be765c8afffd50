"""A warm parent for workers, inside the sandbox: torch imported once, a fresh process per candidate.

Run as `python -m kernelpro.harness.zygote FD DEVICE` by `forkserver.Zygote`. Starting a worker
costs a Python interpreter and `import torch` (about 2.5 s of CPU); forking this process costs
milliseconds. It imports what a worker imports (`guards` first, so the saved functions are the
genuine ones) and never runs candidate code itself: every candidate runs in a child forked from
it, which becomes one ordinary worker (`worker.serve`) on the channel and log pipes sent with the
request, in its own session and working folder. On CUDA it never creates a context: each child
creates its own (a fork refuses once this process has one).

Before each fork, and when the trusted side releases a worker, it makes the sandbox as fresh as a
new one for the next candidate: every process in the sandbox that is neither its init, this
process nor a live worker's session is killed, and once no worker is live the private /tmp,
/dev/shm and build folders are emptied. It is not dumpable (no ptrace, no /proc/PID/mem), so a
candidate cannot change what the next child inherits. A candidate can still kill it: the trusted
side then starts another.

Requests (one datagram each, on a SOCK_SEQPACKET socket): {"cmd": "fork"} with three descriptors
(channel, stdout, stderr) answers {"pid": N, "workdir": PATH}; {"cmd": "status", "pid": N, "wait_s": S}
answers {"status": exit code, negative for a signal, or null if alive}; {"cmd": "release", "pid": N}
answers {} after cleaning up.
"""

from __future__ import annotations

import sys

from kernelpro.harness import guards  # noqa: F401  (first: saves the genuine functions)

import ctypes
import json
import os
import shutil
import socket
import time
import traceback

import torch  # the point: imported once, before any fork (and never touching the GPU)

from kernelpro.harness import sandbox, worker
from kernelpro.harness.process import send_signal

_PR_SET_DUMPABLE = 4
MAX_REQUEST = 1 << 16


def _not_dumpable() -> None:
    try:
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    except (OSError, AttributeError):
        pass


def _session(pid: int) -> int | None:
    try:
        return os.getsid(pid)
    except (ProcessLookupError, PermissionError):
        return None


class Zygote:
    def __init__(self, control: socket.socket, device: str):
        self.control = control
        self.device = device
        self.home = os.getcwd()
        self.live: set[int] = set()  # forked workers not yet released (each leads its own session)
        self.ended: dict[int, int] = {}  # reaped children: exit code, negative for a signal
        self.count = 0
        # Only in a sandbox of its own (its parent is the PID namespace's init) does it sweep processes and
        # scratch folders; unsandboxed (KERNELPRO_SANDBOX=none) it would reach the host's.
        self.sandboxed = os.environ.get("KERNELPRO_SANDBOXED") == "1" and os.getppid() == 1
        # what the private /tmp held at start: the read-only binds Python needs, never removed
        self.kept_in_tmp = set(os.listdir("/tmp")) if self.sandboxed else set()
        self.build_roots = [os.environ["KERNELPRO_BUILD_ROOT"]] if os.environ.get("KERNELPRO_BUILD_ROOT") else []

    def serve(self) -> None:
        self.reply({"type": "ready", "pid": os.getpid()})
        while True:
            try:
                data, fds, _, _ = socket.recv_fds(self.control, MAX_REQUEST, 3)
            except OSError:
                os._exit(0)
            if not data:
                os._exit(0)  # the trusted side is gone
            self.reap()
            request = json.loads(data)
            if request["cmd"] == "fork":
                self.reply(self.fork(fds))
            elif request["cmd"] == "status":
                self.reply({"status": self.status(int(request["pid"]), float(request.get("wait_s", 0.0)))})
            elif request["cmd"] == "release":
                self.live.discard(int(request["pid"]))
                self.clean()
                self.reply({})

    def reply(self, message: dict) -> None:
        self.control.send(json.dumps(message).encode())

    def reap(self) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            self.ended[pid] = os.waitstatus_to_exitcode(status)

    def status(self, pid: int, wait_s: float) -> int | None:
        deadline = time.monotonic() + wait_s
        while True:
            self.reap()
            if pid in self.ended or time.monotonic() >= deadline:
                return self.ended.get(pid)
            time.sleep(0.01)

    def clean(self) -> None:
        """Kill every process that is not init, this one or a live worker's; empty the scratch folders
        once no worker is live."""
        me = os.getpid()
        for _ in range(200 if self.sandboxed else 0):
            # a live worker by its own pid too: one just forked may not have led its own session yet
            strays = [pid for pid in _pids()
                      if pid not in (1, me) and pid not in self.live and _session(pid) not in self.live]
            if not strays:
                break
            send_signal(strays)
            self.reap()
            time.sleep(0.005)
        if self.live:
            return
        for entry in os.listdir(self.home):
            _remove(os.path.join(self.home, entry))
        if self.sandboxed:
            for entry in set(os.listdir("/tmp")) - self.kept_in_tmp:
                _remove(os.path.join("/tmp", entry))
            for folder in ["/dev/shm", *self.build_roots]:
                for entry in _listdir(folder):
                    _remove(os.path.join(folder, entry))

    def fork(self, fds: list[int]) -> dict:
        problem = ""
        if len(fds) != 3:
            problem = f"a fork needs 3 descriptors, got {len(fds)}"
        elif torch.cuda.is_initialized():
            problem = "the fork server has a CUDA context, which its children cannot use"
        if problem:
            for fd in fds:
                os.close(fd)
            return {"error": problem}
        self.clean()
        self.count += 1
        workdir = os.path.join(self.home, f"worker-{self.count}")
        os.mkdir(workdir, 0o700)
        pid = os.fork()
        if pid == 0:
            self._become_worker(fds, workdir)
        for fd in fds:
            os.close(fd)
        self.live.add(pid)
        return {"pid": pid, "workdir": workdir}

    def _become_worker(self, fds: list[int], workdir: str) -> None:
        channel_fd, out_fd, err_fd = fds
        try:
            os.setsid()
            self.control.close()
            os.dup2(out_fd, 1)
            os.dup2(err_fd, 2)
            os.close(out_fd)
            os.close(err_fd)
            os.chdir(workdir)
            os.environ.update({"HOME": workdir, "TMPDIR": workdir})
            worker.serve_and_exit(channel_fd, self.device)
        except BaseException:
            traceback.print_exc()
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1)  # never back into the zygote's loop (serve_and_exit ends the process itself)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _listdir(folder: str) -> list[str]:
    try:
        return os.listdir(folder)
    except OSError:
        return []


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        try:
            os.unlink(path)
        except OSError:
            pass


def main() -> None:
    sandbox.limit_self()
    worker.preload(sys.argv[2])
    _not_dumpable()
    control = socket.socket(fileno=int(sys.argv[1]))
    Zygote(control, sys.argv[2]).serve()


if __name__ == "__main__":
    main()
