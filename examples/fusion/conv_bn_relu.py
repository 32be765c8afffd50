import torch
import torch.nn as nn


class Model(nn.Module):
    """Convolution, batch norm (running statistics), ReLU, and a channel scale."""

    def __init__(self, channels_in: int, channels_out: int):
        super().__init__()
        self.conv = nn.Conv2d(channels_in, channels_out, 3, padding=1)
        self.bn = nn.BatchNorm2d(channels_out)
        self.scale = nn.Parameter(torch.rand(channels_out, 1, 1) + 0.5)
        with torch.no_grad():
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 1.5)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x))) * self.scale


batch = 32
channels_in = 64
channels_out = 128
size = 64


def get_inputs():
    return [torch.randn(batch, channels_in, size, size)]


def get_init_inputs():
    return [channels_in, channels_out]
