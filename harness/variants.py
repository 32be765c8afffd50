"""The reference under a setting a candidate may change without touching the model's code.

Some moves keep the reference's code and change only how it runs: TF32 allowed in matrix products and
convolutions, the model and its inputs in channels-last memory format, or cuDNN choosing its convolution algorithms
by timing them (other kernels, another order of the sums). Whether such a candidate can meet the tolerance is
decided by the reference itself under the same setting, and one more forward of it costs far less than an evaluation
of the candidate (a worker, five correctness trials, a timing). The reference's evaluation runs it
(`EvalOptions.variants`) before any candidate code exists in its worker, and reports how much of the output leaves
the tolerance.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import get_args

import torch

from kernelpro.harness.records import Variant

VARIANTS: tuple[str, ...] = get_args(Variant)  # the names EvalOptions.variants accepts


def _layout(tensor: torch.Tensor) -> torch.memory_format:
    return torch.channels_last if tensor.dim() == 4 else torch.channels_last_3d


@contextmanager
def _tf32(model, inputs: list) -> Iterator[tuple[object, list]]:
    """TF32 allowed in matrix products and cuDNN's convolutions, and put back afterwards."""
    flags = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = tuple(flag.allow_tf32 for flag in flags)
    for flag in flags:
        flag.allow_tf32 = True
    try:
        yield model, inputs
    finally:
        for flag, value in zip(flags, saved):
            flag.allow_tf32 = value


@contextmanager
def _channels_last(model, inputs: list) -> Iterator[tuple[object, list]]:
    """The model's 4-D and 5-D parameters and buffers, and such inputs, in channels-last memory format."""
    if isinstance(model, torch.nn.Module):
        for tensor in [*model.parameters(), *model.buffers()]:
            if tensor.dim() in (4, 5):
                tensor.data = tensor.data.contiguous(memory_format=_layout(tensor))
    yield model, [x.contiguous(memory_format=_layout(x)) if isinstance(x, torch.Tensor) and x.dim() in (4, 5) else x
                  for x in inputs]


@contextmanager
def _cudnn_benchmark(model, inputs: list) -> Iterator[tuple[object, list]]:
    """cuDNN picks each convolution's algorithm by timing them, and is put back afterwards."""
    saved = torch.backends.cudnn.benchmark
    torch.backends.cudnn.benchmark = True
    try:
        yield model, inputs
    finally:
        torch.backends.cudnn.benchmark = saved


@contextmanager
def one_ulp_apart(seed: int, device: torch.device, model, inputs: list) -> Iterator[tuple[object, list]]:
    """Not a setting but the sensitivity probe's change (EvalOptions.sensitivity): each floating input element moved
    by one ulp up or down at random (as rounding noise does, not all one way), drawn from the trial's seed."""
    draw = torch.Generator(device=device).manual_seed(seed)
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.is_floating_point():
            up = torch.randint(0, 2, x.shape, generator=draw, device=x.device, dtype=torch.bool)
            torch.nextafter(x, torch.where(up, float("inf"), float("-inf")).to(x.dtype), out=x)
            del up
    yield model, inputs


_SETTINGS: dict[str, Callable] = {"tf32": _tf32, "channels_last": _channels_last, "cudnn_benchmark": _cudnn_benchmark}


def changes_anything(name: str, model, inputs: list, device: torch.device) -> bool:
    """Whether the variant can change this model's arithmetic here: TF32 only on CUDA; channels-last only where a
    parameter, buffer or input has 4 or 5 dimensions; cuDNN's algorithm choice only on CUDA where a parameter has 3
    or more (a convolution's weight)."""
    tensors = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    if name == "tf32":
        return device.type == "cuda"
    if name == "cudnn_benchmark":
        return device.type == "cuda" and any(t.dim() >= 3 for t in tensors)
    return any(t.dim() in (4, 5) for t in tensors + [x for x in inputs if isinstance(x, torch.Tensor)])


def applied(name: str, model, inputs: list):
    """The context in which `model` and the inputs it yields run under the variant."""
    if name not in _SETTINGS:
        raise ValueError(f"no reference variant named {name!r}: {', '.join(VARIANTS)}")
    return _SETTINGS[name](model, inputs)
