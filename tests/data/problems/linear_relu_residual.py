"""Test problem: y = relu(linear(x)) + x, small enough for CPU tests."""

import torch
import torch.nn as nn

batch = 16
width = 64


class Model(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.linear(x)) + x


def get_inputs():
    return [torch.randn(batch, width)]


def get_init_inputs():
    return [width]
