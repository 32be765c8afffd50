"""A memory-bound chain: y = gelu(x + bias) * scale.

Eager runs three elementwise kernels, each reading and writing the whole 128 MB
tensor; a fused kernel reads it once and writes it once.
"""

import torch
import torch.nn as nn

batch_size = 4096
features = 8192


class Model(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x + self.bias
        y = torch.nn.functional.gelu(y)
        return y * self.scale


def get_inputs():
    return [torch.randn(batch_size, features)]


def get_init_inputs():
    return [features, 0.5]
