"""Memory-bound: one fused-able elementwise pass over 64 M floats (256 MB in, 256 MB out)."""
import torch
import torch.nn as nn

N = 1 << 26


class Model(nn.Module):
    def forward(self, x):
        return x * 1.5 + 0.25


def get_inputs():
    return [torch.randn(N)]


def get_init_inputs():
    return []
