"""Every verdict, produced by a real candidate in a real worker process (CPU)."""

from __future__ import annotations

import pytest

from conftest import attacking, candidate_source
from kernelpro.harness import EvalOptions, PhaseLimits, Verdict, load_problem

FAST = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=1.0,
                   limits=PhaseLimits(correctness_s=15, load_s=60))

EXPECTED = {
    # name: (verdict, phase, words the reason must contain)
    "good": (Verdict.CORRECT, "done", "correct"),
    "segfault": (Verdict.CRASH, "correctness", "SIGSEGV"),
    "infinite_loop": (Verdict.TIMEOUT, "correctness", "ran past"),
    "exits": (Verdict.RUNTIME_ERROR, "correctness", "exited with status 3"),
    "syntax_error": (Verdict.COMPILE_ERROR, "static", "syntax error"),
    "no_modelnew": (Verdict.LOAD_ERROR, "load", "ModelNew"),
    "wrong_shape": (Verdict.INCORRECT, "correctness", "shape"),
    "wrong_dtype": (Verdict.INCORRECT, "correctness", "dtype"),
    "nan_output": (Verdict.INCORRECT, "correctness", "NaN"),
    "mutates_input": (Verdict.REJECTED, "correctness", "modified input 0"),
    "aliases_input": (Verdict.REJECTED, "correctness", "view of input 0"),
    "caches_across_calls": (Verdict.INCORRECT, "correctness", "trial 1"),
    "late_thread": (Verdict.REJECTED, "correctness", "changed after forward returned"),
    "patches_allclose": (Verdict.REJECTED, "load", "torch.allclose"),
    "tensor_subclass": (Verdict.REJECTED, "correctness", "subclass"),
    "forged_stdout": (Verdict.INCORRECT, "correctness", "outside tolerance"),
    "nondeterministic": (Verdict.INCORRECT, "correctness", "second call"),
    "raises": (Verdict.RUNTIME_ERROR, "correctness", "ValueError"),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_candidate_gets_its_verdict(name, cpu_evaluator, linear_problem):
    verdict, phase, words = EXPECTED[name]
    result = cpu_evaluator.evaluate(linear_problem, candidate_source(name), FAST)
    assert result.verdict is verdict, result.reason
    assert result.phase.value == phase
    assert words in result.reason
    assert (result.speedup is not None) == (verdict is Verdict.CORRECT)
    if verdict is Verdict.CORRECT:  # the reference's inputs and outputs as evaluated, for the coder's prompt
        assert [(v.kind, v.shape, v.dtype) for v in result.signature.inputs] == [("tensor", [16, 64], "torch.float32")]


def test_incorrect_carries_error_measures(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("wrong_shape"), FAST)
    assert result.errors[0].shape_mismatch == ([16, 64], [16, 63])
    assert result.signature.outputs[0].shape == [16, 64]  # a failed candidate's result still describes the problem
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("caches_across_calls"), FAST)
    error = result.errors[0]
    assert error.trial == 1 and error.mismatch_fraction > 0.5 and error.max_abs_error > 1e-3
    assert len(error.worst_index) == 2 and abs(error.worst_got - error.worst_expected) > 1e-3


