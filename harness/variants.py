"""The reference under a setting a candidate may change without touching the model's code.

Some moves keep the reference's code and change only how it runs: TF32 allowed in matrix products and
convolutions, the model and its inputs in channels-last memory format, or cuDNN choosing its convolution algorithms
by timing them (other kernels, another order of the sums). Whether such a candidate can meet the tolerance is
decided by the reference itself under the same setting, and one more forward of it costs far less than an evaluation
of the candidate (a worker, five correctness trials, a timing). The reference's evaluation runs it
(`EvalOptions.variants`) before any candidate code exists in its worker, and reports how much of the output leaves
the tolerance. One variant is no setting but an arithmetic a kernel of ours can copy: the convolutions in float32 on
operands rounded to TF32 (`tf32_operands`), which eager matches where cuDNN's TF32 convolutions round so.
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


def tf32_nearest(x: torch.Tensor) -> torch.Tensor:
    """A float32 tensor's values rounded to TF32 (10 mantissa bits), to nearest with ties away from zero, as
    `cvt.rna.tf32.f32` rounds: add half of the 13 dropped bits' weight, then drop them (one copy of `x`, rounded in
    place: level 1's inputs are GBs)."""
    bits = x.to(memory_format=torch.contiguous_format, copy=True).view(torch.int32)
    return bits.add_(0x1000).bitwise_and_(-0x2000).view(torch.float32)


#: torch's convolution functions (torch.nn.functional's are these same objects), which nn.Conv*d and
#: nn.ConvTranspose*d call; their `groups` is the seventh positional argument in both forms
_CONVOLUTIONS = {torch.conv1d, torch.conv2d, torch.conv3d, torch.conv_transpose1d, torch.conv_transpose2d,
                 torch.conv_transpose3d}


def rounds_operands(in_channels: int, groups: int) -> bool:
    """Whether `tf32_operands` rounds a convolution's operands: all but the depthwise ones (one input channel per
    group), which the offline coder's fp32 convolution leaves to cuDNN by the same test (conv_gemm.is_conv)."""
    return groups == 1 or in_channels // groups > 1


class _RoundedOperands(torch.overrides.TorchFunctionMode):
    """Each float32 convolution with more than one input channel per group run on its input and weight rounded by
    `rounding`; a depthwise one (one input channel per group) as it is."""

    def __init__(self, rounding: Callable[[torch.Tensor], torch.Tensor]):
        super().__init__()
        self.rounding = rounding

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _CONVOLUTIONS and len(args) >= 2 and all(
                isinstance(a, torch.Tensor) and a.dtype == torch.float32 for a in args[:2]):
            if rounds_operands(args[0].shape[1], kwargs.get("groups", args[6] if len(args) > 6 else 1)):
                args = (self.rounding(args[0]), self.rounding(args[1]), *args[2:])
        return func(*args, **kwargs)


@contextmanager
def rounded_operands(rounding: Callable[[torch.Tensor], torch.Tensor], model,
                     inputs: list) -> Iterator[tuple[object, list]]:
    """cuDNN's TF32 off, and each convolution's operands rounded by `rounding` first (`_RoundedOperands`)."""
    saved = torch.backends.cudnn.allow_tf32
    torch.backends.cudnn.allow_tf32 = False
    try:
        with _RoundedOperands(rounding):
            yield model, inputs
    finally:
        torch.backends.cudnn.allow_tf32 = saved


def _tf32_operands(model, inputs: list):
    """The convolutions on operands rounded to TF32 to nearest (`rounded_operands` with `tf32_nearest`): the
    products are then exact and only the order of their float32 sums differs from a TF32 convolution that rounds
    its operands so. Where eager matches itself under this, cuDNN's convolutions round that way, and a
    convolution kernel of our own that rounds them alike passes fp32's tolerance (the offline coder's triton_conv
    at fp32)."""
    return rounded_operands(tf32_nearest, model, inputs)


class _Draws:
    """A random generator per device, each seeded alike (a model may compute a value on the host too)."""

    def __init__(self, seed: int):
        self.seed = seed
        self.generators: dict[torch.device, torch.Generator] = {}

    def on(self, device: torch.device) -> torch.Generator:
        if device not in self.generators:
            self.generators[device] = torch.Generator(device=device).manual_seed(self.seed)
        return self.generators[device]


