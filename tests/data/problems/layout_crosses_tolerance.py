"""Test problem (ours): in channels-last, every output element moves by 70% of its allowance (1e-4 + 1e-4 x |y|)
where the input's first element is under LIMIT, and by 130% (outside the tolerance) where it is not: near the
tolerance on some trials, past it on others (with LIMIT above 1, near it on every trial)."""
import torch
import torch.nn as nn

LIMIT = 0.5


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(4, 4, 1)

    def forward(self, x):
        y = self.conv(x)
        share = 0.7 if x.flatten()[0] < LIMIT else 1.3
        return y if x.is_contiguous() else y + share * (1e-4 + 1e-4 * y.abs())


def get_inputs():
    return [torch.rand(2, 4, 8, 8)]


def get_init_inputs():
    return []
