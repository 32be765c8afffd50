"""Loading a problem's model and tensors inside a worker: seeds, casts, builds, byte counts.

Light on purpose (torch only): the profiled program and the offline coder's graph
worker use these without the evaluation worker's guards, which import torch._dynamo.
"""

from __future__ import annotations

import importlib.util
import math
import random
import sys
from pathlib import Path

import torch

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}
#: How models are run. "train": as KernelBench runs them, built as they are (training mode: batch norm
#: normalizes with the batch's statistics, dropout with p > 0 is active). "eval": `.eval()` after the
#: build, for users who optimize inference.
MODEL_MODES = ("train", "eval")


def set_seed(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)
    try:
        import numpy
        numpy.random.seed(seed % (2**32))
    except ImportError:
        pass


def cast_to(value, device: torch.device, dtype: torch.dtype):
    """A tensor moved to the device, floating-point ones in the evaluated precision; anything else
    (numbers, strings, None, tuples and lists, tensors inside them) unchanged, as KernelBench leaves
    them."""
    if isinstance(value, torch.Tensor):
        value = value.to(device)
        return value.to(dtype) if value.is_floating_point() else value
    return value


def build_model(cls, seed: int, init_inputs: list, device: torch.device, dtype: torch.dtype,
                mode: str = "train"):
    """`cls(*init_inputs)` seeded and built on the device (under no_grad, as KernelBench builds it), so
    Model and ModelNew get the same weights; in training mode unless `mode` is "eval"."""
    if mode not in MODEL_MODES:
        raise ValueError(f"model mode {mode!r}: one of {', '.join(MODEL_MODES)}")
    set_seed(seed)
    with device, torch.no_grad():
        model = cls(*init_inputs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device=device, dtype=dtype)
        if mode == "eval":
            model = model.eval()
    return model


def import_file(module_name: str, path: Path):
    spec = importlib.util.spec_from_file_location(module_name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    spec.loader.exec_module(module)
    return module


def flatten_outputs(value) -> tuple[str, list]:
    if isinstance(value, (tuple, list)):
        return f"sequence:{len(value)}", list(value)
    return "single", [value]


def tensor_bytes(values: list) -> int:
    return sum(v.numel() * v.element_size() for v in values if isinstance(v, torch.Tensor))


def parameter_bytes(model) -> int:
    if not isinstance(model, torch.nn.Module):
        return 0
    return sum(p.numel() * p.element_size() for p in model.parameters())


def largest_magnitude(value: torch.Tensor) -> float | None:
    """The largest |element| of a floating tensor, from its minimum and maximum (one read, no temporary of its size);
    None for other tensors, an empty one, or one with a NaN or an infinity at either end."""
    if not value.is_floating_point() or value.numel() == 0:
        return None
    low, high = torch.aminmax(value.detach())
    largest = max(abs(float(low)), abs(float(high)))
    return largest if math.isfinite(largest) else None


def describe_values(values: list, magnitude: bool = False) -> list[dict]:
    """Each value as the prompt and the report show it: a tensor's shape and dtype (and with `magnitude`, a floating
    one's largest |element|), else its type and a short repr (the records' `ValueSpec`)."""
    described = []
    for value in values:
        if isinstance(value, torch.Tensor):
            described.append({"kind": "tensor", "shape": list(value.shape), "dtype": str(value.dtype)})
            largest = largest_magnitude(value) if magnitude else None
            if largest is not None:
                described[-1]["largest"] = largest
        else:
            described.append({"kind": type(value).__name__, "value": repr(value)[:80]})
    return described


#: the normalisation modules `normalization_layers` counts
NORMALIZATIONS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d, torch.nn.SyncBatchNorm,
                  torch.nn.GroupNorm, torch.nn.InstanceNorm1d, torch.nn.InstanceNorm2d, torch.nn.InstanceNorm3d,
                  torch.nn.LayerNorm, torch.nn.LocalResponseNorm) + ((torch.nn.RMSNorm,) if hasattr(torch.nn, "RMSNorm")
                                                                     else ())


def normalization_layers(model: torch.nn.Module) -> int:
    """How many normalisation modules the model holds (NORMALIZATIONS): in a network that stacks them, each
    renormalises what the ones before it computed."""
    return sum(isinstance(module, NORMALIZATIONS) for module in model.modules())


def _normalizing_functions() -> frozenset:
    """The functional normalisations a traced forward may call."""
    functional = torch.nn.functional
    names = ("batch_norm", "layer_norm", "group_norm", "instance_norm", "local_response_norm", "rms_norm")
    return frozenset(getattr(space, name) for space in (functional, torch) for name in names if hasattr(space, name))


def normalization_depth(model: torch.nn.Module) -> int | None:
    """The most normalisations on one path from the inputs to an output of the model's forward (modules of
    NORMALIZATIONS and their functional forms), from a symbolic trace: how deep they stack, where a difference in one
    reaches every later one. None where the forward cannot be traced symbolically (data-dependent control flow)."""
    try:
        graph = torch.fx.symbolic_trace(model).graph
    except Exception:
        return None
    modules, functions = dict(model.named_modules()), _normalizing_functions()
    depth: dict = {}
    for node in graph.nodes:  # in topological order
        below = max((depth[arg] for arg in node.all_input_nodes), default=0)
        normalizes = (node.op == "call_module" and isinstance(modules.get(node.target), NORMALIZATIONS)) or \
            (node.op == "call_function" and node.target in functions)
        depth[node] = below + normalizes
    return max(depth.values(), default=0)
