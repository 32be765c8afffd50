"""The LLM coder's prompt facts, replayed from real evaluations of our suite's problems (CPU harness).

Each request is built the way the search builds it: from the reference's evaluation record and a
failed candidate's record, both produced here by the real harness. The prompts are checked for the
presence of each fact, not byte for byte. The worked examples are evaluated against their problem.
"""

from __future__ import annotations

import json
import re
from dataclasses import replace
from pathlib import Path

import pytest

from kernelpro import facts, worked_examples
from kernelpro.coder import CoderRequest
from kernelpro.harness import EvalOptions, PhaseLimits, Verdict
from kernelpro.harness.problem import Problem, load_problem, reference_candidate
from kernelpro.prompts import system_blocks, user_turn

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "benchmarks" / "suite"
FAST = EvalOptions(device="cpu", timing_trials=5, timing_budget_s=1.0,
                   limits=PhaseLimits(correctness_s=60, load_s=120))


def off_by_a_bit(problem: Problem) -> str:
    """A candidate that is the reference with its output scaled by 1.01: incorrect, everywhere a little."""
    return problem.source + ("\n\nclass ModelNew(Model):\n    def forward(self, *args):\n"
                             "        return super().forward(*args) * 1.01\n")


@pytest.fixture(scope="module")
def rmsnorm(cpu_evaluator, tmp_path_factory):
    """Our suite's RMSNorm at a CPU test's size (its GPU size takes minutes on two cores)."""
    source = (SUITE / "level1" / "2_RMSNorm.py").read_text()
    assert "rows = 16384" in source and "features = 4096" in source
    path = tmp_path_factory.mktemp("suite") / "2_RMSNorm.py"
    path.write_text(source.replace("rows = 16384", "rows = 384").replace("features = 4096", "features = 512"))
    problem = load_problem(path)
    reference = cpu_evaluator.evaluate(problem, reference_candidate(problem), FAST)
    assert reference.ok, reference.reason
    failed = cpu_evaluator.evaluate(problem, off_by_a_bit(problem), FAST)
    assert failed.verdict is Verdict.INCORRECT, failed.reason
    return problem, reference.model_dump(mode="json"), failed.model_dump(mode="json")


def replayed_request(problem: Problem, reference: dict, failed: dict, **fields) -> CoderRequest:
    return CoderRequest(
        problem_path=str(problem.path), problem_source=problem.source, parent_source=off_by_a_bit(problem),
        parent_state={}, parent_verdict="incorrect", parent_ms=None, parent_speedup=None, kind="repair",
        failure=f"{failed['verdict']}: {failed['reason']}", device="cpu",
        device_facts=facts.device_facts("cpu", reference), problem_facts=facts.problem_facts(reference),
        failure_facts=facts.failure_facts(failed), **fields)


def test_the_reference_record_gives_shapes_dtypes_work_and_times(rmsnorm):
    problem, reference, _ = rmsnorm
    found = facts.problem_facts(reference)
    assert found.inputs == ("float32 [384, 512]",) and found.outputs == ("float32 [384, 512]",)
    assert found.bytes_moved == 2 * 384 * 512 * 4 + 512 * 4  # input, output, the weight
    assert found.eager_ms and found.eager_ms > 0 and found.compile_ms is None  # torch.compile not asked for
    assert found.floor_ms is None  # no measured ceilings on the CPU: no floor is invented


def test_a_repair_prompt_carries_the_structured_failure(rmsnorm):
    problem, reference, failed = rmsnorm
    request = replayed_request(problem, reference, failed)
    prefix = "\n".join(block["text"] for block in system_blocks(request, ["fuse_elementwise"]))
    turn = user_turn(request)
    assert "inputs (get_inputs(), in order): float32 [384, 512]" in prefix
    assert "eager takes" in prefix and "Device: cpu" in prefix
    assert "training mode" in prefix and "A cuda candidate" in prefix
    assert "verdict incorrect in phase correctness" in turn
    assert "of elements outside atol = rtol = 0.0001" in turn
    assert "Being evaluated elsewhere" not in turn
    assert "Being evaluated elsewhere in this run, outcome not yet known (prefer something else): fuse_pointwise" in \
        user_turn(replace(request, pending=("fuse_pointwise",)))
    worst = re.search(r"worst element at index \[(\d+), (\d+)\]: expected (\S+), got (\S+)", turn)
    assert worst, turn
    expected, got = float(worst.group(3)), float(worst.group(4))
    assert got == pytest.approx(expected * 1.01, rel=1e-3)  # the element the record names, as it was
    assert problem.source.strip() in prefix and problem.source.strip() not in turn.replace(
        off_by_a_bit(problem).strip(), "")  # the reference in the cached prefix, not again in the turn


