"""GPU tests: run on the lent H100 with `pytest -m gpu` (scripts/gpu_check.sh)."""

from __future__ import annotations

import statistics
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, Verdict, load_problem  # noqa: E402

REPO = Path(__file__).parent.parent.parent
DATA = REPO / "tests" / "data" / "gpu"
EXAMPLES = REPO / "examples"
OPTIONS = EvalOptions(device="cuda", timing_trials=30, limits=PhaseLimits(load_s=600, correctness_s=120))


@pytest.fixture(scope="module")
def gpu_evaluator(tmp_path_factory):
    from kernelpro.harness.cache import BuildCache
    evaluator = Evaluator("cuda", cache=BuildCache(tmp_path_factory.mktemp("builds")), spares=1)
    yield evaluator
    evaluator.close()


@pytest.fixture(scope="module")
def gelu_problem():
    return load_problem(EXAMPLES / "gelu_bias_scale.py")


def evaluate(evaluator, problem, path: Path, **updates):
    return evaluator.evaluate(problem, path.read_text(), OPTIONS.model_copy(update=updates))


def test_illegal_memory_access_is_contained(gpu_evaluator, gelu_problem):
    result = evaluate(gpu_evaluator, gelu_problem, DATA / "illegal_access.py")
    assert result.verdict in (Verdict.RUNTIME_ERROR, Verdict.CRASH), result.reason
    # The next evaluation gets a fresh worker and a clean CUDA context.
    after = evaluate(gpu_evaluator, gelu_problem, EXAMPLES / "gelu_bias_scale_triton.py")
    assert after.verdict is Verdict.CORRECT, after.reason


def test_side_stream_early_return_is_rejected(gpu_evaluator, gelu_problem):
    result = evaluate(gpu_evaluator, gelu_problem, DATA / "side_stream_early_return.py")
    assert result.verdict is Verdict.REJECTED, result.reason
    assert "changed after forward returned" in result.reason


def test_uncomputed_empty_after_reference_fails(gpu_evaluator, gelu_problem):
    result = evaluate(gpu_evaluator, gelu_problem, DATA / "empty_after_reference.py")
    assert result.verdict is Verdict.INCORRECT, result.reason


@pytest.mark.parametrize("name", ["gelu_bias_scale_triton.py", "gelu_bias_scale_cuda.py"])
def test_real_triton_and_load_inline_candidates(gpu_evaluator, gelu_problem, name):
    result = evaluate(gpu_evaluator, gelu_problem, EXAMPLES / name, policy="strict")
    assert result.verdict is Verdict.CORRECT, result.reason
    assert result.custom_kernels, "the profiler saw no custom kernel"
    assert result.floor is not None and result.floor.memory_floor_ms is not None
    print(f"{name}: {result.speedup:.2f}x vs eager, {result.candidate.median_ms:.4f} ms, "
          f"floor {result.floor.floor_ms:.4f} ms")


def test_strict_rejects_a_kernel_that_never_runs(gpu_evaluator, gelu_problem):
    result = evaluate(gpu_evaluator, gelu_problem, DATA / "unused_kernel_strict.py", policy="strict")
    assert result.verdict is Verdict.REJECTED and "no custom kernel ran" in result.reason


def test_build_is_cached_on_reevaluation(gpu_evaluator, gelu_problem):
    first = evaluate(gpu_evaluator, gelu_problem, EXAMPLES / "gelu_bias_scale_cuda.py")
    again = evaluate(gpu_evaluator, gelu_problem, EXAMPLES / "gelu_bias_scale_cuda.py")
    assert first.verdict is Verdict.CORRECT and again.verdict is Verdict.CORRECT
    assert again.build_cached is True and again.build_s == 0.0


def test_timing_is_stable_for_millisecond_kernels(gpu_evaluator):
    problem = load_problem(DATA / "matmul_2048.py")
    source = ("import torch\nclass ModelNew(torch.nn.Module):\n"
              "    def forward(self, a, b):\n        return torch.mm(a, b)\n")
    medians, cvs = [], []
    for _ in range(5):
        result = gpu_evaluator.evaluate(problem, source, OPTIONS.model_copy(update={"tolerance": 1e-2}))
        assert result.verdict is Verdict.CORRECT, result.reason
        assert result.candidate.median_ms >= 1.0
        medians.append(result.candidate.median_ms)
        cvs.append(result.candidate.cv)
    across = statistics.pstdev(medians) / statistics.fmean(medians)
    print(f"medians {medians}, per-run CV of samples {cvs}, CV across runs {across:.4f}")
    assert across < 0.02


