"""Test problem whose output does not depend on its input (degenerate)."""

import torch
import torch.nn as nn


class Model(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (x - x).sum(dim=1)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
