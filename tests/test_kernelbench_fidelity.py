"""KernelBench's semantics in the harness: any init inputs, training mode by default, out-of-memory as a
verdict, missing packages in one line, chunked comparisons, the memory plan (CPU, real workers)."""

from __future__ import annotations

import textwrap
import threading
import time

import pytest
import torch

from kernelpro.harness import EvalOptions, PhaseLimits, ProblemError, Verdict, load_problem
from kernelpro.harness import compare
from kernelpro.harness.memory import MemoryPlan, needed_bytes
from kernelpro.harness.problem import reference_candidate

FAST = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=1.0,
                   limits=PhaseLimits(correctness_s=30, load_s=60, reference_s=60))


def write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


CONTAINERS = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self, kernel_size, stride, name, nothing, shape, scale, weights):
        super().__init__()
        assert isinstance(kernel_size, tuple) and isinstance(stride, list) and name == "avg"
        assert nothing is None and isinstance(shape, tuple) and isinstance(shape[1], tuple)
        assert isinstance(scale, torch.Tensor) and isinstance(weights[0], torch.Tensor)
        self.pool = nn.AvgPool2d(kernel_size, stride=tuple(stride))
        self.register_buffer("scale", scale.clone())
        self.register_buffer("shift", weights[0].clone().to(scale.device))

    def forward(self, x, factor):
        return self.pool(x) * self.scale * factor + self.shift.sum()

def get_inputs():
    return [torch.rand(2, 3, 12, 10), 0.5]

def get_init_inputs():
    return [(3, 5), [2, 1], "avg", None, (4, (1, 2)), torch.tensor(2.0), [torch.ones(3)]]
"""


def test_init_inputs_may_be_any_values(tmp_path, cpu_evaluator):
    """Tuples, lists, strings, None, nested tuples and tensors inside lists, as KernelBench's own problems
    pass them (kernel_size=(3, 5), bias_shape=(16, 1, 1)); before, such a problem never loaded."""
    problem = load_problem(write(tmp_path, "containers.py", CONTAINERS))
    result = cpu_evaluator.evaluate(problem, reference_candidate(problem), FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert result.model_mode == "train"
    assert result.memory.input_bytes == 2 * 3 * 12 * 10 * 4


BATCH_NORM = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 8, 3)
        self.norm = nn.BatchNorm2d(8)

    def forward(self, x):
        return self.norm(self.conv(x))

def get_inputs():
    return [torch.randn(4, 3, 10, 10) * 3 + 1]

def get_init_inputs():
    return []
"""

FOLDED = BATCH_NORM + """

class ModelNew(Model):
    \"\"\"The norm folded into the convolution with its running statistics: exact in eval mode only.\"\"\"

    def forward(self, x):
        n = self.norm
        scale = n.weight / torch.sqrt(n.running_var + n.eps)
        weight = self.conv.weight * scale[:, None, None, None]
        bias = (self.conv.bias - n.running_mean) * scale + n.bias
        return torch.nn.functional.conv2d(x, weight, bias)
"""


def test_training_mode_is_the_default_and_eval_mode_an_option(tmp_path, cpu_evaluator):
    """KernelBench never calls .eval(): batch norm normalizes with the batch's statistics. A candidate that
    folds the norm's running statistics computes another function there, and is incorrect; with
    --model-mode eval it is exactly the reference."""
    problem = load_problem(write(tmp_path, "bn.py", BATCH_NORM))
    trained = cpu_evaluator.evaluate(problem, FOLDED, FAST)
    assert trained.verdict is Verdict.INCORRECT, trained.reason
    assert trained.model_mode == "train"
    inference = cpu_evaluator.evaluate(problem, FOLDED, FAST.model_copy(update={"model_mode": "eval"}))
    assert inference.verdict is Verdict.CORRECT, inference.reason
    assert inference.model_mode == "eval"


OOM_CANDIDATE = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    calls = 0

    def __init__(self, *args):
        super().__init__()

    def forward(self, x):
        ModelNew.calls += 1
        if ModelNew.calls > {after}:
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return torch.relu(x)
"""

RELU = """
import torch
import torch.nn as nn

class Model(nn.Module):
    def forward(self, x):
        return torch.relu(x)

def get_inputs():
    return [torch.randn(64, 256)]

def get_init_inputs():
    return []
