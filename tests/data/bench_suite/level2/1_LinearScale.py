import torch
import torch.nn as nn


class Model(nn.Module):
    """A linear layer whose output is scaled by constants: the scale folds into the weights."""

    def __init__(self, features: int):
        super().__init__()
        self.linear = nn.Linear(features, features)

    def forward(self, x):
        return torch.relu(self.linear(x) * 0.25 * 2.0)


def get_inputs():
    return [torch.randn(128, 256)]


def get_init_inputs():
    return [256]
