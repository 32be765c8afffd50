import ctypes
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        ctypes.string_at(0)  # read address 0: SIGSEGV
        return x
