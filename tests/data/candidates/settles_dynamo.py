import torch
import torch._dynamo
import torch.nn as nn
import torch.nn.functional as F
from torch._dynamo import mutation_guard

# What a candidate's first torch.compile does to torch: dynamo wraps torch.manual_seed on import and
# replaces nn.Module.__init__ and __setstate__. These are torch's own patches, not tampering.
mutation_guard.install_generation_tagging_init()


class ModelNew(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return F.relu(F.linear(x, self.linear.weight, self.linear.bias)).add_(x)
