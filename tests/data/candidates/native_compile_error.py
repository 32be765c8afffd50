import torch.nn as nn
from torch.utils.cpp_extension import load_inline

CPP_SOURCE = r"""
#include <torch/extension.h>
torch::Tensor broken(torch::Tensor x) { return x.this_method_does_not_exist(); }
"""

extension = load_inline(name="kp_test_broken", cpp_sources=[CPP_SOURCE], functions=["broken"])


class ModelNew(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return extension.broken(x)
