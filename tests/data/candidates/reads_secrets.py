import os
import torch
import torch.nn as nn

LEAKED = sorted(name for name in os.environ if "KEY" in name or "TOKEN" in name or "SECRET" in name)
if LEAKED:
    raise RuntimeError("secrets visible to the candidate: " + ", ".join(LEAKED))


class ModelNew(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return torch.relu(self.linear(x)) + x
