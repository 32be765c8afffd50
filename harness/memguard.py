"""A host-memory limit on every process tree that runs candidate code.

One watcher thread in the trusted process samples, every POLL_S seconds, the resident memory of each
watched process and all its descendants (read from /proc), and kills a tree that goes over the limit;
the evaluation then records a `crash` verdict that says so. A runaway candidate therefore cannot push
the machine into its out-of-memory killer, which might pick the judge.

Why a watcher and not an rlimit or a cgroup: RLIMIT_AS (and RLIMIT_DATA) count address space, and the
CUDA driver reserves far more of it than any real allocation (a CUDA process maps tens of GB it never
touches), so they either break CUDA or limit nothing. A memory cgroup needs a writable, delegated
cgroup tree: present on a systemd workstation through `systemd-run --user --scope`, absent in most
containers and CI runners. The watcher works the same everywhere; its cost is an overshoot of at most
what a process can allocate in POLL_S.

The limit: KERNELPRO_MEMORY_LIMIT_GB (per process tree; `none` turns it off), by default three quarters
of the machine's RAM.
"""

from __future__ import annotations

import collections
import itertools
import os
import threading
import time
from pathlib import Path
from typing import Callable

LIMIT_ENV = "KERNELPRO_MEMORY_LIMIT_GB"
DEFAULT_SHARE = 0.75
POLL_S = 0.2
_PAGE = os.sysconf("SC_PAGE_SIZE")


def limit_bytes() -> int | None:
    """The limit per watched process tree, in bytes; None when turned off."""
    value = os.environ.get(LIMIT_ENV, "").strip().lower()
    if value in ("none", "off"):
        return None
    if value:
        try:
            gb = float(value)
        except ValueError:
            raise ValueError(f"{LIMIT_ENV}={value!r}: give a number of GB, or none") from None
        return int(gb * 2**30) if gb > 0 else None
    return int(DEFAULT_SHARE * _PAGE * os.sysconf("SC_PHYS_PAGES"))


def stat_fields(stat: Path) -> list[str]:
    """A /proc stat file's fields after the command's name (which may hold spaces and parentheses): the state
    first, then the parent's PID. OSError where the process or thread is gone."""
    return stat.read_text().rsplit(")", 1)[1].split()


def _children() -> dict[int, list[int]]:
    children: dict[int, list[int]] = collections.defaultdict(list)
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                parent = int(stat_fields(entry / "stat")[1])
            except (OSError, IndexError, ValueError):
                continue
            children[parent].append(int(entry.name))
    return children


def tree(root: int, children: dict[int, list[int]] | None = None) -> list[int]:
    """`root` and every live descendant."""
    children = _children() if children is None else children
    found, stack = [root], [root]
    while stack:
        for child in children.get(stack.pop(), []):
            found.append(child)
            stack.append(child)
    return found


def resident_bytes(pids: list[int]) -> int:
    total = 0
    for pid in pids:
        try:
            total += int(Path(f"/proc/{pid}/statm").read_text().split()[1]) * _PAGE
        except (OSError, IndexError, ValueError):
            pass  # gone meanwhile
    return total


OverLimit = Callable[[int, int], None]  # (resident bytes, limit bytes); must kill the tree


class _Watcher:
    def __init__(self):
        self._watched: dict[int, tuple[int, int, OverLimit]] = {}
        self._lock = threading.Lock()
        self._ids = itertools.count()
        self._thread: threading.Thread | None = None

    def watch(self, pid: int, over: OverLimit, limit: int | None = None) -> int | None:
        limit = limit_bytes() if limit is None else limit
        if limit is None:
            return None
        with self._lock:
            token = next(self._ids)
            self._watched[token] = (pid, limit, over)
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, name="kernelpro-memguard", daemon=True)
                self._thread.start()
        return token

    def unwatch(self, token: int | None) -> None:
        if token is not None:
            with self._lock:
                self._watched.pop(token, None)

    def _run(self) -> None:
        while True:
            time.sleep(POLL_S)
            with self._lock:
                watched = list(self._watched.items())
            if not watched:
                continue
            children = _children()
            for token, (pid, limit, over) in watched:
                used = resident_bytes(tree(pid, children))
                if used > limit:
                    self.unwatch(token)
                    try:
                        over(used, limit)
                    except Exception:  # noqa: BLE001 - the watcher must outlive any callback
                        pass


_WATCHER = _Watcher()
watch = _WATCHER.watch
unwatch = _WATCHER.unwatch


def describe_limit() -> str:
    """The memory limit in force, in one line (for `kernelpro tools list`)."""
    try:
        limit = limit_bytes()
    except ValueError as error:
        return f"memory limit: {error}"
    if limit is None:
        return f"memory limit: none ({LIMIT_ENV}=none)"
    return f"memory limit: {limit / 2**30:.1f} GB of host memory per evaluation's processes ({LIMIT_ENV})"


def describe(used: int, limit: int) -> str:
    return (f"its processes used {used / 2**30:.1f} GB of host memory, over the {limit / 2**30:.1f} GB limit "
            f"({LIMIT_ENV}), and were killed")
