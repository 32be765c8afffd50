"""`forward` as a torch.fx graph, for problems as model files write them.

Plain symbolic tracing first. It fails where forward builds a tensor from its input's sizes
(`torch.ones(t, t, device=x.device).triu(1)`, `torch.zeros(x.size(0), h)`) or needs a size
as a Python value (`for t in range(x.size(1))`). Then the graph is traced again with
torch.fx's MetaTracer over a copy of the model on the meta device: meta tensors of the
inputs' shapes run behind the proxies, so every size is a concrete number while the graph is
recorded, and nothing is computed. The graph is bound to the real model (the same module
paths and attributes). Size arithmetic that stays in the graph is made constant later by
`fxpasses.specialize_scalars`: the problems' shapes are fixed.
"""

from __future__ import annotations

import copy
import inspect
import warnings

import torch
import torch.fx as fx
from torch.fx.experimental.meta_tracer import MetaProxy, MetaTracer


class _SizedProxy(MetaProxy):
    """MetaProxy whose size(dim) gives that dimension for dim 0 too (torch's treats 0 as no dim)."""

    def size(self, dim: int | None = None):
        meta = getattr(self, "_tensor_meta", None)
        if meta is not None:
            return meta.size() if dim is None else meta.size(dim)
        return self.tracer.create_proxy("call_method", "size", (self,) if dim is None else (self, dim), {})


class _Tracer(MetaTracer):
    # a buffer read in forward is a graph input (get_attr), not a value: else an expression of it with
    # concrete sizes (`self.bias[:, :, :T, :T] == 0`, a relative-position index lookup) runs on the meta
    # copy while tracing and is kept as a `_tensor_constant` without data
    proxy_buffer_attributes = True

    def proxy(self, node: fx.Node) -> _SizedProxy:
        return _SizedProxy(node, self)


def trace(model: torch.nn.Module, inputs: list) -> fx.GraphModule:
    try:
        return fx.symbolic_trace(model)
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
