"""Run every candidate the offline coder writes for a set of problems against the reference, on a machine without a
GPU, at reduced sizes: a candidate that computes wrong values fails here, not in a GPU evaluation.

Each problem's size constants are divided (`kernelpro.bench.suite.shrunk_source`: 64x from 512, 4x from 64), every
move whose candidate the CPU can run is built (graph moves, and the Triton moves at fp32 run by Triton's
interpreter; CUDA C++, CUTLASS and CUDA graphs need the GPU), and Model and ModelNew run from the same seed in
training mode (KernelBench's) on the same inputs, in a child process per problem. An output, or a buffer the call
updates (running statistics), outside the fp32 tolerance, a different shape or dtype, or an error is a failure:

    python scripts/check_values.py --problems @benchmarks/kernelbench_subset30.txt [--moves fuse_pointwise,...]
    python scripts/check_values.py --suite benchmarks/suite

Prints one line per problem and a summary; exit 1 where any candidate failed that a search would evaluate (a
failure the reference's own measurements predict, as the search's coder skips such moves, is listed apart: the
reference moved one ulp leaves the tolerance, or eager fails under the setting the move changes). A problem whose reference fails at the
reduced sizes (a shape constraint the division broke) is listed as skipped, and the candidates a problem's time
(--timeout) did not reach as not checked.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from compile_for_gpu import problem_arguments, problem_files  # noqa: E402

#: moves whose candidates need a GPU to run (native code, graphs) or copy its arithmetic (TF32, triton_conv at fp32)
NEEDS_GPU = {"cuda_kernels", "cute_gemm", "cuda_graphs", "triton_conv", "tf32_matmul", "cudnn_benchmark"}

CHILD = """
import contextlib, functools, json, sys, traceback
from pathlib import Path
import torch
from kernelpro.harness.modelio import import_file
from kernelpro.harness.compare import compare_outputs
from kernelpro.harness.records import DEFAULT_TOLERANCE

def flat(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]

problem = import_file("kernelpro_problem", Path(sys.argv[1]))
tolerance = DEFAULT_TOLERANCE["fp32"]

# Model (or ModelNew) built from seed 42, called once on inputs drawn from seed 7 (inside `change`, a context that
# yields the model and inputs to run, where given): its outputs, and its buffers after the call
def run(model_class, change=None):
    torch.manual_seed(42)
    model = model_class(*problem.get_init_inputs()).train()
    torch.manual_seed(7)
    inputs = problem.get_inputs()
    with (change(model, inputs) if change else contextlib.nullcontext((model, inputs))) as (model, inputs):
        with torch.no_grad():
            outputs = flat(model(*inputs))
    return outputs, [buffer for name, buffer in sorted(model.named_buffers()) if not name.startswith("_kp_")]

# what the search measures in the reference's evaluation and skips moves by: its sensitivity to one ulp, and
# eager's own output under each setting a move changes alone
from kernelpro.harness import variants
from kernelpro.harness.compare import deviation
outputs, buffers = run(problem.Model)
changes = {"sensitive": functools.partial(variants.one_ulp_apart, 7, torch.device("cpu")),
           "channels_last": functools.partial(variants.applied, "channels_last")}
facts = {}
for name, change in changes.items():
    try:
        facts[name] = deviation(outputs, run(problem.Model, change)[0], tolerance)["outside_fraction"]
    except Exception:  # eager raises under the setting: a move that changes only it fails too
        facts[name] = 1.0
print(json.dumps({"reference": facts}), flush=True)
expected = outputs + buffers
for number, (move, path) in enumerate(json.loads(sys.argv[2])):
    try:
        got = sum(run(import_file(f"kernelpro_candidate_{number}", Path(path)).ModelNew), [])
        mismatch = compare_outputs(expected, got, str(len(expected)), str(len(got)), tolerance)
        print(json.dumps({"move": move, "failure": mismatch.reason if mismatch else None}), flush=True)
    except Exception as error:
        line = traceback.format_exception_only(type(error), error)[-1].strip()
        print(json.dumps({"move": move, "failure": line[:300]}), flush=True)
"""


def reference_fails(small: Path) -> str:
    """Why the problem's reference fails at the reduced sizes (a shape constraint the division broke), or ""."""
    import torch
    from kernelpro.harness.modelio import import_file
    try:
        problem = import_file(f"kernelpro_reduced_{small.stem}", small)
        with torch.no_grad():
            problem.Model(*problem.get_init_inputs())(*problem.get_inputs())
    except Exception as error:  # noqa: BLE001 - any failure of the reduced problem skips it
        return f"the reference fails at these sizes: {type(error).__name__}: {error}"[:300]
    return ""


def check(key: str, path: Path, scratch: Path, moves: list[str], timeout_s: float) -> list[dict]:
    from kernelpro.bench.suite import shrunk_source
    from kernelpro.offline.compiler import Compiler
    small = scratch / f"{key.replace('/', '_')}.py"
    small.write_text(shrunk_source(path.read_text()))
    failing = reference_fails(small)
    if failing:
        return [{"problem": key, "skipped": failing}]
    compiler = Compiler(small, 42, "train")
    builds = []
    for move in moves:
        try:
            source, counts, _ = compiler.build(["fuse_pointwise", move] if move == "persistent_kernels" else [move])
        except Exception:  # noqa: BLE001 - a move that does not build here is not offered either
            continue
        if counts.get(move, 1) == 0:
            continue  # nothing rewritten: the candidate is the reference's own code
        candidate = scratch / f"{small.stem}_{move}.py"
        candidate.write_text(source)
        builds.append((move, str(candidate)))
    return [{"problem": key, "move": move, **found} for move, found in run_candidates(small, builds, timeout_s).items()]


