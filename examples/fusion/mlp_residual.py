import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A small MLP block: linear, layer norm, GELU, linear, residual."""

    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.down = nn.Linear(hidden, features)

    def forward(self, x):
        return x + self.down(F.gelu(self.norm(self.up(x))))


rows = 8192
features = 1024
hidden = 4096


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return [features, hidden]
