"""A correct candidate near the tolerance, checked on more inputs before its verdict stands.

Each correct record says how close its outputs came to the tolerance (`EvalResult.tolerance_used`, from the
comparison's own pass: `compare.compare_outputs(..., used=)`). Near it, other inputs may cross it: KernelBench's
evaluator found level3/13_DenseNet121TransitionLayer's fused batch norm incorrect on one of its five trials
(0.000115 against 1e-4) after the harness had passed it on five of its own. `if_marginal` runs such a candidate's extra trials through the
evaluator's own single evaluations, untimed, and the first round that fails gives the verdict.
"""

from __future__ import annotations

from collections.abc import Callable

from kernelpro.harness.cache import source_hash
from kernelpro.harness.records import EvalOptions, EvalResult

#: a correct candidate whose outputs took this share of the tolerance (or more) on some trial is checked again
MARGINAL_SHARE = 0.5
#: the correctness trials (fresh seeds) such a candidate runs again, in rounds that hold at most MARGINAL_HELD_BYTES
#: of reference outputs (and at least EvalOptions.correct_trials trials) each: one round for most problems, four of
#: five trials at level 1's sizes
MARGINAL_TRIALS = 20
MARGINAL_HELD_BYTES = 4 << 30
#: how the rounds' seeds step away from the evaluation's (a prime: no round repeats another's trials)
SEED_STEP = 104729

#: what a round leaves out: timing, energy, and the reference's probes (a round's reference runs only to compare)
CORRECTNESS_ONLY = {"measure_time": False, "kernelbench_timing": False, "measure_energy": False, "sensitivity": False,
                    "variants": (), "launch_profile": False}

#: one evaluation of the candidate under the given options; `keep=False`: its reference outputs stay out of the
#: evaluator's reference cache (a one-off seed's must not evict the search's)
EvaluateOnce = Callable[..., EvalResult]


def rounds(seed: int, correct_trials: int, output_bytes: int) -> list[tuple[int, int]]:
    """The recheck's rounds for an evaluation from `seed` with `correct_trials` trials whose reference outputs take
    `output_bytes`: (the round's seed, its trials), each trial's seed the round's plus its index, as in an
    evaluation."""
    per_round = max(correct_trials, min(MARGINAL_TRIALS, MARGINAL_HELD_BYTES // max(1, output_bytes)))
    return [(seed + SEED_STEP * round_, per_round) for round_ in range(1, -(-MARGINAL_TRIALS // per_round) + 1)]


def faced_seeds(seed: int, correct_trials: int, output_bytes: int) -> list[int]:
    """Every trial's seed that a candidate whose outputs used MARGINAL_SHARE of the tolerance or more faces: the
    evaluation's own trials, then the recheck's (`rounds`)."""
    return [seed + trial for trial in range(correct_trials)] + [
        first + trial for first, trials in rounds(seed, correct_trials, output_bytes) for trial in range(trials)]


def if_marginal(evaluate_once: EvaluateOnce, rechecked: dict, problem, options: EvalOptions,
                result: EvalResult) -> EvalResult:
    """`result` as it stands where it is not correct or its outputs took less than MARGINAL_SHARE of the tolerance;
    else the verdict after MARGINAL_TRIALS more trials on fresh seeds. One slower than
    `EvalOptions.recheck_from_speedup` is not rechecked (it cannot become a search's best): its record says so.
    `rechecked` (the evaluator's) remembers what passed: the extra trials' inputs follow from the seed, so the same
    source on the same problem and options passes them again, and they are not run twice."""
    if not result.ok or result.tolerance_used is None or result.tolerance_used < MARGINAL_SHARE:
        return result
    if options.recheck_from_speedup is not None and (result.speedup or 0.0) < options.recheck_from_speedup:
        return result.model_copy(update={"flags": result.flags + ["near_tolerance_not_rechecked"]})
    why = f"its outputs used {result.tolerance_used:.0%} of the tolerance"
    key = (source_hash(problem.source) if problem is not None else "", result.source_sha256, options.seed,
           options.correct_trials, options.precision, options.model_mode, options.effective_tolerance)
    if key in rechecked:
        used, extra = rechecked[key]
        trials = result.correct_trials + extra
        return result.model_copy(update={
            "tolerance_used": max(used, result.tolerance_used), "correct_trials": trials,
            "flags": result.flags + ["marginal_rechecked"],
            "reason": f"{result.reason} (rechecked on {trials} trials after {why}, the extra ones earlier)"})
    used, trials, spent = result.tolerance_used, result.correct_trials, 0.0
    for seed, per_round in rounds(options.seed, options.correct_trials,
                                  result.memory.output_bytes if result.memory else 0):
        again = evaluate_once(options.model_copy(update={
            "seed": seed, "correct_trials": per_round, **CORRECTNESS_ONLY}), keep=False)
        spent += again.wall_s
        # the record's time is the first evaluation's and the rounds', these under the phase `recheck`
        timed = {"wall_s": result.wall_s + spent, "phase_s": {**result.phase_s, "recheck": round(spent, 3)}}
        if not again.ok:
            return again.model_copy(update={
                "reason": f"on more inputs after {why}: {again.reason}",
                "correct_trials": trials + again.correct_trials, "flags": again.flags + ["marginal_failed"],
                "build_cached": result.build_cached, "build_s": result.build_s, **timed})
        used, trials = max(used, again.tolerance_used or 0.0), trials + again.correct_trials
    rechecked[key] = used, trials - result.correct_trials
    return result.model_copy(update={"tolerance_used": used, "correct_trials": trials,
                                     "flags": result.flags + ["marginal_rechecked"],
                                     "reason": f"{result.reason} (rechecked on {trials} trials after {why})",
                                     **timed})
