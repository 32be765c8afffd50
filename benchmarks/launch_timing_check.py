"""Is a small kernel's collected time its own? For template kernels of given shapes, each of the first `--most` analytic
configurations timed two ways in one process on the GPU, interleaved:

- `flushed`: the collection's protocol (`kernelpro.launch.timing.time_models`: an L2 flush before each call, CUDA
  events around the call), where the host's time to issue the forward overlaps the flush only;
- `queued`: the same flush, then a GPU-side wait (`torch.cuda._sleep`, longer than the host needs to issue the call),
  then the events: the call is queued behind the wait before the start event runs, so only GPU time is measured;

and `host_us`, the host's time to issue one forward (no synchronisation inside). Where `flushed` exceeds `queued` by
about `host_us` less the flush's GPU time, the collected label was the host's, not the kernel's.

    python benchmarks/launch_timing_check.py softmax:659x321 layernorm:1090x604 ... [--most 16] [--json OUT]

On a CUDA GPU only.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

SLEEP_CYCLES = 2_000_000  # about 1 ms at the H100's clocks: far longer than a forward takes to issue


def queued_times(models: list, inputs: list, calls: int, rounds: int = 5) -> tuple[list, list]:
    """(median GPU ms per call behind a GPU-side wait, median host us to issue a call), per model, interleaved."""
    import torch
    from kernelpro.launch.timing import FLUSH_BYTES
    flush = torch.empty(FLUSH_BYTES // 4, dtype=torch.float32, device="cuda")
    gpu = {n: [] for n in range(len(models))}
    host = {n: [] for n in range(len(models))}
    with torch.no_grad():
        for round_number in range(rounds):
            order = list(range(len(models)))
            order = order[round_number % len(order):] + order[:round_number % len(order)]
            for number in order:
                if models[number] is None:
                    continue
                for _ in range(max(1, calls // rounds)):
                    flush.zero_()
                    torch.cuda._sleep(SLEEP_CYCLES)
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    began = time.perf_counter()
                    models[number](*inputs)
                    host[number].append(1e6 * (time.perf_counter() - began))
                    end.record()
                    torch.cuda.synchronize()
                    gpu[number].append(start.elapsed_time(end))
    return ([statistics.median(gpu[n]) if gpu[n] else None for n in range(len(models))],
            [statistics.median(host[n]) if host[n] else None for n in range(len(models))])


def check(template: str, dims: tuple[int, ...], most: int, calls: int) -> dict:
    import torch
    from kernelpro.launch import collect as C
    from kernelpro.launch.timing import build_candidates, time_models
    from kernelpro.offline.worker import Problem, _device
    device, _ = _device({"device": "cuda"})
    with tempfile.TemporaryDirectory(prefix="kernelpro-timing-check-") as folder:
        path = C.template_problem(C.Shape(template, dims), Path(folder))
        built = Problem(path, 42, "eval")
        _, _, kernels = built.build(C.MOVES, {}, device, "fp32", "analytic")
        kernel = next(k for k in kernels if k["backend"] == "triton")
        rows = C.configurations(built, C.MOVES, kernel, most, device)
        files = []
        for rank, source, _ in rows:
            files.append(str(Path(folder) / f"candidate_{rank}.py"))
            Path(files[-1]).write_text(source)
        inputs, models, _ = build_candidates({"problem": str(path), "candidates": files}, torch.device("cuda"))
        flushed = time_models(models, inputs, calls)
        queued, host = queued_times(models, inputs, calls)
    return {"template": template, "dims": list(dims), "kernel": kernel["name"], "features": kernel["features"],
            "configs": [{"rank": rank, "config": config, "flushed_ms": f, "queued_ms": q, "host_us": h}
                        for (rank, _, config), f, q, h in zip(rows, flushed, queued, host)]}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("shapes", nargs="+", help="TEMPLATE:ROWSxLENGTH, e.g. softmax:659x321")
    parser.add_argument("--most", type=int, default=16)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    results = []
    for text in args.shapes:
        template, _, dims = text.partition(":")
        try:
            results.append(check(template, tuple(int(d) for d in dims.split("x")), args.most, args.calls))
        except Exception as error:  # one shape's failure is reported, the others go on
            results.append({"template": template, "dims": dims, "error": f"{type(error).__name__}: {error}"[:300]})
        done = results[-1]
        for row in done.get("configs", []):
            print(f"{text} rank {row['rank']:2d} {row['config']}: flushed {row['flushed_ms'] * 1e3:8.1f} us, "
                  f"queued {row['queued_ms'] * 1e3:8.1f} us, host {row['host_us']:6.1f} us"
                  if row["flushed_ms"] is not None and row["queued_ms"] is not None else f"{text} rank {row['rank']}: failed")
        if "error" in done:
            print(f"{text}: {done['error']}", file=sys.stderr)
        if args.json:
            args.json.write_text(json.dumps(results, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
