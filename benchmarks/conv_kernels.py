"""The `triton_conv` move's generated convolutions against cuDNN, at bf16/fp16, per kernel (H100).

For each problem (default: convolution problems of levels 1 and 2 of `../shared/kernelbench`,
forward and transposed; transposed ones only with `--transposed`, since the search does not offer
them), the offline coder builds the
`triton_conv` candidate at its top-ranked launch configuration, and the harness judges it at the
run's precision: correctness trials at that precision's tolerance, then timing of the candidate
and of eager (cuDNN's convolution and the epilogue's kernels), sandboxed as always. In this
process, cuDNN's convolution (forward or transposed) alone is then timed on the same shape and precision (CUDA events,
median of `--trials`; no candidate code runs here). The table sets the generated kernel's
TFLOP/s (the convolution's FLOPs over the candidate's time, the epilogue included) beside cuDNN's
(the same FLOPs over the convolution alone).

    python benchmarks/conv_kernels.py .kb/kernelbench --precision bf16 --json conv_kernels.json

Rows are appended to `--json` as they finish, so a run cut short keeps what it measured.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, load_problem
from kernelpro.offline import conv_gemm
from kernelpro.offline.worker import Problem, _device

DEFAULT = ["level1/62_conv_standard_2D__square_input__asymmetric_kernel",
           "level1/63_conv_standard_2D__square_input__square_kernel", "level1/86_conv_depthwise_separable_2D",
           "level1/87_conv_pointwise_2D", "level2/25_Conv2d_Min_Tanh_Tanh", "level2/32_Conv2d_Scaling_Min",
           "level2/48_Conv3d_Scaling_Tanh_Multiply_Sigmoid", "level2/57_Conv2d_ReLU_HardSwish",
           "level2/69_Conv2d_HardSwish_ReLU", "level2/71_Conv2d_Divide_LeakyReLU",
           "level1/64_conv_transposed_1D", "level1/65_conv_transposed_2D__square_input__asymmetric_kernel",
           "level1/71_conv_transposed_2D__asymmetric_input__square_kernel", "level1/74_conv_transposed_1D_dilated",
           "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__",
           "level1/81_conv_transposed_2D_asymmetric_input_square_kernel___dilated____padded____strided__",
           "level2/26_ConvTranspose3d_Add_HardSwish", "level2/100_ConvTranspose3d_Clamp_Min_Divide"]


def cudnn_ms(problem_path: Path, precision: str, trials: int) -> list[dict]:
    """Each convolution module of the problem's model alone, on its own input as the model feeds it,
    at `precision`: median ms over CUDA-event timings (reference code, not candidate code)."""
    import torch
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[precision]
    module: dict = {}
    exec(compile(problem_path.read_text(), str(problem_path), "exec"), module)
    torch.manual_seed(42)
    model = module["Model"](*module["get_init_inputs"]()).to("cuda", dtype)
    inputs = [t.to("cuda", dtype) if isinstance(t, torch.Tensor) and t.is_floating_point() else t
              for t in module["get_inputs"]()]
    convs, seen = [], []
    hooks = [m.register_forward_hook(lambda mod, args, out: seen.append((mod, args[0])))
             for m in model.modules() if isinstance(m, torch.nn.modules.conv._ConvNd)]
    with torch.no_grad():
        model(*inputs)
    for hook in hooks:
        hook.remove()
    for conv, x in seen:
        with torch.no_grad():
            for _ in range(5):
                conv(x)
            times = []
            for _ in range(trials):
                start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                conv(x)
                stop.record()
                stop.synchronize()
                times.append(start.elapsed_time(stop))
        convs.append({"input": list(x.shape), "weight": list(conv.weight.shape), "ms": statistics.median(times)})
    seen.clear()
    del model, inputs
    torch.cuda.empty_cache()
    return convs


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, help="a KernelBench folder (level1/, level2/, ...)")
    parser.add_argument("--problems", nargs="*", default=DEFAULT, help="problem keys (levelN/stem)")
    parser.add_argument("--precision", default="bf16", choices=["bf16", "fp16"])
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the generated candidates here")
    parser.add_argument("--transposed", action="store_true",
                        help="also build transposed convolutions (conv_gemm.TRANSPOSED, off in the search)")
    args = parser.parse_args()
    conv_gemm.TRANSPOSED = args.transposed
    device, _ = _device({"device": "cuda"})
    done = json.loads(args.json.read_text())["rows"] if args.json and args.json.exists() else []
    rows = [r for r in done if r.get("precision") == args.precision]
    finished = {r["key"] for r in rows}
    with Evaluator("cuda") as evaluator:
        for key in args.problems:
            if key in finished:
                continue
            path = args.suite / f"{key}.py"
            started = time.perf_counter()
            graph = Problem(path, 42, "train")
            source, counts, kernels = graph.build(["triton_conv"], {}, device, args.precision)
            row = {"key": key, "precision": args.precision, "kernels": [
                {"kind": k["features"]["kind"], "config": k["config"], "flops": k["features"]["flops"],
                 "m": k["features"]["m"], "n": k["features"]["n"], "k": k["features"]["k"]} for k in kernels]}
            if not kernels:
                row["skipped"] = "; ".join(graph.left_alone.get("triton_conv", [])) or "no convolution the move takes"
            else:
                if args.keep:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    (args.keep / f"{path.stem}_triton_conv.py").write_text(source)
                options = EvalOptions(device="cuda", precision=args.precision, baselines=("eager",),
                                      limits=PhaseLimits(build_s=900, load_s=900))
                result = evaluator.evaluate(load_problem(path), source, options)
                ms = result.candidate.median_ms if result.candidate else None
                eager = result.reference.median_ms if result.reference else None
                row |= {"verdict": str(getattr(result.verdict, "value", result.verdict)), "reason": result.reason,
                        "candidate_ms": ms, "eager_ms": eager, "speedup": eager / ms if eager and ms else None,
                        "cudnn": cudnn_ms(path, args.precision, args.trials)}
                flops = sum(k["flops"] for k in row["kernels"])
                cudnn = sum(c["ms"] for c in row["cudnn"])
                row |= {"tflops": flops / (ms * 1e-3) / 1e12 if ms else None,
                        "cudnn_tflops": flops / (cudnn * 1e-3) / 1e12 if cudnn else None}
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"command": "python benchmarks/conv_kernels.py", "rows": rows},
                                                indent=1))
    print("\n| problem | kernel | verdict | candidate ms | eager ms | vs eager | TFLOP/s | cuDNN conv alone TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|")
    for row in rows:
        if "skipped" in row:
            print(f"| {row['key']} | - | skipped: {row['skipped'][:80]} | | | | | |")
            continue
        kinds = ", ".join(k["kind"] for k in row["kernels"])
        fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
        print(f"| {row['key']} | {kinds} | {row['verdict']} | {fmt(row['candidate_ms'], '.3f')} | "
              f"{fmt(row['eager_ms'], '.3f')} | {fmt(row['speedup'], '.2f')}x | {fmt(row['tflops'], '.1f')} | "
              f"{fmt(row['cudnn_tflops'], '.1f')} |")


if __name__ == "__main__":
    main()
