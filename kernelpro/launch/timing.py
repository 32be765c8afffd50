"""The collection's timing child: `python -m kernelpro.launch.timing SPEC.json`, on a CUDA GPU.

SPEC names a problem file and candidate files (one per launch configuration of one kernel). Each
candidate's `ModelNew` is built on the GPU (seed 42, the problem's init inputs) and its forward is
timed on the problem's inputs: 3 warm-up calls, then `calls` calls, each after a 256 MB write that
flushes L2, between CUDA events; the median in ms. Prints a JSON list (null for a candidate that
failed) on its last line of stdout.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

FLUSH_BYTES = 256 * 1024 * 1024


def time_candidates(spec: dict) -> list[float | None]:
    import torch
    from kernelpro.harness.modelio import import_file
    device = torch.device("cuda")
    problem = import_file("kernelpro_launch_problem", Path(spec["problem"]))
    torch.manual_seed(42)
    inputs = [x.to(device) if isinstance(x, torch.Tensor) else x for x in problem.get_inputs()]
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device=device)
    times: list[float | None] = []
    for number, path in enumerate(spec["candidates"]):
        try:
            module = import_file(f"kernelpro_launch_candidate_{number}", Path(path))
            torch.manual_seed(42)
            model = module.ModelNew(*problem.get_init_inputs()).to(device)
            samples = []
            with torch.no_grad():
                for _ in range(3):
                    model(*inputs)
                for _ in range(int(spec.get("calls", 20))):
                    flush.zero_()
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    model(*inputs)
                    end.record()
                    torch.cuda.synchronize()
                    samples.append(start.elapsed_time(end))
            times.append(statistics.median(samples))
        except Exception as error:  # a configuration that does not compile or run: no time, the sweep goes on
            print(f"candidate {number}: {type(error).__name__}: {error}", file=sys.stderr)
            times.append(None)
    return times


def main() -> None:
    print(json.dumps(time_candidates(json.loads(Path(sys.argv[1]).read_text()))))


if __name__ == "__main__":
    main()
