"""Test problem (ours): data-dependent control flow, so torch.fx cannot trace forward."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x):
        if x.sum() > 0:
            return x * 2.0
        return x * 3.0


def get_inputs():
    return [torch.randn(64, 64)]


def get_init_inputs():
    return []
