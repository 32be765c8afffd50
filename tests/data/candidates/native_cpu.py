"""A real custom kernel on the CPU: relu(x @ W^T + b) + x in one C++ loop nest."""

import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>

torch::Tensor linear_relu_residual(torch::Tensor x, torch::Tensor weight, torch::Tensor bias) {
    auto xc = x.contiguous();
    auto wc = weight.contiguous();
    const int64_t rows = xc.size(0), width = xc.size(1), outs = wc.size(0);
    auto out = torch::empty({rows, outs}, xc.options());
    const float* xp = xc.data_ptr<float>();
    const float* wp = wc.data_ptr<float>();
    const float* bp = bias.data_ptr<float>();
    float* op = out.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r) {
        for (int64_t o = 0; o < outs; ++o) {
            float acc = bp[o];
            for (int64_t k = 0; k < width; ++k) acc += xp[r * width + k] * wp[o * width + k];
            op[r * outs + o] = (acc > 0.f ? acc : 0.f) + xp[r * width + o];
        }
    }
    return out;
}
"""

extension = load_inline(name="kp_test_linear_relu_residual", cpp_sources=[CPP_SOURCE],
                        functions=["linear_relu_residual"], extra_cflags=["-O2"], verbose=False)


class ModelNew(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return extension.linear_relu_residual(x, self.linear.weight, self.linear.bias)
