"""GPU: graph rewrites that change which library kernels run (and the attention kernel that replaces a ReLU
attention's four), judged by the real harness on KernelBench's problems at
their sizes (fp32, training mode, sandboxed like any candidate), with their speed against eager printed:
`python3 -m pytest -m gpu tests/gpu/test_gpu_rewrites.py -s`. KernelBench's problems are read from
$KERNELBENCH_DIR, else ../shared/kernelbench, else .kb/kernelbench (the copy the device tool carries)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from conftest import kernelbench_file  # noqa: E402
from kernelpro.harness import EvalOptions, Evaluator, Verdict, load_problem  # noqa: E402
from kernelpro.launch.device import target_device  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402

CASES = {  # KernelBench problem: the move whose rule rewrites it
    "level3/31_VisionAttention": "attention_to_sdpa",  # nn.MultiheadAttention without its weights
    # (level3/13_DenseNet121TransitionLayer with pool_before_product, the 2x2 average pool before the 1x1 conv, was
    # 8.97% outside 1e-4 on an H200, 2026-12-05: cuDNN rounds the convolution's operands to TF32; the rule now
    # leaves fp32 convolutions alone)
    "level3/34_VanillaRNNHidden": "batch_step_products",  # 256 unrolled steps: the input's products in one
    # stride-1 transposed convolutions as convolutions: 1.29x and 1.16x on an H100, 2026-12-06 (`kernelpro eval`)
    "level1/64_conv_transposed_1D": "transposed_as_conv",
    "level1/74_conv_transposed_1D_dilated": "transposed_as_conv",
    "level3/50_ReLUSelfAttention": "fuse_reductions",  # ReLU attention as one kernel, the scores never written
    # its batch norms as row kernels: incorrect in the budget-8 bench of 2026-11-26 (H100) and here on an H200
    # (2026-12-05), correct in Triton's interpreter on the CPU (two layers at full size)
    "level3/14_DenseNet121DenseBlock": "fuse_reductions",
}
#: cases known to fail on the GPU, with why (the test still runs them and says how far off they are)
KNOWN_INCORRECT = {"level3/14_DenseNet121DenseBlock": "incorrect on an H100 and an H200; likely cuDNN's TF32 rounding "
                                                      "of each convolution after a batch norm that differs in its "
                                                      "last bits (not confirmed)"}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    from kernelpro.harness.cache import BuildCache
    with Evaluator("cuda", cache=BuildCache(tmp_path_factory.mktemp("builds"))) as evaluator:
        yield evaluator


@pytest.mark.parametrize("key", [pytest.param(key, marks=pytest.mark.xfail(reason=KNOWN_INCORRECT[key], strict=False))
                                 if key in KNOWN_INCORRECT else key for key in CASES])
def test_a_rewritten_kernelbench_problem_is_correct_on_the_gpu(key, evaluator):
    path = kernelbench_file(key)
    if path is None:
        pytest.skip(f"{key}: no KernelBench folder here")
    device, _ = target_device({"device": "cuda"})
    source, counts, _ = Compiler(path, 42, "train").build([CASES[key]], {}, device)
    assert counts[CASES[key]] >= 1, counts
    result = evaluator.evaluate(load_problem(path), source, EvalOptions(device="cuda", timing_trials=20))
    assert result.verdict is Verdict.CORRECT, result.reason
    print(f"{key} with {CASES[key]}: {result.speedup:.3f}x vs eager")
