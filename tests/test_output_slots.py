"""Output slots (harness/outputslots.py): memory the judge owns, into which a worker writes its outputs for the
judge to compare in place. On the CPU the slot is a sealed shared memfd, the same protocol as the GPU's device
memory (tests/gpu/test_gpu_output_slots.py); these tests run it for real, over a real channel and in real
evaluations."""

from __future__ import annotations

import hashlib
import mmap
import os
import socket
import subprocess
import sys
import time

import pytest
import torch

from kernelpro.harness import EvalOptions, Verdict, channel, load_problem, outputslots
from kernelpro.harness.payload import PayloadRejected, flat_values
from kernelpro.harness.process import ChannelWorker

FAST = EvalOptions(device="cpu", timing_trials=3, warmup_calls=1)

PROBLEM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2, x.sum()

def get_inputs():
    return [torch.randn(256, 512)]

def get_init_inputs():
    return []
"""


@pytest.fixture
def pair():
    judge, worker = socket.socketpair()
    yield judge, worker
    judge.close()
    worker.close()


def offered(judge, worker, reference_bytes=1 << 16, outputs=2):
    """A slot offered over the channel and mapped by the worker's side, as in an evaluation."""
    slot, fd, command = outputslots.offer(reference_bytes, outputs, "cpu", None)
    assert slot is not None, command
    channel.send(judge, command, descriptor=fd)
    os.close(fd)
    writer = outputslots.SlotWriter(worker)
    writer.receive()
    assert writer.memory is not None, writer.why
    return slot, writer


def test_outputs_written_by_the_worker_are_read_in_place_by_the_judge(pair):
    judge, worker = pair
    slot, writer = offered(judge, worker)
    values = [torch.randn(7, 9), 3, torch.arange(10, dtype=torch.int64), None, torch.ones(0)]
    meta = writer.write(values, sync=lambda: None, region=0)
    read = slot.outputs(meta, 0)
    assert torch.equal(read[0], values[0]) and read[1] == 3 and torch.equal(read[2], values[2])
    assert read[3] is None and read[4].shape == (0,)
    assert read[0].untyped_storage().data_ptr() == slot.memory.untyped_storage().data_ptr()  # in place, no copy
    channel.send(judge, outputslots.COMPARED)
    writer.wait()  # the judge's answer is what lets the worker write again
    assert writer.unanswered == 0


def test_regions_keep_trial_zero_beside_its_repeat_and_the_whole_slot_holds_the_timing_outputs(pair):
    judge, worker = pair
    slot, writer = offered(judge, worker, reference_bytes=4 * 100, outputs=1)
    assert slot.regions == writer.regions == 2
    first, again = torch.randn(100), torch.randn(100)
    meta = writer.write([first], sync=lambda: None, region=0)
    channel.send(judge, outputslots.COMPARED)
    writer.write([again], sync=lambda: None, region=1)
    assert torch.equal(slot.outputs(meta, 0)[0], first) and torch.equal(slot.outputs(meta, 1)[0], again)
    channel.send(judge, outputslots.COMPARED)
    both = writer.write([first, again], sync=lambda: None, region=None)  # eager's and the candidate's
    assert both is not None and writer.write([first, again], sync=lambda: None, region=0) is None
    assert [torch.equal(a, b) for a, b in zip(slot.outputs(both, None), [first, again])] == [True, True]
    with pytest.raises(PayloadRejected, match="past the end"):
        slot.outputs(meta, 2)


@pytest.mark.parametrize("room, regions", [(10 << 20, 2), (1 << 20, 1), (1 << 10, 0)])
def test_a_slot_has_the_regions_its_room_holds(room, regions):
    slot, fd, command = outputslots.offer(600 << 10, 1, "cpu", room)
    assert (slot.regions if slot else 0) == regions, command
    if fd is not None:
        os.close(fd)
    else:
        assert "no room" in command["why"]


