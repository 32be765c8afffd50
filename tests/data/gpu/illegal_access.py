import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CUDA_SOURCE = r"""
#include <torch/extension.h>
__global__ void scribble_kernel(float* out, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    out[i * 1000000007L] = 1.0f;  // far outside the allocation
}
torch::Tensor scribble(torch::Tensor x) {
    auto out = torch::empty_like(x);
    scribble_kernel<<<64, 256>>>(out.data_ptr<float>(), out.numel());
    return out;
}
"""

extension = load_inline(name="kp_gpu_test_illegal", cpp_sources=["torch::Tensor scribble(torch::Tensor x);"],
                        cuda_sources=[CUDA_SOURCE], functions=["scribble"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, features, scale):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))

    def forward(self, x):
        out = extension.scribble(x)
        torch.cuda.synchronize()
        return out
