"""Checks the worker runs around candidate code, with functions saved beforehand.

This module is imported by the worker before any candidate code exists in the
process, so the functions it binds at import time are the genuine ones. A
candidate that replaces `torch.allclose`, `torch.cuda.synchronize`,
`time.perf_counter` or any other public callable of the watched namespaces is
caught by `tampered_names()`.
"""

from __future__ import annotations

import time
import types

import torch


def torch_own_patch(saved: object, now: object) -> bool:
    """Whether `now` is one of torch's own lazy monkeypatches of `saved`, not a candidate's.

    Importing `torch._dynamo` wraps `torch.manual_seed` (functools.wraps, so `__wrapped__`
    is the genuine function), and the first `torch.compile` replaces `nn.Module.__init__`
    and `__setstate__` with closures of dynamo's mutation guard over the genuine ones. A
    candidate that uses torch.compile must not look like a tamperer because of that; the
    worker does not import dynamo up front (it costs seconds per worker) to settle them.
    """
    if getattr(now, "__wrapped__", None) is saved and getattr(now, "__module__", "") in ("torch.random", "torch"):
        return getattr(now, "__qualname__", "") == getattr(saved, "__qualname__", None)
    if getattr(now, "__module__", "") != "torch._dynamo.mutation_guard":
        return False
    cells = getattr(now, "__closure__", None) or ()
    return any(cell.cell_contents is saved for cell in cells)


# Saved before the candidate is imported: these are what the harness calls.
perf_counter = time.perf_counter
sleep = time.sleep
torch_equal = torch.equal
torch_empty = torch.empty
tensor_type = torch.Tensor
uint8 = torch.uint8
_clone = torch.Tensor.clone
_contiguous = torch.Tensor.contiguous
_view = torch.Tensor.view
_reshape = torch.Tensor.reshape
fill = torch.Tensor.fill_
_storage = torch.Tensor.untyped_storage
cuda_synchronize = torch.cuda.synchronize
CudaEvent = torch.cuda.Event
event_elapsed_time = torch.cuda.Event.elapsed_time
cuda_sleep = torch.cuda._sleep  # a GPU-side wait of so many cycles (the queued timing protocol)


def _watched_namespaces() -> list[object]:
    return [torch, torch.nn.functional, torch.Tensor, torch.nn.Module, torch.cuda,
            torch.cuda.Event, torch.testing, torch.autograd, time, torch._C._nn]


def _callables(namespace: object) -> dict[str, object]:
    entries = {}
    for name, value in vars(namespace).items():
        if isinstance(value, types.ModuleType):
            continue
        if name.startswith("_") and not (name.startswith("__") and name.endswith("__")):
            continue
        if callable(value) or isinstance(value, (staticmethod, classmethod)):
            entries[name] = value
    return entries


_SNAPSHOT = [(namespace, _callables(namespace)) for namespace in _watched_namespaces()]
_MISSING = object()


def tampered_names() -> list[str]:
    """Public callables of the watched namespaces that were replaced or deleted."""
    changed = []
    for namespace, before in _SNAPSHOT:
        now = vars(namespace)
        label = getattr(namespace, "__name__", type(namespace).__name__)
        for name, value in before.items():
            current = now.get(name, _MISSING)
            if current is not value and not torch_own_patch(value, current):
                changed.append(f"{label}.{name}")
    return changed


def bits(tensor: torch.Tensor) -> torch.Tensor:
    """The tensor's bytes as a flat uint8 tensor, so NaNs compare equal to themselves."""
    flat = _reshape(_contiguous(tensor.detach()), (-1,))
    return _view(flat, uint8) if flat.numel() else flat


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch_equal(bits(a), bits(b)))


def snapshot(tensor: torch.Tensor) -> torch.Tensor:
    """A copy taken on the current stream, without synchronizing."""
    return _clone(tensor.detach())


def storage_span(tensor: torch.Tensor) -> tuple[int, int]:
    storage = _storage(tensor)
    return storage.data_ptr(), storage.data_ptr() + storage.nbytes()


def overlaps(a: torch.Tensor, b: torch.Tensor) -> bool:
    start_a, end_a = storage_span(a)
    start_b, end_b = storage_span(b)
    return start_a < end_b and start_b < end_a and end_a > start_a and end_b > start_b


def poison_cuda_free_memory(device: torch.device) -> int:
    """Fill every free block of the CUDA caching allocator with 0xFF (NaN in every float type).

    A candidate that returns `torch.empty(...)` gets one of these blocks, so
    uninitialized memory reads as NaN instead of a stale reference result.
    Returns the bytes poisoned.
    """
    cuda_synchronize(device)
    free_blocks = [
        block["size"]
        for segment in torch.cuda.memory_snapshot()
        if segment.get("device") == device.index
        for block in segment.get("blocks", [])
        if block.get("state") == "inactive"
    ]
    held = [torch_empty(size, dtype=uint8, device=device) for size in free_blocks]
    for tensor in held:
        fill(tensor, 0xFF)
    cuda_synchronize(device)
    poisoned = sum(t.numel() for t in held)
    del held
    return poisoned


def prefill_like(templates: list[torch.Tensor], device: torch.device) -> None:
    """Allocate and free NaN-filled (0xFF) blocks shaped like the expected outputs."""
    held = [torch_empty(t.shape, dtype=t.dtype, device=device) for t in templates]
    for tensor in held:
        fill(_view(_reshape(tensor, (-1,)), uint8) if tensor.numel() else tensor, 0xFF)
    if device.type == "cuda":
        cuda_synchronize(device)
    del held