def test_outputs_that_do_not_fit_or_are_not_plain_go_as_a_payload(pair):
    judge, worker = pair
    _, writer = offered(judge, worker, reference_bytes=1024, outputs=1)
    assert writer.write([torch.zeros(1 << 20)], sync=lambda: None, region=0) is None
    assert writer.write([object()], sync=lambda: None, region=0) is None
    assert writer.unanswered == 0


@pytest.mark.parametrize("meta, why", [
    ([{"dtype": "float32", "shape": [1 << 30], "nbytes": 4 << 30}], "past the end"),
    ([{"dtype": "float32", "shape": [4], "nbytes": 4}], "malformed"),
    ([{"dtype": "no_such_type", "shape": [4], "nbytes": 16}], "malformed"),
    ([{"unsupported": "Module"}], "not a tensor"),
    ({"dtype": "float32"}, "malformed"),
])
def test_descriptions_the_slot_cannot_hold_are_rejected(pair, meta, why):
    judge, worker = pair
    slot, _ = offered(judge, worker)
    with pytest.raises(PayloadRejected, match=why):
        slot.outputs(meta, 0)


def test_the_worker_can_neither_shrink_nor_grow_the_slot(pair):
    """A reader of a file's pages past a shrunk end dies of SIGBUS: the judge seals the file before it hands it
    over, and the worker's side refuses one that is not sealed."""
    _, fd, _ = outputslots.offer(4096, 1, "cpu", None)
    try:
        for size in (0, 1 << 30):
            with pytest.raises(PermissionError):
                os.ftruncate(fd, size)
    finally:
        os.close(fd)
    judge, worker = pair
    bare = os.memfd_create("unsealed")
    os.ftruncate(bare, 4096)
    channel.send(judge, {"cmd": "slot", "bytes": 4096, "regions": 1, "region_bytes": 4096, "backend": "cpu"},
                 descriptor=bare)
    os.close(bare)
    writer = outputslots.SlotWriter(worker)
    writer.receive()
    assert writer.memory is None and "not sealed" in writer.why


@pytest.mark.parametrize("asks", [False, True])
def test_a_descriptor_is_taken_only_by_a_receiver_that_asks_for_one(pair, asks):
    """The judge's reads never take a descriptor from a worker: such a frame ends the channel."""
    judge, worker = pair
    fd = os.memfd_create("x")
    channel.send(worker, {"type": "candidate_output"}, descriptor=fd)
    os.close(fd)
    if not asks:
        with pytest.raises(channel.ChannelClosed, match="malformed"):
            channel.receive(judge)
        return
    header, received = channel.receive(judge, descriptors=True)
    assert header == {"type": "candidate_output"} and isinstance(received, int)
    os.close(received)


def test_no_slot_when_turned_off_and_the_worker_hears_why(pair, monkeypatch):
    monkeypatch.setenv("KERNELPRO_OUTPUT_SLOTS", "0")
    slot, fd, command = outputslots.offer(4096, 1, "cpu", None)
    assert slot is None and fd is None and command["bytes"] == 0
    judge, worker = pair
    channel.send(judge, command)
    writer = outputslots.SlotWriter(worker)
    writer.receive()
    assert writer.memory is None and "turned off" in writer.why
    assert writer.write([torch.ones(3)], sync=lambda: None, region=0) is None


class _Process(ChannelWorker):
    """A ChannelWorker around any process: `paused` needs only its process tree."""

    def __init__(self, process: subprocess.Popen):
        self._root, self._killed = process.pid, False


