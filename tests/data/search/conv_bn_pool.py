"""Test problem (ours): conv + batch norm + activation + max-pool stages, and near misses of the
batch-norm folding, pool reordering and bias-after-pool moves."""
import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
        self.norm1 = nn.BatchNorm2d(8)
        self.conv2 = nn.Conv2d(8, 8, 3, padding=1, bias=False)
        self.norm2 = nn.BatchNorm2d(8)
        self.conv3 = nn.Conv2d(8, 4, 1)
        self.norm3 = nn.BatchNorm2d(4)
        self.pool = nn.MaxPool2d(2)
        self.pool_indices = nn.MaxPool2d(2, return_indices=True)
        self.conv4 = nn.Conv2d(8, 4, 3, padding=1)
        self.conv5 = nn.Conv2d(8, 4, 3, padding=1)
        for norm in (self.norm1, self.norm2, self.norm3):  # statistics other than the initial 0 and 1
            norm.running_mean.uniform_(-0.5, 0.5)
            norm.running_var.uniform_(0.5, 2.0)
            norm.weight.data.uniform_(0.5, 1.5)
            norm.bias.data.uniform_(-0.2, 0.2)

    def forward(self, x):
        h = self.pool(torch.relu(self.norm1(self.conv1(x))))  # both moves apply
        h = F.max_pool2d(F.leaky_relu(self.norm2(self.conv2(h)), 0.1), 2)  # both apply, functional forms
        c = self.conv3(h)
        n = self.norm3(c) + c  # the conv has two users: the norm is not folded
        g = self.pool(F.gelu(n))  # gelu is not monotone: the pool stays after it
        values, indices = self.pool_indices(torch.relu(h))  # pools that return indices are left alone
        p = F.max_pool2d(self.conv4(h), 3, stride=2, padding=1)  # the bias moves past a padded pool
        a = F.avg_pool2d(self.conv5(h), 2)  # not past an average pool
        return g, values, indices, p, a


def get_inputs():
    return [torch.randn(2, 3, 16, 16)]


def get_init_inputs():
    return []
