"""GPU: a candidate's Triton kernels compiled ahead by the build worker (harness/tritonwarm.py) are the ones the GPU
worker's first call finds, on KernelBench's level2/30 and level3/3 at their sizes. The candidate's calls in the
correctness phase are printed with and without (KERNELPRO_TRITON_PRECOMPILE=0), each from a cold build cache:
`python3 -m pytest -m gpu tests/gpu/test_gpu_precompile.py -s`."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")]

from conftest import kernelbench_file  # noqa: E402
from kernelpro.harness import EvalOptions, Evaluator, Verdict, load_problem  # noqa: E402
from kernelpro.harness.cache import BuildCache  # noqa: E402
from kernelpro.launch.device import target_device  # noqa: E402
from kernelpro.offline.compiler import Compiler  # noqa: E402

#: problem -> the moves built: two kernels, and 17 GEMM kernels (precompiled by default from 8)
CASES = {"level2/30_Gemm_GroupNorm_Hardtanh": ["triton_gemm", "fuse_reductions"],
         "level3/3_DeepNarrowMLP": ["triton_gemm"]}


@pytest.mark.parametrize("key", list(CASES))
@pytest.mark.parametrize("ahead", [True, False], ids=["compiled-ahead", "compiled-at-first-call"])
def test_kernels_compiled_ahead_are_found_by_the_first_call(key, ahead, tmp_path, monkeypatch):
    path = kernelbench_file(key)
    if path is None:
        pytest.skip(f"{key}: no KernelBench folder here")
    monkeypatch.setenv("KERNELPRO_TRITON_PRECOMPILE", "1" if ahead else "0")
    device, _ = target_device({"device": "cuda"})
    source, _, kernels = Compiler(path, 42, "train").build(CASES[key], {}, device)
    assert kernels
    problem = load_problem(path)
    with Evaluator("cuda", cache=BuildCache(tmp_path / "builds")) as evaluator:
        result = evaluator.evaluate(problem, source, EvalOptions(device="cuda", timing_trials=10))
        precompiled = evaluator.cache.entry(source).precompiled
    assert result.verdict is Verdict.CORRECT, result.reason
    if ahead:
        assert precompiled["stopped"] == "" and precompiled["kernels"] >= len(kernels), precompiled
    print(f"{key}: compiled {'ahead' if ahead else 'at the first call'}: build {result.build_s or 0:.1f} s, "
          f"correctness steps {result.correctness_s}")
