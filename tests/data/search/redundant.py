"""Test problem (ours): every graph-level simplification has something to do here."""
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self, n: int):
        super().__init__()
        self.linear = nn.Linear(n, n)
        self.log_scale = nn.Parameter(torch.zeros(n))
        self.drop = nn.Dropout(0.1)

    def forward(self, x):
        y = self.drop(self.linear(x) * 2.0) * 1.0
        y = (y / torch.exp(self.log_scale)) * 3.0 * 0.5
        m = torch.max(y, dim=1, keepdim=True).values
        z = torch.nn.functional.gelu(m - m.mean(dim=1, keepdim=True))
        q = torch.matmul(x, self.linear.weight.t()).sum(dim=1, keepdim=True)
        return z + q, y.transpose(0, 1).transpose(0, 1), -(-x)


def get_inputs():
    return [torch.randn(16, 32)]


def get_init_inputs():
    return [32]
