"""GPU: `triton_conv` candidates (implicit GEMM, depthwise, transposed) judged by the real harness at bf16 and fp16,
and at fp32 on KernelBench's convolutions where eager matched the kernel's TF32 rounding.

The CPU tests check the kernels in Triton's interpreter at float32 and fp16; bf16 (which the
interpreter does not compute) and the compiled kernels (tl.dot on tensor cores) are checked here,
at the precision's tolerance, in training mode, sandboxed like any candidate.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from conftest import conv_problem  # noqa: E402
from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, Verdict, load_problem  # noqa: E402
from kernelpro.offline.codegen import conv_gemm  # noqa: E402
from kernelpro.launch.device import Device
from kernelpro.offline.compiler import Compiler  # noqa: E402

CASES = {
    "conv2d-gelu": dict(nd=2, batch=8, c_in=32, c_out=64, size=(40, 36), kernel=(3, 3), stride=(1, 1),
                        padding=(1, 1), dilation=(1, 1), groups=1, bias=True, epilogue="F.gelu(h) * y"),
    "conv2d-strided-dilated-grouped": dict(nd=2, batch=4, c_in=24, c_out=48, size=(33, 29), kernel=(3, 5),
                                           stride=(2, 1), padding=(2, 1), dilation=(2, 1), groups=3, bias=False,
                                           epilogue="torch.relu(h + y)"),
    "depthwise": dict(nd=2, batch=4, c_in=32, c_out=64, size=(31, 37), kernel=(3, 3), stride=(1, 1), padding=(1, 1),
                      dilation=(1, 1), groups=32, bias=True, epilogue="h * torch.sigmoid(h)"),
    "conv3d": dict(nd=3, batch=2, c_in=8, c_out=32, size=(10, 12, 14), kernel=(3, 3, 3), stride=(1, 1, 1),
                   padding=(1, 0, 1), dilation=(1, 1, 1), groups=1, bias=True, epilogue="(torch.tanh(h), h - y)"),
    "transposed2d-strided": dict(nd=2, batch=4, c_in=32, c_out=48, size=(17, 21), kernel=(3, 4), stride=(2, 2),
                                 padding=(1, 1), dilation=(1, 1), groups=1, bias=True, epilogue="torch.relu(h) - y",
                                 output_padding=(1, 0)),
    "transposed3d-grouped-dilated": dict(nd=3, batch=2, c_in=16, c_out=32, size=(5, 6, 7), kernel=(3, 3, 3),
                                         stride=(1, 2, 1), padding=(1, 1, 2), dilation=(1, 1, 2), groups=2,
                                         bias=False, epilogue="h * 2.0", output_padding=(0, 1, 0)),
    "conv1d-bare": dict(nd=1, batch=4, c_in=16, c_out=40, size=(301,), kernel=(5,), stride=(2,), padding=(2,),
                        dilation=(1,), groups=1, bias=True, epilogue="h"),
}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    from kernelpro.harness.cache import BuildCache
    with Evaluator("cuda", cache=BuildCache(tmp_path_factory.mktemp("builds"))) as evaluator:
        yield evaluator


@pytest.mark.parametrize("precision", ["bf16", "fp16"])
@pytest.mark.parametrize("name", list(CASES))
def test_triton_conv_candidates_are_correct_on_the_gpu(name, precision, evaluator, tmp_path, monkeypatch):
    monkeypatch.setattr(conv_gemm, "TRANSPOSED", True)  # on by default; kept for runs that turn it off
    path = conv_problem(tmp_path, **CASES[name])
    source, counts, kernels = Compiler(path, 42, "train").build(["triton_conv"], {}, Device(), precision)
    assert counts["triton_conv"] == 1
    options = EvalOptions(device="cuda", precision=precision, timing_trials=10,
                          limits=PhaseLimits(load_s=600, correctness_s=120))
    result = evaluator.evaluate(load_problem(path), source, options)
    assert result.verdict is Verdict.CORRECT, result.reason


KERNELBENCH_CONVS = ["level1/64_conv_transposed_1D", "level1/74_conv_transposed_1D_dilated",
                     "level1/62_conv_standard_2D__square_input__asymmetric_kernel", "level2/57_Conv2d_ReLU_HardSwish",
                     "level2/78_ConvTranspose3d_Max_Max_Sum"]


@pytest.mark.parametrize("key", KERNELBENCH_CONVS)
def test_at_fp32_the_kernel_passes_where_eager_matched_its_rounding(key, evaluator):
    """At fp32 the kernel computes a convolution on operands rounded to TF32 to nearest, which is the reference's
    variant `tf32_operands`: where eager matched itself under that variant (KernelBench's sizes, cuDNN's own
    choice of kernel), the candidate must be correct at fp32's 1e-4. Where eager did not, the offline coder does not
    offer the move and nothing is claimed: the test says what the variant found and skips."""
    from conftest import kernelbench_file
    from kernelpro.harness.problem import reference_candidate
    path = kernelbench_file(key)
    if path is None:
        pytest.skip(f"{key}: no KernelBench folder here")
    problem = load_problem(path)
    reference = evaluator.evaluate(problem, reference_candidate(problem),
                                   EvalOptions(device="cuda", timing_trials=10, variants=("tf32_operands",)))
    found = reference.variants.get("tf32_operands")
    print(key, found, "| truncated operands instead:", _truncated_match(path))
    assert found is not None, "not measured: on a GPU the probe runs at any size its reservation holds"
    if found.outside_fraction or found.error:
        pytest.skip(f"{key}: eager under tf32_operands: {found}")
    source, counts, _ = Compiler(path, 42, "train").build(["triton_conv"], {}, Device(), "fp32")
    assert counts["triton_conv"] >= 1
    result = evaluator.evaluate(problem, source, EvalOptions(device="cuda", timing_trials=10,
                                                             limits=PhaseLimits(load_s=600, correctness_s=300)))
    print(key, result.verdict, result.reason, result.speedup)
    assert result.verdict is Verdict.CORRECT, result.reason


def _truncated_match(path) -> str:
    """For the record beside the variant: the share of eager's output outside 1e-4 when each non-depthwise
    convolution's operands are truncated to TF32 instead (the tensor cores' own reading of raw float32 bits), which
    says which way cuDNN rounds where the variant's nearest rounding does not match."""
    from kernelpro.harness import variants
    from kernelpro.harness.compare import outside_tolerance
    from kernelpro.harness.modelio import import_file

    def truncate(x):
        return (x.to(memory_format=torch.contiguous_format, copy=True).view(torch.int32)
                .bitwise_and_(-0x2000).view(torch.float32))
    module = import_file("kernelpro_truncated_probe", path)
    torch.manual_seed(42)
    model = module.Model(*module.get_init_inputs()).cuda()
    torch.manual_seed(42)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in module.get_inputs()]
    with torch.no_grad():
        expected = model(*inputs)
        with variants.rounded_operands(truncate, model, inputs) as (same, moved):
            got = same(*moved)
    bad, total, largest = outside_tolerance(expected, got, 1e-4)
    return f"{bad / total:.2%} outside, largest {largest:.2g}"
