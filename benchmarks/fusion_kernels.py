"""The offline coder's generated Triton kernels on the fusion examples, against eager and torch.compile.

For each problem in examples/fusion/: the candidate with both fusion moves
(`fuse_reductions` + `fuse_pointwise`, each kernel at its top-ranked launch
configuration) built by the offline coder's graph worker, then judged by the
harness (correctness trials at fp32 with the default tolerance, timing of
candidate, eager and torch.compile in the same evaluation). This is one step of
what `kernelpro search` does, without the search: no other moves, no tuning.

    python benchmarks/fusion_kernels.py --json results/fusion_kernels.json [problems...]
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
MOVES = ["fuse_reductions", "fuse_pointwise"]


def candidate(problem: Path, folder: Path) -> tuple[Path, list[dict]]:
    spec = {"problem_path": str(problem), "applied": [], "device": "cuda", "precision": "fp32", "policy": "relaxed"}
    applied = []
    for move in MOVES:  # apply each fusion move that finds something to fuse
        answer = expand(dict(spec, applied=applied))
        if any(o["move"] == move for o in answer["options"]):
            applied.append(move)
    answer = expand(dict(spec, applied=applied))
    path = folder / f"{problem.stem}_new.py"
    path.write_text(answer["source"])
    return path, answer["kernels"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problems", nargs="*", type=Path,
                        default=sorted((REPO / "examples" / "fusion").glob("*.py")))
    parser.add_argument("--json", type=Path)
    parser.add_argument("--keep", type=Path, help="keep the generated candidates here")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="kp-fusion-"))
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for problem in args.problems:
        started = time.perf_counter()
        path, kernels = candidate(problem, folder)
        result = run_eval(problem, path, device="cuda", baseline="compile")
        row = {"problem": problem.stem, "verdict": str(result.verdict.value if hasattr(result.verdict, "value")
                                                          else result.verdict), "kernels": [k["name"] for k in kernels],
               "configs": [k["config"] for k in kernels],
               "eager_ms": result.reference.median_ms if result.reference else None,
               "compile_ms": result.reference_compile.median_ms if result.reference_compile else None,
               "candidate_ms": result.candidate.median_ms if result.candidate else None,
               "speedup": result.speedup, "speedup_vs_compile": result.speedup_vs_compile,
               "floor_ms": result.floor.floor_ms if result.floor else None,
               "memory_floor_ms": result.floor.memory_floor_ms if result.floor else None,
               "seconds": time.perf_counter() - started, "reason": result.reason}
        rows.append(row)
        print(json.dumps(row), flush=True)
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(rows, indent=2))
    good = [r for r in rows if r["verdict"] == "correct" and r["speedup"] and r["speedup_vs_compile"]]
    if good:
        geo = lambda values: math.exp(sum(math.log(v) for v in values) / len(values))  # noqa: E731
        print(f"\n{len(good)}/{len(rows)} correct; geomean speedup vs eager {geo([r['speedup'] for r in good]):.2f}x, "
              f"vs torch.compile {geo([r['speedup_vs_compile'] for r in good]):.2f}x, eager/compile "
              f"{geo([r['eager_ms'] / r['compile_ms'] for r in good]):.2f}x")
    print("\n| problem | kernels | eager ms | compile ms | generated ms | vs eager | vs compile |")
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        cell = (lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else "-")  # noqa: E731
        print(f"| {r['problem']} | {len(r['kernels'])} | {cell(r['eager_ms'])} | {cell(r['compile_ms'])} | "
              f"{cell(r['candidate_ms'])} | {cell(r['speedup'])}x | {cell(r['speedup_vs_compile'])}x |"
              + ("" if r["verdict"] == "correct" else f" {r['verdict']}"))


if __name__ == "__main__":
    main()
