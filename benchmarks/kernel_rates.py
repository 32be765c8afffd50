"""The offline coder's generated GEMMs and convolutions against cuBLAS/cuDNN, per kernel (H100).

For each problem, the offline coder builds the `--move` candidate (`triton_gemm`: GEMMs with their
epilogue; `triton_conv`: convolutions, bf16/fp16 only; transposed ones only with `--transposed`,
since cuDNN wins on most of them) at its top-ranked launch configuration, and the harness
judges it at the run's precision: correctness trials at that precision's tolerance, then timing
of the candidate and of eager (the library call and the epilogue's kernels), sandboxed as always.
In this process the library's product alone is then timed on the same shapes and precision
(CUDA events, median of `--trials`; no candidate code runs here): for a convolution, each of the
model's convolution modules on the input the model feeds it (cuDNN); for a GEMM, `torch.matmul`
(or `F.linear` for a weight read as [N, K]) on random operands of the kernel's M, N, K and batch
(cuBLAS; at fp32 with TF32 off, torch's default for matmul and KernelBench's reference). The
table sets the generated kernels' TFLOP/s (their FLOPs over the candidate's time, the epilogue
included) beside the library's (the same FLOPs over the products alone).

    python benchmarks/kernel_rates.py .kb/kernelbench --move triton_conv --precision bf16 --json rates.json
    python benchmarks/kernel_rates.py .kb/kernelbench --move triton_gemm --precision fp32 --json rates.json

Rows are appended to `--json` as they finish (keyed by problem, move and precision), so a run
cut short keeps what it measured, and a second run goes on from it.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from cuda_timing import median_ms
from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, load_problem
from kernelpro.offline.codegen import conv_gemm
from kernelpro.offline.compiler import Compiler
from kernelpro.launch.device import target_device

CONVOLUTIONS = ["level1/62_conv_standard_2D__square_input__asymmetric_kernel",
           "level1/63_conv_standard_2D__square_input__square_kernel", "level1/86_conv_depthwise_separable_2D",
           "level1/87_conv_pointwise_2D", "level2/25_Conv2d_Min_Tanh_Tanh", "level2/32_Conv2d_Scaling_Min",
           "level2/48_Conv3d_Scaling_Tanh_Multiply_Sigmoid", "level2/57_Conv2d_ReLU_HardSwish",
           "level2/69_Conv2d_HardSwish_ReLU", "level2/71_Conv2d_Divide_LeakyReLU",
           "level1/64_conv_transposed_1D", "level1/65_conv_transposed_2D__square_input__asymmetric_kernel",
           "level1/71_conv_transposed_2D__asymmetric_input__square_kernel", "level1/74_conv_transposed_1D_dilated",
           "level1/78_conv_transposed_2D_asymmetric_input_asymmetric_kernel___padded__",
           "level1/81_conv_transposed_2D_asymmetric_input_square_kernel___dilated____padded____strided__",
           "level2/26_ConvTranspose3d_Add_HardSwish", "level2/100_ConvTranspose3d_Clamp_Min_Divide"]
GEMMS = ["level1/10_3D_tensor_matrix_multiplication", "level1/11_4D_tensor_matrix_multiplication",
         "level1/13_Matmul_for_symmetric_matrices",
         "level1/16_Matmul_with_transposed_A", "level1/18_Matmul_with_transposed_both", "level2/12_Gemm_Multiply_LeakyReLU",
         "level2/29_Matmul_Mish_Mish", "level2/59_Matmul_Swish_Scaling", "level2/86_Matmul_Divide_GELU",
         "level2/95_Matmul_Add_Swish_Tanh_GELU_Hardtanh", "level2/30_Gemm_GroupNorm_Hardtanh",
         "level2/75_Gemm_GroupNorm_Min_BiasAdd", "level2/98_Matmul_AvgPool_GELU_Scale_Max", "level3/3_DeepNarrowMLP"]
DEFAULTS = {"triton_conv": CONVOLUTIONS, "triton_gemm": GEMMS}
DTYPES = {"fp32": "float32", "bf16": "bfloat16", "fp16": "float16"}


def cudnn_ms(problem_path: Path, precision: str, trials: int) -> list[dict]:
    """Each convolution module of the problem's model alone, on its own input as the model feeds it,
    at `precision`: median ms over CUDA-event timings (reference code, not candidate code)."""
    import torch
    dtype = getattr(torch, DTYPES[precision])
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
        convs.append({"input": list(x.shape), "weight": list(conv.weight.shape),
                      "ms": median_ms(lambda: conv(x), trials)})
    seen.clear()
    del model, inputs
    torch.cuda.empty_cache()
    return convs


def cublas_ms(kernels: list[dict], precision: str, trials: int) -> list[dict]:
    """Each generated GEMM's product alone in cuBLAS, on random operands of its shape and precision."""
    import torch
    dtype = getattr(torch, DTYPES[precision])
    products = []
    for kernel in kernels:
        m, n, k, batch = kernel["m"], kernel["n"], kernel["k"], kernel["batch"]
        a = torch.randn(*([batch] if batch > 1 else []), m, k, device="cuda", dtype=dtype)
        if kernel["b_layout"] == "nk":
            b = torch.randn(n, k, device="cuda", dtype=dtype)
            ms = median_ms(lambda: torch.nn.functional.linear(a, b), trials)
        else:
            b = torch.randn(*([batch] if batch > 1 else []), k, n, device="cuda", dtype=dtype)
            ms = median_ms(lambda: torch.matmul(a, b), trials)
        products.append({"m": m, "n": n, "k": k, "batch": batch, "ms": ms})
    torch.cuda.empty_cache()
    return products


