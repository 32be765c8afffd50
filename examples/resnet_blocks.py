"""A small residual network: a strided stem, then four basic blocks of two 3x3 convolutions
with batch norm and ReLU around an identity shortcut, average pooling and a classifier.

In eval mode eager PyTorch runs every convolution, batch norm, ReLU and residual add as
its own kernel: some fifty launches per forward on a GPU, the convolutions taking most of the time.
"""

import torch
import torch.nn as nn

BATCH = 16
CHANNELS = 64
SIZE = 112
BLOCKS = 4


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.relu(self.bn1(self.conv1(x)))
        return torch.relu(x + self.bn2(self.conv2(out)))


class Model(nn.Module):
    def __init__(self, channels: int, blocks: int, classes: int):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, channels, 3, stride=2, padding=1, bias=False),
                                  nn.BatchNorm2d(channels), nn.ReLU())
        self.blocks = nn.Sequential(*(BasicBlock(channels) for _ in range(blocks)))
        self.head = nn.Linear(channels, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)).mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(BATCH, 3, SIZE, SIZE)]


def get_init_inputs():
    return [CHANNELS, BLOCKS, 100]