def test_paused_stops_every_thread_of_the_worker_until_the_block_ends(tmp_path):
    """A process whose second thread counts in shared memory as fast as it can: paused, the count stands still."""
    counter = tmp_path / "counter"
    counter.write_bytes(bytes(8))
    program = f"""
import mmap, threading, time
handle = open({str(counter)!r}, "r+b")
m = mmap.mmap(handle.fileno(), 8)
def count():
    n = 0
    while True:
        n += 1
        m[:8] = n.to_bytes(8, "little")  # one copy (struct.pack_into zeroes the bytes first: a reader saw 0)
threading.Thread(target=count, daemon=True).start()
time.sleep(60)
"""
    process = subprocess.Popen([sys.executable, "-c", program])
    try:
        with open(counter, "r+b") as handle:
            shared = mmap.mmap(handle.fileno(), 8)

            def count() -> int:
                return int.from_bytes(shared[:8], "little")
            deadline = time.monotonic() + 20
            while count() == 0 and time.monotonic() < deadline:
                time.sleep(0.01)
            assert count() > 0
            with _Process(process).paused():
                before = count()
                time.sleep(0.2)
                assert count() == before
            deadline = time.monotonic() + 10  # continued (on a loaded box its thread may wait for a core)
            while count() <= before and time.monotonic() < deadline:
                time.sleep(0.01)
            assert count() > before, "the process did not go on after the block"
    finally:
        process.kill()
        process.wait()


SECOND_CALL_DIFFERS = ("self.calls = getattr(self, 'calls', 0) + 1\n"
                       "        return torch.relu(x) * 2 + (0.01 if self.calls == 2 else 0.0), x.sum()")


def _candidate(body: str) -> str:
    return PROBLEM.replace("class Model(", "class ModelNew(").replace("return torch.relu(x) * 2, x.sum()", body)


@pytest.mark.parametrize("body, verdict", [
    ("return torch.relu(x) * 2, x.sum()", Verdict.CORRECT),
    ("return torch.relu(x) * 2.01, x.sum()", Verdict.INCORRECT),
    ("return torch.relu(x) * 2 + torch.rand(1) * 1e-2, x.sum()", Verdict.INCORRECT),  # differs call to call
    (SECOND_CALL_DIFFERS, Verdict.INCORRECT),  # trial 0's repeat (region 1) differs from its first call
    ("return torch.relu(x) * 2, x.sum().item()", Verdict.INCORRECT),  # a float where a tensor is expected
])
def test_verdicts_are_the_same_with_and_without_the_slot(tmp_path, cpu_evaluator, monkeypatch, body, verdict):
    case = f"# {hashlib.sha256(body.encode()).hexdigest()}\n"  # each case's reference outputs computed for it
    (tmp_path / "p.py").write_text(PROBLEM + case)
    problem = load_problem(tmp_path / "p.py")
    with_slot = cpu_evaluator.evaluate(problem, _candidate(body), FAST)
    monkeypatch.setenv("KERNELPRO_OUTPUT_SLOTS", "0")
    (tmp_path / "q.py").write_text(PROBLEM + case + "# without\n")
    without = cpu_evaluator.evaluate(load_problem(tmp_path / "q.py"), _candidate(body) + "\n# without\n", FAST)
    assert with_slot.verdict is without.verdict is verdict, (with_slot.reason, without.reason)
    assert with_slot.reason == without.reason or verdict is Verdict.CORRECT  # a correct one's has its speed
    assert with_slot.output_slot.startswith("2 x ") and "MiB on cpu" in with_slot.output_slot
    assert "turned off" in without.output_slot
    # the reference's own outputs take the same way as the candidate's
    assert with_slot.reference_outputs == "computed, through the output slot"
    assert without.reference_outputs == "computed, through the channel"


SCRIBBLER = '''
import gc, threading
import torch
import torch.nn as nn

def scribble():
    from kernelpro.harness.outputslots import SlotWriter
    while True:
        slots = [found.memory for found in gc.get_objects()
                 if isinstance(found, SlotWriter) and found.memory is not None]
        for _ in range(100000):
            for memory in slots:
                memory.fill_(0)

class ModelNew(nn.Module):
    started = False

    def forward(self, x):
        if not ModelNew.started:
            ModelNew.started = True
            threading.Thread(target=scribble, daemon=True).start()
        return torch.relu(x) * 2, x.sum()
'''


def test_a_candidate_that_writes_into_the_slot_is_judged_on_what_it_wrote(tmp_path, cpu_evaluator):
    """A thread of the candidate's that zeroes the slot over and over: the judge survives and records a verdict on
    what the slot held, zeros (it cannot see the reference, so writing there cannot make it pass)."""
    (tmp_path / "p.py").write_text(PROBLEM)
    result = cpu_evaluator.evaluate(load_problem(tmp_path / "p.py"), SCRIBBLER, FAST)
    assert result.verdict is Verdict.INCORRECT, result.reason
    assert "MiB on cpu" in result.output_slot


