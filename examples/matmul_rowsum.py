"""Matrix product followed by a row sum: y = (A @ B).sum(dim=1, keepdim=True).

Eager computes the whole M x N product (2*M*K*N FLOPs) and then reduces it.
The inputs are non-negative (think attention weights times values), so every output
is a sum of positive terms and float32 reassociation stays within tolerance.
"""

import torch
import torch.nn as nn

M = 1024
K = 1024
N = 1024


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.matmul(a, b).sum(dim=1, keepdim=True)


def get_inputs():
    return [torch.rand(M, K), torch.rand(K, N)]


def get_init_inputs():
    return []
