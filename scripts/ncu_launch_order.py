"""Is a kernel slower under ncu only because it is the first one of the profiled call?

Runs a candidate's ModelNew (fp32, on CUDA) for CALLS calls between cudaProfilerStart and
cudaProfilerStop, after a warm-up, under ncu, and prints each launch's duration and DRAM
bytes in launch order. In the second call, the first kernel follows the first call's last
kernel instead of the profiler's start, so comparing a kernel's launches tells its own
cost from the cost of its place.

    python scripts/ncu_launch_order.py CANDIDATE.py [--calls 2] [--metrics stage1] [--json OUT.json]

--metrics stage1 collects the profiler's stage-1 counters (speed of light, DRAM bytes, FLOP
counts: what `benchmarks/fusion_kernels.py --profile` collects), in several ncu replay passes,
instead of the three metrics of one pass: the same kernel's durations under the two tell
whether the number of passes changes the duration ncu reports. --keep-caches runs ncu with
--cache-control none: each launch then finds the caches as the launch before it left them (its
dirty L2 lines included), as in the running program.

ncu runs with --clock-control none (the card's clocks are never touched).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum")


def run_calls(candidate: Path, calls: int, warmup: int) -> None:
    """The profiled program (run by ncu)."""
    import torch
    from kernelpro.harness.modelio import build_model, cast_to, import_file
    module = import_file("kp_launch_order_candidate", candidate)
    device = torch.device("cuda")
    model = build_model(module.ModelNew, 42, list(module.get_init_inputs()), device, torch.float32).eval()
    inputs = [cast_to(x, device, torch.float32) for x in module.get_inputs()]
    with torch.no_grad():
        for _ in range(warmup):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStart()
        for _ in range(calls):
            model(*inputs)
        torch.cuda.synchronize()
        torch.cuda.cudart().cudaProfilerStop()


def profile(candidate: Path, calls: int, warmup: int, metrics: str = "three", keep_caches: bool = False) -> list[dict]:
    """Each profiled launch in order: kernel name, microseconds, DRAM bytes."""
    from kernelpro.tools.api import find_binary
    from kernelpro.tools.ncu import command, parse_csv
    ncu = find_binary("ncu")
    if ncu is None:
        raise SystemExit("ncu is not on PATH")
    log = Path(os.environ.get("TMPDIR", "/tmp")) / "kp_launch_order.csv"
    chosen = list(METRICS)
    if metrics == "stage1":  # without the names this GPU lacks, as the profiler does
        from kernelpro.harness.cache import kernelpro_home
        from kernelpro.tools.ncu import query_metrics, split_metrics
        from kernelpro.tools.roofline import STAGE1_METRICS
        import torch
        known = query_metrics(str(ncu), kernelpro_home() / "ncu", torch.cuda.get_device_name())  # the profiler's cache
        chosen, dropped = split_metrics(STAGE1_METRICS, known)
        print(f"{len(chosen)} metrics" + (f"; this GPU lacks {', '.join(dropped)}" if dropped else ""))
    argv = command(str(ncu), log, metrics=chosen) + (["--cache-control", "none"] if keep_caches else []) + [
        sys.executable, __file__, str(candidate), "--calls", str(calls), "--warmup", str(warmup), "--child"]
    subprocess.run(argv, check=True)
    rows = []
    for kernel in parse_csv(log.read_text()):
        rows.append({"kernel": kernel.name, "us": (kernel.seconds("gpu__time_duration.sum") or 0) * 1e6,
                     "dram_bytes": (kernel.bytes("dram__bytes_read.sum") or 0) + (kernel.bytes("dram__bytes_write.sum") or 0)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("candidate", type=Path)
    parser.add_argument("--calls", type=int, default=2)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--metrics", choices=("three", "stage1"), default="three")
    parser.add_argument("--keep-caches", action="store_true", help="ncu --cache-control none")
    parser.add_argument("--json", type=Path)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        run_calls(args.candidate, args.calls, args.warmup)
        return
    rows = profile(args.candidate.resolve(), args.calls, args.warmup, args.metrics, args.keep_caches)
    per_call = len(rows) // args.calls if args.calls else 0
    for index, row in enumerate(rows):
        call = index // per_call + 1 if per_call else 1
        print(f"call {call}  {row['kernel'][:60]:60s} {row['us']:9.1f} us  {row['dram_bytes'] / 1e6:8.1f} MB")
    if args.json:
        args.json.write_text(json.dumps({"candidate": str(args.candidate), "calls": args.calls, "metrics": args.metrics,
                                        "keep_caches": args.keep_caches, "launches": rows}, indent=2))


if __name__ == "__main__":
    main()
