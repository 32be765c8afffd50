import torch
import torch.nn as nn


class Model(nn.Module):
    """A GRU returning its last hidden state, in the form of KernelBench's level3/40 at a test's size."""

    def __init__(self, input_size, hidden_size, num_layers=3):
        super().__init__()
        self.gru = nn.GRU(input_size, hidden_size, num_layers, True, False, dropout=0, bidirectional=False)

    def forward(self, x, h0):
        output, h_n = self.gru(x, h0)
        return h_n * 2.0


def get_inputs():
    return [torch.rand(16, 2, 8), torch.rand(3, 2, 12)]


def get_init_inputs():
    return [8, 12, 3]
