"""The program a profiler watches: one problem (or candidate) run in its own process.

Run as `python -m kernelpro.tools.target SPEC.json` by `kernelpro.tools.runner`,
directly or under `ncu`. It runs untrusted candidate code, so the trusted side
starts it with a scrubbed environment in a temporary folder and only reads the
JSON it writes. Modes:

- `timeline`: warm up, then `torch.profiler` over a few calls: every kernel (or, on
  CPU, every top-level operator) with its time, launches, idle gaps and copies;
  the wall and host time per call measured without the profiler, by the harness's clock; the analytic
  FLOPs (`torch.utils.flop_counter` on the reference `Model`) and the fewest bytes
  (inputs, outputs and parameters); the compiled binaries (`load_inline` .so,
  Triton .cubin) for the SASS tool.
- `ncu`: warm up outside the profiled range, then exactly one call between
  `cudaProfilerStart` and `cudaProfilerStop` (ncu runs with
  `--profile-from-start off`), so only the program's own kernels are measured.
- `energy`: the NVML energy counter around a window of repeated calls.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import time
from pathlib import Path

import torch

from kernelpro.harness.modelio import (DTYPES, build_model, cast_to, flatten_outputs, import_file,
                                       parameter_bytes, set_seed, tensor_bytes)
from kernelpro.harness.sandbox import limit_self
from kernelpro.harness.timing import Clock

CALL_RANGE = "kernelpro::call"


def _call_problem(function, seed: int, device: torch.device) -> list:
    set_seed(seed)
    try:
        with device:
            return list(function())
    except Exception:
        set_seed(seed)
        return list(function())


class Program:
    """The problem's inputs and the model to profile (the candidate's ModelNew, or the reference)."""

    def __init__(self, spec: dict):
        self.device = torch.device("cuda", 0) if spec["device"] == "cuda" else torch.device("cpu")
        self.dtype = DTYPES[spec.get("precision", "fp32")]
        seed = spec.get("seed", 42)
        problem = import_file("kernelpro_reference", Path(spec["problem_path"]))
        init_inputs = [cast_to(x, self.device, self.dtype) for x in _call_problem(problem.get_init_inputs, seed,
                                                                                  self.device)]
        self.inputs = [cast_to(x, self.device, self.dtype) for x in _call_problem(problem.get_inputs, seed,
                                                                                 self.device)]
        mode = spec.get("model_mode", "train")
        self.reference = build_model(problem.Model, seed, init_inputs, self.device, self.dtype, mode)
        if spec.get("candidate_path"):
            candidate = import_file("kernelpro_candidate", Path(spec["candidate_path"]))
            self.model = build_model(candidate.ModelNew, seed, init_inputs, self.device, self.dtype, mode)
        else:
            self.model = self.reference

    def sync(self) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)

    def call(self):
        with torch.no_grad():
            return self.model(*self.inputs)

    def warm_up(self, calls: int) -> None:
        for _ in range(calls):
            self.call()
        self.sync()


def analytic_counts(program: Program) -> dict:
    """FLOPs of the reference (flop_counter) and the fewest bytes any version must move."""
    flops = 0
    try:
        from torch.utils.flop_counter import FlopCounterMode
        counter = FlopCounterMode(display=False)
        with counter, torch.no_grad():
            outputs = program.reference(*program.inputs)
        flops = int(counter.get_total_flops())
    except Exception:
        with torch.no_grad():
            outputs = program.reference(*program.inputs)
    _, outputs = flatten_outputs(outputs)
    return {"flops": flops, "bytes": tensor_bytes(program.inputs) + tensor_bytes(outputs)
            + parameter_bytes(program.reference)}


def wall_and_host_ms(program: Program, calls: int) -> tuple[float, float]:
    """The median wall time of a call (until the device is done) and the median host time to issue it, in ms,
    timed by the harness's clock and protocol (an L2 flush before each call), so they compare with a verdict's."""
    clock = Clock(program.device, "synced_end")
    times = [clock.time(program.call, (), flush_value=n)[1] for n in range(calls)]
    return statistics.median(t.wall_ms for t in times), statistics.median(t.issue_ms for t in times)


def _binaries(spec: dict) -> list[str]:
    found = []
    for folder, pattern in ((spec.get("extensions_dir"), "*.so"), (spec.get("triton_cache_dir"), "*.cubin")):
        if folder and Path(folder).is_dir():
            found += sorted(str(p) for p in Path(folder).rglob(pattern))
    return found


def _subtree_flops(event) -> int:
    return int(getattr(event, "flops", 0) or 0) + sum(_subtree_flops(child) for child in event.cpu_children)


def _input_bytes(event, dtype: torch.dtype) -> int:
    """The bytes of an operator's tensor inputs (shapes from record_shapes; the program's dtype)."""
    size = torch.empty((), dtype=dtype).element_size()
    total = 0
    for shape in getattr(event, "input_shapes", None) or []:
        if isinstance(shape, (list, tuple)) and shape and all(isinstance(d, int) for d in shape):
            count = 1
            for d in shape:
                count *= d
            total += count * size
    return total


def timeline(program: Program, spec: dict) -> dict:
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile, record_function

    calls = spec.get("calls", 5)
    program.warm_up(spec.get("warmup", 3))
    wall_ms, host_ms = wall_and_host_ms(program, spec.get("wall_calls", 20))
    cuda = program.device.type == "cuda"
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities, record_shapes=not cuda, with_flops=not cuda) as profiler:
        for _ in range(calls):
            with record_function(CALL_RANGE):
                program.call()
            program.sync()
    kernels: dict[str, dict] = {}
    intervals, copies = [], {"HtoD": 0, "DtoH": 0, "DtoD": 0}
    for event in profiler.events():
        if cuda and event.device_type == DeviceType.CUDA:
            name = event.name
            if name.startswith("Memcpy"):
                for kind in copies:
                    if kind in name:
                        copies[kind] += 1
                continue
            if name.startswith("Memset") or name == CALL_RANGE:  # the call's own range shows up on the GPU too
                continue
            intervals.append((event.time_range.start, event.time_range.end, name))
        elif not cuda and event.device_type == DeviceType.CPU and event.cpu_parent is not None \
                and event.cpu_parent.name == CALL_RANGE:
            name = event.name
        else:
            continue
        entry = kernels.setdefault(name, {"name": name, "launches": 0, "total_us": 0.0, "flops": 0, "bytes": 0})
        entry["launches"] += 1
        entry["total_us"] += event.time_range.end - event.time_range.start
        if not cuda:  # an operator: its own and its children's FLOP estimates, and the bytes of its inputs
            entry["flops"] += _subtree_flops(event)
            entry["bytes"] += _input_bytes(event, program.dtype)
    intervals.sort()
    gaps = [b[0] - a[1] for a, b in zip(intervals, intervals[1:]) if b[0] > a[1]]
    # The launch order of one call: ncu rows come in this order, which pairs them with kernels exactly.
    first_call = intervals[: len(intervals) // calls] if len(intervals) % calls == 0 else []
    sequence = [name for _, _, name in first_call]
    per_call = 1.0 / calls
    return {
        "device_name": torch.cuda.get_device_name(program.device) if cuda else "cpu",
        "calls": calls, "wall_ms": wall_ms, "host_ms": host_ms,
        "kernels": [dict(k, launches_per_call=k["launches"] * per_call, ms_per_call=k["total_us"] * per_call / 1e3,
                         flops_per_call=k["flops"] * per_call, bytes_per_call=k["bytes"] * per_call)
                    for k in kernels.values()],
        "busy_ms": sum(k["total_us"] for k in kernels.values()) * per_call / 1e3,
        "gaps_per_call": len([g for g in gaps if g > 5.0]) * per_call,
        "gap_ms_per_call": sum(gaps) * per_call / 1e3,
        "copies_per_call": {kind: n * per_call for kind, n in copies.items()},
        "sequence": sequence,
        "sequence_us": [end - start for start, end, _ in first_call],  # each launch's duration, in that order
        "analytic": analytic_counts(program),
        "precision": spec.get("precision", "fp32"),
        "binaries": _binaries(spec),
    }


def ncu_window(program: Program, spec: dict) -> dict:
    program.warm_up(spec.get("warmup", 2))
    torch.cuda.cudart().cudaProfilerStart()
    for _ in range(spec.get("calls", 1)):
        program.call()
    program.sync()
    torch.cuda.cudart().cudaProfilerStop()
    return {"calls": spec.get("calls", 1)}


def energy_window(program: Program, spec: dict, meter=None) -> dict:
    """Joules over a window of back-to-back calls, read by the meter the harness's energy measurement uses
    (`kernelpro.energy.meter.NvmlMeter`: the energy counter, or sampled power where the card has none, on the GPU
    this process sees); the window lasts the meter's minimum (`window_s` or more) and at least `min_calls` calls."""
    from kernelpro.energy.meter import NvmlMeter
    program.warm_up(spec.get("warmup", 3))
    meter = meter or NvmlMeter(min_window_s=spec.get("window_s", 1.0))
    reading, calls = meter.start(), 0
    started = time.perf_counter()
    while calls < spec.get("min_calls", 10) or time.perf_counter() - started < meter.min_window_s:
        program.call()
        calls += 1
        if calls % 16 == 0:
            program.sync()
    program.sync()
    joules, seconds = meter.stop(reading)
    return {"calls": calls, "seconds": seconds, "joules": joules, "power_limit_w": meter.power_limit_w(),
            "method": meter.method}


MODES = {"timeline": timeline, "ncu": ncu_window, "energy": energy_window}


def main() -> None:
    limit_self()  # before any candidate code
    spec = json.loads(Path(sys.argv[1]).read_text())
    for variable in ("extensions_dir", "triton_cache_dir"):
        if spec.get(variable):
            os.environ["TORCH_EXTENSIONS_DIR" if variable == "extensions_dir" else "TRITON_CACHE_DIR"] = spec[variable]
    result = MODES[spec["mode"]](Program(spec), spec)
    Path(spec["out"]).write_text(json.dumps(result))
    sys.stdout.flush()
    os._exit(0)  # skip teardown: candidate threads and atexit hooks do not matter here


if __name__ == "__main__":
    main()
