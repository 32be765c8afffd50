"""The `cute_gemm` move's CUTLASS Hopper GEMM against cuBLAS plus a separate epilogue (H100).

The problem (default: examples/linear_gelu.py, a 4096 x 4096 x 4096 linear with bias,
then GELU) runs at bf16. Its eager reference is exactly "cuBLAS + a separate epilogue":
cuBLASLt computes the product with the bias, then a second kernel applies GELU. For
each of the top `--configs` launch configurations the offline coder ranks, the
candidate is built in the harness's CPU pool (all at once) and judged by the harness:
correctness trials at bf16 and the default tolerance, then timing of candidate and
eager (and torch.compile in the first evaluation). The SASS tool then reads the built
extension: every GEMM kernel must contain HGMMA (warp-group tensor-core) instructions.

For context it also times, in this process, cuBLAS alone (F.linear with bias) and
GELU alone, with CUDA events.

    python benchmarks/cute_gemm.py --configs 3 --json cute_gemm.json
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path

from cuda_timing import median_ms
from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, load_problem
from kernelpro.harness.cache import BuildCache
from kernelpro.offline.worker import Problem, _device
from kernelpro.tools.sass import SassTool

REPO = Path(__file__).resolve().parent.parent


def library_times(problem_path: Path, precision: str, repeats: int = 50) -> dict:
    """cuBLAS (linear with bias) and the epilogue (GELU) alone, median ms over CUDA-event timings."""
    import torch
    import torch.nn.functional as F
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    module = {}
    exec(compile(problem_path.read_text(), str(problem_path), "exec"), module)
    (x,) = [t.to("cuda", dtype) for t in module["get_inputs"]()]
    model = module["Model"](*module["get_init_inputs"]()).to("cuda", dtype)
    weight, bias = model.linear.weight, model.linear.bias

    with torch.no_grad():
        y = F.linear(x, weight, bias)
        return {"cublas_ms": median_ms(lambda: F.linear(x, weight, bias), repeats),
                "epilogue_ms": median_ms(lambda: F.gelu(y), repeats),
                "flops": 2 * x.shape[0] * weight.shape[0] * weight.shape[1]}


STEADY = r"""
import importlib.util, json, os, statistics, sys, torch
problem_path, candidate_path, precision = sys.argv[1:4]
dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
spec = importlib.util.spec_from_file_location("kp_steady_candidate", candidate_path)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)  # the extension is already built: load_inline finds it
torch.manual_seed(42)
inputs = [t.to("cuda", dtype) for t in module.get_inputs()]
torch.manual_seed(42)
reference = module.Model(*module.get_init_inputs()).to("cuda", dtype)
torch.manual_seed(42)
candidate = module.ModelNew(*module.get_init_inputs()).to("cuda", dtype)

def median_ms(fn, repeats=100):
    for _ in range(10):
        fn()
    times = []
    for _ in range(repeats):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record(); fn(); stop.record(); stop.synchronize()
        times.append(start.elapsed_time(stop))
    return statistics.median(times)

def kernels_us(fn):
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(20):
            fn()
        torch.cuda.synchronize()
    return {e.key[:60]: e.device_time_total / e.count for e in prof.key_averages() if e.device_time_total > 0}

with torch.no_grad():
    print(json.dumps({"candidate_ms": median_ms(lambda: candidate(*inputs)),
                      "reference_ms": median_ms(lambda: reference(*inputs)),
                      "candidate_kernels_us": kernels_us(lambda: candidate(*inputs)),
                      "reference_kernels_us": kernels_us(lambda: reference(*inputs))}))
