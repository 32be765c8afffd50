"""Real native builds on the CPU: load_inline C++ through the build pool and the cache."""

from __future__ import annotations

import pytest

from conftest import candidate_source
from kernelpro.harness import EvalOptions, Evaluator, Verdict
from kernelpro.harness.cache import BuildCache

pytestmark = pytest.mark.slow
OPTIONS = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=1.0)


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    with Evaluator("cpu", cache=BuildCache(tmp_path_factory.mktemp("builds")), spares=1) as evaluator:
        yield evaluator


def test_custom_cpu_kernel_passes_strict_and_is_cached(evaluator, linear_problem):
    source = candidate_source("native_cpu")
    first = evaluator.evaluate(linear_problem, source, OPTIONS.model_copy(update={"policy": "strict"}))
    assert first.verdict is Verdict.CORRECT, first.reason
    assert first.build_cached is False and first.build_s > 0
    again = evaluator.evaluate(linear_problem, source, OPTIONS)
    assert again.verdict is Verdict.CORRECT
    assert again.build_cached is True and again.build_s == 0.0


def test_compile_error_quotes_the_compiler_and_is_remembered(evaluator, linear_problem):
    source = candidate_source("native_compile_error")
    first = evaluator.evaluate(linear_problem, source, OPTIONS)
    assert first.verdict is Verdict.COMPILE_ERROR and first.phase.value == "build"
    assert "this_method_does_not_exist" in first.reason or "error" in first.reason
    assert "this_method_does_not_exist" in first.stderr.text()
    again = evaluator.evaluate(linear_problem, source, OPTIONS)
    assert again.verdict is Verdict.COMPILE_ERROR and again.build_cached is True and again.wall_s < 5


def test_a_fresh_evaluator_finds_the_build_on_disk(evaluator, linear_problem):
    source = candidate_source("native_cpu")
    evaluator.evaluate(linear_problem, source, OPTIONS)
    with Evaluator("cpu", cache=evaluator.cache, spares=0) as fresh:
        result = fresh.evaluate(linear_problem, source, OPTIONS)
    assert result.verdict is Verdict.CORRECT and result.build_cached is True
