"""A small decoder stack written out by hand: four pre-norm layers of causal self-attention
and a GELU MLP, then a final LayerNorm, as a model file would write it.

Each layer launches some fifteen kernels (norms, projections, the score matrix, its
masking and softmax, copies of transposed views, the MLP, residual adds), so the
whole forward is a realistic program to profile: many kernels, a few of which take
most of the time.
"""

import math

import torch
import torch.nn as nn

BATCH = 8
TOKENS = 256
WIDTH = 512
HEADS = 8
LAYERS = 4


class Layer(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(width)
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.norm2 = nn.LayerNorm(width)
        self.up = nn.Linear(width, 4 * width)
        self.down = nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        head_dim = width // self.heads
        q, k, v = self.qkv(self.norm1(x)).chunk(3, dim=-1)
        q = q.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        k = k.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        v = v.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim)
        weights = torch.softmax(scores.masked_fill(mask, float("-inf")), dim=-1)
        attended = torch.matmul(weights, v).transpose(1, 2).reshape(batch, tokens, width)
        x = x + self.proj(attended)
        return x + self.down(torch.nn.functional.gelu(self.up(self.norm2(x))))


class Model(nn.Module):
    def __init__(self, width: int, heads: int, layers: int):
        super().__init__()
        self.layers = nn.ModuleList(Layer(width, heads) for _ in range(layers))
        self.norm = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        tokens = x.shape[1]
        mask = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).triu(1)
        for layer in self.layers:
            x = layer(x, mask)
        return self.norm(x)


def get_inputs():
    return [torch.randn(BATCH, TOKENS, WIDTH)]


def get_init_inputs():
    return [WIDTH, HEADS, LAYERS]
