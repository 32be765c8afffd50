"""The offline coder's generated kernels on the fusion examples, against eager and torch.compile.

For each problem in examples/fusion/ and each variant, the candidate with the
variant's moves (each kernel at its top-ranked launch configuration) built by the
offline coder's graph worker, then judged by the harness (correctness trials at
fp32 with the default tolerance; timing of candidate and eager in the same
evaluation, and torch.compile in the first variant's). Variants:

- `triton`: fuse_reductions + fuse_pointwise (Triton kernels);
- `cuda`: cuda_kernels (the same groups as CUDA C++ through load_inline);
- `gemm`: triton_gemm + the Triton fusion moves (only where a matmul has an epilogue).

This is one step of what `kernelpro search` does, without the search: no other
moves, no tuning.

    python benchmarks/fusion_kernels.py --variants triton,cuda,gemm --json out.json [problems...]
"""

from __future__ import annotations

import argparse
import json
import math
import tempfile
import time
from pathlib import Path

from kernelpro.cli_eval import run_eval
from kernelpro.offline.worker import expand

REPO = Path(__file__).resolve().parent.parent
VARIANTS = {"triton": ["fuse_reductions", "fuse_pointwise"], "cuda": ["cuda_kernels"],
            "gemm": ["triton_gemm", "fuse_reductions", "fuse_pointwise"]}


def candidate(problem: Path, folder: Path, moves: list[str], variant: str) -> tuple[Path | None, list[dict]]:
    spec = {"problem_path": str(problem), "applied": [], "device": "cuda", "precision": "fp32", "policy": "relaxed"}
    applied = []
    for move in moves:  # apply each move that finds something to rewrite
        answer = expand(dict(spec, applied=applied))
        if any(o["move"] == move for o in answer["options"]):
            applied.append(move)
    if moves[0] not in applied:
        return None, []  # the variant's own move does not apply here
    answer = expand(dict(spec, applied=applied))
    path = folder / f"{problem.stem}_{variant}.py"
    path.write_text(answer["source"])
    return path, answer["kernels"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", type=Path,
                        default=sorted((REPO / "examples" / "fusion").glob("*.py")))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the generated candidates here")
    parser.add_argument("--variants", default="triton", help="comma-separated: " + ", ".join(VARIANTS))
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown:
        parser.error(f"unknown variant(s) {', '.join(unknown)}; known: {', '.join(VARIANTS)}")
    folder = args.keep or Path(tempfile.mkdtemp(prefix="kp-fusion-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in args.problems:
        compile_ms = None
        for variant in variants:
            started = time.perf_counter()
            path, kernels = candidate(problem, folder, VARIANTS[variant], variant)
            if path is None:
                continue
            result = run_eval(problem, path, device="cuda", baseline="compile" if compile_ms is None else "eager")
            if compile_ms is None and result.reference_compile:
                compile_ms = result.reference_compile.median_ms
            ms = result.candidate.median_ms if result.candidate else None
            row = {"problem": problem.stem, "variant": variant,
                   "verdict": str(getattr(result.verdict, "value", result.verdict)),
                   "kernels": [k["name"] for k in kernels], "configs": [k["config"] for k in kernels],
                   "eager_ms": result.reference.median_ms if result.reference else None,
                   "compile_ms": compile_ms, "candidate_ms": ms, "speedup": result.speedup,
                   "speedup_vs_compile": compile_ms / ms if compile_ms and ms else None,
                   "floor_ms": result.floor.floor_ms if result.floor else None,
                   "memory_floor_ms": result.floor.memory_floor_ms if result.floor else None,
                   "seconds": time.perf_counter() - started, "reason": result.reason}
            rows.append(row)
            print(json.dumps(row), flush=True)
            if args.json:
                args.json.parent.mkdir(parents=True, exist_ok=True)
                args.json.write_text(json.dumps(rows, indent=2))
    geo = lambda values: math.exp(sum(math.log(v) for v in values) / len(values))  # noqa: E731
    for variant in variants:
        good = [r for r in rows if r["variant"] == variant and r["verdict"] == "correct" and r["speedup"]
                and r["speedup_vs_compile"]]
        if good:
            print(f"\n{variant}: {len(good)}/{sum(r['variant'] == variant for r in rows)} correct; geomean speedup "
                  f"vs eager {geo([r['speedup'] for r in good]):.2f}x, vs torch.compile "
                  f"{geo([r['speedup_vs_compile'] for r in good]):.2f}x, eager/compile "
                  f"{geo([r['eager_ms'] / r['compile_ms'] for r in good]):.2f}x")
    print("\n| problem | variant | kernels | eager ms | compile ms | generated ms | vs eager | vs compile |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        cell = (lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else "-")  # noqa: E731
        print(f"| {r['problem']} | {r['variant']} | {len(r['kernels'])} | {cell(r['eager_ms'])} | "
              f"{cell(r['compile_ms'])} | {cell(r['candidate_ms'])} | {cell(r['speedup'])}x | "
              f"{cell(r['speedup_vs_compile'])}x |" + ("" if r["verdict"] == "correct" else f" {r['verdict']}"))


if __name__ == "__main__":
    main()