"""


def steady_times(problem_path: Path, source: str, precision: str, cache: BuildCache, folder: Path) -> dict:
    """Back-to-back calls with warm caches (CUDA events per call, no flush) and the profiler's kernel
    times, for candidate and reference, in a child process (candidate code never runs here)."""
    import os
    import subprocess
    import sys
    from kernelpro.harness.toolchain import build_environment
    path = folder / "steady_candidate.py"
    path.write_text(source)
    env = dict(os.environ, TORCH_EXTENSIONS_DIR=str(cache.entry(source).extensions_dir), **build_environment("cuda"))
    done = subprocess.run([sys.executable, "-c", STEADY, str(problem_path), str(path), precision], env=env,
                          capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        return {"error": done.stderr[-2000:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def hgmma_counts(source: str, cache: BuildCache) -> dict[str, int]:
    """HGMMA instructions per GEMM kernel of the candidate's built extension."""
    counts = {}
    for library in sorted(cache.entry(source).extensions_dir.rglob("*.so")):
        for kernel in SassTool().inspect(library).values():
            if "GemmUniversal" in kernel.name:
                counts[kernel.name[:80]] = kernel.base_count("HGMMA")
    return counts


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problem", type=Path, default=REPO / "examples" / "linear_gelu.py")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--configs", type=int, default=3, help="the top N ranked launch configurations")
    parser.add_argument("--trials", type=int, default=100)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the generated candidates here")
    args = parser.parse_args()
    device, _ = _device({"device": "cuda"})
    graph = Problem(args.problem, 42)
    _, _, kernels = graph.build(["cute_gemm"], {}, device, args.precision)
    if not kernels:
        raise SystemExit(f"cute_gemm does not apply to {args.problem}")
    name = kernels[0]["name"]
    candidates = []
    for rank in range(min(args.configs, kernels[0]["configs"])):
        source, _, chosen = graph.build(["cute_gemm"], {name: rank}, device, args.precision)
        candidates.append((rank, source, chosen[0]["config"]))
        if args.keep:
            args.keep.mkdir(parents=True, exist_ok=True)
            (args.keep / f"{args.problem.stem}_cute_rank{rank}.py").write_text(source)
    problem = load_problem(args.problem)
    cache = BuildCache()
    rows, compile_ms = [], None
    started = time.perf_counter()
    with Evaluator("cuda", cache=cache, build_workers=len(candidates)) as evaluator:
        options = EvalOptions(device="cuda", precision=args.precision, timing_trials=args.trials,
                              limits=PhaseLimits(build_s=900, load_s=900))
        for _, source, _ in candidates:
            evaluator.prebuild(source, options)
        for rank, source, config in candidates:
            opts = options.model_copy(update={"baselines": ("eager", "compile") if compile_ms is None else ("eager",)})
            result = evaluator.evaluate(problem, source, opts)
            if compile_ms is None and result.reference_compile:
                compile_ms = result.reference_compile.median_ms
            ms = result.candidate.median_ms if result.candidate else None
            eager = result.reference.median_ms if result.reference else None
            row = {"rank": rank, "config": config, "verdict": str(getattr(result.verdict, "value", result.verdict)),
                   "reason": result.reason, "build_s": result.build_s, "candidate_ms": ms, "eager_ms": eager,
                   "compile_ms": compile_ms, "candidate_cv": result.candidate.cv if result.candidate else None,
                   "share_of_eager": eager / ms if eager and ms else None,
                   "speedup_vs_compile": compile_ms / ms if compile_ms and ms else None,
                   "hgmma": hgmma_counts(source, cache) if result.verdict == "correct" else {}}
            if result.verdict == "correct":
                row["steady"] = steady_times(args.problem, source, args.precision, cache,
                                             Path(tempfile.mkdtemp(prefix="kp-cute-")))
            rows.append(row)
            print(json.dumps(row), flush=True)
    library = library_times(args.problem, args.precision)
    report = {"problem": args.problem.stem, "precision": args.precision, "library": library, "rows": rows,
              "seconds": time.perf_counter() - started}
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=2))
    tflops = lambda ms: library["flops"] / (ms * 1e-3) / 1e12  # noqa: E731
    print(f"\ncuBLAS (linear + bias) {library['cublas_ms']:.3f} ms ({tflops(library['cublas_ms']):.0f} TFLOP/s), "
          f"GELU alone {library['epilogue_ms']:.3f} ms; torch.compile {compile_ms or float('nan'):.3f} ms")
    print("\n| config | verdict | ms | TFLOP/s | vs cuBLAS + GELU (eager) | vs torch.compile | HGMMA per kernel |")
    print("|---|---|---|---|---|---|---|")
    for row in rows:
        c = row["config"]
        shape = f"{c['tile_m']}x{c['tile_n']}x{c['tile_k']} {c['schedule']} cluster {c['cluster_m']}x{c['cluster_n']}"
        ms = row["candidate_ms"]
        cells = [f"{ms:.3f}", f"{tflops(ms):.0f}", f"{row['share_of_eager']:.2f}x", f"{row['speedup_vs_compile']:.2f}x"
                 if row["speedup_vs_compile"] else "-"] if ms else ["-"] * 4
        print(f"| {shape} | {row['verdict']} | " + " | ".join(cells) + f" | {list(row['hgmma'].values())} |")
    print("\nsteady state (back-to-back calls, warm L2), candidate vs reference ms, and their kernels (us):")
    for row in rows:
        steady = row.get("steady", {})
        if "candidate_ms" in steady:
            print(f"rank {row['rank']}: {steady['candidate_ms']:.3f} vs {steady['reference_ms']:.3f} "
                  f"({steady['reference_ms'] / steady['candidate_ms']:.2f}x); {steady['candidate_kernels_us']} vs "
                  f"{steady['reference_kernels_us']}")
        elif steady:
            print(f"rank {row['rank']}: {steady['error'][-500:]}")


if __name__ == "__main__":
    main()