def test_measured_ceilings_give_a_floor_and_the_parent_and_best_against_it(rmsnorm):
    """On a GPU the reference's record carries the measured bandwidth, so the floor and each
    candidate's distance from it are stated; the profiler's ceilings, when present, come first."""
    problem, reference, failed = rmsnorm
    bandwidth = 2500.0  # a record as the harness writes it on a GPU: measured bandwidth, the floor from it
    floor_ms = reference["floor"]["bytes_moved"] / (bandwidth * 1e9) * 1e3
    gpu = json.loads(json.dumps(reference))
    gpu["floor"].update(bandwidth_gbps=bandwidth, flop_rate_tflops=50.0, memory_floor_ms=floor_ms, floor_ms=floor_ms)
    gpu["device_name"] = "a GPU"
    gpu["reference_compile"] = dict(gpu["reference"], median_ms=3 * floor_ms)
    ceilings = {"bandwidth_gbps": 3000.0, "fp32_tflops": 51.0, "tf32_tflops": 400.0, "bf16_tflops": 700.0,
                "fp16_tflops": 700.0, "sm_count": 132, "l2_bytes": 50 * 2**20, "smem_per_sm_bytes": 228 * 1024}
    request = CoderRequest(
        problem_path="p.py", problem_source=problem.source, parent_source=problem.source, parent_state={},
        parent_verdict="correct", parent_ms=4 * floor_ms, parent_speedup=1.5, kind="refine", device="cuda",
        device_facts=facts.device_facts("cuda", gpu, ceilings), problem_facts=facts.problem_facts(gpu),
        best_source="# the best so far\n", best_ms=2 * floor_ms, best_speedup=3.0)
    prefix = "\n".join(block["text"] for block in system_blocks(request, ["fuse_elementwise"]))
    turn = user_turn(request)
    assert "memory bandwidth 3000 GB/s" in prefix and "TF32 400.0 TFLOP/s" in prefix
    assert "132 SMs, L2 50 MiB, shared memory 228 KiB per SM" in prefix
    assert f"roofline floor {floor_ms:.4f} ms" in prefix and f"torch.compile takes {3 * floor_ms:.4f} ms" in prefix
    assert "1.50x over eager, 4.0x the roofline floor" in turn
    assert "Best candidate of this run so far" in turn and "3.00x over eager, 2.0x the roofline floor" in turn
    fallback = facts.device_facts("cuda", gpu)  # no profiler ceilings: the harness's own measurement
    assert fallback.bandwidth_gbps == bandwidth and "harness" in fallback.source
    assert fallback.tf32_tflops == 50.0 and fallback.fp32_tflops is None  # at fp32 the floor's rate is TF32's


def test_a_compile_error_names_its_first_error_line(cpu_evaluator, rmsnorm):
    problem, reference, _ = rmsnorm
    broken = problem.source + "\n\nclass ModelNew(Model):\n    def forward(self, x)\n        return x\n"
    result = cpu_evaluator.evaluate(problem, broken, FAST)
    assert result.verdict is Verdict.COMPILE_ERROR
    text = facts.failure_text(facts.failure_facts(result.model_dump(mode="json")))
    assert "verdict compile_error in phase static" in text and "syntax" in text.lower()


@pytest.mark.parametrize("backend", ["pytorch", "triton"])
def test_the_worked_examples_are_correct_in_the_harness(backend, cpu_evaluator, tmp_path):
    """The prompt's examples pass the real harness (Triton through its interpreter on the CPU; the
    CUDA one is evaluated by the GPU tests)."""
    path = tmp_path / "relu_scale_add.py"
    path.write_text(worked_examples.PROBLEM)
    problem = load_problem(path)
    result = cpu_evaluator.evaluate(problem, worked_examples.EXAMPLES[backend], FAST)
    assert result.verdict is Verdict.CORRECT, result.reason
    assert "class ModelNew" in worked_examples.prompt_text()


def test_a_turn_over_its_size_cap_drops_the_best_source_first_and_cuts_the_parent_last():
    """Generated candidates of whole models run to hundreds of kilobytes (the offline coder's cuda_kernels
    candidate of level3/10_ResNet101: 581,342 characters). Under the cap a turn is whole; over it, the best
    candidate's source gives way first (its timing stays), and a parent that alone is over the cap keeps its
    head and tail around a marker."""
    from kernelpro.prompts import USER_TURN_CHARS
    parent = "# parent head\n" + "x = 1\n" * 5000 + "# parent tail\n"
    best = "# best head\n" + "y = 2\n" * 5000
    request = CoderRequest(problem_path="p.py", problem_source="# reference\n", parent_source=parent,
                           parent_state={}, parent_verdict="correct", parent_ms=2.0, parent_speedup=1.5,
                           kind="refine", guidance="use shared memory", tried=(("fuse_pointwise", "1.2x"),),
                           best_source=best, best_ms=1.0, best_speedup=3.0)
    whole = user_turn(request)
    assert parent in whole and best in whole and len(whole) < USER_TURN_CHARS
    capped = user_turn(request, cap=len(whole) - 1000)
    assert len(capped) <= len(whole) - 1000
    assert parent in capped and "# best head" not in capped
    assert f"its source ({len(best)} characters) is left out" in capped and "3.00x over eager" in capped
    assert "use shared memory" in capped and "fuse_pointwise: 1.2x" in capped  # only what had to give way
    tight = user_turn(request, cap=12_000)
    assert len(tight) <= 12_000 + 200  # the marker and the parts' separators
    assert "# parent head" in tight and "# parent tail" in tight and "characters of this source left out" in tight
    assert "Improve the parent" in tight