def run_candidates(problem: Path, builds: list[tuple[str, str]], timeout_s: float) -> dict[str, dict]:
    """Each (move, candidate file) of `builds` run against `problem` in a child process: move -> {"failure": why it
    failed, or None where its outputs and buffers match the reference's; "unchecked": why it was not run to the end
    (the problem's time ran out: the interpreter is slow), or None}. A child that dies fails the moves it had left."""
    if not builds:
        return {}
    env = {**os.environ, "TRITON_INTERPRET": "1", "CUDA_VISIBLE_DEVICES": ""}
    unchecked = None
    try:
        done = subprocess.run([sys.executable, "-c", CHILD, str(problem), json.dumps(builds)], capture_output=True,
                              text=True, env=env, timeout=timeout_s)
        output, error = done.stdout, done.stderr
    except subprocess.TimeoutExpired as expired:
        output, error = expired.stdout or "", ""
        output = output.decode(errors="replace") if isinstance(output, bytes) else output
        unchecked = f"not run within the problem's {timeout_s:g} s"
    rows = [json.loads(line) for line in output.splitlines() if line.startswith("{")]
    facts = next((row["reference"] for row in rows if "reference" in row), {})
    answers = {row["move"]: row for row in rows if "move" in row}
    last = (error.strip().splitlines() or ["no output"])[-1]
    found = {move: {"failure": answers[move]["failure"], "unchecked": None} if move in answers else
             {"failure": None if unchecked else f"the child process ended: {last[:200]}", "unchecked": unchecked}
             for move, _ in builds}
    for move, row in found.items():  # the search measures these facts and does not evaluate such a move
        row["predicted"] = predicted_failure(move, facts) if row["failure"] else None
    return found


def predicted_failure(move: str, facts: dict) -> str | None:
    """Why the search would not evaluate `move` on this reference (the offline coder's skips,
    `kernelpro.offline.predictions`, on the facts measured here), or None: a rounding-sensitive reference
    (`ProblemFacts.rounding_sensitive`) gets its exact moves only; a move that changes one setting is skipped where
    eager itself fails under it."""
    from kernelpro.facts import ProblemFacts
    from kernelpro.offline import predictions
    measured = ProblemFacts(inputs=(), outputs=(), sensitive_fraction=facts.get("sensitive"),
                            variant_fractions=tuple(sorted((name, fraction) for name, fraction in facts.items()
                                                           if name != "sensitive")))
    if measured.rounding_sensitive and move not in predictions.exact_moves(measured):
        return f"the reference is rounding-sensitive ({facts['sensitive']:.1%} moves out under one ulp)"
    return predictions.failing_settings(measured, "fp32").get(move)


def outcomes(rows: list[dict]) -> tuple[list[dict], list[dict], list[dict]]:
    """The rows that failed where a search would have evaluated them, that failed as the reference predicts, and that
    the problem's time did not reach."""
    return ([row for row in rows if row["failure"] and not row["predicted"]],
            [row for row in rows if row["predicted"]], [row for row in rows if row["unchecked"]])


def main() -> int:
    from kernelpro.offline.moves import MOVES
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    problem_arguments(parser)
    parser.add_argument("--moves", default="", help="comma-separated moves (default: every one the CPU can run)")
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds for one problem's candidates")
    args = parser.parse_args()
    files = problem_files(args)
    if not files:
        parser.error("give --problems or --suite")
    runnable = [name for name, move in MOVES.items()
                if name not in NEEDS_GPU and not move.half_only and not move.eval_only]
    moves = args.moves.split(",") if args.moves else runnable
    unknown = sorted(set(moves) - set(MOVES))
    if unknown:
        parser.error(f"unknown moves: {', '.join(unknown)}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="kernelpro-values-") as scratch:
        for number, (key, path) in enumerate(files.items(), 1):
            found = check(key, path, Path(scratch), moves, args.timeout)
            if found and "skipped" in found[0]:
                print(f"[{number}/{len(files)}] {key}: skipped, {found[0]['skipped']}", flush=True)
                continue
            rows += found
            failed, predicted, unchecked = outcomes(found)
            correct = len(found) - len(failed) - len(predicted) - len(unchecked)
            why_failed = "; ".join(f"{row['move']} ({row['failure']})" for row in failed)
            why_predicted = "; ".join(f"{row['move']} ({row['predicted']})" for row in predicted)
            print(f"[{number}/{len(files)}] {key}: {correct}/{len(found)} correct"
                  + (f"; failed: {why_failed}" if failed else "")
                  + (f"; failed as predicted, not evaluated by a search: {why_predicted}" if predicted else "")
                  + (f"; not checked in {args.timeout:g} s: {', '.join(row['move'] for row in unchecked)}"
                     if unchecked else ""), flush=True)
    failures, predicted, unchecked = outcomes(rows)
    print(f"{len(rows)} candidates, {len(rows) - len(failures) - len(predicted) - len(unchecked)} correct, "
          f"{len(failures)} failed, {len(predicted)} failed as predicted, {len(unchecked)} not checked in time")
    if args.json_file:
        Path(args.json_file).write_text(json.dumps(rows, indent=1))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
