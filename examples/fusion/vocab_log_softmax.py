import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Temperature-scaled log-probabilities over a large vocabulary: few rows, each very long."""

    def __init__(self, temperature: float):
        super().__init__()
        self.temperature = temperature

    def forward(self, logits):
        return F.log_softmax(logits / self.temperature, dim=-1)


rows = 64
vocab = 262144


def get_inputs():
    return [torch.randn(rows, vocab)]


def get_init_inputs():
    return [0.7]
