"""Output slots against the channel: one problem's candidate evaluated with its outputs compared in the judge's
output slot (device memory on CUDA, harness/outputslots.py) and with them sent through the channel
(KERNELPRO_OUTPUT_SLOTS=0), one after the other on the same device, each `--repeats` times.

    python benchmarks/output_slots.py ../shared/kernelbench/level1/19_ReLU.py --device cuda --json slots.json

The candidate is the problem's model under the name ModelNew (a distinct source from the reference's, so that it is
judged, not taken as the reference itself). Each arm has its own evaluator: its first evaluation also runs and keeps
the reference's outputs, the later ones judge against those. The report gives each evaluation's wall time, its
correctness phase's steps (`EvalResult.correctness_s`: transfer is the judge's wait for the outputs beyond the
worker's own work, compare its comparison) and its timing phase.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import time
from pathlib import Path


def run_arm(name: str, slots: str, problem_path: Path, device: str, repeats: int, cache: Path) -> dict:
    from kernelpro.harness import EvalOptions, Evaluator, load_problem
    from kernelpro.harness.cache import BuildCache

    os.environ["KERNELPRO_OUTPUT_SLOTS"] = slots
    problem = load_problem(problem_path)
    candidate = re.sub(r"\bModel\b", "ModelNew", problem.source) + f"\n# output slots: {slots}\n"
    rows = []
    with Evaluator(device, cache=BuildCache(cache)) as evaluator:
        for index in range(repeats):
            result = evaluator.evaluate(problem, candidate, EvalOptions(device=device))
            rows.append({"evaluation": index, "verdict": result.verdict.value, "reason": result.reason,
                         "wall_s": round(result.wall_s, 2), "phase_s": result.phase_s, "correctness_s": result.correctness_s,
                         "output_slot": result.output_slot})
            steps = result.correctness_s
            print(f"  [{name}] {index}: {result.verdict.value:10s} wall {result.wall_s:6.1f} s, correctness "
                  f"{result.phase_s.get('correctness', 0):6.1f} s (transfer {steps.get('transfer', 0):.2f}, compare "
                  f"{steps.get('compare', 0):.2f}), timing {result.phase_s.get('timing', 0):5.1f} s; "
                  f"{result.output_slot}" + ("" if result.ok else f"; {result.reason}"), flush=True)
    return {"arm": name, "rows": rows}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("problem", type=Path, help="a KernelBench problem file")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--repeats", type=int, default=2, help="evaluations per arm (the first keeps the reference's)")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    if not args.problem.is_file():
        parser.error(f"{args.problem}: no such problem file")
    if args.repeats < 1:
        parser.error("--repeats must be at least 1")
    with tempfile.TemporaryDirectory(prefix="kernelpro-slots-") as folder:
        arms = [run_arm(name, slots, args.problem, args.device, args.repeats, Path(folder) / name)
                for name, slots in (("slot", "1"), ("channel", "0"))]
    import torch
    report = {"problem": args.problem.name, "device": torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu",
              "torch": torch.__version__, "date": time.strftime("%Y-%m-%d"), "arms": arms}
    print("\n| arm | evaluation | wall s | correctness s | transfer s | compare s | timing s |\n|---|---|---|---|---|---|---|")
    for arm in arms:
        for row in arm["rows"]:
            steps = row["correctness_s"]
            print(f"| {arm['arm']} | {row['evaluation']} | {row['wall_s']} | {row['phase_s'].get('correctness', 0)} | "
                  f"{steps.get('transfer', 0)} | {steps.get('compare', 0)} | {row['phase_s'].get('timing', 0)} |")
    if args.json:
        args.json.write_text(json.dumps(report, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
