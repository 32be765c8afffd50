"""Candidate for matmul_rowsum: reduce first, then multiply.

sum_j (A @ B)[i, j] = sum_k A[i, k] * (sum_j B[k, j]), so the row sum of the product
is A times the row sums of B: a matrix-vector product, 2*M*K + K*N FLOPs instead of
2*M*K*N. Exact in real arithmetic; in float32 only the summation order changes.
"""

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        return torch.mv(a, b.sum(dim=1)).unsqueeze(1)
