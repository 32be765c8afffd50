"""Short worked examples for the LLM coder's prompt: one problem, and a candidate per backend in the
form kernelpro's harness accepts (a standalone module defining `ModelNew`, same constructor and
forward as `Model`). The tests evaluate each against the problem in the real harness (PyTorch and
Triton's interpreter on the CPU, all three on a GPU), so the prompt never teaches a broken form.
"""

from __future__ import annotations

PROBLEM = '''import torch
import torch.nn as nn


class Model(nn.Module):
    """y = relu(x) * scale + x"""

    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x) * self.scale + x


def get_inputs():
    return [torch.randn(64, 4096)]


def get_init_inputs():
    return [0.5]
'''

PYTORCH = '''import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # one fewer temporary: x + scale * relu(x), the multiply-add fused by torch.addcmul
        return torch.addcmul(x, torch.relu(x), torch.full((), self.scale, dtype=x.dtype, device=x.device))
'''

TRITON = '''import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_scale_add(x_ptr, out_ptr, n, scale, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    tl.store(out_ptr + offsets, tl.maximum(x, 0.0) * scale + x, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        relu_scale_add[(triton.cdiv(n, 1024),)](x, out, n, self.scale, BLOCK=1024)
        return out
'''

CUDA = '''import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

SOURCE = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_scale_add(const float* __restrict__ x, float* __restrict__ out, long n, float scale) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; out[i] = fmaxf(v, 0.f) * scale + v; }
}

torch::Tensor run(torch::Tensor x, double scale) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "a float32 CUDA tensor");
    auto input = x.contiguous();
    auto out = torch::empty_like(input);
    long n = input.numel();
    auto stream = at::cuda::getCurrentCUDAStream();
    relu_scale_add<<<(n + 255) / 256, 256, 0, stream>>>(input.data_ptr<float>(), out.data_ptr<float>(), n,
                                                        (float)scale);
    return out;
}
"""

module = load_inline(name="relu_scale_add_ext", cpp_sources="torch::Tensor run(torch::Tensor x, double scale);",
                     cuda_sources=SOURCE, functions=["run"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, scale: float):
        super().__init__()
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return module.run(x, self.scale)
'''

EXAMPLES = {"pytorch": PYTORCH, "triton": TRITON, "cuda": CUDA}


def prompt_text() -> str:
    """The examples as the prompt shows them."""
    parts = ["Worked examples of the accepted form, for this problem:\n```python\n" + PROBLEM + "```"]
    for backend, source in EXAMPLES.items():
        parts.append(f"A {backend} candidate:\n```python\n{source}```")
    return "\n\n".join(parts)
