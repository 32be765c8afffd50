"""A transformer MLP block: LayerNorm, Linear 1024->4096, GELU, Linear 4096->1024, residual."""
import torch
import torch.nn as nn

TOKENS = 4096
WIDTH = 1024


class Model(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x):
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm(x))))


def get_inputs():
    return [torch.randn(TOKENS, WIDTH)]


def get_init_inputs():
    return [WIDTH]
