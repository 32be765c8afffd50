"""Host memory the GPU copies to and from at full speed.

The trusted process keeps a problem's reference outputs in host memory where the GPU cannot hold them beside its
evaluations, and every evaluation moves them back to the GPU to compare there. From ordinary (pageable) memory the
driver stages each copy through a small locked buffer of its own: 6.7 GB took 0.96 s to the GPU and 0.51 s from it on
an H200 host, against 0.13 s and 0.12 s once the memory was page-locked (`cudaHostRegister`, 0.32 s for the 6.7 GB;
torch's pinned allocator took 3.3 s for the same buffer, rounded it up to 8 GB and caches it after use).

Copying into or locking memory that was never touched makes the driver fault in every page on one thread (2 s and
more for 6 GB); a large buffer is filled first, which torch spreads over its threads.
"""

from __future__ import annotations

import ctypes
import weakref

import numpy as np
import torch

#: buffers under this size stay pageable: locking costs more than it saves
LOCK_MIN_BYTES = 64 << 20


def host_bytes(nbytes: int, lock: bool) -> np.ndarray:
    """A host buffer of `nbytes` bytes (a uint8 array), page-locked for the GPU's copies where `lock` and this process
    has a GPU (and the driver agrees); unlocked again when the array and every view of it are gone."""
    tensor = torch.empty(nbytes, dtype=torch.uint8)
    array = tensor.numpy()
    if nbytes < LOCK_MIN_BYTES or not torch.cuda.is_available():
        return array
    tensor.fill_(0)  # its pages faulted in on torch's threads, not in the driver's copy or lock on one
    if lock:
        if int(torch.cuda.cudart().cudaHostRegister(tensor.data_ptr(), nbytes, 0)) == 0:
            weakref.finalize(array, _unlock, tensor)
        else:
            _clear_last_error()  # the buffer stays pageable; no later kernel launch check may find this error
    return array


def _clear_last_error() -> None:
    """Reset this thread's last CUDA runtime error (a failed call leaves it there, and torch checks every kernel
    launch against it) through the runtime library this process loaded; torch binds no cudaGetLastError."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "libcudart.so" in line}
        for path in paths:
            ctypes.CDLL(path).cudaGetLastError()  # loaded already: the same library, not a second copy
    except (OSError, AttributeError):
        pass  # no shared runtime library (a static one) or no /proc: nothing to reset through


def _unlock(tensor: torch.Tensor) -> None:
    try:
        torch.cuda.cudart().cudaHostUnregister(tensor.data_ptr())
    except Exception:
        pass  # the process is ending: the driver releases it with the context
