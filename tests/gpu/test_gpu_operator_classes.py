"""GPU: the level-1 operator classes added on 2026-11-25 (scans, vector norms, losses written out, a pool alone,
split-K and matrix-vector GEMMs; later the split variant's one-pass statistics, int64 pointwise indexing, the
looped variant's online softmax and a convolution's bias in the kernel after it) as
compiled kernels, judged by the real harness at fp32 in training mode,
sandboxed like any candidate. The CPU tests check the same kernels in Triton's interpreter; this checks the
compiled ones (tl.cumsum/tl.cumprod, the split-K partial kernel, the masked 32-wide tiles) and prints their
speed against eager: `GPU_TESTS_K=operator_classes bash scripts/gpu_check.sh`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from kernelpro.harness import EvalOptions, Evaluator, PhaseLimits, Verdict, load_problem  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402
from kernelpro.launch.device import target_device  # noqa: E402

CASES = {  # name: (forward, inputs, init, moves, the kernel kind expected)
    "cumsum_reverse": ("return torch.cumsum(x.flip(1), dim=1).flip(1)", ["torch.rand(4096, 8192)"], "",
                       ["fuse_reductions"], "scan"),
    "cumsum_exclusive": ("return torch.cat((torch.zeros_like(x.select(1, 0).unsqueeze(1)), "
                         "torch.cumsum(x.narrow(dim=1, start=0, length=x.size(1) - 1), dim=1)), dim=1)",
                         ["torch.rand(4096, 8192)"], "", ["fuse_reductions"], "scan"),
    "masked_cumprod": ("return torch.cumprod(1.0 + 0.001 * x * (y > 0.5), dim=1)", ["torch.rand(2048, 3000)",
                                                                                     "torch.rand(2048, 3000)"], "",
                       ["fuse_reductions"], "scan"),
    "frobenius": ("return x / torch.norm(x, p='fro')", ["torch.rand(64, 64, 256, 256)"], "", ["fuse_reductions"],
                  "row"),
    "l2_rows": ("return x / torch.norm(x, p=2, dim=1, keepdim=True)", ["torch.rand(4096, 16384)"], "",
                ["fuse_reductions"], "row"),
    "triplet": ("return self.f(x, y, z)", ["torch.rand(8192, 4096)", "torch.rand(8192, 4096)",
                                           "torch.rand(8192, 4096)"], "self.f = nn.TripletMarginLoss(margin=1.0)",
                ["fuse_reductions"], "row"),
    "max_pool": ("return self.p(x)", ["torch.rand(16, 64, 256, 256)"],
                 "self.p = nn.MaxPool2d(kernel_size=4, stride=1, padding=1)", ["fuse_pointwise"], "pointwise"),
    "split_k": ("return torch.relu(x @ y)", ["torch.rand(256, 65536)", "torch.rand(65536, 256)"], "",
                ["triton_gemm"], "gemm"),
    "matrix_vector": ("return x @ y", ["torch.rand(4096, 16384)", "torch.rand(16384, 1)"], "", ["triton_gemm"],
                      "gemm"),
    "persistent_pointwise": ("return torch.relu(x * 2.0 + y) - 1.0", ["torch.rand(8192, 8192)", "torch.rand(8192)"],
                             "", ["fuse_pointwise", "persistent_kernels"], "pointwise"),
    # the split variant's one-pass statistics (two-level Welford), KernelBench level2/73's norm at its size
    "batch_norm_split_welford": ("return self.bn(x) * 2.0", ["torch.rand(128, 64, 126, 126)"],
                                 "self.bn = nn.BatchNorm2d(64)", ["fuse_reductions"], "row"),
    # past 2^31 elements: int64 indexing (KernelBench level1/45's shape: 16 GiB of input)
    "avg_pool_int64": ("return self.p(x)", ["torch.rand(16, 64, 2048, 2048)"], "self.p = nn.AvgPool2d(11)",
                       ["fuse_pointwise"], "pointwise"),
    # a softmax over spatial dims flattened for it, with the clamp and scale around it (level2/38's, at its size)
    "flattened_softmax": ("b, c, d, h, w = x.shape\n        y = torch.softmax(torch.clamp(x, 0.0, 1.0).view(b, c, -1), dim=2)"
                          "\n        return y.view(b, c, d, h, w) * self.scale", ["torch.randn(32, 64, 32, 64, 64)"],
                          "self.scale = nn.Parameter(torch.ones(1, 64, 1, 1, 1))", ["fuse_reductions"], "row"),
    # rows too long for registers: the looped variant's online softmax reads each row twice (level1/24's kind)
    "log_softmax_online": ("return torch.log_softmax(x, dim=1)", ["torch.randn(4096, 65536)"], "",
                           ["fuse_reductions"], "row"),
    # a transposed convolution's bias in the pointwise kernel after it (level2/100 at half its batch)
    "conv_transpose_bias_epilogue": ("return torch.clamp(self.c(x), min=-1.0) / 2.0",
                                     ["torch.rand(8, 64, 24, 48, 48)"],
                                     "self.c = nn.ConvTranspose3d(64, 128, 3, stride=2, padding=1)",
                                     ["fuse_pointwise"], "pointwise"),
}


@pytest.fixture(scope="module")
def evaluator(tmp_path_factory):
    from kernelpro.harness.cache import BuildCache
    with Evaluator("cuda", cache=BuildCache(tmp_path_factory.mktemp("builds"))) as evaluator:
        yield evaluator


def problem(tmp_path, forward: str, inputs: list[str], init: str):
    args = ", ".join("xyz"[:len(inputs)])
    path = tmp_path / "problem.py"
    path.write_text("\n".join([
        "import torch", "import torch.nn as nn", "import torch.nn.functional as F", "", "",
        "class Model(nn.Module):", "    def __init__(self):", "        super().__init__()",
        f"        {init}" if init else "", "", f"    def forward(self, {args}):", f"        {forward}", "", "",
        f"def get_inputs():\n    return [{', '.join(inputs)}]", "", "def get_init_inputs():\n    return []", ""]))
    return path


@pytest.mark.parametrize("name", list(CASES))
def test_operator_class_candidates_are_correct_on_the_gpu(name, evaluator, tmp_path):
    forward, inputs, init, moves, kind = CASES[name]
    path = problem(tmp_path, forward, inputs, init)
    device, _ = target_device({"device": "cuda"})
    source, _, kernels = Compiler(path, 42, "train").build(moves, {}, device)
    assert kind in [k["kind"] for k in kernels], kernels
    options = EvalOptions(device="cuda", timing_trials=20, limits=PhaseLimits(load_s=600, correctness_s=300))
    result = evaluator.evaluate(load_problem(path), source, options)
    assert result.verdict is Verdict.CORRECT, result.reason
    print(f"{name}: {result.speedup:.3f}x vs eager ({[k['config'] for k in kernels]})")