"""


@pytest.mark.parametrize("after, phase", [(-1, "load"), (0, "correctness"), (6, "timing")])
def test_out_of_memory_in_a_phase_is_a_verdict(tmp_path, cpu_evaluator, after, phase):
    """An out-of-memory (injected: the CPU has no device allocator to exhaust) is the candidate's
    runtime_error, naming the phase and the problem's sizes; the evaluation itself goes on. Correctness
    makes 6 calls (5 trials and a repeat), so after 6 the timing phase meets it; -1: at import."""
    problem = load_problem(write(tmp_path, "relu.py", RELU))
    source = OOM_CANDIDATE.format(after=max(after, 0))
    if after < 0:
        source += "\nraise torch.OutOfMemoryError('CUDA out of memory. Tried to allocate 80.00 GiB')\n"
    result = cpu_evaluator.evaluate(problem, source, FAST)
    assert result.verdict is Verdict.RUNTIME_ERROR
    assert result.phase.value == phase
    assert f"out of device memory in the {phase} phase" in result.reason
    assert "inputs 0.00 GiB" in result.reason and "reference outputs" in result.reason


STALE_AFTER_MOVE = """
import torch
import torch.nn as nn

class ModelNew(nn.Module):
    def _apply(self, fn, *args, **kwargs):
        self.__dict__["moves"] = self.__dict__.get("moves", 0) + 1  # as an RNN re-flattening its weights
        return super()._apply(fn, *args, **kwargs)

    def forward(self, x):
        first = self.__dict__.setdefault("moves_at_first_call", self.__dict__.get("moves", 0))
        if {kept_across_a_move} and self.__dict__.get("moves", 0) != first:
            return torch.relu(x) + 1  # what reading the freed weights' memory gives
        return torch.relu(x)
"""


@pytest.mark.parametrize("kept, verdict", [(True, Verdict.INCORRECT), (False, Verdict.CORRECT)])
def test_the_model_is_moved_before_the_repeat_as_kernelbench_moves_it_before_each_call(tmp_path, cpu_evaluator,
                                                                                       kept, verdict):
    """KernelBench calls `.to(device, dtype)` on the model before every correctness trial and before its timing;
    a candidate whose results depend on memory that a move frees (a CUDA graph captured on an RNN's weights) failed
    there with an illegal address. The harness moves the model between trial 0's call and its repeat: such a
    candidate disagrees with itself. The first `.to` is the build's, before any call."""
    problem = load_problem(write(tmp_path, "relu.py", RELU))
    source = STALE_AFTER_MOVE.replace("{kept_across_a_move}", str(kept))
    result = cpu_evaluator.evaluate(problem, source, FAST)
    assert result.verdict is verdict, result.reason
    if kept:
        assert "a second call on the same inputs disagreed" in result.reason


def test_a_reference_out_of_memory_is_one_line_about_the_problem(tmp_path, cpu_evaluator):
    source = RELU.replace("return torch.relu(x)", "raise torch.OutOfMemoryError('CUDA out of memory. Tried "
                                                 "to allocate 12.00 GiB')")
    problem = load_problem(write(tmp_path, "big.py", source))
    with pytest.raises(ProblemError, match="the reference Model ran out of device memory .*inputs 0.00 GiB"):
        cpu_evaluator.evaluate(problem, reference_candidate(problem), FAST)


def test_a_problem_needing_a_missing_package_says_which(tmp_path):
    path = write(tmp_path, "needs.py", "import torch\nfrom kernelpro_no_such_pkg.ops import rearrange\n"
                                       + RELU.replace("import torch\n", "", 1))
    with pytest.raises(ProblemError, match="needs the Python package 'kernelpro_no_such_pkg'.*pip install"):
        load_problem(path)


def test_comparison_in_chunks_gives_the_whole_tensor_s_statistics(monkeypatch):
    """The comparison holds one chunk at a time; what it reports is the whole tensor's fraction and
    largest error, wherever in the tensor the mismatches are."""
    torch.manual_seed(0)
    expected = torch.randn(1000, 37)
    got = expected.clone()
    got[3, 4] += 0.5  # first chunk
    got[-1, -1] -= 2.0  # last chunk
    got[500, 0] = float("nan")
    whole = compare.compare_tensor(expected, got, 0, 1e-4)
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 1000)
    chunked = compare.compare_tensor(expected, got, 0, 1e-4)
    assert chunked is not None and whole is not None
    assert chunked.stats == whole.stats
    assert chunked.stats.mismatch_fraction == pytest.approx(3 / expected.numel())
    assert chunked.stats.max_abs_error == pytest.approx(2.0)
    assert chunked.stats.nan_inf_mismatch
    monkeypatch.setattr(compare, "CHUNK_ELEMENTS", 7)
    assert compare.compare_tensor(expected, expected.clone(), 0, 1e-4) is None
    ints = torch.arange(100)
    other = ints.clone()
    other[99] = 0
    assert "1.00% of elements differ" in compare.compare_tensor(ints, other, 0, 1e-4).reason


