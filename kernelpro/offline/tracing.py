"""`forward` as a torch.fx graph, for problems as model files write them.

Plain symbolic tracing first. It fails where forward builds a tensor from its input's sizes
(`torch.ones(t, t, device=x.device).triu(1)`, `torch.zeros(x.size(0), h)`) or needs a size
as a Python value (`for t in range(x.size(1))`). Then the graph is traced again with
torch.fx's MetaTracer over a copy of the model on the meta device: meta tensors of the
inputs' shapes run behind the proxies, so every size is a concrete number while the graph is
recorded, and nothing is computed. The graph is bound to the real model (the same module
paths and attributes). Size arithmetic that stays in the graph is made constant later by
`rewrite.passes.specialize_scalars`: the problems' shapes are fixed.

Shapes and dtypes reach every node from fake tensors of the inputs' shapes (`propagate_shapes`): the
problems' tensors are GPU-sized, and nothing here computes on them.
"""

from __future__ import annotations

import copy
import functools
import inspect
import itertools
import operator
import warnings

import torch
import torch.fx as fx
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.fx.experimental.meta_tracer import MetaProxy, MetaTracer
from torch.fx.passes.shape_prop import ShapeProp


def _device_of(value) -> bool:
    return isinstance(value, fx.Node) and value.op == "call_function" and value.target is getattr and \
        value.args[1:] == ("device",)


class _SizedProxy(MetaProxy):
    """MetaProxy whose size(dim) gives that dimension for dim 0 too (torch's treats 0 as no dim), and whose truth is
    known where forward compares two of its tensors' devices (`if x.device != self.w.device: raise ...`, a check
    NetVLAD makes): a model and its inputs share a device in every run, as the meta copy's share `meta`."""

    def size(self, dim: int | None = None):
        meta = getattr(self, "_tensor_meta", None)
        if meta is not None:
            return meta.size() if dim is None else meta.size(dim)
        return self.tracer.create_proxy("call_method", "size", (self,) if dim is None else (self, dim), {})

    def __bool__(self) -> bool:
        node = self.node
        if node.op == "call_function" and node.target in (operator.eq, operator.ne) and len(node.args) == 2 \
                and all(_device_of(a) for a in node.args):
            return node.target is operator.eq
        return super().__bool__()


#: the dtype torch makes of a Python type given as one (`torch.ones(n, dtype=bool)`, `x.to(float)`)
_PYTHON_DTYPES = {bool: torch.bool, int: torch.int64, float: torch.float64, complex: torch.complex128}


class _PythonDtypes:
    """Records a Python type given where torch takes a dtype as that dtype: fx cannot record a class as an
    argument (Mamba's `torch.tril(torch.ones(T, T, dtype=bool))` stopped both tracers)."""

    def create_arg(self, a):
        if isinstance(a, type) and a in _PYTHON_DTYPES:
            return _PYTHON_DTYPES[a]
        return super().create_arg(a)


class _PlainTracer(_PythonDtypes, fx.Tracer):
    pass


class _Tracer(_PythonDtypes, MetaTracer):
    # a buffer read in forward is a graph input (get_attr), not a value: else an expression of it with
    # concrete sizes (`self.bias[:, :, :T, :T] == 0`, a relative-position index lookup) runs on the meta
    # copy while tracing and is kept as a `_tensor_constant` without data
    proxy_buffer_attributes = True

    def proxy(self, node: fx.Node) -> _SizedProxy:
        return _SizedProxy(node, self)


def trace(model: torch.nn.Module, inputs: list) -> fx.GraphModule:
    try:
        return fx.GraphModule(model, _PlainTracer().trace(model), model.__class__.__name__)
    except Exception as first:  # noqa: BLE001 - the second tracer's error is the one that tells
        names = list(inspect.signature(model.forward).parameters)
        tensors = {n: v.to("meta") for n, v in zip(names, inputs) if isinstance(v, torch.Tensor)}
        others = {n: v for n, v in zip(names, inputs) if not isinstance(v, torch.Tensor)}
        shadow = copy.deepcopy(model).to("meta")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")  # ops without a meta kernel: their sizes stay symbolic
                graph = _Tracer().trace(shadow, tensors, others or None)
        except Exception as second:
            raise second from first
        for name, module in shadow.named_children():  # stateless modules the tracer added for forward's own
            if not hasattr(model, name):
                model.add_module(name, module)
        return fx.GraphModule(model, graph)


def fake_inputs(mode: FakeTensorMode, inputs: list, device: str = "cpu") -> list:
    """Fake tensors on `device` (the model's: shapes, strides and dtypes, no storage) for meta or real
    inputs."""
    fakes = []
    for value in inputs:
        if isinstance(value, torch.Tensor) and value.is_meta:
            with mode:
                value = torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=device)
        elif isinstance(value, torch.Tensor):
            value = mode.from_tensor(value)
        fakes.append(value)
    return fakes


def model_device(model) -> str:
    """Where the model's tensors are: meta where its first parameter (or, without any, its first buffer) is."""
    tensor = next(itertools.chain(model.parameters(), model.buffers()), None) \
        if isinstance(model, torch.nn.Module) else None
    return "meta" if tensor is not None and tensor.is_meta else "cpu"


