import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """GroupNorm then SiLU, as in a diffusion U-Net block."""

    def __init__(self, groups: int, channels: int):
        super().__init__()
        self.norm = nn.GroupNorm(groups, channels)

    def forward(self, x):
        return F.silu(self.norm(x))


batch = 32
channels = 256
groups = 32
size = 64


def get_inputs():
    return [torch.randn(batch, channels, size, size)]


def get_init_inputs():
    return [groups, channels]
