"""Registers and spills of the Triton GEMMs the offline coder writes, for every launch configuration of each
GEMM's ranked list, compiled for a GPU architecture by Triton's own ptxas on the CPU (nothing runs).

    python benchmarks/gemm_registers.py PROBLEM.py [PROBLEM.py ...] [--moves triton_gemm,tf32_matmul] [--arch 90]
        [--json OUT]

For each problem the candidate of `triton_gemm` (or of --moves: with `tf32_matmul`, the plain TF32 path) is built
as the graph worker builds it (the analytic ranking, then the tiles that spill last), once per rank of each GEMM
kernel (`tune:` walks that list); every `*_kernel` of the candidate that the GEMM's
launches name is compiled with the constants its launch passes, and the SASS tool (cuobjdump's resource usage) reads the cubin's
registers per thread and stack bytes (spills; `kernelpro.tools.sass`). The Triton that compiles is the one importable: run it under
the GPU machine's version (e.g. `PYTHONPATH` to a `pip install --target DIR triton==3.6.0`) to match what the
GPU compiles. Why: on an H200 the 128x256 tf32x3 configuration ran at 0.69x of the 128x128 one it followed
(level2/59, 2026-11-29); a tile whose accumulator spills is tried after the others (docs/offline-coder.md).
"""

from __future__ import annotations

import argparse
import ast
import json
import os
import sys
import tempfile
import warnings
from pathlib import Path

os.environ.pop("TRITON_INTERPRET", None)  # this compiles the kernels; Triton's interpreter has nothing to compile

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernelpro.harness.modelio import import_file  # noqa: E402
from kernelpro.launch.static import part_of  # noqa: E402
from kernelpro.offline import gemm, worker  # noqa: E402
from kernelpro.tools.api import find_binary  # noqa: E402
from kernelpro.tools.sass import SassTool  # noqa: E402


def launches(source: str) -> list[tuple[str, dict]]:
    """Each `NAME_kernel[grid](..., KEY=constant, ...)` of a candidate: the kernel's name and its constant keywords."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript) \
                and isinstance(node.func.value, ast.Name) and node.func.value.id.endswith("_kernel"):
            constants = {}
            for keyword in node.keywords:
                try:
                    constants[keyword.arg] = ast.literal_eval(keyword.value)
                except ValueError:
                    pass
            found.append((node.func.value.id, constants))
    return found


def compile_usage(function, constants: dict, arch: int, folder: Path) -> dict:
    """Registers and stack of one kernel compiled for sm_<arch> with these launch constants."""
    options = {k: constants[k] for k in ("num_warps", "num_stages") if k in constants}
    fixed = {k: v for k, v in constants.items() if k in function.arg_names}
    signature = {}
    for name in function.arg_names:
        signature[name] = "constexpr" if name in fixed else "*fp32" if name.endswith("_ptr") else "i32"
    source = ASTSource(function, signature, constexprs={(function.arg_names.index(k),): v for k, v in fixed.items()})
    kernel = triton.compile(source, target=GPUTarget("cuda", arch, 32), options=options)
    cubin = folder / f"{function.__name__}.cubin"
    cubin.write_bytes(kernel.asm["cubin"])
    (found,) = SassTool().inspect(cubin).values()  # one kernel per Triton cubin
    return {"registers": found.registers, "stack_bytes": found.stack_bytes, "local_bytes": found.local_bytes}


def problem_rows(path: Path, arch: int, folder: Path, moves: list[str]) -> list[dict]:
    problem = worker.Problem(path, 42, "train")
    device = worker.triton_gen.Device()
    _, _, kernels = problem.build(moves, {}, device, "fp32", "analytic")
    rows = []
    for kernel in (k for k in kernels if k["kind"] == "gemm"):
        for rank in range(kernel["configs"]):
            source, _, built = problem.build(moves, {kernel["name"]: rank}, device, "fp32", "analytic")
            (this,) = [k for k in built if k["name"] == kernel["name"]]
            candidate = folder / f"candidate_{path.stem}_{len(rows)}.py"
            candidate.write_text(source)
            module = import_file(candidate.stem, candidate)
            usage = {}
            for name, constants in launches(source):
                if part_of(name, kernel["name"]):
                    usage[name] = compile_usage(getattr(module, name), constants, arch, folder)
            rows.append({"problem": path.stem, "kernel": kernel["name"], "rank": rank,
                         "config": {k: v for k, v in this["config"].items() if k != "score"},
                         "score": this["config"].get("score"),
                         "shape": {k: this["features"][k] for k in ("m", "n", "k", "batch", "b_layout")},
                         "kernels": usage,
                         "spills": any(u["stack_bytes"] or u["local_bytes"] for u in usage.values())})
            print(f"{path.stem} {kernel['name']} rank {rank} {rows[-1]['config']}: "
                  + ", ".join(f"{n} {u['registers']} regs, {u['stack_bytes']} B stack" for n, u in usage.items()),
                  flush=True)
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", type=Path, nargs="+", help="KernelBench-format problem files")
    parser.add_argument("--moves", default="triton_gemm", help="the candidate's moves, comma-separated "
                        "(default triton_gemm; triton_gemm,tf32_matmul: the plain TF32 configurations)")
    parser.add_argument("--arch", type=int, default=90, help="compute capability to compile for (default 90)")
    parser.add_argument("--json", type=Path, help="write the rows here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    if find_binary("cuobjdump") is None:
        raise SystemExit("no cuobjdump on PATH or from an nvidia-* wheel (pip install nvidia-cuda-cuobjdump)")
    rows, errors = [], []
    with tempfile.TemporaryDirectory() as folder:
        for path in args.problems:
            try:
                rows += problem_rows(path, args.arch, Path(folder), args.moves.split(","))
            except Exception as error:  # a problem the generators do not take: reported, not counted
                errors.append({"problem": path.stem, "error": f"{type(error).__name__}: {error}"[:300]})
                print(f"{path.stem}: {errors[-1]['error']}", file=sys.stderr, flush=True)
    spilled = [r for r in rows if r["spills"]]
    held = [r for r in rows if gemm.spills(r["config"])]
    held_spilled = sum(r["spills"] for r in held)
    print(f"{len(rows)} configurations compiled for sm_{args.arch} with Triton {triton.__version__}; "
          f"{len(spilled)} spill. The ranking holds back {len(held)} (gemm.spills: accumulators over "
          f"{gemm.ACCUMULATOR_REGISTERS} registers per thread), {held_spilled} of which spill; "
          f"it leaves {len(spilled) - held_spilled} that spill among the others")
    if args.json:
        document = {"command": "python benchmarks/gemm_registers.py " + " ".join(sys.argv[1:] if argv is None else argv),
                    "triton": triton.__version__, "arch": args.arch, "moves": args.moves, "rows": rows,
                    "errors": errors}
        args.json.write_text(json.dumps(document, indent=1) + "\n")


if __name__ == "__main__":
    main()
