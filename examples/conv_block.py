"""A small CNN: three conv + batch-norm + ReLU stages, pooling, and a linear classifier."""
import torch
import torch.nn as nn

BATCH = 32


class Model(nn.Module):
    def __init__(self, classes: int):
        super().__init__()
        layers, channels = [], 3
        for width in (64, 128, 128):
            layers += [nn.Conv2d(channels, width, 3, padding=1), nn.BatchNorm2d(width), nn.ReLU(), nn.MaxPool2d(2)]
            channels = width
        self.features = nn.Sequential(*layers)
        self.head = nn.Linear(channels, classes)

    def forward(self, x):
        return self.head(self.features(x).mean(dim=(2, 3)))


def get_inputs():
    return [torch.randn(BATCH, 3, 128, 128)]


def get_init_inputs():
    return [100]
