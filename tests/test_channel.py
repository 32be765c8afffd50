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
    assert header == {"type": "trial", "n": 3} and received == payload
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
    assert received == b"head" + tensor.numpy().tobytes() + b"tail"


def test_a_frame_that_stops_short_times_out_or_reports_the_closed_peer():
    left, right = socket.socketpair()
    encoded = b'{"type": "trial"}'
    left.sendall(struct.pack(">QQ", len(encoded), 1000) + encoded + b"x" * 10)  # 990 payload bytes never come
    with pytest.raises(channel.ChannelTimeout):
        channel.receive(right, deadline=time.monotonic() + 0.3)
    left.close()
    with pytest.raises(channel.ChannelClosed):
        channel.receive(right, deadline=time.monotonic() + 5)


def test_an_oversized_header_is_refused():
    left, right = socket.socketpair()
    left.sendall(struct.pack(">QQ", channel.MAX_HEADER_BYTES + 1, 0))
    with pytest.raises(channel.ChannelClosed, match="oversized"):
        channel.receive(right, deadline=time.monotonic() + 5)
