"""Test problem (ours): a convolution's output flattened with `view`, which a channels-last tensor refuses."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3)

    def forward(self, x):
        y = self.conv(x)
        return y.view(y.size(0), -1)


def get_inputs():
    return [torch.rand(2, 3, 8, 8)]


def get_init_inputs():
    return []
