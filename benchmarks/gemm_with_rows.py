"""Does fuse_reductions keep the Triton GEMMs that triton_gemm makes? For each problem, the GEMM kernels of the
candidate {triton_gemm} against those of {fuse_reductions, triton_gemm} (built on the CPU for a CUDA device, as
the offline coder's graph worker builds them; nothing runs). A problem where the pair has fewer is one where the
row kernels took the GEMMs' epilogues (fixed 2026-11-29, docs/offline-coder.md).

    python benchmarks/gemm_with_rows.py ../shared/kernelbench/level2 [--json OUT]
"""

from __future__ import annotations

import argparse
import json
import warnings
from pathlib import Path

from kernelpro.offline import worker


def gemms(problem: worker.Problem, moves: list[str]) -> int:
    _, _, kernels = problem.build(moves, {}, worker.triton_gen.Device(), "fp32", "analytic")
    return sum(kernel["kind"] == "gemm" for kernel in kernels)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("folder", type=Path, help="a folder of KernelBench-format problems")
    parser.add_argument("--json", type=Path, help="write the per-problem counts here")
    args = parser.parse_args(argv)
    warnings.filterwarnings("ignore")
    rows = []
    for path in sorted(args.folder.glob("*.py")):
        try:
            problem = worker.Problem(path, 42, "train")
            alone, paired = gemms(problem, ["triton_gemm"]), gemms(problem, ["fuse_reductions", "triton_gemm"])
        except Exception as error:  # a problem the generators do not take: reported, not counted
            rows.append({"problem": path.stem, "error": f"{type(error).__name__}: {error}"[:200]})
            continue
        rows.append({"problem": path.stem, "triton_gemm": alone, "with_fuse_reductions": paired})
        if alone or paired:
            print(f"{path.stem}: {alone} GEMM(s) alone, {paired} with fuse_reductions", flush=True)
    counted = [r for r in rows if "error" not in r]
    fewer = [r["problem"] for r in counted if r["with_fuse_reductions"] < r["triton_gemm"]]
    print(f"{len(counted)} problems built ({len(rows) - len(counted)} not); with a Triton GEMM alone: "
          f"{sum(r['triton_gemm'] > 0 for r in counted)}; fewer GEMMs with fuse_reductions: {len(fewer)}"
          + (f" ({', '.join(fewer)})" if fewer else ""))
    if args.json:
        args.json.write_text(json.dumps({"folder": str(args.folder), "rows": rows, "fewer": fewer}, indent=1) + "\n")


if __name__ == "__main__":
    main()
