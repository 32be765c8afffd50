import torch
import torch.nn as nn


class Model(nn.Module):
    """Standardize each row with its mean and (unbiased) standard deviation, then clamp."""

    def __init__(self):
        super().__init__()

    def forward(self, x):
        mean = x.mean(dim=-1, keepdim=True)
        std = x.std(dim=-1, keepdim=True)
        return torch.clamp((x - mean) / (std + 1e-5), -3.0, 3.0)


rows = 16384
features = 2048


def get_inputs():
    return [torch.randn(rows, features)]


def get_init_inputs():
    return []
