import torch
import torch.nn as nn


class Model(nn.Module):
    """Huber loss written out, averaged over every element: one row as long as the tensor."""

    def __init__(self, delta: float):
        super().__init__()
        self.delta = delta

    def forward(self, prediction, target):
        error = (prediction - target).abs()
        loss = torch.where(error < self.delta, 0.5 * error * error, self.delta * (error - 0.5 * self.delta))
        return loss.mean()


batch = 4096
features = 4096


def get_inputs():
    return [torch.randn(batch, features), torch.randn(batch, features)]


def get_init_inputs():
    return [1.0]
