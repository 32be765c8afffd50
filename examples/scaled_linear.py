"""A linear layer with its output rescaled, offset and clamped, as in many
KernelBench-style "Gemm + elementwise" problems.

y = clamp(((x @ W^T + b) * 0.5 * 4.0 + 1.0 - 1.0) / temperature, -3, 3), where
temperature = exp(log_temperature) is a learned per-feature parameter. Eager runs
the GEMM and then five elementwise passes over the 4096 x 1024 output.
"""

import torch
import torch.nn as nn

BATCH = 4096
IN_FEATURES = 512
OUT_FEATURES = 1024


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.log_temperature = nn.Parameter(torch.zeros(out_features))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.linear(x) * 0.5 * 4.0
        y = y + 1.0 - 1.0
        y = y / torch.exp(self.log_temperature)
        return torch.clamp(y, -3.0, 3.0)


def get_inputs():
    return [torch.randn(BATCH, IN_FEATURES)]


def get_init_inputs():
    return [IN_FEATURES, OUT_FEATURES]
