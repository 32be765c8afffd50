"""Harness throughput: evaluations per minute for 20 mixed candidates, cold and warm cache.

The candidates are variants of the shipped gelu_bias_scale candidates: Triton kernels
with other block sizes and warp counts, CUDA kernels (load_inline) with other launch
shapes, and PyTorch rewrites. Each variant is a distinct source, so a cold run builds
every CUDA variant (in the CPU build pool, in parallel) and a warm run builds none.

    python benchmarks/harness_throughput.py --device cuda --json throughput.json

`--every N` keeps every Nth candidate (a shorter run with all three kinds); the report names the
sandbox the workers ran in (run it again with KERNELPRO_SANDBOX=none for the sandbox's cost).
`--parallel N` keeps N evaluations in flight, each timed with the device to itself (`harness/lane.py`): run it with
1 and 2 on the same card for what overlapping builds, worker start and checks with the timing gains; the report
gives the time the evaluations waited for the device, and says whether any timing overlapped other work (never).
On the CPU (`--device cpu`) only the PyTorch variants run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "examples"

PYTORCH_VARIANTS = [
    "return torch.nn.functional.gelu(x + self.bias) * self.scale",
    "return torch.nn.functional.gelu(x + self.bias).mul_(self.scale)",
    "y = x + self.bias\n        return torch.nn.functional.gelu(y, approximate='none') * self.scale",
    "y = torch.add(x, self.bias)\n        return 0.5 * y * (1.0 + torch.erf(y * 0.7071067811865476)) * self.scale",
    "y = x + self.bias\n        return y.mul(0.5 * self.scale).mul_(torch.erf(y * 0.7071067811865476).add_(1.0))",
    "return torch.nn.functional.gelu(x.add(self.bias)).mul(self.scale)",
]

PYTORCH_TEMPLATE = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x):
        {body}
'''


def candidates() -> list[tuple[str, str]]:
    triton = (EXAMPLES / "gelu_bias_scale_triton.py").read_text()
    cuda = (EXAMPLES / "gelu_bias_scale_cuda.py").read_text()
    sources = []
    for block, warps in [(512, 4), (1024, 4), (1024, 8), (2048, 4), (2048, 8), (4096, 8), (8192, 16)]:
        sources.append((f"triton BLOCK={block} warps={warps}",
                        triton.replace("block = 2048", f"block = {block}")
                              .replace("num_warps=8", f"num_warps={warps}")))
    for threads, waves in [(128, 8), (256, 4), (256, 8), (256, 16), (512, 4), (512, 8), (1024, 2)]:
        sources.append((f"cuda threads={threads} blocks/SM={waves}",
                        cuda.replace("int threads = 256;", f"int threads = {threads};")
                            .replace("132L * 16", f"132L * {waves}")))
    for index, body in enumerate(PYTORCH_VARIANTS):
        sources.append((f"pytorch variant {index}", PYTORCH_TEMPLATE.format(body=body)))
    return sources


def run_pass(label: str, device: str, cache_root: Path, sources, trials: int, parallel: int = 1) -> dict:
    from concurrent.futures import ThreadPoolExecutor

    from kernelpro.harness import EvalOptions, Evaluator, load_problem
    from kernelpro.harness.cache import BuildCache
    from kernelpro.harness.lane import ALONE

    problem = load_problem(EXAMPLES / "gelu_bias_scale.py")
    options = EvalOptions(device=device, timing_trials=trials)
    rows = []
    began = time.monotonic()
    with Evaluator(device, cache=BuildCache(cache_root), spares=1,
                   build_workers=min(8, os.cpu_count() or 2)) as evaluator:
        for _, source in sources:  # all native builds start at once, in the CPU pool
            evaluator.prebuild(source, options)
        with ThreadPoolExecutor(parallel) as pool:
            futures = [(name, pool.submit(evaluator.evaluate, problem, source, options)) for name, source in sources]
            for name, future in futures:
                result = future.result()
                rows.append({"candidate": name, "verdict": result.verdict.value, "speedup": result.speedup,
                             "build_cached": result.build_cached, "build_s": result.build_s,
                             "wall_s": round(result.wall_s, 2), "phase_s": result.phase_s,
                             "correctness_s": result.correctness_s})
                print(f"  [{label}] {name:34s} {result.verdict.value:13s} "
                      f"{(result.speedup or 0):6.2f}x  wall {result.wall_s:5.1f} s", flush=True)
        history = list(evaluator.lane.history)
    seconds = time.monotonic() - began
    overlapped = sum(1 for a in history if a.how == ALONE for b in history
                     if b is not a and a.entered < b.left and b.entered < a.left)
    return {"pass": label, "parallel": parallel, "evaluations": len(sources), "seconds": round(seconds, 1),
            "evaluations_per_minute": round(60 * len(sources) / seconds, 2),
            "queue_s": round(sum(r["phase_s"].get("queue", 0.0) for r in rows), 1),
            "timings_overlapping_other_work": overlapped,
            "rows": rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--every", type=int, default=1, help="keep every Nth candidate")
    parser.add_argument("--parallel", type=int, default=1, help="evaluations in flight at once")
    args = parser.parse_args()
    if args.parallel < 1:
        parser.error("--parallel must be at least 1")
    sources = candidates()[::max(1, args.every)]
    if args.device == "cpu":
        sources = [(name, source) for name, source in sources if name.startswith("pytorch")]
    with tempfile.TemporaryDirectory(prefix="kernelpro-bench-") as folder:
        cache_root = Path(folder) / "builds"
        cold = run_pass("cold", args.device, cache_root, sources, args.trials, args.parallel)
        warm = run_pass("warm", args.device, cache_root, sources, args.trials, args.parallel)
    import torch

    from kernelpro.harness.sandbox import describe
    report = {"sandbox": describe(), "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "cpu_count": os.cpu_count(), "date": time.strftime("%Y-%m-%d"),
              "passes": [cold, warm]}
    print(f"\n{describe()}; {args.parallel} in flight\n| pass | evaluations | seconds | evaluations/min | waited for "
          "the device, s | timings overlapping other work |\n|---|---|---|---|---|---|")
    for entry in (cold, warm):
        print(f"| {entry['pass']} cache | {entry['evaluations']} | {entry['seconds']} | "
              f"{entry['evaluations_per_minute']} | {entry['queue_s']} | {entry['timings_overlapping_other_work']} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))


if __name__ == "__main__":
    sys.exit(main())
