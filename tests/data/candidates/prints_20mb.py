import sys
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)
        self.printed = False

    def forward(self, x):
        if not self.printed:
            self.printed = True
            chunk = "x" * 1023 + "\n"
            for _ in range(20 * 1024):
                sys.stdout.write(chunk)
            sys.stdout.flush()
        return torch.relu(self.linear(x)) + x
