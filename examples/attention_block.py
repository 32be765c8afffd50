"""Multi-head self-attention written out by hand, as many model files do.

softmax(q @ k^T / sqrt(d)) @ v over 8 heads of 64 features and 512 tokens,
with dropout that is inactive in eval mode and a projection back to the width.
The eager version materialises the 512 x 512 score matrix of every head and
makes a contiguous copy of the transposed keys.
"""

import math

import torch
import torch.nn as nn

BATCH = 4
TOKENS = 512
WIDTH = 512
HEADS = 8


class Model(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.dropout = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        batch, tokens, width = x.shape
        head_dim = width // self.heads
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        q = q.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        k = k.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        v = v.reshape(batch, tokens, self.heads, head_dim).transpose(1, 2)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(head_dim)
        weights = self.dropout(torch.softmax(scores, dim=-1))
        out = torch.matmul(weights, v).transpose(1, 2).reshape(batch, tokens, width)
        return self.proj(out)


def get_inputs():
    return [torch.randn(BATCH, TOKENS, WIDTH)]


def get_init_inputs():
    return [WIDTH, HEADS]
