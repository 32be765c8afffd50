"""Adaptive timing: a candidate whose speedup cannot reach the search's best stops being timed early; one that
can, the reference's evaluation and the closing re-measurement get every trial."""

from __future__ import annotations

import math
import random

import pytest

from conftest import candidate_source
from kernelpro.harness import EvalOptions, PhaseLimits
from kernelpro.harness.timing import ADAPTIVE_MIN_TRIALS, cannot_reach, speedup_upper_bound

TIMED = EvalOptions(device="cpu", timing_trials=60, timing_budget_s=30.0, limits=PhaseLimits(correctness_s=15, load_s=60))


def noisy(median: float, count: int, seed: int) -> list[float]:
    draw = random.Random(seed)
    return [median * math.exp(draw.gauss(0, 0.1)) for _ in range(count)]


def test_the_upper_bound_covers_the_true_speedup_and_narrows_with_more_pairs():
    assert speedup_upper_bound([1.0] * (ADAPTIVE_MIN_TRIALS - 1), [2.0] * (ADAPTIVE_MIN_TRIALS - 1)) is None
    eager, slower = noisy(1.0, 40, 1), noisy(2.0, 40, 2)  # a candidate at 0.5x
    few, many = speedup_upper_bound(eager[:10], slower[:10]), speedup_upper_bound(eager, slower)
    assert 0.5 < many < few < 1.0
    # the same speed as eager: the bound stays above 1, so a best of 1.0 never stops it
    assert speedup_upper_bound(noisy(1.0, 10, 3), noisy(1.0, 10, 4)) > 1.0
    stop = cannot_reach(1.0)
    assert stop({"eager": eager[:10], "candidate": slower[:10]})
    assert not stop({"eager": eager[:9], "candidate": slower[:9]})  # too few pairs to decide anything
    assert not cannot_reach(0.4)({"eager": eager, "candidate": slower})  # it may still reach 0.4x
    covered = sum(speedup_upper_bound(noisy(1.0, 10, 100 + k), noisy(2.0, 10, 200 + k)) >= 0.5 for k in range(200))
    assert covered >= 180  # a 95% bound: the true 0.5x is under it nearly always


def slow_candidate() -> str:
    """good.py's candidate, computing its output 40 times: correct and many times slower than eager."""
    return candidate_source("good") + (
        "\n\nclass Slow(ModelNew):\n    def forward(self, x):\n        for _ in range(39):\n"
        "            super().forward(x)\n        return super().forward(x)\n\n\nModelNew = Slow\n")


def test_a_candidate_that_cannot_reach_the_best_stops_after_the_fewest_trials(cpu_evaluator, linear_problem):
    source = slow_candidate()
    stopped = cpu_evaluator.evaluate(linear_problem, source, TIMED.model_copy(update={"stop_below_speedup": 1.0}))
    assert stopped.verdict.value == "correct" and stopped.speedup < 1.0
    # at the first round that can decide, or a few later where a loaded machine spreads the calls' times
    assert ADAPTIVE_MIN_TRIALS <= stopped.candidate.trials < TIMED.timing_trials
    assert "timing_stopped_early" in stopped.flags
    full = cpu_evaluator.evaluate(linear_problem, source, TIMED)  # no target: every trial (the final re-measure)
    assert full.candidate.trials == TIMED.timing_trials and "timing_stopped_early" not in full.flags
    fast = cpu_evaluator.evaluate(linear_problem, candidate_source("good"),
                                  TIMED.model_copy(update={"stop_below_speedup": 0.05}))
    assert fast.candidate.trials == TIMED.timing_trials and "timing_stopped_early" not in fast.flags


def test_a_search_asks_for_the_best_so_far_and_the_closing_re_measurement_for_every_trial(tmp_path):
    """The driver's options: a candidate's carry the best speedup so far; without adaptive timing, or under the
    energy objective, none; the final check's never."""
    from kernelpro.driver import SearchRun
    from kernelpro.settings import SearchSettings
    from conftest import DATA
    settings = SearchSettings(problem=str(DATA / "problems" / "linear_relu_residual.py"), out=str(tmp_path / "run"),
                              device="cpu", budget=1, profile=False, use_kb=False)
    run = SearchRun(settings)
    run.store.put("baseline", {"eager_ms": 2.0})
    run._fastest_ms = 0.5  # as tell() keeps it: the best so far runs at 4x
    assert run.candidate_options().stop_below_speedup == 4.0
    assert run.options().stop_below_speedup is None  # the reference, the closing re-measurement
    # a candidate near the tolerance is checked on more inputs only where it may become the best; the final, always
    from kernelpro.driver import RECHECK_MARGIN
    assert run.candidate_options().recheck_from_speedup == pytest.approx(4.0 * (1 - RECHECK_MARGIN))
    assert run.options().recheck_from_speedup is None
    run.settings = settings.model_copy(update=dict(adaptive_timing=False))
    assert run.candidate_options().stop_below_speedup is None
    assert run.candidate_options().recheck_from_speedup == pytest.approx(4.0 * (1 - RECHECK_MARGIN))
    run.settings = settings.model_copy(update=dict(objective="energy"))  # the best is not the fastest there
    assert run.candidate_options().stop_below_speedup is None and run.candidate_options().recheck_from_speedup is None
