"""The wire format of outputs from a worker to the trusted process.

A payload is an 8-byte length, a JSON list that gives each value's dtype, shape and
byte count (or the value itself, for a plain Python scalar), then the tensors' raw
bytes. Nothing is unpickled, so a payload carries plain tensors and JSON scalars
only, whatever the worker sends; and neither side copies the bytes through a
serializer (a correctness trial of a GPU-sized problem moves hundreds of MB: one
256 MB output took 0.8 s to `torch.save` and 0.7 s to load on the dev box).
"""

from __future__ import annotations

import json
import struct

import torch

from kernelpro.harness import hostmem


class PayloadRejected(Exception):
    """A payload that is not plain tensors and scalars."""


_META_LENGTH = struct.Struct(">Q")
#: the dtypes an output may have, by name (anything else is rejected)
DTYPES = {str(d).removeprefix("torch."): d for d in (
    torch.float64, torch.float32, torch.float16, torch.bfloat16, torch.complex64, torch.complex128,
    torch.int64, torch.int32, torch.int16, torch.int8, torch.uint8, torch.bool,
    torch.float8_e4m3fn, torch.float8_e5m2)}
_SCALARS = (bool, int, float, str, type(None))


class DeviceBytes:
    """A device tensor's bytes in a payload, left on the device until the channel writes them: they are
    copied once, straight into the buffer that carries them (the sealed file of a large payload),
    instead of into a fresh host tensor first and from there into that buffer. At KernelBench's
    level-1 sizes (6.4 GB outputs, six sends per evaluation) the extra host copy was seconds a send."""

    def __init__(self, flat: torch.Tensor):
        self.flat = flat  # contiguous, 1-D, uint8
        self.nbytes = flat.numel()

    def write_into(self, target) -> None:
        """Copy the bytes into `target`, a writable buffer of exactly `nbytes` bytes."""
        if self.nbytes:
            host = torch.frombuffer(target, dtype=torch.uint8, count=self.nbytes)
            host.copy_(self.flat)
            del host  # the buffer must not stay exported: the sender unmaps it next

    def tobytes(self) -> bytes:
        return self.flat.cpu().numpy().tobytes()


def flat_values(values: list) -> tuple[list[dict], list[torch.Tensor]]:
    """(each value described, the tensors' bytes): a tensor as its dtype, shape and byte count with its contiguous
    bytes as a flat uint8 tensor on its own device; a JSON scalar as its value; anything else as unsupported."""
    meta, flats = [], []
    for value in values:
        if isinstance(value, torch.Tensor):
            tensor = value.detach()
            tensor = (tensor.to_dense() if tensor.layout != torch.strided else tensor).contiguous()
            raw = tensor.reshape(-1).view(torch.uint8) if tensor.numel() else torch.empty(0, dtype=torch.uint8)
            meta.append({"dtype": str(tensor.dtype).removeprefix("torch."), "shape": list(tensor.shape),
                         "nbytes": raw.numel()})
            flats.append(raw)
        elif isinstance(value, _SCALARS):
            meta.append({"value": value})
        else:
            meta.append({"unsupported": type(value).__name__})
    return meta, flats


def pack_values(values: list) -> list:
    """The payload for a list of outputs (the worker's side): buffers to send one after another.
    Tensors go as their contiguous bytes (a CPU tensor's memory itself, a device tensor's as a
    DeviceBytes the channel copies out); other values must be JSON scalars."""
    meta, flats = flat_values(values)
    return [_head(meta)] + [
        memoryview(raw.numpy()) if raw.device.type == "cpu" else DeviceBytes(raw) for raw in flats]


def host_payload(values: list, lock: bool = False):
    """The payload (`load_tensors`' format) of outputs held on a device or in shared memory (views of an output slot),
    copied into host memory: a uint8 array, page-locked where `lock` (`hostmem`)."""
    meta, flats = flat_values(values)
    head = _head(meta)
    buffer = hostmem.host_bytes(len(head) + sum(flat.numel() for flat in flats), lock)
    buffer[:len(head)] = memoryview(head)
    offset = len(head)
    for flat in flats:
        if flat.numel():
            torch.frombuffer(buffer, dtype=torch.uint8, count=flat.numel(), offset=offset).copy_(flat)
            offset += flat.numel()
    return buffer


def _head(meta: list[dict]) -> bytes:
    """A payload's start: the length of its JSON description, then the description."""
    encoded = json.dumps(meta).encode()
    return _META_LENGTH.pack(len(encoded)) + encoded


def tensor_entry(entry: dict) -> tuple[torch.dtype, list[int], int] | None:
    """A described value's (dtype, shape, byte count) when it is a tensor, None when it is a plain scalar;
    PayloadRejected when it is neither, or its fields do not agree."""
    if not isinstance(entry, dict) or "unsupported" in entry:
        kind = entry.get("unsupported") if isinstance(entry, dict) else type(entry).__name__
        raise PayloadRejected(f"an output is a {kind}, not a tensor or a plain scalar")
    if "value" in entry:
        if not isinstance(entry["value"], _SCALARS):
            raise PayloadRejected("malformed output payload")
        return None
    dtype, shape, nbytes = DTYPES[entry["dtype"]], [int(n) for n in entry["shape"]], int(entry["nbytes"])
    count = 1
    for n in shape:
        count *= n
    if min(shape, default=0) < 0 or nbytes != count * dtype.itemsize:
        raise PayloadRejected("malformed output payload")
    return dtype, shape, nbytes


def load_tensors(payload: bytes | bytearray) -> list:
    """The outputs in a payload (the trusted side). Tensors share the payload's memory."""
    try:
        (size,) = _META_LENGTH.unpack_from(payload, 0)
        meta = json.loads(bytes(payload[_META_LENGTH.size:_META_LENGTH.size + size]))
        offset = _META_LENGTH.size + size
        values = []
        for entry in meta:
            spec = tensor_entry(entry)
            if spec is None:
                values.append(entry["value"])
                continue
            dtype, shape, nbytes = spec
            if offset + nbytes > len(payload):
                raise PayloadRejected("malformed output payload")
            raw = (torch.frombuffer(payload, dtype=torch.uint8, count=nbytes, offset=offset) if nbytes
                   else torch.empty(0, dtype=torch.uint8))
            values.append(raw.view(dtype).reshape(shape))
            offset += nbytes
    except PayloadRejected:
        raise
    except Exception as error:
        raise PayloadRejected(f"malformed output payload ({type(error).__name__})") from None
    if offset != len(payload):
        raise PayloadRejected("malformed output payload")
    return values


def available_memory_bytes() -> int:
    """This machine's available physical memory (Linux), or a large number where unknown."""
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return 1 << 40


def spill(payload: bytearray):
    """The payload moved to an unlinked temporary file and mapped back (copy-on-write, so tensors can
    view it): the page cache holds it instead of this process. For the reference's outputs of every
    correctness trial, which at KernelBench's sizes (GBs each) would not fit in memory together."""
    import mmap
    import tempfile
    with tempfile.TemporaryFile(prefix="kernelpro-reference-") as handle:
        handle.write(payload)
        handle.flush()
        return mmap.mmap(handle.fileno(), len(payload), access=mmap.ACCESS_COPY)