def test_memory_plan_holds_back_what_does_not_fit():
    plan = MemoryPlan(20 << 30)

    class Problem:
        source = "a problem"

    problem = Problem()
    first = plan.reserve(problem)  # unknown needs: the whole budget
    assert first.size == 20 << 30
    first.resize(plan.estimate(problem, {"input_bytes": 1 << 30, "output_bytes": 1 << 30}))
    assert plan.known and first.size == needed_bytes({"input_bytes": 1 << 30, "output_bytes": 1 << 30})
    second = plan.reserve(problem)  # known now, and it fits beside the first
    got: list = []
    waiter = threading.Thread(target=lambda: got.append(plan.reserve(problem)))
    waiter.start()  # a third does not fit (2 x 8.6 GB held of 20): it waits
    time.sleep(0.3)
    assert not got
    first.release()
    waiter.join(5)
    assert got and plan.holders == 2
    second.release()
    got[0].release()
    assert plan.used == 0 and plan.holders == 0


def test_a_device_memory_budget_is_read_at_the_first_reservation_not_before():
    """A bench's next search builds its evaluator while the one before still holds the GPU's memory: the free memory
    is read when its first evaluation reserves, after it has taken the GPU."""
    free = [4 << 30]  # what the device has free: little while the search before runs
    plan = MemoryPlan(None, measure=lambda: free[0])

    class Problem:
        source = "a problem"
    free[0] = 100 << 30  # the search before has ended
    first = plan.reserve(Problem())
    assert plan.budget == 100 << 30 and first.size == 100 << 30
    first.release()


def test_a_budget_read_while_the_search_before_let_go_of_its_memory_grows_once_it_is_free(monkeypatch):
    """The search before may still be letting go of its memory (its workers exiting) when the first evaluation
    reads the free memory: the plan reads it again whenever no evaluation holds any. It grows to the new reading,
    what the plan keeps between evaluations counted as its own, and never shrinks on a lower one (that may be an
    evaluation's worker still exiting)."""
    from kernelpro.harness import memory
    monkeypatch.setattr(memory, "REMEASURE_S", 0.0)
    free, readings = [30 << 30], []
    plan = MemoryPlan(None, measure=lambda: readings.append(free[0]) or free[0])

    class Problem:
        source = "a problem"
    problem = Problem()
    plan.reserve(problem).release()
    assert plan.budget == 30 << 30
    kept = plan.keep(6 << 30, 0)  # a problem's reference outputs, kept on the device
    free[0] = 74 << 30  # the search before is gone; the kept outputs are not free
    plan.estimate(problem, {"input_bytes": 1 << 30})
    first = plan.reserve(problem)
    assert plan.budget == 80 << 30 and len(readings) == 2
    plan.reserve(problem).release()  # beside one that holds memory: not read
    assert len(readings) == 2
    first.release()
    free[0] = 1 << 30
    plan.reserve(problem).release()  # read with none held, lower: the budget stays
    assert len(readings) == 3 and plan.budget == 80 << 30
    kept.release()
    assert plan.used == 0


def test_kernelbench_timing_is_reported_beside_our_own(tmp_path, cpu_evaluator):
    problem = load_problem(write(tmp_path, "relu.py", RELU))
    result = cpu_evaluator.evaluate(problem, reference_candidate(problem),
                                    FAST.model_copy(update={"kernelbench_timing": True}))
    assert result.verdict is Verdict.CORRECT, result.reason
    kb = result.kernelbench
    assert kb is not None and kb.trials == 100
    assert kb.speedup == pytest.approx(kb.reference_mean_ms / kb.candidate_mean_ms)
    plain = cpu_evaluator.evaluate(problem, reference_candidate(problem), FAST)
    assert plain.kernelbench is None


