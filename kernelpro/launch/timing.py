"""The collection's timing child: `python -m kernelpro.launch.timing SPEC.json`, on a CUDA GPU.

SPEC names a problem file and candidate files (one per launch configuration of one kernel). Each
candidate's `ModelNew` is built on the GPU (seed 42, the problem's init inputs) and called 3 times
(compiling its kernels) before anything is timed. The GPU is then kept busy for WARM_S seconds, so
its clocks are up when timing starts. Candidates are timed in ROUNDS interleaved rounds, each round
in a rotated order, a share of `calls` per visit: each call after a 256 MB write that flushes L2, then a
GPU-side wait longer than the host takes to issue the call, then between CUDA events; a candidate's time is the
median of all its calls, in ms. Interleaving spreads any drift of clocks or temperature over every candidate alike;
timing them one after another (as the first collection did) made the first one timed, the analytic ranking's choice,
up to 11x slower than it is. The wait (since protocol v3, 2026-11-27) queues the call behind it before the start
event runs, so the time is the GPU's alone: without it a forward whose host time (24-118 us on the H100 machines)
outlasted the flush (about 85 us) was timed from an idle GPU waiting on the host, and small kernels' times rose by up
to 2.7x, differently from run to run (`benchmarks/launch_timing_check.py`; docs/launch.md).

Prints a JSON list on its last line of stdout: per candidate, {"ms": its time, "static": the static features of
every Triton kernel it compiled, by function name (`kernelpro.launch.static`; {} where cuobjdump is missing or
failed)}, or null for a candidate that failed.

`python -m kernelpro.launch.timing --profile SPEC.json`: the first candidate's forward once more, between
cudaProfilerStart and cudaProfilerStop, after its 3 calls, for `ncu --profile-from-start off`
(`kernelpro.launch.dynamic`).
"""

from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

ROUNDS = 5
WARM_S = 0.5
PROTOCOL = f"interleaved-{ROUNDS}-rounds-queued-v3"


def build_candidates(spec: dict, device) -> tuple[list, list, list]:
    """(the problem's inputs on `device`, each candidate's model or None where it failed, each candidate's static
    features by kernel), each model called 3 times. SPEC's `precision` (bf16, fp16; fp32 by default): the inputs'
    floating-point tensors and the models' weights in that dtype, as the harness runs a problem in it."""
    import torch
    from kernelpro.harness.modelio import DTYPES, cast_to, import_file
    problem = import_file("kernelpro_launch_problem", Path(spec["problem"]))
    precision = spec.get("precision", "fp32")
    dtype = DTYPES[precision]
    torch.manual_seed(42)
    inputs = [cast_to(x, device, dtype) for x in problem.get_inputs()]
    models, static = [], []
    for number, path in enumerate(spec["candidates"]):
        try:
            module = import_file(f"kernelpro_launch_candidate_{number}", Path(path))
            torch.manual_seed(42)
            model = module.ModelNew(*problem.get_init_inputs()).to(device)
            if precision != "fp32":
                model = model.to(dtype=dtype)
            with torch.no_grad():
                for _ in range(3):
                    model(*inputs)
            if device.type == "cuda":
                torch.cuda.synchronize()
            models.append(model)
        except Exception as error:  # a configuration that does not compile or run: no time, the sweep goes on
            print(f"candidate {number}: {type(error).__name__}: {error}", file=sys.stderr)
            models.append(None)
            static.append({})
            continue
        try:
            from kernelpro.launch.static import of_triton_module
            static.append(of_triton_module(module))
        except Exception as error:  # no cuobjdump, or a cache Triton laid out otherwise: no static features
            print(f"candidate {number}: no static features ({type(error).__name__}: {error})", file=sys.stderr)
            static.append({})
    return inputs, models, static


def time_candidates(spec: dict) -> list[dict | None]:
    import torch
    inputs, models, static = build_candidates(spec, torch.device("cuda"))
    times = time_models(models, inputs, int(spec.get("calls", 20)))
    return [{"ms": ms, "static": static[n]} if ms is not None else None for n, ms in enumerate(times)]


def time_models(models: list, inputs: list, calls: int = 20, queued: bool = True) -> list[float | None]:
    """Each model's median ms per call (None where it is None or failed): ROUNDS interleaved rounds after
    WARM_S seconds of warm-up, each call timed by the harness's clock (`kernelpro.harness.timing.Clock`) by its
    `queued` protocol: an L2 flush, then a GPU-side wait of twice the model's host issue time (at least
    `timing.MIN_WAIT_MS`, measured on its first visit, untimed), so the call is queued before its start event runs.
    `queued=False` leaves the wait out, for comparison: the host's issue time then counts, as it did in protocol
    v2."""
    import torch
    from kernelpro.harness.timing import Clock
    device = torch.device("cuda")
    clock = Clock(device, "queued")
    started = time.perf_counter()
    while time.perf_counter() - started < WARM_S:
        for _ in range(20):
            clock.flush_buffer.zero_()
        torch.cuda.synchronize()
    live = [n for n, m in enumerate(models) if m is not None]
    samples: dict[int, list[float]] = {n: [] for n in live}
    per_visit = max(1, round(calls / ROUNDS))
    failed: set[int] = set()
    wait: dict[int, int] = {}  # a model's wait in cycles
    with torch.no_grad():
        for round_number in range(ROUNDS):
            shift = (round_number * len(live)) // ROUNDS
            order = live[shift:] + live[:shift]
            for number in (order if round_number % 2 == 0 else order[::-1]):
                if number in failed:
                    continue
                try:
                    if number not in wait:
                        wait[number] = clock.wait_for(models[number], inputs) if queued else 0
                    for _ in range(per_visit):
                        _, taken = clock.time(models[number], inputs, wait_cycles=wait[number])
                        samples[number].append(taken.device_ms)
                except Exception as error:
                    print(f"candidate {number}: {type(error).__name__}: {error}", file=sys.stderr)
                    failed.add(number)
    return [statistics.median(samples[n]) if n in samples and n not in failed else None for n in range(len(models))]


def profile_first(spec: dict) -> None:
    """The first candidate's forward between cudaProfilerStart/Stop (after the 3 calls that compile it)."""
    import torch
    inputs, models, _ = build_candidates({**spec, "candidates": spec["candidates"][:1]}, torch.device("cuda"))
    if models[0] is None:
        sys.exit("the candidate failed to build or run")
    with torch.no_grad():
        torch.cuda.synchronize()
        torch.cuda.profiler.start()
        models[0](*inputs)
        torch.cuda.synchronize()
        torch.cuda.profiler.stop()


def main() -> None:
    if sys.argv[1] == "--profile":
        return profile_first(json.loads(Path(sys.argv[2]).read_text()))
    print(json.dumps(time_candidates(json.loads(Path(sys.argv[1]).read_text()))))


if __name__ == "__main__":
    main()
