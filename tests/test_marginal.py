"""A correct candidate near the tolerance is checked on more inputs before its verdict stands
(harness/recheck.py; harness/compare.py: the share of the tolerance, `used=`)."""

from __future__ import annotations

import torch

from conftest import candidate_source
from kernelpro.harness import EvalOptions, PhaseLimits, Verdict, compare, recheck
from kernelpro.harness.recheck import MARGINAL_HELD_BYTES, MARGINAL_SHARE, MARGINAL_TRIALS
from kernelpro.harness.records import EvalResult, MemorySizes

FAST = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=1.0,
                   limits=PhaseLimits(correctness_s=15, load_s=60))


def _share(expected: list, got: list, tolerance: float) -> float:
    """The largest share of the tolerance that passing outputs took, as the comparison reports it."""
    used: list[float] = []
    assert compare.compare_outputs(expected, got, "x", "x", tolerance, used=used) is None
    return max(used, default=0.0)


def test_the_share_of_the_tolerance_is_the_largest_difference_over_its_allowance():
    expected = [torch.tensor([1.0, 2.0, 0.0], dtype=torch.float64), torch.tensor([3, 4]), "a string"]
    got = [torch.tensor([1.0 + 1e-4, 2.0, 0.0], dtype=torch.float64), torch.tensor([3, 4]), "a string"]
    # 1e-4 against 1e-4 + 1e-4 x 1.0
    assert abs(_share(expected, got, 1e-4) - 0.5) < 1e-9
    assert _share(expected, expected, 1e-4) == 0.0
    # NaN where NaN is expected, and equal infinities, use none of it
    special = [torch.tensor([float("nan"), float("inf"), 1.0])]
    assert _share(special, [torch.tensor([float("nan"), float("inf"), 1.0])], 1e-4) == 0.0
    # half precisions are read in float32
    half = [torch.tensor([1.0, 2.0], dtype=torch.bfloat16)]
    assert _share(half, half, 1e-2) == 0.0


def _off_by(share: float) -> str:
    """The good candidate, its outputs moved by `share` of their allowance (atol + rtol x |y|, both 1e-4)."""
    source = candidate_source("good")
    old = "        return F.relu(F.linear(x, self.linear.weight, self.linear.bias)).add_(x)\n"
    assert old in source
    return source.replace(old, "        y = F.relu(F.linear(x, self.linear.weight, self.linear.bias)).add_(x)\n"
                                f"        return y + (y.abs() + 1.0) * {share * 1e-4!r}\n")


