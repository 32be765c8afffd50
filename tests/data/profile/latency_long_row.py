"""Latency-bound: softmax over one row of 4 M elements. PyTorch gives each row one block,
so a single block runs on one of the GPU's SMs: far from both ceilings, and long enough
that launch overhead does not matter."""
import torch
import torch.nn as nn

LENGTH = 1 << 22


class Model(nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(1, LENGTH)]


def get_init_inputs():
    return []
