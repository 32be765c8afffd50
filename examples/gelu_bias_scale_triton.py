"""Candidate for gelu_bias_scale: one fused Triton kernel (add bias, exact GELU, scale).

One read of x and one write of y instead of three read/write passes.
"""

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def gelu_bias_scale_kernel(x_ptr, bias_ptr, out_ptr, n_elements, features, scale,
                           BLOCK: tl.constexpr):
    # Fuses: x + bias, gelu (erf form), * scale.
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n_elements
    x = tl.load(x_ptr + offsets, mask=mask)
    b = tl.load(bias_ptr + offsets % features, mask=mask)
    y = x + b
    gelu = 0.5 * y * (1.0 + tl.math.erf(y * 0.7071067811865476))
    tl.store(out_ptr + offsets, gelu * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, features: int, scale: float):
        super().__init__()
        self.bias = nn.Parameter(torch.randn(features))
        self.scale = scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        block = 2048
        grid = (triton.cdiv(n, block),)
        gelu_bias_scale_kernel[grid](x, self.bias, out, n, x.shape[-1], self.scale,
                                     BLOCK=block, num_warps=8)
        return out
