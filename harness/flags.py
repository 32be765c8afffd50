"""torch's process-wide library settings, kept apart for each model the worker times.

TF32 matmuls and convolutions, cuDNN's autotuner and the like are switches of the
whole process. A candidate may turn them on (when imported, in its `__init__`, in
its forward) and leave them on; set in the worker's process, they would also hold
for the reference and torch.compile timed call by call beside it (an offline
candidate that set TF32 in its `__init__` made the reference's matmuls TF32 as
well, and KernelBench's evaluator measured that reference a third faster). So each
timed model runs with the settings it had when it was built: the reference and
torch.compile with the worker's own, taken before any candidate code ran, the
candidate with what its import and construction left.
"""

from __future__ import annotations

import torch

#: (object, attribute) of every setting a model's speed or numerics depend on
SETTINGS = ((torch.backends.cuda.matmul, "allow_tf32"),
            (torch.backends.cuda.matmul, "allow_fp16_reduced_precision_reduction"),
            (torch.backends.cuda.matmul, "allow_bf16_reduced_precision_reduction"),
            (torch.backends.cudnn, "enabled"), (torch.backends.cudnn, "benchmark"),
            (torch.backends.cudnn, "deterministic"), (torch.backends.cudnn, "allow_tf32"))


def snapshot() -> tuple:
    return tuple(getattr(owner, name) for owner, name in SETTINGS)


def apply(values: tuple) -> None:
    for (owner, name), value in zip(SETTINGS, values):
        if getattr(owner, name) != value:
            setattr(owner, name, value)


class WithSettings:
    """A model called with the settings it was built under, whatever the last call left."""

    def __init__(self, model, values: tuple):
        self.model, self.values = model, values

    def __call__(self, *args, **kwargs):
        apply(self.values)
        return self.model(*args, **kwargs)