class _ShapeProp(ShapeProp):
    """ShapeProp that gives a recurrent module's, a linear layer's and a norm's outputs their shapes without running
    them (the linear layer's and the norms' below). Under fake tensors
    nn.GRU decomposes into one cell per step and layer (43,008 cells for KernelBench's level3/40, 29 s a
    propagation, 7 minutes a root expansion)."""

    device = "cpu"  # the model's (meta where its parameters are): a real tensor lifted out of forward goes there

    def get_attr(self, target, args, kwargs):
        value = super().get_attr(target, args, kwargs)
        if isinstance(value, torch.Tensor) and not value.is_meta and value.dim() and str(value.device) != self.device:
            return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device=self.device)
        return value

    def call_module(self, target, args, kwargs):
        module = self.fetch_attr(target)
        x = args[0] if args else None
        if isinstance(module, torch.nn.RNNBase) and isinstance(x, torch.Tensor) and x.dim() in (2, 3):
            return _recurrent_outputs(module, x)
        if isinstance(module, torch.nn.Linear) and len(args) == 1 and not kwargs and isinstance(x, torch.Tensor) \
                and x.dim() >= 1 and x.shape[-1] == module.in_features and x.dtype == module.weight.dtype:
            # its output's shape from its settings: under fake tensors each call went through linear's
            # decomposition (3 ms a call; KernelBench's level3/34 unrolls 512 of them, propagated after every move)
            return x.new_empty(tuple(x.shape[:-1]) + (module.out_features,))
        if _shape_preserving_norm(module, args, kwargs):
            # a norm's output is laid out as its input: under fake tensors a training-mode batch norm went through
            # native_batch_norm's decomposition, 9 ms a call (KernelBench's level3/10_ResNet101 has 104 of them)
            return torch.empty_like(x) if type(module) in _BATCH_NORM_DIMS else x.new_empty(x.shape)
        return super().call_module(target, args, kwargs)


_BATCH_NORM_DIMS = {torch.nn.BatchNorm1d: (2, 3), torch.nn.BatchNorm2d: (4,), torch.nn.BatchNorm3d: (5,)}


def _shape_preserving_norm(module, args: tuple, kwargs: dict) -> bool:
    """Whether this call is a batch, group or layer norm over an input it accepts, in the norm's dtype, laid out so
    that its output has the input's shape, strides and dtype: contiguous, or channels-last for a batch norm (a
    layer norm makes a channels-last input's output contiguous)."""
    x = args[0] if len(args) == 1 and not kwargs else None
    if not isinstance(x, torch.Tensor) or not (x.is_contiguous() or (
            type(module) in _BATCH_NORM_DIMS and x.is_contiguous(memory_format=torch.channels_last))):
        return False
    weight = getattr(module, "weight", None)
    if weight is not None and weight.dtype != x.dtype:
        return False
    if type(module) in _BATCH_NORM_DIMS:
        return x.dim() in _BATCH_NORM_DIMS[type(module)] and x.shape[1] == module.num_features
    if type(module) is torch.nn.GroupNorm:
        return x.dim() >= 2 and x.shape[1] == module.num_channels
    if type(module) is torch.nn.LayerNorm:
        normalized = tuple(module.normalized_shape)
        return x.dim() > len(normalized) and tuple(x.shape[-len(normalized):]) == normalized
    return False


def _recurrent_outputs(module: torch.nn.RNNBase, x: torch.Tensor):
    """Empty tensors shaped as nn.RNN/GRU/LSTM return them: (output, h_n), or (output, (h_n, c_n))."""
    directions = 2 if module.bidirectional else 1
    hidden = module.proj_size if getattr(module, "proj_size", 0) > 0 else module.hidden_size
    if x.dim() == 3:
        batch = x.shape[0] if module.batch_first else x.shape[1]
        steps = x.shape[1] if module.batch_first else x.shape[0]
        output = (batch, steps) if module.batch_first else (steps, batch)
        state, cell = (directions * module.num_layers, batch), (directions * module.num_layers, batch)
    else:  # unbatched: (steps, features)
        output, state, cell = (x.shape[0],), (directions * module.num_layers,), (directions * module.num_layers,)
    result = x.new_empty(output + (directions * hidden,)), x.new_empty(state + (hidden,))
    if isinstance(module, torch.nn.LSTM):
        return result[0], (result[1], x.new_empty(cell + (module.hidden_size,)))
    return result


def propagate_shapes(gm: fx.GraphModule, inputs: list) -> None:
    """ShapeProp's `tensor_meta` on every node, from fake tensors: a real run on the CPU took
    seconds per build on the problems' GPU-sized inputs, and a node expands a dozen builds. The
    interpreter is made before the mode is entered: inside it ShapeProp would deep-copy the module to
    fake tensors first (its parameters are meta tensors or real ones, which the mode takes as they come)."""
    interpreter = _ShapeProp(gm)
    interpreter.device = model_device(gm)
    with _fake_mode() as mode:
        interpreter.propagate(*fake_inputs(mode, inputs, interpreter.device))


@functools.cache
def _fake_mode() -> FakeTensorMode:
    """One fake mode for every propagation of this process (a new one costs about 10 ms, and each would
    convert the same parameters to fake tensors again)."""
    return FakeTensorMode(allow_non_fake_inputs=True)


def size_only_inputs(get_inputs, seed: int) -> list:
    """The problem's inputs as meta tensors: their shapes and dtypes without their storage (a
    KernelBench input can be GBs). Input code that cannot run on the meta device runs on the CPU."""
    torch.manual_seed(seed)
    try:
        with torch.device("meta"):
            values = list(get_inputs())
    except Exception:
        torch.manual_seed(seed)
        values = list(get_inputs())
    return [value.to("meta") if isinstance(value, torch.Tensor) else value for value in values]
