"""GPU: the reference's variants (harness/variants.py) on KernelBench's problems at their sizes, where the moves that
change only these settings were judged incorrect in budget-8 searches on an H200 (tf32_matmul on the GEMM problems,
53% and 63% of the output outside 1e-4; channels_last on the convolutions, 2%): the reference's own evaluation must
find eager failing under the same setting. `python3 -m pytest -m gpu tests/gpu/test_gpu_variants.py -s`; the problems
are read from $KERNELBENCH_DIR, else ../shared/kernelbench, else .kb/kernelbench."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from conftest import kernelbench_file  # noqa: E402
from kernelpro.harness import EvalOptions, Evaluator, load_problem  # noqa: E402
from kernelpro.harness.problem import reference_candidate  # noqa: E402
from kernelpro.harness.variants import VARIANTS  # noqa: E402

def _reference_evaluated(key: str, tmp_path, **options):
    """The reference of KernelBench's problem `key` at its sizes, evaluated as a search's root is, with `options`
    (the probes asked for); skipped where no KernelBench folder is here."""
    path = kernelbench_file(key)
    if path is None:
        pytest.skip(f"{key}: no KernelBench folder here")
    from kernelpro.harness.cache import BuildCache
    problem = load_problem(path)
    with Evaluator("cuda", cache=BuildCache(tmp_path / "builds"), spares=0) as evaluator:
        return evaluator.evaluate(problem, reference_candidate(problem),
                                  EvalOptions(device="cuda", timing_trials=10, **options))


CASES = {"level2/59_Matmul_Swish_Scaling": "tf32", "level2/30_Gemm_GroupNorm_Hardtanh": "tf32",
         "level2/57_Conv2d_ReLU_HardSwish": "channels_last"}


@pytest.mark.parametrize("key", list(CASES))
def test_the_reference_fails_under_the_setting_its_failed_move_changed(key, tmp_path):
    result = _reference_evaluated(key, tmp_path, variants=VARIANTS)
    print(key, {name: found.model_dump() for name, found in result.variants.items()})
    assert result.ok and result.variants[CASES[key]].outside_fraction > 0


def test_the_sensitivity_probe_finds_efficientnets_chaos_behind_its_tf32_convolutions(tmp_path):
    """level3/24_EfficientNetB2 at its sizes: cuDNN's TF32 convolutions round its input's last bit away and a global
    pool averages what is left, so noise on the inputs alone left its output unchanged on an H200, and 4 of its
    search's 8 candidates failed; with noise on every intermediate result the probe finds it rounding-sensitive."""
    result = _reference_evaluated("level3/24_EfficientNetB2", tmp_path, sensitivity=True)
    print(result.sensitivity)
    assert result.ok and result.sensitivity.outside_fraction > 0.5


def test_the_settings_are_timed_and_a_slow_transposed_3d_convolution_gains_under_both_settings_at_once(tmp_path):
    """level2/78 at its sizes: eager's ConvTranspose3d ran at about 6 TFLOPS on an H100; under channels-last alone
    and under cuDNN's timed choice alone it ran as fast as it is (1.00x and 0.98x, H100, 2026-12-06), and its
    searches' 9.5x to 10.3x candidates had both moves. The reference's evaluation times a few calls under each
    setting and under the pair: the pair must show a gain of at least VARIANT_GAIN, within the tolerance, so that
    the offline coder tries both at once first."""
    key = "level2/78_ConvTranspose3d_Max_Max_Sum"
    from kernelpro.facts import VARIANT_GAIN, problem_facts
    result = _reference_evaluated(key, tmp_path, variants=VARIANTS)
    print(key, {name: found.model_dump() for name, found in result.variants.items()})
    assert result.ok and all(found.speedup for found in result.variants.values())
    facts = problem_facts(result.model_dump(mode="json"))
    assert facts.gains_under("channels_last+cudnn_benchmark") >= VARIANT_GAIN, result.variants
