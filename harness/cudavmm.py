"""GPU memory that one process allocates and another maps: CUDA's virtual memory management API, through
the driver (`libcuda`) with ctypes.

The trusted process allocates with `cuMemCreate`, asking for a POSIX file descriptor as the shareable
handle, and passes that descriptor to the worker over the channel (SCM_RIGHTS); the worker imports it
and maps the same physical memory into its own address space. Legacy CUDA IPC (`cudaIpcGetMemHandle`)
does not work here: it finds the exporting process by PID, and a sandboxed worker has its own PID and
IPC namespaces. A descriptor needs neither.

The memory belongs to the allocation: a worker that unmaps its view, releases its handle or dies
leaves the trusted process's mapping intact. A mapping is undone when the last tensor viewing it
is gone (and the object that made it), never while one still reads it.
"""

from __future__ import annotations

import ctypes
import os
import weakref

_DEVICE_ATTRIBUTE_VMM = 102  # CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED
_DEVICE_ATTRIBUTE_POSIX_FD = 103  # CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED
_ALLOCATION_PINNED = 1  # CU_MEM_ALLOCATION_TYPE_PINNED
_HANDLE_POSIX_FD = 1  # CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR
_LOCATION_DEVICE = 1  # CU_MEM_LOCATION_TYPE_DEVICE
_READ_WRITE = 3  # CU_MEM_ACCESS_FLAGS_PROT_READWRITE
_GRANULARITY_RECOMMENDED = 1  # CU_MEM_ALLOC_GRANULARITY_RECOMMENDED


class VmmError(RuntimeError):
    """A driver call failed, or the driver has no such call."""


class _Location(ctypes.Structure):
    _fields_ = [("type", ctypes.c_int), ("id", ctypes.c_int)]


class _AllocationFlags(ctypes.Structure):
    _fields_ = [("compressionType", ctypes.c_ubyte), ("gpuDirectRDMACapable", ctypes.c_ubyte),
                ("usage", ctypes.c_ushort), ("reserved", ctypes.c_ubyte * 4)]


class _AllocationProp(ctypes.Structure):  # CUmemAllocationProp
    _fields_ = [("type", ctypes.c_int), ("requestedHandleTypes", ctypes.c_int), ("location", _Location),
                ("win32HandleMetaData", ctypes.c_void_p), ("allocFlags", _AllocationFlags)]


class _AccessDesc(ctypes.Structure):  # CUmemAccessDesc
    _fields_ = [("location", _Location), ("flags", ctypes.c_int)]


_driver: ctypes.CDLL | None = None


def _lib() -> ctypes.CDLL:
    global _driver
    if _driver is None:
        try:
            _driver = ctypes.CDLL("libcuda.so.1")
        except OSError as error:
            raise VmmError(f"no CUDA driver library ({error})") from None
        u64, size = ctypes.c_ulonglong, ctypes.c_size_t
        signatures = {
            "cuMemAddressReserve": [ctypes.POINTER(u64), size, size, u64, u64],
            "cuMemAddressFree": [u64, size],
            "cuMemMap": [u64, size, size, u64, u64],
            "cuMemUnmap": [u64, size],
            "cuMemSetAccess": [u64, size, ctypes.POINTER(_AccessDesc), size],
            "cuMemCreate": [ctypes.POINTER(u64), size, ctypes.POINTER(_AllocationProp), u64],
            "cuMemRelease": [u64],
            "cuMemExportToShareableHandle": [ctypes.c_void_p, u64, ctypes.c_int, u64],
            "cuMemImportFromShareableHandle": [ctypes.POINTER(u64), ctypes.c_void_p, ctypes.c_int],
            "cuMemGetAllocationGranularity": [ctypes.POINTER(size), ctypes.POINTER(_AllocationProp), ctypes.c_int],
        }
        for name, arguments in signatures.items():
            function = getattr(_driver, name, None)
            if function is not None:
                function.argtypes, function.restype = arguments, ctypes.c_int
    return _driver


def _call(name: str, *arguments) -> None:
    function = getattr(_lib(), name, None)
    if function is None:
        raise VmmError(f"the CUDA driver has no {name}")
    code = function(*arguments)
    if code != 0:
        raise VmmError(f"{name} failed (CUDA error {code})")


_contexts: dict[int, ctypes.c_void_p] = {}  # device ordinal -> its primary context, retained once


def _device(ordinal: int) -> ctypes.c_int:
    """The device, its primary context (torch's) made current on the calling thread: the mapping calls
    need one, and a trusted-side thread or a finalizer may not have it yet."""
    _call("cuInit", 0)
    device = ctypes.c_int()
    _call("cuDeviceGet", ctypes.byref(device), ordinal)
    if ordinal not in _contexts:
        context = ctypes.c_void_p()
        _call("cuDevicePrimaryCtxRetain", ctypes.byref(context), device)
        _contexts[ordinal] = context
    _call("cuCtxSetCurrent", _contexts[ordinal])
    return device


