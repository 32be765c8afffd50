"""Test problem (ours): patterns that look simplifiable but are not exactly equivalent."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.linear = nn.Linear(8, 8)

    def forward(self, x):
        h = self.linear(x)
        a = h * 2.0 + h  # the linear output has two users: its weights cannot absorb the scale
        s = x.sum(dim=1, keepdim=True)  # dim 1 has size 8, not 1
        t = x.reshape(4, 2, 8).transpose(0, 1).transpose(1, 2)  # different dims: no cancellation
        return a, s, t


def get_inputs():
    return [torch.randn(8, 8)]


def get_init_inputs():
    return []
