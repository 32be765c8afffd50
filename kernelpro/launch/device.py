"""What the launch ranking knows of a GPU: its SMs and their limits, the occupancy a block reaches on one, and
how full the last wave of a launch keeps them. The offline coder's analytic rankings and the learned launch
models (`kernelpro.launch.model`) read the same record, so both rank for one device."""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class Device:
    """What the analytic model needs to know of the GPU (H100 SXM by default)."""
    sms: int = 132
    threads_per_sm: int = 2048
    registers_per_sm: int = 65536
    blocks_per_sm: int = 32
    bytes_in_flight: int = 32768  # per SM to cover DRAM latency at full bandwidth (Little's law)
    l2_bytes: int = 50 * 2**20  # the L2 cache
    name: str = ""  # the GPU's name (a learned launch model is per device); empty: none known


def wave_fill(waves: float) -> float:
    """How full a launch keeps the SMs, from its waves (programs over the SMs' resident slots): the last
    wave's share where there are several, the one partial wave's share otherwise."""
    return waves / math.ceil(waves) if waves >= 1 else waves


def occupancy_of(threads: int, registers: int, device: Device) -> tuple[int, float]:
    """(blocks resident per SM, the share of the SM's threads they hold) for blocks of `threads` threads using
    `registers` registers each."""
    blocks = max(1, min(device.blocks_per_sm, device.threads_per_sm // threads,
                        device.registers_per_sm // (max(registers, 16) * threads)))
    return blocks, blocks * threads / device.threads_per_sm


def target_device(spec: dict) -> tuple[Device, tuple[int, int] | None]:
    """The GPU the candidates will run on (`spec["device"] == "cuda"` and one is visible), H100 numbers
    otherwise, and its compute capability (None when this process sees no GPU)."""
    import torch
    if spec.get("device") == "cuda" and torch.cuda.is_available():
        props = torch.cuda.get_device_properties(0)
        return Device(sms=props.multi_processor_count,
                      threads_per_sm=getattr(props, "max_threads_per_multi_processor", 2048),
                      registers_per_sm=getattr(props, "regs_per_multiprocessor", 65536),
                      l2_bytes=getattr(props, "L2_cache_size", 0) or Device.l2_bytes, name=props.name), \
            (props.major, props.minor)
    return Device(), None
