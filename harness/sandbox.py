"""The sandbox every process that runs candidate code starts in (evaluation workers, native builds).

Bubblewrap (`bwrap`, Debian's `bubblewrap`; unprivileged where user namespaces are enabled, and
as root) gives the process:
- its own PID namespace with its own /proc: it sees no other process, `getppid()` is the
  namespace's init, and no `/proc/<pid>/environ` of kernelpro's (or anyone's) is readable;
- its own network namespace: loopback only, nothing outside, not even the host's loopback;
- a mount namespace in which everything is read-only except its working folder, the folders
  named writable (a native build's own cache entry) and a private /tmp; a minimal /dev with
  the GPU's device nodes bound in (the driver's files are read-only like the rest);
- its own IPC and UTS namespaces and a new session (no terminal injection). When the evaluation
  ends the trusted side kills bwrap, the namespace's init, and the kernel then kills everything
  started inside: nothing outlives the evaluation.

`isolation()` says whether it works here (checked once per process by running it). Where it does
not, kernelpro says so once, loudly, and the Anthropic coder refuses to run without
`--unsafe-no-sandbox`. `KERNELPRO_SANDBOX=none` turns it off (for debugging a worker).
"""

from __future__ import annotations

import functools
import glob
import os
import resource
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

#: CPU seconds a sandboxed process may use (a runaway loop in a candidate, not a slow build)
CPU_SECONDS = 4 * 3600


@dataclass(frozen=True)
class Isolation:
    kind: str  # "bubblewrap" or "none"
    detail: str  # how it was found, or why there is none

    @property
    def active(self) -> bool:
        return self.kind != "none"


@functools.lru_cache(maxsize=1)
def isolation() -> Isolation:
    if os.environ.get("KERNELPRO_SANDBOX", "").lower() == "none":
        return Isolation("none", "turned off by KERNELPRO_SANDBOX=none")
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return Isolation("none", "bubblewrap is not installed (Debian/Ubuntu: apt install bubblewrap)")
    probe = [bwrap, *_namespaces(), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as error:
        return Isolation("none", f"bubblewrap did not run: {error}")
    if done.returncode != 0:
        return Isolation("none", "bubblewrap cannot make namespaces here (user namespaces disabled?): "
                                 + (done.stderr.strip().splitlines() or ["no message"])[-1][:200])
    return Isolation("bubblewrap", f"{bwrap}: PID, network, mount, IPC and UTS namespaces")


def _namespaces() -> list[str]:
    return ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts"]


#: where a worker sees the build cache read-only, to copy its candidate's build from (see `wrap`)
BUILD_SHADOW = "/tmp/.kernelpro-builds"


def wrap(command: list[str], workdir: Path, writable: tuple[Path, ...] = (),
         build_cache: Path | None = None, keep_capabilities: bool = False) -> list[str]:
    """`command` as it starts inside the sandbox, or unchanged where there is none.

    `writable` folders are bound read-write (a native build's own cache entry). `build_cache` is
    shown read-only at BUILD_SHADOW while its own path is a private, empty tmpfs: the worker copies
    its candidate's build there, at the very path it was built at (so torch and ninja find it up to
    date), before any candidate code runs; whatever a candidate writes there is gone with it.

    Run as root, bubblewrap keeps the caller's capabilities unless told: they are dropped (a root
    candidate without CAP_SYS_PTRACE cannot read a fork server's memory), except with
    `keep_capabilities` (a profiler's run: Nsight Compute may need them for the GPU's counters)."""
    if not isolation().active:
        return command
    # No --die-with-parent: the kernel sends that signal when the spawning *thread* exits, and workers
    # booted ahead are spawned by evaluation threads that end before the workers are used. The trusted
    # side kills each sandbox itself; one orphaned by a killed kernelpro finds its channel closed and exits.
    args = [shutil.which("bwrap") or "bwrap", *_namespaces(), "--new-session",
            *([] if keep_capabilities or os.geteuid() != 0 else ["--cap-drop", "ALL"]),
            "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    for path in _needed_under_tmp():  # over the private /tmp, read-only: what Python needs to start
        args += ["--ro-bind", path, path]
    for node in sorted(glob.glob("/dev/nvidia*")):  # the GPU: device nodes only
        args += ["--dev-bind", node, node]
    if build_cache is not None:
        build_cache.mkdir(parents=True, exist_ok=True)
        args += ["--ro-bind", str(build_cache), BUILD_SHADOW, "--tmpfs", str(build_cache)]
    for folder in (workdir, *writable):
        args += ["--bind", str(folder), str(folder)]
    return args + ["--chdir", str(workdir), "--"] + command


def _needed_under_tmp() -> list[str]:
    """The interpreter's environment, kernelpro's own source and the import path where they lie under /tmp (a
    checkout and its .venv cloned there): the private /tmp would hide them, and the worker could not even start
    ("bwrap: execvp /tmp/.../.venv/bin/python: No such file or directory"). Outermost folders only."""
    wanted = {sys.prefix, sys.base_prefix, os.path.dirname(sys.executable), str(Path(__file__).resolve().parents[1]),
              *sys.path}
    found = sorted({spelled for path in wanted if path for spelled in (os.path.abspath(path), os.path.realpath(path))
                    if (spelled + "/").startswith("/tmp/") and spelled != "/tmp" and os.path.exists(spelled)})
    outermost: list[str] = []
    for path in found:
        if not any(path.startswith(kept + "/") for kept in outermost):
            outermost.append(path)
    return outermost


def shown(folder: str) -> Path:
    """Where this process reads a folder of the build cache: its read-only view at BUILD_SHADOW inside the sandbox
    (whose own path is a private, empty tmpfs there), the folder itself outside."""
    target = Path(folder)
    if os.environ.get("KERNELPRO_BUILD_SHADOW"):
        return Path(BUILD_SHADOW) / target.parent.name / target.name
    return target


def restore_build(folder: str) -> None:
    """Inside the sandbox (the worker, before it imports the candidate): the candidate's cached build
    folder copied from the read-only view of the cache to its own path, where it was built."""
    target, source = Path(folder), shown(folder)
    if source != target and source.is_dir() and not target.exists():
        shutil.copytree(source, target, symlinks=True)


def limit_self() -> None:
    """Limits a sandboxed process sets on itself before any candidate code runs: CPU time, no core
    files, and (not as root, which the kernel does not count) a process count."""
    resource.setrlimit(resource.RLIMIT_CPU, (CPU_SECONDS, CPU_SECONDS))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    if os.geteuid() != 0:
        soft, hard = resource.getrlimit(resource.RLIMIT_NPROC)
        wanted = 4096 if hard == resource.RLIM_INFINITY else min(4096, hard)
        resource.setrlimit(resource.RLIMIT_NPROC, (wanted, hard))


def usable_cores() -> int:
    """The CPU cores this process may run on (its affinity where the system reports one, else every core)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def describe() -> str:
    found = isolation()
    return f"sandbox: {found.kind} ({found.detail})"


def warn_once() -> None:
    """Where candidates run unsandboxed, one loud line on stderr (once per process)."""
    if not isolation().active and not getattr(warn_once, "said", False):
        warn_once.said = True
        print(f"WARNING: candidate code runs WITHOUT a sandbox here: {isolation().detail}. It can read "
              "this machine's files and other processes' environments, and reach the network.",
              file=sys.stderr)
