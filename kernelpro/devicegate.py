"""One search at a time on a GPU, with the next ones started and waiting at the gate.

A bench (`kernelpro.bench.runner`) starts each GPU's next searches while the current one still runs, and names the
GPU's gate in `KERNELPRO_DEVICE_GATE` (a lock file). The waiting search boots what needs no GPU (its fork server:
an interpreter and `import torch` in the sandbox, 7 to 12 s on an H200 machine; the offline coder's graph worker),
then waits here before it touches the GPU, and holds the gate until it exits. So the worker start that cost every
problem's reference evaluation most of its time is paid while the problem before is still timing, on CPU cores it
does not use. The lock is an `flock` on the file: the kernel releases it when the holder exits, however it ends.
Without the variable (a search of its own) there is no gate.
"""

from __future__ import annotations

import fcntl
import os
import time

ENV = "KERNELPRO_DEVICE_GATE"

_held: list[int] = []  # the descriptors of gates this process holds: open until it exits


def gate_named() -> bool:
    """Whether this process runs behind a gate (a search started by a bench on CUDA)."""
    return bool(os.environ.get(ENV))


def wait_for_device(path: str | None = None) -> float:
    """Waits until this process holds the gate (`path`, else `$KERNELPRO_DEVICE_GATE`; none: no wait), then keeps it
    until the process exits. Returns the seconds waited."""
    path = path if path is not None else os.environ.get(ENV, "")
    if not path:
        return 0.0
    descriptor = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    began = time.monotonic()
    fcntl.flock(descriptor, fcntl.LOCK_EX)
    _held.append(descriptor)
    return time.monotonic() - began
