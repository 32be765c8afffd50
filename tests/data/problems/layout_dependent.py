"""Test problem (ours): a forward whose result depends on its input's memory format, as a stand-in for a convolution
whose channels-last algorithm rounds otherwise on the GPU (on the CPU both layouts give the same bits)."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        return y * (1.0 if x.is_contiguous() else 1.01)


def get_inputs():
    return [torch.rand(2, 4, 8, 8)]


def get_init_inputs():
    return []
