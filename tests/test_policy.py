"""Static policy checks (the source is parsed, never run)."""

from __future__ import annotations

from conftest import DATA, REPO
from kernelpro.harness.policy import check_candidate, declared_kernels, launched_custom_kernel

REFERENCE = (REPO / "examples" / "gelu_bias_scale.py").read_text()


def test_relaxed_accepts_anything_that_parses():
    assert check_candidate("import os\n", REFERENCE, "relaxed") is None
    assert check_candidate("def (:", REFERENCE, "relaxed").verdict == "compile_error"


def test_strict_accepts_the_shipped_kernels():
    for name in ("gelu_bias_scale_triton.py", "gelu_bias_scale_cuda.py"):
        assert check_candidate((REPO / "examples" / name).read_text(), REFERENCE, "strict") is None


def test_declared_kernels_from_cuda_triton_and_load_inline():
    assert declared_kernels((REPO / "examples" / "gelu_bias_scale_cuda.py").read_text()) == [
        "gelu_bias_scale", "gelu_bias_scale_kernel"]
    assert declared_kernels((REPO / "examples" / "gelu_bias_scale_triton.py").read_text()) == [
        "gelu_bias_scale_kernel"]
    assert declared_kernels((DATA / "candidates" / "native_cpu.py").read_text()) == ["linear_relu_residual"]


def test_pytorch_ops_inside_triton_kernels_do_not_count():
    source = (REPO / "examples" / "gelu_bias_scale_triton.py").read_text()
    assert "tl.math.erf" in source  # erf is computed inside the kernel, not by torch
    reference = REFERENCE.replace("torch.nn.functional.gelu(y)", "torch.erf(y)")
    assert check_candidate(source, reference, "strict") is None


def test_runtime_kernel_names_are_matched_against_the_source():
    source = (REPO / "examples" / "gelu_bias_scale_cuda.py").read_text()
    assert launched_custom_kernel(["gelu_bias_scale_kernel(float4 const*, float4 const*, float4*, long)"], source)
    assert not launched_custom_kernel(["void at::native::vectorized_elementwise_kernel<4>(...)"], source)
