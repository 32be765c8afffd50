"""A linear layer followed by GELU: the classic GEMM with a pointwise epilogue.

Eager runs cuBLAS (with the bias fused by cuBLASLt) and then a separate GELU pass
over the 4096 x 4096 output. At bf16 (`--precision bf16`) the offline coder's
`cute_gemm` move computes both in one CUTLASS Hopper GEMM.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

TOKENS = 4096
FEATURES = 4096


class Model(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.gelu(self.linear(x))


def get_inputs():
    return [torch.randn(TOKENS, FEATURES)]


def get_init_inputs():
    return [FEATURES, FEATURES]