def test_reference_outputs_spill_to_a_file_when_memory_is_short(tmp_path, monkeypatch):
    """Every trial's reference outputs are kept until the candidate's arrive; where they would take over
    a quarter of the available memory they go to an unlinked file mapped back, and verdicts are the same.
    The spilled files are what the next evaluation of the problem judges against (harness/refcache.py)."""
    from kernelpro.harness import Evaluator
    from kernelpro.harness import evaluate as evaluate_module
    from kernelpro.harness.cache import BuildCache
    spilled = []
    real_spill = evaluate_module.spill
    monkeypatch.setattr(evaluate_module, "available_memory_bytes", lambda: 4)
    monkeypatch.setattr(evaluate_module, "spill", lambda payload: spilled.append(len(payload)) or real_spill(payload))
    problem = load_problem(write(tmp_path, "relu.py", RELU))
    with Evaluator("cpu", cache=BuildCache(tmp_path / "builds"), spares=0) as evaluator:
        itself = evaluator.evaluate(problem, reference_candidate(problem), FAST)
        # the reference as its own candidate (a baseline) is timed, not compared with itself: no outputs cross
        assert itself.verdict is Verdict.CORRECT and itself.reason.startswith("the reference itself, timed")
        assert itself.correct_trials == 0 and itself.reference and itself.signature.inputs[0].shape
        assert spilled == [] and len(evaluator.references) == 0
        copy = RELU + "\n\nclass ModelNew(Model):\n    pass\n"
        good = evaluator.evaluate(problem, copy, FAST)
        assert good.verdict is Verdict.CORRECT and good.correct_trials == FAST.correct_trials, good.reason
        assert len(spilled) == FAST.correct_trials and min(spilled) > 64 * 256 * 4
        wrong = evaluator.evaluate(problem, RELU.replace("torch.relu(x)", "torch.relu(x) + 1e-3")
                                   .replace("class Model", "class ModelNew"), FAST)
        assert wrong.verdict is Verdict.INCORRECT and "trial 0" in wrong.reason
        assert evaluator.references.hits == 1 and len(spilled) == FAST.correct_trials


def load_kb_judge():
    import importlib.util
    from pathlib import Path
    spec = importlib.util.spec_from_file_location("kb_judge", Path(__file__).parents[1] / "scripts" / "kb_judge.py")
    kb_judge = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kb_judge)
    return kb_judge


def test_kb_judge_sets_the_two_verdicts_side_by_side(tmp_path):
    """scripts/kb_judge.py's agreement over a bench folder and the oracle's judgements (made up here: the
    oracle itself runs only on a GPU)."""
    import json
    kb_judge = load_kb_judge()
    bench, out = tmp_path / "bench", tmp_path / "out"
    for key, ours, theirs, correct in (("level1/1_A", 1.50, 1.40, True), ("level2/2_B", 2.0, 1.5, True),
                                       ("level3/3_C", 1.1, 1.1, False)):
        folder = bench / "problems" / key
        folder.mkdir(parents=True)
        (folder / "best.py").write_text("class ModelNew: pass\n")
        (folder / "run.json").write_text(json.dumps({"best_moves": ["m"], "final": {
            "speedup": ours, "kernelbench": {"speedup": ours}}, "best_tolerance_used": 0.9 if not correct else 0.01,
            "best_rechecked": not correct}))
        judged = out / "judged" / f"{key}.json"
        judged.parent.mkdir(parents=True)
        judged.write_text(json.dumps({"correctness": correct, "compiled": True, "speedup_vs_eager": theirs,
                                      "best_sha256": kb_judge.digest(folder / "best.py")}))
    document = kb_judge.agreement(bench, out)
    assert document["judged"] == 3 and document["correct_agree"] == 2 and document["stale"] == []
    assert document["speedup_compared"] == 3 and document["speedup_agree"] == 2  # 2.0 vs 1.5 is 33% apart
    # where the evaluator disagrees, how close our best came to the tolerance is beside it
    disagreed = next(r for r in document["problems"] if not r["kernelbench_correct"])
    assert (disagreed["tolerance_used"], disagreed["rechecked"]) == (0.9, True)
    # level2/2_B searched again (--rerun): its judgement was of the old best.py, so it is stale, not a verdict
    (bench / "problems" / "level2/2_B" / "best.py").write_text("class ModelNew: x = 1\n")
    document = kb_judge.agreement(bench, out)
    assert document["judged"] == 2 and document["stale"] == ["level2/2_B"]
    assert kb_judge.current_judgement(out, "level1/1_A", bench / "problems" / "level1/1_A" / "best.py")
    assert kb_judge.current_judgement(out, "level2/2_B", bench / "problems" / "level2/2_B" / "best.py") is None


def test_kb_judge_refuses_an_interpreter_without_the_evaluators_packages(tmp_path):
    """Without pydantic (a lent machine's python before scripts/gpu_env.sh) every judgement would end in an import
    error, which the agreement table reads as the evaluator calling each best incorrect: the script stops first."""
    import importlib.util
    import sys
    kb_judge = load_kb_judge()
    lacking = tmp_path / "python"
    lacking.write_text("#!/bin/sh\necho \"ModuleNotFoundError: No module named 'pydantic'\" >&2\nexit 1\n")
    lacking.chmod(0o755)
    assert kb_judge.missing_needs(str(lacking)) == "ModuleNotFoundError: No module named 'pydantic'"
    has_all = all(importlib.util.find_spec(name) for name in kb_judge.ORACLE_NEEDS)
    assert (kb_judge.missing_needs(sys.executable) == "") == has_all
