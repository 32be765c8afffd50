"""An output slot: memory the trusted process owns and a worker writes a candidate's outputs into, so that
they are compared where they are instead of crossing the channel.

On CUDA the slot is device memory (`cudavmm`): a candidate's outputs go from its tensors to the slot in
one device-to-device copy, and the trusted side compares them on the GPU. Through the channel each
output went to host memory, through a sealed file, and back to the device for the comparison: at
KernelBench's level-1 sizes (6.4 GB an output) seconds per trial. On the CPU the slot is a shared
memfd, sealed against shrinking and growing (so the worker cannot pull pages from under a reader).

The protocol, one evaluation:
- once the reference's first trial has run (its sizes known) the trusted side offers a slot (`offer`) of one
  or two regions, each the size of the reference's outputs, as the room beside what the problem needs allows
  (`MemoryPlan.room`); or none, with why (no room, no support), and the worker sends its outputs through the
  channel as before;
- before the worker loads any candidate code, the reference's outputs of each trial go through region 0: the
  trusted side copies them out (to host memory, `payload.host_payload`) and zeroes the region (`Slot.clear`)
  before it lets the worker go on;
- the worker (`SlotWriter`) copies a call's outputs into their region, synchronizes and says so with their
  description (`payload.flat_values`'s) instead of a payload; outputs that do not fit go as a payload.
  A trial's outputs go to region 0, the repeat of trial 0 to region 1 (trial 0's stay in region 0 for
  the comparison of the two), the timing phase's eager and candidate outputs across both. With one region
  the repeat goes as a payload, and the trusted side answers it too (`SlotWriter.expect_answer`): trial 1's
  outputs do not go into region 0 before trial 0's there have been compared with the repeat;
- the trusted side stops the worker's processes (`ChannelWorker.paused`), reads the outputs in place
  (`Slot.outputs`, which checks the description against the region) and compares them, and only then
  lets it go on (`COMPARED`).
Nothing the reference wrote into the slot is there once candidate code can run, and what the trusted side
compares against is its own copy: a worker that writes into the slot at any time can change only what is
compared as its own outputs.
"""

from __future__ import annotations

import fcntl
import mmap
import os
import socket

import torch

from kernelpro.harness import channel, cudavmm
from kernelpro.harness.payload import PayloadRejected, available_memory_bytes, flat_values, tensor_entry

ALIGN = 256  # each output starts at a multiple of this in the slot
#: where the room is not known (the CPU, a GPU NVML cannot read), a slot may take this share of the device's
#: free memory (CUDA) or of the available memory (CPU)
SHARE = 0.25
COMPARED = {"cmd": "compared"}
_POPULATE = mmap.MAP_SHARED | getattr(mmap, "MAP_POPULATE", 0)
_SEALS = fcntl.F_SEAL_SHRINK | fcntl.F_SEAL_GROW | fcntl.F_SEAL_SEAL