def test_fp32_compute_ceiling_is_the_tf32_rate_and_leaves_the_flag():
    """A TF32 candidate must not sit under the fp32 floor; the candidate's flag is put back."""
    from kernelpro.harness.ceilings import measure
    flags = torch.backends.cuda.matmul
    flags.allow_tf32 = False
    measured = measure("cuda")
    assert flags.allow_tf32 is False
    assert measured.fastest_tflops("fp32") == measured.tf32_tflops > 1.5 * measured.fp32_tflops
    assert measured.device_name == torch.cuda.get_device_name(0) and measured.sm_count


@pytest.mark.parametrize("backend", ["pytorch", "triton", "cuda"])
def test_the_prompts_worked_examples_are_correct_on_the_gpu(backend, gpu_evaluator, tmp_path):
    """The LLM coder's worked examples (kernelpro/worked_examples.py) in the form the harness accepts."""
    from kernelpro import worked_examples
    path = tmp_path / "relu_scale_add.py"
    path.write_text(worked_examples.PROBLEM)
    result = gpu_evaluator.evaluate(load_problem(path), worked_examples.EXAMPLES[backend], OPTIONS)
    assert result.verdict is Verdict.CORRECT, result.reason


def test_the_launch_profile_tells_a_launch_bound_reference_from_a_busy_one(gpu_evaluator, tmp_path):
    """Forty tiny adds leave the GPU idle most of each call; one large matrix product keeps it busy."""
    from kernelpro.harness.problem import reference_candidate
    shapes = {"tiny": ("x = x + 1.0\n" * 40, "torch.randn(256)"),
              "busy": ("x = x @ x\n", "torch.randn(4096, 4096)")}
    found = {}
    for name, (body, make) in shapes.items():
        path = tmp_path / f"{name}.py"
        lines = "".join(f"        {line}\n" for line in body.splitlines())
        path.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n    def forward(self, x):\n"
                        f"{lines}        return x\n\n\ndef get_inputs():\n    return [{make}]\n\n\n"
                        "def get_init_inputs():\n    return []\n")
        problem = load_problem(path)
        found[name] = gpu_evaluator.evaluate(problem, reference_candidate(problem),
                                             OPTIONS.model_copy(update={"launch_profile": True})).launch_profile
    print({name: profile.model_dump() for name, profile in found.items()})
    assert found["tiny"].launches_per_call == 40 and found["tiny"].busy_fraction < 0.5
    assert found["busy"].launches_per_call >= 1 and found["busy"].busy_fraction > 0.5


def test_the_ceilings_are_measured_once_by_the_reference_and_kept(tmp_path, gelu_problem):
    """The reference's own evaluation (no candidate code in its worker) measures the device's ceilings; later
    evaluations on the same evaluator use them instead of measuring in a candidate's worker."""
    from kernelpro.harness.cache import BuildCache
    from kernelpro.harness.ceilings import KeptCeilings
    from kernelpro.harness.problem import reference_candidate
    store = KeptCeilings()
    with Evaluator("cuda", cache=BuildCache(tmp_path / "builds"), spares=1, ceilings=store) as evaluator:
        # a candidate before any reference: its own worker's ceilings, not kept
        candidate = evaluate(evaluator, gelu_problem, EXAMPLES / "gelu_bias_scale_triton.py").floor
        assert not store.kept and candidate.bandwidth_gbps
        reference = evaluator.evaluate(gelu_problem, reference_candidate(gelu_problem), OPTIONS).floor
        assert [kept.bandwidth_gbps for kept in store.kept.values()] == [reference.bandwidth_gbps]
        later = evaluate(evaluator, gelu_problem, EXAMPLES / "gelu_bias_scale_triton.py").floor
        assert (later.bandwidth_gbps, later.flop_rate_tflops) == (reference.bandwidth_gbps, reference.flop_rate_tflops)


def test_a_candidate_near_the_tolerance_is_rechecked_on_the_gpu_and_one_past_it_fails(gpu_evaluator, gelu_problem):
    """The reference with its outputs moved by a share of their allowance (atol + rtol x |y|): at 70% it stays correct
    after 20 more trials, untimed, whose time counts as `recheck`; at 150% it fails its first trial."""
    def off_by(share: float) -> str:
        return gelu_problem.source + (
            "\n\nclass ModelNew(Model):\n    def forward(self, *args):\n"
            "        y = super().forward(*args)\n"
            f"        return y + (y.abs() + 1.0) * {share * 1e-4!r}\n")
    near = gpu_evaluator.evaluate(gelu_problem, off_by(0.7), OPTIONS)
    assert near.verdict is Verdict.CORRECT and "marginal_rechecked" in near.flags, near.reason
    assert 0.65 < near.tolerance_used < 0.75 and near.correct_trials == OPTIONS.correct_trials + 20
    assert near.phase_s["recheck"] > 0 and near.speedup is not None
    past = gpu_evaluator.evaluate(gelu_problem, off_by(1.5), OPTIONS)
    assert past.verdict is Verdict.INCORRECT and "trial 0" in past.reason, past.reason
