"""Candidate for gelu_bias_scale: one fused CUDA kernel with 16-byte loads and stores.

Each thread handles four consecutive floats (one float4); the bias row is reused
through L1/L2. Requires features % 4 == 0, which the problem guarantees (8192).
"""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
#include <cuda_runtime.h>
#include <c10/cuda/CUDAException.h>

__device__ __forceinline__ float gelu_bias_scale_one(float x, float b, float scale) {
    float y = x + b;
    return 0.5f * y * (1.0f + erff(y * 0.70710678118654752f)) * scale;
}

// Fuses: x + bias, gelu (erf form), * scale. One float4 per thread.
__global__ void gelu_bias_scale_kernel(const float4* __restrict__ x, const float4* __restrict__ bias,
                                       float4* __restrict__ out, long n_vec, long features_vec,
                                       float scale) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    long stride = (long)gridDim.x * blockDim.x;
    for (; i < n_vec; i += stride) {
        float4 v = x[i];
        float4 b = bias[i % features_vec];
        float4 r;
        r.x = gelu_bias_scale_one(v.x, b.x, scale);
        r.y = gelu_bias_scale_one(v.y, b.y, scale);
        r.z = gelu_bias_scale_one(v.z, b.z, scale);
        r.w = gelu_bias_scale_one(v.w, b.w, scale);
        out[i] = r;
    }
}

torch::Tensor gelu_bias_scale(torch::Tensor x, torch::Tensor bias, double scale) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat, "x must be a float32 CUDA tensor");
    TORCH_CHECK(x.size(-1) % 4 == 0, "features must be a multiple of 4");
    auto xc = x.contiguous();
    auto out = torch::empty_like(xc);
    long n_vec = xc.numel() / 4;
    int threads = 256;
    int blocks = (int)std::min<long>((n_vec + threads - 1) / threads, 132L * 16);
    gelu_bias_scale_kernel<<<blocks, threads>>>(
        reinterpret_cast<const float4*>(xc.data_ptr<float>()),
        reinterpret_cast<const float4*>(bias.data_ptr<float>()),
        reinterpret_cast<float4*>(out.data_ptr<float>()), n_vec, xc.size(-1) / 4, (float)scale);
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return out;
}
"""

CPP_SOURCE = "torch::Tensor gelu_bias_scale(torch::Tensor x, torch::Tensor bias, double scale);"

extension = load_inline(name="kp_example_gelu_bias_scale", cpp_sources=[CPP_SOURCE],
                        cuda_sources=[CUDA_SOURCE], functions=["gelu_bias_scale"],
                        extra_cuda_cflags=["-O3"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return extension.gelu_bias_scale(x, self.bias, self.scale)