#: the integer type of each floating type's width: a float's bits plus or minus one is its neighbour one ulp away
_BITS = {8: torch.int64, 4: torch.int32, 2: torch.int16, 1: torch.int8}


def _ulp_noise(x: torch.Tensor, draws: _Draws) -> torch.Tensor:
    """`x` itself, each finite nonzero element moved one ulp up or down at random (its bits plus or minus one: one
    ulp away from zero or towards it): rounding noise, which leaves exact zeros (a ReLU's), infinities (a mask's) and
    NaNs as they are. In place, with a few bytes of noise and masks per element, so the probe fits beside a
    model's largest intermediate values (a vision transformer's attention weights: 8.6 GB a call)."""
    step = torch.randint(0, 2, x.shape, generator=draws.on(x.device), device=x.device, dtype=torch.int8)
    step.mul_(2).sub_(1).masked_fill_(~(torch.isfinite(x) & (x != 0)), 0)
    x.view(_BITS[x.element_size()]).add_(step)
    return x


def _floating(value) -> bool:
    return isinstance(value, torch.Tensor) and value.is_floating_point()


class RoundingNoise(torch.overrides.TorchFunctionMode):
    """Every result computed from floating tensors, one ulp up or down at random: what another order of a kernel's
    sums, or another kernel, does to each intermediate value. A result that shares storage with an argument (a view,
    an in-place op) is left as it is, as are results computed from no floating tensor (constants) and tuples."""

    def __init__(self, draws: _Draws):
        super().__init__()
        self.draws = draws

    def __torch_function__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if not _floating(result) or result.is_sparse or result.numel() == 0:
            return result
        arguments = [a for a in (*args, *(kwargs or {}).values()) if isinstance(a, torch.Tensor)]
        arguments += [a for group in args if isinstance(group, (list, tuple)) for a in group if _floating(a)]
        if not any(_floating(a) for a in arguments):
            return result
        storage = result.untyped_storage().data_ptr()
        if any(a.untyped_storage().data_ptr() == storage for a in arguments if a.layout == torch.strided):
            return result
        return _ulp_noise(result, self.draws)


@contextmanager
def one_ulp_apart(seed: int, model, inputs: list) -> Iterator[tuple[object, list]]:
    """Not a setting but the sensitivity probe's change (EvalOptions.sensitivity): each floating input element, and
    each intermediate result (`RoundingNoise`), moved by one ulp up or down at random (as rounding noise does, not
    all one way), drawn from the trial's seed. Noise on the inputs alone misses a model whose amplifying layers
    come after an average over the whole image (a batch norm over two pooled samples), which averages it away."""
    draws = _Draws(seed)
    for x in inputs:
        if _floating(x):
            _ulp_noise(x, draws)
    with RoundingNoise(draws):
        yield model, inputs


@contextmanager
def as_is(model, inputs: list) -> Iterator[tuple[object, list]]:
    """No change: the reference as it is, for what a variant is set against."""
    yield model, inputs


_SETTINGS: dict[str, Callable] = {"tf32": _tf32, "channels_last": _channels_last, "cudnn_benchmark": _cudnn_benchmark,
                                  "tf32_operands": _tf32_operands}


def changes_anything(name: str, model, inputs: list, device: torch.device) -> bool:
    """Whether the variant can change this model's arithmetic here: TF32 only on CUDA; channels-last only where a
    parameter, buffer or input has 4 or 5 dimensions; cuDNN's algorithm choice only on CUDA where a parameter has 3
    or more (a convolution's weight); TF32-rounded operands only on CUDA where such a parameter is float32."""
    tensors = [*model.parameters(), *model.buffers()] if isinstance(model, torch.nn.Module) else []
    if name == "tf32":
        return device.type == "cuda"
    if name == "cudnn_benchmark":
        return device.type == "cuda" and any(t.dim() >= 3 for t in tensors)
    if name == "tf32_operands":
        return device.type == "cuda" and any(t.dim() >= 3 and t.dtype == torch.float32 for t in tensors)
    return any(t.dim() in (4, 5) for t in tensors + [x for x in inputs if isinstance(x, torch.Tensor)])


def applied(name: str, model, inputs: list):
    """The context in which `model` and the inputs it yields run under the variant."""
    if name not in _SETTINGS:
        raise ValueError(f"no reference variant named {name!r}: {', '.join(VARIANTS)}")
    return _SETTINGS[name](model, inputs)