def _aligned(nbytes: int) -> int:
    return -(-nbytes // ALIGN) * ALIGN


def offsets(meta: list[dict]) -> tuple[list[int | None], int]:
    """Where each described output starts in a slot (None for a scalar), and the bytes they take."""
    starts, end = [], 0
    for entry in meta:
        spec = tensor_entry(entry)
        if spec is None:
            starts.append(None)
            continue
        starts.append(end)
        end += _aligned(spec[2])
    return starts, end


class Slot:
    """The trusted side's slot: a flat uint8 tensor over memory the worker maps too."""

    def __init__(self, memory: torch.Tensor, regions: int, region_bytes: int):
        self.memory, self.regions, self.region_bytes = memory, regions, region_bytes

    @property
    def nbytes(self) -> int:
        return self.memory.numel()

    def clear(self, region: int) -> None:
        """Zero a region and wait until it is zero: what the reference wrote there is gone before a candidate can
        read the slot."""
        self.memory[region * self.region_bytes:(region + 1) * self.region_bytes].zero_()
        if self.memory.device.type == "cuda":
            torch.cuda.synchronize(self.memory.device)

    def outputs(self, meta, region: int | None) -> list:
        """The outputs a worker says it wrote into `region` (None: across the whole slot), as views of it;
        PayloadRejected for a description that is malformed or reaches past the region."""
        if not isinstance(meta, list):
            raise PayloadRejected("malformed output description")
        try:
            base, length = (0, self.regions * self.region_bytes) if region is None else (
                region * self.region_bytes, self.region_bytes)
            starts, end = offsets(meta)
            if end > length or (region or 0) >= self.regions:
                raise PayloadRejected("outputs described past the end of their output slot")
            values = []
            for entry, start in zip(meta, starts):
                if start is None:
                    values.append(entry["value"])
                    continue
                dtype, shape, nbytes = tensor_entry(entry)
                values.append(self.memory[base + start:base + start + nbytes].view(dtype).reshape(shape))
            return values
        except PayloadRejected:
            raise
        except Exception as error:
            raise PayloadRejected(f"malformed output description ({type(error).__name__})") from None


def offer(reference_bytes: int, outputs: int, device: str, room: int | None,
          withheld: str = "") -> tuple[Slot | None, int | None, dict]:
    """A slot for outputs of `reference_bytes` in all (`outputs` of them), in two regions where `room` (bytes, None:
    unknown) holds them, else one: (the slot, a descriptor for the worker, the command that offers it); or (None,
    None, the command that says there is none, and why). `withheld`: why none is offered whatever the room."""
    region = reference_bytes + ALIGN * max(1, outputs)
    if withheld or os.environ.get("KERNELPRO_OUTPUT_SLOTS", "1") == "0":
        return None, None, {"cmd": "slot", "bytes": 0, "why": withheld or "turned off (KERNELPRO_OUTPUT_SLOTS=0)"}
    try:
        why = cudavmm.unsupported(0) if device == "cuda" else ""
        if room is None and not why:
            room = int(SHARE * (torch.cuda.mem_get_info(0)[0] if device == "cuda" else available_memory_bytes()))
        regions = 2 if 2 * region <= (room or 0) else 1 if region <= (room or 0) else 0
        if not why and not regions:
            why = f"no room for {region / 2**30:.2f} GiB beside what the problem needs"
        if why:
            return None, None, {"cmd": "slot", "bytes": 0, "why": why}
        if device == "cuda":
            memory, export = cudavmm.allocate(regions * region, 0)
            fd = export()
        else:
            memory, fd = _shared_file(regions * region)
    except (cudavmm.VmmError, OSError, RuntimeError) as error:
        return None, None, {"cmd": "slot", "bytes": 0, "why": f"could not allocate one ({error})"}
    slot = Slot(memory, regions, region)
    return slot, fd, {"cmd": "slot", "bytes": slot.nbytes, "regions": regions, "region_bytes": region,
                      "backend": device}


def _shared_file(size: int) -> tuple[torch.Tensor, int]:
    """A memfd of `size` bytes sealed against shrinking and growing, mapped shared here, and its descriptor."""
    fd = os.memfd_create("kernelpro-slot", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
    try:
        os.posix_fallocate(fd, 0, size)  # the pages at once, and mapped in at once (_POPULATE)
        fcntl.fcntl(fd, fcntl.F_ADD_SEALS, _SEALS)
        mapped = mmap.mmap(fd, size, flags=_POPULATE)
    except BaseException:
        os.close(fd)
        raise
    return torch.frombuffer(mapped, dtype=torch.uint8), fd


def _map_shared_file(fd: int, size: int) -> torch.Tensor:
    """The worker's side of `_shared_file`: refused unless sealed against shrinking (a reader's pages stay)."""
    try:
        if fcntl.fcntl(fd, fcntl.F_GET_SEALS) & _SEALS != _SEALS or os.fstat(fd).st_size != size:
            raise OSError("the output slot's file is not sealed, or not the size announced")
        return torch.frombuffer(mmap.mmap(fd, size, flags=_POPULATE), dtype=torch.uint8)
    finally:
        os.close(fd)


class SlotWriter:
    """The worker's side: the slot it was offered (if any), and the turn-taking with the trusted side."""

    def __init__(self, sock: socket.socket):
        self.sock, self.memory, self.why, self.unanswered = sock, None, "", 0
        self.regions, self.region_bytes = 0, 0

    def receive(self) -> None:
        """Read the trusted side's offer (the next frame on the channel) and map the slot it gives."""
        command, fd = channel.receive(self.sock, descriptors=True)
        if command.get("cmd") != "slot":
            raise channel.ChannelClosed(f"expected the output slot's offer, got {command.get('cmd')!r}")
        if not isinstance(fd, int):
            self.why = command.get("why") or "none offered"
            return
        try:
            size, regions, region_bytes = int(command["bytes"]), int(command["regions"]), int(command["region_bytes"])
        except (KeyError, TypeError, ValueError):
            os.close(fd)
            self.why = "a malformed offer"
            return
        try:
            memory = (cudavmm.import_descriptor(fd, size, 0) if command.get("backend") == "cuda"
                      else _map_shared_file(fd, size))  # either closes the descriptor
            if regions * region_bytes > size:
                raise ValueError("regions past the end of the slot")
            self.memory, self.regions, self.region_bytes = memory, regions, region_bytes
        except (cudavmm.VmmError, OSError, ValueError, RuntimeError) as error:
            self.why = f"could not map it ({error})"

    def write(self, values: list, sync, region: int | None) -> list | None:
        """Copy `values` into `region` (None: across the whole slot) once the trusted side is done with what it
        held, `sync()`, and return their description; None (nothing written) where there is no such region or
        they do not fit."""
        if self.memory is None or (region or 0) >= self.regions:
            return None
        meta, flats = flat_values(values)
        try:
            starts, end = offsets(meta)
        except PayloadRejected:
            return None  # an unsupported value: the payload path says so
        base, length = (0, self.regions * self.region_bytes) if region is None else (
            region * self.region_bytes, self.region_bytes)
        if end > length:
            return None
        self.wait()
        for flat, start in zip(flats, [s for s in starts if s is not None]):
            self.memory[base + start:base + start + flat.numel()].copy_(flat)
        sync()
        self.unanswered += 1
        return meta

    def expect_answer(self) -> None:
        """The trusted side answers the message just sent (a payload it compares with outputs in the slot): `wait`
        waits for that answer too, so nothing is written over those outputs before it."""
        self.unanswered += 1

    def wait(self) -> None:
        """Until the trusted side has compared every output this wrote."""
        while self.unanswered:
            command, _ = channel.receive(self.sock)
            if command != COMPARED:
                raise channel.ChannelClosed(f"expected {COMPARED}, got {command!r}")
            self.unanswered -= 1
