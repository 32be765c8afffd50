"""The private channel between the trusted process and a worker.

A socket pair, never stdout: a frame is an 8-byte big-endian header length, an
8-byte payload length, a flags byte, a JSON header and an optional binary payload
(outputs in `payload`'s raw format), sent from one buffer or several without joining them.

A large payload does not cross the socket: the sender writes it into a memfd, seals
it against any change (write, shrink, grow) and passes the descriptor (SCM_RIGHTS);
the receiver maps it after checking the seals and the size. At KernelBench's sizes an
output is GBs, and pushing it through the socket cost seconds per GB on both ends
(plus a copy to disk for the reference's); the seals keep what the trusted side
compares exactly what was sent, whatever the untrusted sender does afterwards.

A frame may instead carry one descriptor for the receiver to keep (the trusted side handing
a worker its output slot, `outputslots`); only a receiver that asks for descriptors takes one.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import select
import socket
import struct
import time

_LENGTHS = struct.Struct(">QQB")
MAX_HEADER_BYTES = 1 << 20
MAX_PAYLOAD_BYTES = 1 << 36
#: payloads from this size on go as a sealed memfd (where the platform has them)
SEALED_MIN_BYTES = 1 << 20
_IN_SEALED_FILE = 1
_WITH_DESCRIPTOR = 2
_SEALS = fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL
_SEALED = hasattr(os, "memfd_create") and hasattr(socket, "send_fds")


class ChannelClosed(Exception):
    """The other end closed the channel (or the worker died)."""


class ChannelTimeout(Exception):
    """No frame arrived before the deadline."""


def send(sock: socket.socket, header: dict, payload: bytes | list = b"", descriptor: int | None = None) -> None:
    """One frame; `payload` is bytes or a list of buffers sent in order (no copy joins them), or, instead of
    a payload, a `descriptor` that goes with it (the caller keeps its own and closes it)."""
    encoded = json.dumps(header).encode()
    if descriptor is not None:
        lengths = _LENGTHS.pack(len(encoded), 0, _WITH_DESCRIPTOR)
        if socket.send_fds(sock, [lengths], [descriptor]) != len(lengths):
            raise ChannelClosed("a frame's lengths went out in part")
        sock.sendall(encoded)
        return
    parts = [part if hasattr(part, "write_into") else memoryview(part).cast("B")
             for part in (payload if isinstance(payload, list) else [payload])]
    size = sum(part.nbytes for part in parts)
    if _SEALED and size >= SEALED_MIN_BYTES:
        fd = _sealed_file(parts, size)
        try:
            lengths = _LENGTHS.pack(len(encoded), size, _IN_SEALED_FILE)
            if socket.send_fds(sock, [lengths], [fd]) != len(lengths):
                raise ChannelClosed("a frame's lengths went out in part")
        finally:
            os.close(fd)  # the receiver holds its own descriptor now
        sock.sendall(encoded)
        return
    sock.sendall(_LENGTHS.pack(len(encoded), size, 0) + encoded)
    for part in parts:
        if part.nbytes:
            sock.sendall(part.tobytes() if hasattr(part, "write_into") else part)


def _sealed_file(parts: list[memoryview], size: int) -> int:
    """A memfd holding the parts one after another, sealed: nobody can change it any more."""
    fd = os.memfd_create("kernelpro-payload", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.posix_fallocate(fd, 0, size)  # the pages at once: writing into a bare file took 4x longer
        if any(hasattr(part, "write_into") for part in parts):
            _write_mapped(fd, parts, size)
        else:
            offset = 0
            for part in parts:
                done = 0
                while done < part.nbytes:  # os.pwrite moves at most about 2 GB a call
                    done += os.pwrite(fd, part[done:done + (1 << 30)], offset + done)
                offset += part.nbytes
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)  # fails while a writable mapping is left
    except BaseException:
        os.close(fd)
        raise
    return fd


def _write_mapped(fd: int, parts: list, size: int) -> None:
    """Write the parts through a shared mapping of the file, faulted in at once: a part that can write
    itself (a device tensor's bytes) is copied straight into the file's pages. The mapping is gone
    when this returns, so the file can be sealed against writes."""
    flags = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
    with mmap.mmap(fd, size, flags=flags) as mapped:
        whole = memoryview(mapped)
        try:
            offset = 0
            for part in parts:
                target = whole[offset:offset + part.nbytes]
                if hasattr(part, "write_into"):
                    part.write_into(target)
                else:
                    target[:] = part
                target.release()
                offset += part.nbytes
        finally:
            whole.release()


def _open_sealed(fd: int, size: int) -> mmap.mmap:
    """The payload in a received memfd, mapped privately, or ChannelClosed when the descriptor is
    not a memfd sealed against every change, or not the announced size."""
    try:
        seals = fcntl.fcntl(fd, fcntl.F_GET_SEALS)
        if seals & _SEALS != _SEALS:
            raise ChannelClosed("a payload file came unsealed")
        if os.fstat(fd).st_size != size:
            raise ChannelClosed("a payload file is not the size announced")
        return mmap.mmap(fd, size, access=mmap.ACCESS_COPY)  # copy-on-write: tensors can view it
    except OSError as error:
        raise ChannelClosed(f"a payload file could not be read ({error.strerror or error})") from None
    finally:
        os.close(fd)


def _receive_lengths(sock: socket.socket, deadline: float | None) -> tuple[bytes, list[int]]:
    """A frame's lengths, and the descriptors that came with them (at most one is taken)."""
    data, fds = b"", []
    while len(data) < _LENGTHS.size:
        _wait(sock, deadline)
        chunk, received, _, _ = socket.recv_fds(sock, _LENGTHS.size - len(data), 1)
        fds += received
        if not chunk:
            for fd in fds:
                os.close(fd)
            raise ChannelClosed()
        data += chunk
    return data, fds


def _wait(sock: socket.socket, deadline: float | None) -> None:
    if deadline is not None:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise ChannelTimeout()
        ready, _, _ = select.select([sock], [], [], remaining)
        if not ready:
            raise ChannelTimeout()


def _receive_exactly(sock: socket.socket, size: int, deadline: float | None) -> bytearray:
    """`size` bytes, read straight into one buffer: outputs of hundreds of MB cross here for
    every correctness trial, and growing a buffer chunk by chunk copied them twice more
    (a 256 MB payload: 1.3 s before, 0.3 s now, on the 2-core dev box)."""
    buffer = bytearray(size)
    view = memoryview(buffer)
    received = 0
    while received < size:
        _wait(sock, deadline)
        count = sock.recv_into(view[received:], min(size - received, 1 << 24))
        if not count:
            raise ChannelClosed()
        received += count
    view.release()
    return buffer


def receive(sock: socket.socket, deadline: float | None = None,
            descriptors: bool = False) -> tuple[dict, bytearray | bytes | mmap.mmap | int]:
    """Receive one frame; `deadline` is a `time.monotonic()` value or None. A payload that came as a
    sealed file is a private mapping of it. With `descriptors`, a frame that carries a descriptor
    gives it as its payload (an int, the receiver's to close); without, such a frame is refused.
    ChannelClosed when the other end is gone, also one that closed with a message to it unread (a reset)."""
    try:
        return _receive_frame(sock, deadline, descriptors)
    except ConnectionResetError:
        raise ChannelClosed("the other end reset the channel") from None


def _receive_frame(sock: socket.socket, deadline: float | None, descriptors: bool):
    lengths, fds = _receive_lengths(sock, deadline)
    header_size, payload_size, flags = _LENGTHS.unpack(lengths)
    taken = fds[0] if fds and (flags == _IN_SEALED_FILE or (flags == _WITH_DESCRIPTOR and descriptors)) else None
    for fd in fds if taken is None else fds[1:]:
        os.close(fd)  # descriptors nobody announced are not kept
    allowed = (0, _IN_SEALED_FILE, _WITH_DESCRIPTOR) if descriptors else (0, _IN_SEALED_FILE)
    if header_size > MAX_HEADER_BYTES or payload_size > MAX_PAYLOAD_BYTES or flags not in allowed \
            or (flags != 0 and taken is None) or (flags == _WITH_DESCRIPTOR and payload_size):
        if taken is not None:
            os.close(taken)
        raise ChannelClosed(f"oversized or malformed frame ({header_size}, {payload_size}, {flags})")
    if flags == _WITH_DESCRIPTOR:
        try:
            return json.loads(_receive_exactly(sock, header_size, deadline)), taken
        except BaseException:
            os.close(taken)
            raise
    sealed = taken
    if sealed is not None:
        payload = _open_sealed(sealed, payload_size)
        return json.loads(_receive_exactly(sock, header_size, deadline)), payload
    header = json.loads(_receive_exactly(sock, header_size, deadline))
    payload = _receive_exactly(sock, payload_size, deadline) if payload_size else b""
    return header, payload
