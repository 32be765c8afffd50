"""Compute-bound: a 4096 x 4096 x 4096 matrix product (137 GFLOP, 200 MB)."""
import torch
import torch.nn as nn

SIZE = 4096


class Model(nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(SIZE, SIZE), torch.randn(SIZE, SIZE)]


def get_init_inputs():
    return []
