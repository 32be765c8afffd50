"""Time per evaluation with and without reusing the reference's outputs (harness/refcache.py).

    python benchmarks/reference_reuse.py PROBLEM.py [--device cuda] [--evaluations 3] [--json-file F]

Evaluates a copy of the problem's reference (a `ModelNew` subclassing `Model`: a candidate that is
correct by construction; the reference itself is timed without correctness trials, so it would
not use the kept outputs) EVALUATIONS times in one evaluator,
once with the outputs kept from the first evaluation and once without, and prints each
evaluation's wall time and phases. On a KernelBench level-1 problem (6.4 GB per output)
the reference phase is what reuse saves.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

from kernelpro.harness import EvalOptions, Evaluator, load_problem
from kernelpro.harness.cache import BuildCache


def run(problem_path: Path, device: str, evaluations: int, reuse: bool) -> list[dict]:
    problem = load_problem(problem_path)
    candidate = problem.source.rstrip() + "\n\n\nclass ModelNew(Model):\n    pass\n"
    rows = []
    with tempfile.TemporaryDirectory() as cache, \
            Evaluator(device, cache=BuildCache(Path(cache)), spares=0, reuse_references=reuse) as evaluator:
        options = EvalOptions(device=device, timing_trials=10, timing_budget_s=2.0)
        for index in range(evaluations):
            began = time.monotonic()
            result = evaluator.evaluate(problem, candidate, options)
            rows.append({"reuse": reuse, "evaluation": index + 1, "verdict": result.verdict.value,
                         "wall_s": round(time.monotonic() - began, 2), "phase_s": result.phase_s})
            print(f"reuse={'on ' if reuse else 'off'} #{index + 1}: {result.verdict.value:8} "
                  f"{rows[-1]['wall_s']:7.2f} s  {result.phase_s}", flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--evaluations", type=int, default=3)
    parser.add_argument("--json-file", type=Path)
    args = parser.parse_args(argv)
    rows = run(args.problem, args.device, args.evaluations, True) + \
        run(args.problem, args.device, args.evaluations, False)
    if args.json_file:
        args.json_file.write_text(json.dumps(rows, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
