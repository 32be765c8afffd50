"""Compile every Triton kernel the offline coder writes for a set of problems for a GPU, on a machine without one.

For each problem and each move that generates Triton kernels, the candidate is built and its forward run on the meta
device in a child process, with every Triton launch a compilation for the target (`kernelpro.harness.tritonwarm`,
as the build worker does). A kernel that Triton cannot compile for the GPU fails here, not in a GPU evaluation:

    python scripts/compile_for_gpu.py --problems @benchmarks/kernelbench_subset30.txt [--arch 90] [--json-file F]
    python scripts/compile_for_gpu.py --suite benchmarks/suite

Prints one line per build (compiled kernels of the candidate's, or why its forward stopped) and a summary; exit 1
where any build stopped. `--static` also reads each compiled kernel's registers and local-memory (spill)
instructions through cuobjdump (`kernelpro.launch.static`), at the launch configuration each move ranks first.
KernelBench's problems are read from --kernelbench (default ../shared/kernelbench).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: the moves that write Triton kernels, each at the precisions it is offered at, with the moves it is built on top of
#: where they change its kernels (persistent grids launch fuse_pointwise's; under tf32_matmul the GEMM multiplies in
#: plain TF32 on operands it rounds first)
MOVES = ((("fuse_pointwise",), "fp32"), (("fuse_reductions",), "fp32"), (("triton_gemm",), "fp32"),
         (("triton_gemm", "tf32_matmul"), "fp32"), (("fuse_pointwise", "persistent_kernels"), "fp32"),
         (("triton_conv",), "bf16"), (("triton_conv",), "fp32"))

CHILD = """
import json, sys
from pathlib import Path
from kernelpro.harness import tritonwarm
from kernelpro.harness.modelio import import_file
arch, problem_path = int(sys.argv[1]), Path(sys.argv[2])
problem = import_file("kernelpro_problem", problem_path)
static = sys.argv[4] == "1"
for number, (name, path, precision) in enumerate(json.loads(sys.argv[3])):
    candidate = import_file(f"kernelpro_candidate_{number}", Path(path))
    result = tritonwarm.precompile(candidate, problem, ("cuda", arch, 32), precision, "train", 42)
    if static:
        from kernelpro.launch.static import of_triton_module
        result["static"] = {kernel: {key: found.get(key, 0.0) for key in ("registers", "local_memory")}
                            for kernel, found in of_triton_module(candidate).items()}
    print(json.dumps({"move": name, **result}), flush=True)
"""


def problem_arguments(parser: argparse.ArgumentParser) -> None:
    """The options that choose the problems (`problem_files` reads them), and --json-file for the rows."""
    parser.add_argument("--problems", default="", help="KernelBench keys, comma-separated, or @FILE")
    parser.add_argument("--suite", default="", help="a folder of level*/ problems (benchmarks/suite)")
    parser.add_argument("--kernelbench", default=str(ROOT.parent / "shared" / "kernelbench"))
    parser.add_argument("--json-file", default="", help="write every row as JSON here")


def problem_files(args) -> dict[str, Path]:
    found: dict[str, Path] = {}
    if args.suite:
        found.update({f"{p.parent.name}/{p.stem}": p for p in sorted(Path(args.suite).glob("level*/*.py"))})
    if args.problems:
        spec = args.problems
        lines = Path(spec[1:]).read_text().splitlines() if spec.startswith("@") else spec.split(",")
        keys = [line.split("#")[0].strip() for line in lines]
        found.update({key: Path(args.kernelbench) / f"{key}.py" for key in keys if key})
    return found


def check(key: str, path: Path, arch: int, scratch: Path, static: bool = False) -> list[dict]:
    from kernelpro.offline.compiler import Compiler
    compiler = Compiler(path, 42, "train")
    builds, rows = [], []
    for moves, precision in MOVES:
        move = "+".join(moves)
        try:
            source, counts, _ = compiler.build(list(moves), precision=precision)
        except Exception as error:  # noqa: BLE001 - a move that does not build here is not offered either
            rows.append({"problem": key, "move": f"{move} {precision}", "skipped": f"{type(error).__name__}"})
            continue
        if "@triton.jit" not in source:
            continue
        candidate = scratch / f"{key.replace('/', '_')}_{move}_{precision}.py"
        candidate.write_text(source)
        builds.append((f"{move} {precision}", str(candidate), precision, source.count("@triton.jit")))
    if not builds:
        return rows
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["TRITON_CACHE_DIR"] = str(scratch / "triton")
    listed = json.dumps([(move, candidate, precision) for move, candidate, precision, _ in builds])
    done = subprocess.run([sys.executable, "-c", CHILD, str(arch), str(path), listed, "1" if static else "0"],
                          capture_output=True, text=True, env=env, timeout=1800)
    answers = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    for (move, _, _, expected), answer in zip(builds, answers + [None] * len(builds)):
        if answer is None:
            rows.append({"problem": key, "move": move, "kernels": 0, "expected": expected,
                         "stopped": f"the child process ended ({done.stderr.strip().splitlines()[-1:]})"})
        else:
            rows.append({"problem": key, "move": move, "kernels": answer["kernels"], "expected": expected,
                         "stopped": answer["stopped"], **({"static": answer["static"]} if "static" in answer else {})})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    problem_arguments(parser)
    parser.add_argument("--arch", type=int, default=90, help="compute capability x 10 (90: H100, H200)")
    parser.add_argument("--static", action="store_true", help="registers and spills of each kernel (cuobjdump)")
    args = parser.parse_args()
    files = problem_files(args)
    if not files:
        parser.error("give --problems or --suite")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernelpro-compile-") as scratch:
        for number, (key, path) in enumerate(files.items(), 1):
            for row in check(key, path, args.arch, Path(scratch), args.static):
                rows.append(row)
                state = row.get("skipped") and f"not built ({row['skipped']})" or \
                    f"{row['kernels']}/{row['expected']} compiled" + (f"; stopped: {row['stopped']}" if row["stopped"]
                                                                        else "")
                spilling = sorted(k for k, v in row.get("static", {}).items() if v["local_memory"])
                state += f"; spilling: {', '.join(spilling)}" if spilling else ""
                print(f"[{number}/{len(files)}] {key} {row['move']}: {state}", flush=True)
    built = [r for r in rows if "skipped" not in r]
    stopped = [r for r in built if r["stopped"]]
    print(f"{len(built)} builds with Triton kernels, {sum(r['kernels'] for r in built)} kernels compiled for "
          f"sm_{args.arch}; {len(stopped)} stopped early")
    if args.static:
        kernels = [v for r in built for v in r.get("static", {}).values()]
        registers = [v["registers"] for v in kernels] or [0]
        print(f"static: {len(kernels)} kernel functions read; {sum(1 for v in kernels if v['local_memory'])} with "
              f"local-memory instructions (spills); {min(registers):g} to {max(registers):g} registers a thread")
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(rows, indent=1))
    return 1 if stopped else 0


if __name__ == "__main__":
    sys.exit(main())