def unsupported(ordinal: int = 0) -> str:
    """Why memory cannot be shared this way on device `ordinal`, or "" when it can."""
    try:
        device = _device(ordinal)
        for attribute, what in ((_DEVICE_ATTRIBUTE_VMM, "virtual memory management"),
                                (_DEVICE_ATTRIBUTE_POSIX_FD, "file-descriptor handles")):
            value = ctypes.c_int()
            _call("cuDeviceGetAttribute", ctypes.byref(value), attribute, device)
            if not value.value:
                return f"the GPU's driver has no {what}"
    except VmmError as error:
        return str(error)
    return ""


def _properties(ordinal: int) -> _AllocationProp:
    prop = _AllocationProp()
    prop.type, prop.requestedHandleTypes = _ALLOCATION_PINNED, _HANDLE_POSIX_FD
    prop.location = _Location(_LOCATION_DEVICE, ordinal)
    return prop


def rounded_size(nbytes: int, ordinal: int = 0) -> int:
    """`nbytes` rounded up to the allocation granularity (2 MiB on current GPUs)."""
    granularity = ctypes.c_size_t()
    _device(ordinal)
    _call("cuMemGetAllocationGranularity", ctypes.byref(granularity), ctypes.byref(_properties(ordinal)),
          _GRANULARITY_RECOMMENDED)
    step = max(1, granularity.value)
    return max(step, -(-nbytes // step) * step)


class _Mapped:
    """One allocation mapped into this process. Unmapped and released by `_unmap` (a finalizer)."""

    def __init__(self, handle: int, size: int, ordinal: int):
        self.handle, self.size, self.ordinal, self.address = handle, size, ordinal, 0
        address = ctypes.c_ulonglong()
        _call("cuMemAddressReserve", ctypes.byref(address), size, 0, 0, 0)
        self.address = address.value
        try:
            _call("cuMemMap", self.address, size, 0, handle, 0)
            try:
                access = _AccessDesc(_Location(_LOCATION_DEVICE, ordinal), _READ_WRITE)
                _call("cuMemSetAccess", self.address, size, ctypes.byref(access), 1)
            except VmmError:
                _call("cuMemUnmap", self.address, size)
                raise
        except VmmError:
            _call("cuMemAddressFree", self.address, size)
            raise
        self.__cuda_array_interface__ = {"shape": (size,), "typestr": "|u1", "data": (self.address, False),
                                         "version": 3, "strides": None}
        weakref.finalize(self, _unmap, handle, self.address, size, ordinal)


def _unmap(handle: int, address: int, size: int, ordinal: int) -> None:
    try:
        _device(ordinal)
    except VmmError:
        return  # the process is going down, or the context with it: nothing left to free
    for name, arguments in (("cuMemUnmap", (address, size)), ("cuMemAddressFree", (address, size)),
                            ("cuMemRelease", (handle,))):
        try:
            _call(name, *arguments)
        except VmmError:
            pass  # the process is going down, or the context with it: nothing left to free


def _tensor(mapped: _Mapped):
    import torch
    # the tensor holds `mapped` (torch keeps the object it read the interface from) until its last view goes
    return torch.as_tensor(mapped, device=torch.device("cuda", mapped.ordinal))


def allocate(nbytes: int, ordinal: int = 0):
    """(a uint8 tensor over fresh device memory of at least `nbytes`, a function that returns a new file
    descriptor for it). The tensor's views keep the memory; each descriptor is the caller's to close."""
    size = rounded_size(nbytes, ordinal)  # makes the device's context current
    handle = ctypes.c_ulonglong()
    _call("cuMemCreate", ctypes.byref(handle), size, ctypes.byref(_properties(ordinal)), 0)
    try:
        mapped = _Mapped(handle.value, size, ordinal)
    except VmmError:
        _call("cuMemRelease", handle.value)
        raise

    def export() -> int:
        fd = ctypes.c_int(-1)
        _call("cuMemExportToShareableHandle", ctypes.byref(fd), mapped.handle, _HANDLE_POSIX_FD, 0)
        return fd.value
    return _tensor(mapped), export


def import_descriptor(fd: int, size: int, ordinal: int = 0):
    """A uint8 tensor of `size` bytes over the memory another process exported as `fd` (closed here)."""
    try:
        _device(ordinal)
        handle = ctypes.c_ulonglong()
        _call("cuMemImportFromShareableHandle", ctypes.byref(handle), ctypes.c_void_p(fd), _HANDLE_POSIX_FD)
    finally:
        os.close(fd)
    try:
        mapped = _Mapped(handle.value, size, ordinal)
    except VmmError:
        _call("cuMemRelease", handle.value)
        raise
    return _tensor(mapped)