def test_a_candidate_near_the_tolerance_runs_more_trials_and_keeps_its_verdict(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, _off_by(0.7), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert 0.65 < result.tolerance_used < 0.75
    assert "marginal_rechecked" in result.flags and "rechecked on" in result.reason
    # small outputs: the extra trials in one round
    assert result.correct_trials == FAST.correct_trials + MARGINAL_TRIALS
    assert result.speedup is not None  # the first evaluation's timing stands


def test_a_candidate_well_within_the_tolerance_is_not_rechecked(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, _off_by(0.2), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert 0.15 < result.tolerance_used < MARGINAL_SHARE
    assert "marginal_rechecked" not in result.flags and result.correct_trials == FAST.correct_trials


def test_a_candidate_over_the_tolerance_fails_as_before(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, _off_by(1.5), FAST)
    assert result.verdict is Verdict.INCORRECT and "trial 0" in result.reason, result.reason
    assert result.tolerance_used is None


class _Rounds:
    """A stand-in for the evaluator's single evaluations: answers the recheck's rounds from a script, and records
    the options each round asked for."""

    def __init__(self, answers: list[EvalResult]):
        self.answers, self.asked, self.rechecked = list(answers), [], {}

    def once(self, options, keep=True):
        self.asked.append((options, keep))
        return self.answers.pop(0)

    def recheck(self, options, first: EvalResult) -> EvalResult:
        return recheck.if_marginal(self.once, self.rechecked, None, options, first)


def _result(verdict: Verdict, used: float | None, reason: str = "correct", trials: int = 5,
            output_bytes: int = 4096) -> EvalResult:
    return EvalResult(verdict=verdict, phase="done" if verdict is Verdict.CORRECT else "correctness", reason=reason,
                      tolerance=1e-4, device="cpu", precision="fp32", policy="relaxed", correct_trials=trials,
                      tolerance_used=used, speedup=2.0 if verdict is Verdict.CORRECT else None,
                      memory=MemorySizes(output_bytes=output_bytes), wall_s=3.0, phase_s={"correctness": 1.0})


def test_large_outputs_recheck_in_rounds_and_the_first_that_fails_gives_the_verdict():
    rounds = _Rounds([_result(Verdict.CORRECT, 0.8), _result(Verdict.INCORRECT, None, "trial 3: 0.01% outside"),
                      _result(Verdict.CORRECT, 0.1)])
    # outputs so large that a round holds only the usual five trials' worth
    first = _result(Verdict.CORRECT, 0.9, output_bytes=MARGINAL_HELD_BYTES // 4)
    verdict = rounds.recheck(FAST, first)
    assert verdict.verdict is Verdict.INCORRECT and "marginal_failed" in verdict.flags
    assert verdict.reason.startswith("on more inputs after its outputs used 90% of the tolerance: trial 3")
    assert verdict.correct_trials == 5 + 5 + 5  # the first evaluation's, the passing round's, the failing one's
    assert len(rounds.asked) == 2 and all(not keep and options.correct_trials == 5 for options, keep in rounds.asked)
    seeds = {options.seed for options, _ in rounds.asked} | {FAST.seed}
    assert len(seeds) == 3 and not any(options.measure_time for options, _ in rounds.asked)


def test_a_round_runs_no_timing_and_no_probe_of_the_reference():
    """The options of a `kernelpro eval --sensitivity`-like evaluation: a round compares only."""
    rounds = _Rounds([_result(Verdict.CORRECT, 0.7, trials=MARGINAL_TRIALS)])
    asked = FAST.model_copy(update={"sensitivity": True, "variants": ("tf32",), "launch_profile": True,
                                    "kernelbench_timing": True, "measure_energy": True})
    rounds.recheck(asked, _result(Verdict.CORRECT, 0.6))
    (options, _), = rounds.asked
    assert not (options.measure_time or options.sensitivity or options.variants or options.launch_profile
                or options.kernelbench_timing or options.measure_energy)


def test_small_outputs_recheck_in_one_round_and_the_largest_share_is_kept():
    rounds = _Rounds([_result(Verdict.CORRECT, 0.95, trials=MARGINAL_TRIALS)])
    verdict = rounds.recheck(FAST, _result(Verdict.CORRECT, 0.6))
    assert verdict.ok and "marginal_rechecked" in verdict.flags and verdict.tolerance_used == 0.95
    assert verdict.correct_trials == 5 + MARGINAL_TRIALS and verdict.speedup == 2.0
    assert [options.correct_trials for options, _ in rounds.asked] == [MARGINAL_TRIALS]
    # the record's time counts the extra round's, under its own phase
    assert verdict.wall_s == 3.0 + 3.0 and verdict.phase_s == {"correctness": 1.0, "recheck": 3.0}


def test_only_correct_candidates_at_or_over_the_share_are_rechecked():
    for first in (_result(Verdict.CORRECT, MARGINAL_SHARE - 0.01), _result(Verdict.CORRECT, None),
                  _result(Verdict.INCORRECT, None)):
        rounds = _Rounds([])
        assert rounds.recheck(FAST, first) is first and not rounds.asked


def test_a_search_rechecks_only_a_candidate_that_may_become_its_best():
    """With `recheck_from_speedup` (the search's best so far, less a margin), a slower candidate near the tolerance
    keeps its verdict without more trials, and says so; one that reaches it is rechecked."""
    slower = _result(Verdict.CORRECT, 0.9)  # 2.0x
    rounds = _Rounds([])
    options = FAST.model_copy(update={"recheck_from_speedup": 2.5})
    kept = rounds.recheck(options, slower)
    assert kept.ok and kept.flags == ["near_tolerance_not_rechecked"] and not rounds.asked
    assert kept.correct_trials == 5
    rounds = _Rounds([_result(Verdict.CORRECT, 0.7, trials=MARGINAL_TRIALS)])
    rechecked = rounds.recheck(FAST.model_copy(update={"recheck_from_speedup": 1.9}), slower)
    assert "marginal_rechecked" in rechecked.flags and len(rounds.asked) == 1


def test_the_same_candidate_is_not_rechecked_twice_on_the_same_seeds():
    """A search's closing re-measurement of its best (the same source, problem and options) finds the extra trials
    passed earlier in the run and does not run them again; another seed does."""
    rounds = _Rounds([_result(Verdict.CORRECT, 0.7, trials=MARGINAL_TRIALS)])
    first = rounds.recheck(FAST, _result(Verdict.CORRECT, 0.6))
    again = rounds.recheck(FAST, _result(Verdict.CORRECT, 0.65))
    assert len(rounds.asked) == 1 and "marginal_rechecked" in again.flags and "earlier" in again.reason
    assert again.correct_trials == first.correct_trials == 5 + MARGINAL_TRIALS and again.tolerance_used == 0.7
    rounds.answers.append(_result(Verdict.CORRECT, 0.6, trials=MARGINAL_TRIALS))
    rounds.recheck(FAST.model_copy(update={"seed": 7}), _result(Verdict.CORRECT, 0.6))
    assert len(rounds.asked) == 2