def test_twenty_megabytes_of_prints_are_drained_and_capped(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("prints_20mb"), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert result.stdout.total_bytes >= 20 * 1024 * 1024
    assert len(result.stdout.head) + len(result.stdout.tail) <= 64 * 1024
    assert result.stdout.dropped_bytes > 0


def test_forged_result_on_stdout_is_ignored(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("forged_stdout"), FAST)
    assert '"speedup": 1000.0' in result.stdout.text()
    assert result.verdict is Verdict.INCORRECT and result.speedup is None


def test_worker_environment_has_no_secrets(cpu_evaluator, linear_problem, monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test-secret")
    monkeypatch.setenv("GITHUB_TOKEN", "ghp-test")
    from kernelpro.harness.process import scrubbed_environment
    import os
    assert "ANTHROPIC_API_KEY" not in scrubbed_environment(source=dict(os.environ))
    # The evaluator's spare was spawned earlier; a fresh one sees the new environment.
    from kernelpro.harness import Evaluator
    with Evaluator("cpu", spares=0) as evaluator:
        result = evaluator.evaluate(linear_problem, candidate_source("reads_secrets"), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason


STRICT = FAST.model_copy(update={"policy": "strict"})


@pytest.mark.parametrize("name, words", [
    ("strict_try_except", "try/except"),
    ("strict_inherits", "inherits"),
    ("strict_torch_ops", "linear, relu"),
    ("strict_calls_module", "linear"),
    ("good", "linear"),
])
def test_strict_policy_rejections(name, words, cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, candidate_source(name), STRICT)
    assert result.verdict is Verdict.REJECTED and result.phase.value == "static"
    assert words in result.reason


def test_relaxed_policy_accepts_what_strict_rejects(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("strict_try_except"), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason


def test_worker_survives_every_failure_back_to_back(cpu_evaluator, linear_problem):
    """One evaluator, every kind of failure in a row, then an honest candidate passes."""
    sequence = ["segfault", "exits", "late_thread", "patches_allclose", "tensor_subclass",
                "infinite_loop", "mutates_input", "raises", "good"]
    short = FAST.model_copy(update={"limits": PhaseLimits(correctness_s=8, load_s=60)})
    verdicts = [cpu_evaluator.evaluate(linear_problem, candidate_source(n), short).verdict for n in sequence]
    assert verdicts[-1] is Verdict.CORRECT
    assert Verdict.CORRECT not in verdicts[:-1]


def test_degenerate_problem_is_flagged(cpu_evaluator, tmp_path):
    from conftest import DATA
    from kernelpro.harness import load_problem
    problem = load_problem(DATA / "problems" / "constant_output.py")
    source = "import torch\nclass ModelNew(torch.nn.Module):\n    def forward(self, x):\n" \
             "        return torch.zeros(x.shape[0])\n"
    result = cpu_evaluator.evaluate(problem, source, FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert "degenerate_problem" in result.flags


def test_correctness_uses_fresh_seeds_and_matching_weights(cpu_evaluator, linear_problem):
    """ModelNew built with the trial seed gets the reference's weights; a different init fails."""
    source = candidate_source("good").replace(
        "super().__init__()", "super().__init__()\n        torch.manual_seed(1234)")
    result = cpu_evaluator.evaluate(linear_problem, source, FAST)
    assert result.verdict is Verdict.INCORRECT
    assert result.correct_trials == 0


def test_output_on_another_device_is_incorrect(cpu_evaluator, linear_problem):
    source = candidate_source("good").replace(".add_(x)", ".add_(x).to('meta')")
    result = cpu_evaluator.evaluate(linear_problem, source, FAST)
    assert result.verdict is Verdict.INCORRECT and "is on meta" in result.reason


@pytest.mark.parametrize("precision, tolerance", [("bf16", 1e-2), ("fp16", 1e-2)])
def test_precision_casts_model_and_inputs(cpu_evaluator, linear_problem, precision, tolerance):
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("good"),
                                    FAST.model_copy(update={"precision": precision}))
    assert result.verdict is Verdict.CORRECT, result.reason
    assert result.tolerance == tolerance and result.precision == precision
    # A candidate that ignores the precision and returns float32 is caught.
    stays_fp32 = candidate_source("good").replace(".add_(x)", ".add_(x).float()")
    result = cpu_evaluator.evaluate(linear_problem, stays_fp32, FAST.model_copy(update={"precision": precision}))
    assert result.verdict is Verdict.INCORRECT and "dtype" in result.reason


@pytest.mark.slow
def test_torch_compile_baseline_is_reported_separately(cpu_evaluator, linear_problem):
    options = FAST.model_copy(update={"baselines": ("eager", "compile"),
                                      "limits": PhaseLimits(timing_s=600)})
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("good"), options)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert result.reference_compile is not None and result.reference_compile.trials >= 5
    assert result.speedup_vs_compile == pytest.approx(
        result.reference_compile.median_ms / result.candidate.median_ms)
    assert result.compile_correct is True and result.compile_mismatch == ""


RANDOM_PROBLEM = '''import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x + torch.rand_like(x)  # inductor draws its own random numbers, not eager's


def get_inputs():
    return [torch.randn(256)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_a_torch_compile_whose_output_fails_the_tolerance_is_reported(cpu_evaluator, tmp_path):
    """torch.compile's last timed output is judged against eager's like a candidate's: here inductor's random
    numbers differ from eager's from the same seed, so its time is not a correct one, and the record says so."""
    path = tmp_path / "random_problem.py"
    path.write_text(RANDOM_PROBLEM)
    problem = load_problem(path)
    options = FAST.model_copy(update={"baselines": ("eager", "compile"), "limits": PhaseLimits(timing_s=600)})
    result = cpu_evaluator.evaluate(problem, RANDOM_PROBLEM + "\nModelNew = Model\n", options)
    assert result.verdict is Verdict.CORRECT, result.reason  # the candidate (the reference itself) is fine
    assert result.compile_correct is False and "output 0" in result.compile_mismatch


SETTINGS_PROBLEM = '''import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x + float(torch.backends.cudnn.benchmark)  # what torch's setting is when the reference runs


def get_inputs():
    return [torch.randn(64)]


def get_init_inputs():
    return []
'''


def test_a_candidate_that_leaves_torch_settings_on_does_not_change_the_reference(cpu_evaluator, tmp_path):
    """A candidate that turns a process-wide setting on in its __init__ (TF32 or cuDNN's autotuner, as the
    offline coder's candidates once did) and leaves it on: the reference and torch.compile, timed call by
    call beside it, still run with the worker's own settings (harness/flags.py). Without that, the
    reference's last timed call saw the setting and its result changed, and the candidate was rejected."""
    from kernelpro.harness import load_problem
    path = tmp_path / "settings.py"
    path.write_text(SETTINGS_PROBLEM)
    source = ("import torch\n\n\nclass ModelNew(torch.nn.Module):\n    def __init__(self):\n"
              "        super().__init__()\n        torch.backends.cudnn.benchmark = True\n\n"
              "    def forward(self, x):\n        return x + 0.0\n")
    result = cpu_evaluator.evaluate(load_problem(path), source, FAST)
    assert result.verdict is Verdict.CORRECT, result.reason


def test_a_candidate_that_settles_torchs_own_patches_is_no_tamperer(cpu_evaluator, linear_problem):
    """What a candidate's first torch.compile does to torch: dynamo wraps torch.manual_seed on import and
    replaces nn.Module.__init__ and __setstate__. These are torch's own patches, not tampering."""
    settles = "import torch._dynamo\nfrom torch._dynamo import mutation_guard\nmutation_guard.install_generation_tagging_init()"
    result = cpu_evaluator.evaluate(linear_problem, attacking(settles), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert result.phase.value == "done" and "correct" in result.reason


def test_only_torchs_own_patches_pass_for_untampered():
    """dynamo's wrappers of the genuine functions pass; a look-alike closure over something else does not."""
    import functools

    import torch
    from torch._dynamo import mutation_guard
    from kernelpro.harness.guards import torch_own_patch

    genuine = torch.random.manual_seed
    assert torch_own_patch(genuine, functools.wraps(genuine)(lambda seed: genuine(seed)))
    assert not torch_own_patch(genuine, lambda seed: genuine(seed))

    class Fresh(torch.nn.Module):
        pass
    init = Fresh.__init__
    with pytest.MonkeyPatch.context() as patch:  # dynamo's own patch, applied to a class of our own
        patch.setattr(mutation_guard, "Module", Fresh)
        patch.setattr(Fresh, "___needs_generation_tag_patch", True, raising=False)
        mutation_guard.install_generation_tagging_init()
        assert Fresh.__init__ is not init and torch_own_patch(init, Fresh.__init__)
    assert not torch_own_patch(init, lambda self: None)
    assert not torch_own_patch(object.__init__, Fresh.__init__)  # dynamo's closure, but over another function


def test_a_launch_profile_asked_for_on_the_cpu_is_none(cpu_evaluator, linear_problem):
    result = cpu_evaluator.evaluate(linear_problem, candidate_source("good"),
                                    EvalOptions(device="cpu", timing_trials=3, timing_budget_s=1.0,
                                                launch_profile=True))
    assert result.ok and result.launch_profile is None


CHAOTIC = '''import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        for _ in range(20):  # each step multiplies a difference by up to 1000
            x = torch.sin(1000.0 * x)
        return x


def get_inputs():
    return [torch.rand(64, 64)]


def get_init_inputs():
    return []
'''


#: chaos behind a first layer that rounds its input's last bits away, as a TF32 convolution does on a GPU (cuDNN's
#: default): noise on the inputs alone never reaches the chaotic part (EfficientNetB2's batch norms over two pooled
#: samples, where the probe once saw no change at all and 4 of 8 candidates failed)
HIDDEN = CHAOTIC.replace("    def forward(self, x):\n", "    def forward(self, x):\n"
                                                          "        x = torch.round(x * 256.0) / 256.0\n")


def test_the_sensitivity_probe_tells_a_chaotic_reference_from_a_steady_one(cpu_evaluator, linear_problem, tmp_path):
    """The reference once more with its inputs and every intermediate result moved by one ulp: a steady one stays
    inside the tolerance, a chaotic one (where only a bit-exact candidate could pass) does not, also where the
    chaos lies behind a layer that rounds the inputs' noise away."""
    from kernelpro.harness.problem import reference_candidate
    (tmp_path / "chaotic.py").write_text(CHAOTIC)
    (tmp_path / "hidden.py").write_text(HIDDEN)
    options = EvalOptions(device="cpu", timing_trials=3, timing_budget_s=1.0, sensitivity=True)
    found = {}
    for name, problem in (("steady", linear_problem), ("chaotic", load_problem(tmp_path / "chaotic.py")),
                          ("hidden", load_problem(tmp_path / "hidden.py"))):
        result = cpu_evaluator.evaluate(problem, reference_candidate(problem), options)
        assert result.ok, result.reason
        found[name] = result.sensitivity
    assert found["steady"].outside_fraction == 0.0 and found["steady"].tolerance == 1e-4
    for name in ("chaotic", "hidden"):
        assert found[name].outside_fraction > 0.5 and found[name].max_abs_error > 0.1, name
    plain = cpu_evaluator.evaluate(linear_problem, reference_candidate(linear_problem),
                                   options.model_copy(update={"sensitivity": False}))
    assert plain.sensitivity is None


def test_the_correctness_phase_is_split_into_its_steps(cpu_evaluator, linear_problem):
    """A candidate slow to build (50 ms per model) and to call (100 ms per call): its five models and six calls
    (trial 0 twice) land in their own steps, and the judge's transfer and comparison are timed beside them."""
    source = candidate_source("good").replace("        super().__init__()\n",
                                              "        super().__init__()\n        time.sleep(0.05)\n")
    source = "import time\n" + source.replace("    def forward(self, x):\n", "    def forward(self, x):\n"
                                                                              "        time.sleep(0.1)\n")
    result = cpu_evaluator.evaluate(linear_problem, source, FAST.model_copy(update={"measure_time": False}))
    assert result.verdict is Verdict.CORRECT, result.reason
    steps = result.correctness_s
    assert set(steps) == {"inputs", "model", "call", "transfer", "compare"}
    assert 0.25 <= steps["model"] < 1.0 and 0.6 <= steps["call"] < 2.0
    assert sum(steps.values()) <= result.phase_s["correctness"] + 0.05


def test_a_timing_is_checked_again_when_too_fast_or_clearly_under_the_roofline_floor():
    """A speedup over 10x, or a time more than 5% under the floor, is re-verified on other seeds; a time at the floor
    within its margin (a kernel streaming the same bytes as the copy that measured the bandwidth) is not."""
    from kernelpro.harness.evaluate import suspicion
    from kernelpro.harness.records import EvalResult, Floor, Phase, TimingStats

    def result(ms: float, speedup: float, verdict=Verdict.CORRECT) -> EvalResult:
        stats = TimingStats(median_ms=ms, iqr_ms=0.0, cv=0.0, mean_ms=ms, min_ms=ms, max_ms=ms, trials=9,
                            host_median_ms=ms)
        return EvalResult(verdict=verdict, phase=Phase.DONE, reason="", tolerance=1e-4, device="cuda",
                          precision="fp32", policy="relaxed", speedup=speedup, candidate=stats,
                          floor=Floor(bytes_moved=1, flops=0, floor_ms=10.0))
    assert suspicion(result(10.0, 1.0)) == suspicion(result(9.6, 1.0)) == ""
    assert "under the floor" in suspicion(result(9.4, 1.0))
    assert "over 10x" in suspicion(result(20.0, 11.0))
    assert suspicion(result(1.0, 50.0, Verdict.INCORRECT)) == ""
