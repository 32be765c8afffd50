"""The private channel between the trusted process and a worker: frames, deadlines, a closed peer."""

from __future__ import annotations

import os
import socket
import struct
import threading
import time

import pytest

from kernelpro.harness import channel


def test_a_large_payload_arrives_whole_and_in_order():
    left, right = socket.socketpair()
    payload = os.urandom(1 << 20) * 40  # 40 MB, more than one read
    sender = threading.Thread(target=channel.send, args=(left, {"type": "trial", "n": 3}, payload))
    sender.start()
    header, received = channel.receive(right, deadline=time.monotonic() + 60)
    sender.join()
    assert header == {"type": "trial", "n": 3} and bytes(received) == payload
    channel.send(left, {"type": "done"})
    assert channel.receive(right) == ({"type": "done"}, b"")


def test_a_payload_of_several_buffers_arrives_as_one():
    import torch
    left, right = socket.socketpair()
    tensor = torch.arange(1 << 20, dtype=torch.float32)
    parts = [b"head", memoryview(tensor.numpy()), b"", bytearray(b"tail")]  # sent as they are, not joined
    sender = threading.Thread(target=channel.send, args=(left, {"type": "trial"}, parts))
    sender.start()
    header, received = channel.receive(right, deadline=time.monotonic() + 60)
    sender.join()
    assert bytes(received) == b"head" + tensor.numpy().tobytes() + b"tail"


@pytest.mark.parametrize("elements", [1 << 20, 7], ids=["sealed_file", "socket"])
def test_parts_that_write_themselves_arrive_in_place(elements):
    """A payload's device-tensor parts (payload.DeviceBytes) are copied straight into the sealed file
    (or, under its size, into the frame), between plain buffers, and load back as the same values;
    the file is sealed afterwards, so no writable mapping was left behind."""
    import torch

    from kernelpro.harness.payload import DeviceBytes, load_tensors, pack_values
    left, right = socket.socketpair()
    a = torch.randn(elements, 3).t()  # not contiguous: packed as its contiguous bytes
    b = torch.arange(elements, dtype=torch.int64)
    parts = pack_values([a, 2.5, b])
    # what a GPU's outputs pack as, with CPU tensors in their place (this machine may have no GPU)
    parts[1:] = [DeviceBytes(torch.frombuffer(bytearray(part), dtype=torch.uint8)) for part in parts[1:]]
    sender = threading.Thread(target=channel.send, args=(left, {"type": "trial"}, parts))
    sender.start()
    _, received = channel.receive(right, deadline=time.monotonic() + 60)
    sender.join()
    got = load_tensors(received)
    assert torch.equal(got[0], a) and got[1] == 2.5 and torch.equal(got[2], b)


def test_a_frame_that_stops_short_times_out_or_reports_the_closed_peer():
    left, right = socket.socketpair()
    encoded = b'{"type": "trial"}'
    left.sendall(struct.pack(">QQB", len(encoded), 1000, 0) + encoded + b"x" * 10)  # 990 payload bytes never come
    with pytest.raises(channel.ChannelTimeout):
        channel.receive(right, deadline=time.monotonic() + 0.3)
    left.close()
    with pytest.raises(channel.ChannelClosed):
        channel.receive(right, deadline=time.monotonic() + 5)


def test_an_oversized_header_is_refused():
    left, right = socket.socketpair()
    left.sendall(struct.pack(">QQB", channel.MAX_HEADER_BYTES + 1, 0, 0))
    with pytest.raises(channel.ChannelClosed, match="oversized"):
        channel.receive(right, deadline=time.monotonic() + 5)


# -- large payloads go as a sealed memfd -----------------------------------------------------------

def _frame_with(left, fd, size, flags=1):
    encoded = b'{"type": "trial"}'
    socket.send_fds(left, [struct.pack(">QQB", len(encoded), size, flags)], [fd] if fd is not None else [])
    left.sendall(encoded)


def _memfd(data: bytes, seal: bool) -> int:
    import fcntl
    fd = os.memfd_create("test", os.MFD_ALLOW_SEALING)
    os.write(fd, data)
    if seal:
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, fcntl.F_SEAL_WRITE | fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW
                    | fcntl.F_SEAL_SEAL)
    return fd


def test_a_large_payload_comes_as_a_sealed_file_that_nobody_can_change():
    import fcntl
    import mmap
    left, right = socket.socketpair()
    payload = os.urandom(channel.SEALED_MIN_BYTES) * 3
    channel.send(left, {"type": "trial"}, payload)
    header, received = channel.receive(right, deadline=time.monotonic() + 60)
    assert isinstance(received, mmap.mmap) and bytes(received) == payload
    # the pages are the sealed file's: writing to it fails for anyone who holds it
    path = "/proc/self/map_files"
    held = [os.path.join(path, name) for name in os.listdir(path)
            if os.readlink(os.path.join(path, name)).startswith("/memfd:kernelpro-payload")]
    assert held
    fd = os.open(held[0], os.O_RDWR)
    try:
        assert fcntl.fcntl(fd, fcntl.F_GET_SEALS) & fcntl.F_SEAL_WRITE
        with pytest.raises(PermissionError):
            os.pwrite(fd, b"x", 0)
    finally:
        os.close(fd)


def test_an_unsealed_or_wrong_sized_payload_file_is_refused_and_not_kept():
    left, right = socket.socketpair()
    before = len(os.listdir("/proc/self/fd"))
    for fd, size, match in ((_memfd(b"x" * 64, seal=False), 64, "unsealed"),
                            (_memfd(b"x" * 64, seal=True), 128, "size"),
                            (os.open(__file__, os.O_RDONLY), os.path.getsize(__file__), "unsealed|could not")):
        _frame_with(left, fd, size)
        os.close(fd)
        with pytest.raises(channel.ChannelClosed, match=match):
            channel.receive(right, deadline=time.monotonic() + 5)
        right.recv(1 << 16)  # the header the refused frame left behind
    _frame_with(left, None, 64)  # a file announced, none sent
    with pytest.raises(channel.ChannelClosed, match="malformed"):
        channel.receive(right, deadline=time.monotonic() + 5)
    right.recv(1 << 16)
    # descriptors nobody announced are closed, not collected
    fds = [_memfd(b"y", seal=True) for _ in range(2)]
    encoded = b'{"type": "done"}'
    socket.send_fds(left, [struct.pack(">QQB", len(encoded), 0, 0)], fds)
    left.sendall(encoded)
    for fd in fds:
        os.close(fd)
    assert channel.receive(right, deadline=time.monotonic() + 5) == ({"type": "done"}, b"")
    assert len(os.listdir("/proc/self/fd")) == before
