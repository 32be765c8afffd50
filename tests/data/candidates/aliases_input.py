import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.linear = nn.Linear(width, width)

    def forward(self, x):
        return x.view(x.shape)  # a view of the input, not a new tensor
