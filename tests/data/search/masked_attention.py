"""Test problem (ours): attention as a model file writes it, with masks.

forward unpacks its input's shape into Python ints and builds the causal mask from them
(`torch.ones(tokens, tokens, device=x.device)`), which plain torch.fx tracing cannot do.
The first attention is causal; the second masks padded keys given as an input (every
query keeps key 0, so no row is all -inf); the third fills with a finite value, which is
not what scaled_dot_product_attention computes, and must stay as written.
"""
import math

import torch
import torch.nn as nn

BATCH, TOKENS, WIDTH, HEADS = 2, 16, 32, 4


class Model(nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(width, 3 * width)

    def split(self, x):
        batch, tokens, width = x.shape
        q, k, v = self.qkv(x).chunk(3, dim=-1)
        shape = (batch, tokens, self.heads, width // self.heads)
        return [t.reshape(shape).transpose(1, 2) for t in (q, k, v)]

    def forward(self, x, padded):
        batch, tokens, width = x.shape
        q, k, v = self.split(x)
        causal = torch.ones(tokens, tokens, dtype=torch.bool, device=x.device).triu(1)
        scores = torch.matmul(q, k.transpose(-2, -1)) / math.sqrt(width // self.heads)
        a = torch.matmul(torch.softmax(scores.masked_fill(causal, float("-inf")), dim=-1), v)
        scores = (q @ k.transpose(-2, -1)).masked_fill(padded, float("-inf")) * 0.25
        b = torch.softmax(scores, dim=-1) @ v
        scores = (q @ k.transpose(-2, -1)).masked_fill(padded, -1e4) * 0.25
        c = torch.softmax(scores, dim=-1) @ v
        return a, b, c


def get_inputs():
    padded = torch.rand(BATCH, 1, 1, TOKENS) > 0.6
    padded[..., 0] = False
    return [torch.randn(BATCH, TOKENS, WIDTH), padded]


def get_init_inputs():
    return [WIDTH, HEADS]