PEEKER = '''
import gc
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def forward(self, x):
        from kernelpro.harness.outputslots import SlotWriter
        slots = [found.memory for found in gc.get_objects() if isinstance(found, SlotWriter) and found.memory is not None]
        raise RuntimeError(f"slots {len(slots)}, nonzero bytes {sum(int(m.count_nonzero()) for m in slots)}")
'''


def test_a_candidate_finds_none_of_the_references_outputs_in_the_slot(tmp_path, cpu_evaluator):
    """The reference's outputs go through the slot before any candidate code loads; a candidate that reads the slot
    when it is first called finds it zeroed."""
    (tmp_path / "p.py").write_text(PROBLEM + "# peeked at\n")
    result = cpu_evaluator.evaluate(load_problem(tmp_path / "p.py"), PEEKER, FAST)
    assert result.reference_outputs == "computed, through the output slot"
    assert result.verdict is Verdict.RUNTIME_ERROR and "slots 1, nonzero bytes 0" in result.reason, result.reason


def test_with_room_for_one_region_the_repeat_and_the_timing_outputs_come_through_the_channel(tmp_path, cpu_evaluator,
                                                                                           monkeypatch):
    """One region: trial 0's outputs stay in it for the comparison with the repeat, which comes as a payload, as do
    the timing phase's eager and candidate outputs; the verdicts are the same."""
    (tmp_path / "p.py").write_text(PROBLEM)
    problem = load_problem(tmp_path / "p.py")
    region = 256 * 512 * 4 + 4 + 2 * outputslots.ALIGN  # the outputs' bytes and an alignment's slack for each
    monkeypatch.setattr(outputslots, "available_memory_bytes", lambda: 3 * region // 2)  # the judge's room
    monkeypatch.setattr(outputslots, "SHARE", 1.0)
    for body, verdict in [("return torch.relu(x) * 2, x.sum()", Verdict.CORRECT),
                          (SECOND_CALL_DIFFERS, Verdict.INCORRECT)]:
        result = cpu_evaluator.evaluate(problem, _candidate(body), FAST)
        assert result.verdict is verdict, result.reason
        assert result.output_slot.startswith("1 x "), result.output_slot
        assert verdict is Verdict.CORRECT or "a second call on the same inputs disagreed" in result.reason


def test_with_one_region_trial_1_waits_until_the_repeat_is_compared_with_trial_0_in_the_slot(tmp_path, cpu_evaluator,
                                                                                            monkeypatch):
    """One region: trial 0's outputs stay in it while the repeat, a payload, is compared with them, and trial 1's
    outputs go into the same region. A judge that takes its time over that comparison (an 8 GiB output on the
    GPU) must still compare trial 0's outputs, not trial 1's: the worker waits for it before writing trial 1's."""
    (tmp_path / "p.py").write_text(PROBLEM + "# slow repeat\n")
    problem = load_problem(tmp_path / "p.py")
    region = 256 * 512 * 4 + 4 + 2 * outputslots.ALIGN
    monkeypatch.setattr(outputslots, "available_memory_bytes", lambda: 3 * region // 2)
    monkeypatch.setattr(outputslots, "SHARE", 1.0)
    from kernelpro.harness import compare
    compare_outputs = compare.compare_outputs

    def slow(expected, got, *args, **kwargs):
        time.sleep(1.5)  # meanwhile a worker that did not wait writes trial 1's outputs over trial 0's
        return compare_outputs(expected, got, *args, **kwargs)
    monkeypatch.setattr(compare, "compare_outputs", slow)
    result = cpu_evaluator.evaluate(problem, _candidate("return torch.relu(x) * 2, x.sum()"), FAST)
    assert result.output_slot.startswith("1 x "), result.output_slot
    assert result.verdict is Verdict.CORRECT, result.reason