def _kernel_row(kernel: dict) -> dict:
    f = kernel["features"]
    flops = f.get("flops") or 2 * f["m"] * f["n"] * f["k"] * f.get("batch", 1)
    return {"kind": f["kind"], "config": kernel["config"], "flops": flops, "m": f["m"], "n": f["n"], "k": f["k"],
            "batch": f.get("batch", 1), "b_layout": f.get("b_layout")}


def measure(evaluator, suite: Path, key: str, move: str, precision: str, trials: int, device, keep: Path | None) -> dict:
    path = suite / f"{key}.py"
    graph = Compiler(path, 42, "train")
    source, counts, kernels = graph.build([move], {}, device, precision)
    row = {"key": key, "move": move, "precision": precision, "kernels": [_kernel_row(k) for k in kernels]}
    if not kernels:
        row["skipped"] = "; ".join(graph.left_alone.get(move, [])) or f"nothing that {move} takes"
        return row
    if keep:
        keep.mkdir(parents=True, exist_ok=True)
        (keep / f"{path.stem}_{move}_{precision}.py").write_text(source)
    options = EvalOptions(device="cuda", precision=precision, baselines=("eager",),
                          limits=PhaseLimits(build_s=900, load_s=900))
    result = evaluator.evaluate(load_problem(path), source, options)
    ms = result.candidate.median_ms if result.candidate else None
    eager = result.reference.median_ms if result.reference else None
    library = cudnn_ms(path, precision, trials) if move == "triton_conv" else cublas_ms(row["kernels"], precision, trials)
    flops = sum(k["flops"] for k in row["kernels"])
    library_ms = sum(c["ms"] for c in library)
    return row | {"verdict": str(getattr(result.verdict, "value", result.verdict)), "reason": result.reason,
                  "candidate_ms": ms, "eager_ms": eager, "speedup": eager / ms if eager and ms else None,
                  "library": library, "tflops": flops / (ms * 1e-3) / 1e12 if ms else None,
                  "library_tflops": flops / (library_ms * 1e-3) / 1e12 if library_ms else None}


def print_table(rows: list[dict]) -> None:
    print("\n| problem | move | precision | kernels | verdict | candidate ms | eager ms | vs eager | TFLOP/s | "
          "library alone TFLOP/s |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    fmt = lambda v, f: format(v, f) if v is not None else "-"  # noqa: E731
    for row in rows:
        move = row.get("move", "triton_conv")
        if "skipped" in row:
            print(f"| {row['key']} | {move} | {row['precision']} | - | skipped: {row['skipped'][:80]} | | | | | |")
            continue
        kinds = ", ".join(sorted({k["kind"] for k in row["kernels"]})) + f" x{len(row['kernels'])}"
        print(f"| {row['key']} | {move} | {row['precision']} | {kinds} | {row['verdict']} | "
              f"{fmt(row['candidate_ms'], '.3f')} | {fmt(row['eager_ms'], '.3f')} | {fmt(row['speedup'], '.2f')}x | "
              f"{fmt(row['tflops'], '.1f')} | {fmt(row.get('library_tflops', row.get('cudnn_tflops')), '.1f')} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("suite", type=Path, help="a KernelBench folder (level1/, level2/, ...)")
    parser.add_argument("--move", default="triton_conv", choices=sorted(DEFAULTS))
    parser.add_argument("--problems", nargs="*", help="problem keys (levelN/stem); default: the move's list above")
    parser.add_argument("--precision", default="bf16", choices=sorted(DTYPES))
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the generated candidates here")
    parser.add_argument("--transposed", action="store_true",
                        help="also build transposed convolutions (left out by default: cuDNN wins on most of them)")
    args = parser.parse_args()
    missing = [key for key in args.problems or [] if not (args.suite / f"{key}.py").is_file()]
    if missing:
        parser.error(f"no such problem in {args.suite}: {', '.join(missing)}")
    conv_gemm.TRANSPOSED = args.transposed
    device, _ = target_device({"device": "cuda"})
    rows = json.loads(args.json.read_text())["rows"] if args.json and args.json.exists() else []
    finished = {(r["key"], r.get("move", "triton_conv"), r["precision"]) for r in rows}
    with Evaluator("cuda") as evaluator:
        for key in args.problems or DEFAULTS[args.move]:
            if (key, args.move, args.precision) in finished:
                continue
            started = time.perf_counter()
            row = measure(evaluator, args.suite, key, args.move, args.precision, args.trials, device, args.keep)
            row["seconds"] = round(time.perf_counter() - started, 1)
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps({"command": "python benchmarks/kernel_rates.py", "rows": rows}, indent=1))
    print_table([r for r in rows if r.get("move", "triton_conv") == args.move and r["precision"] == args.precision])


if __name__ == "__main__":
    main()
