"""Training-mode batch norm with running statistics, made something a row kernel can take.

In training mode (KernelBench's semantics) `nn.BatchNorm*d` normalizes with the batch's statistics
and, as a side effect, updates its running statistics. The fusion's row kernels compute batch
statistics (a reduction over every dimension but the channels), but a norm that must also write its
buffers was left a library call. `split_training_batch_norms` rewrites each such norm into

    y    = F.batch_norm(x, None, None, weight, bias, True, 0.0, eps)   # the normalization alone
    mean = x.mean(dims); var = x.var(dims, correction=0)               # the statistics, as outputs
    ...
    _kp_bn_update([running_mean, ...], [running_var, ...], [num_batches_tracked, ...],
                  [mean, ...], [var, ...], [n, ...], [momentum, ...])

The partitioner puts the three row operations over the same input into one row kernel (its builder
computes each reduction once), which then writes the per-channel mean and variance beside the
normalized output, and `_kp_bn_update` moves the running statistics as torch's batch norm does:
`num_batches_tracked += 1`, the factor `momentum` (or `1 / num_batches_tracked` when momentum is
None), and the unbiased variance `var * n / (n - 1)`. One `_kp_bn_update` call at the end of forward
takes every norm of the model, with torch's multi-tensor (`_foreach_`) ops: a ResNet's hundred
norms cost a handful of small launches, not hundreds.
"""

from __future__ import annotations

import collections
import math

import torch
import torch.fx as fx
import torch.nn.functional as F
from torch.fx.passes.shape_prop import _extract_tensor_metadata

from kernelpro.offline.ir.ops import GENERATED_MODULE
from kernelpro.offline.rewrite.passes import meta, module_of

UPDATE_NAME = "_kp_bn_update"
UPDATE_SOURCE = f'''
def {UPDATE_NAME}(running_means, running_vars, counters, means, variances, counts, momentums):
    """Training-mode batch norms' running statistics, updated as torch does (variances: the biased batch
    variances over `counts` values per channel), every norm of the model at once: a few multi-tensor
    kernels, not a few kernels per norm."""
    with torch.no_grad():
        torch._foreach_add_(counters, 1)
        factors = [m if m is not None else 1.0 / float(c) for m, c in zip(momentums, counters)]
        for running, batch in ((running_means, means), (running_vars, variances)):
            unbiased = [1.0] * len(counts) if running is running_means else [n / (n - 1) for n in counts]
            torch._foreach_mul_(running, [1.0 - f for f in factors])
            torch._foreach_add_(running, torch._foreach_mul([b.to(r.dtype) for b, r in zip(batch, running)],
                                                            [f * u for f, u in zip(factors, unbiased)]))
'''


def _update_function():
    scope = {"torch": torch}
    exec(compile(UPDATE_SOURCE, "<kernelpro batch-norm update>", "exec"), scope)  # noqa: S102 - our own text
    function = scope[UPDATE_NAME]
    function.__module__ = GENERATED_MODULE  # defined in the candidate file itself (codegen)
    return function


#: the function the rewritten graph calls; it has a side effect, so dead-code elimination keeps it
UPDATE = torch.fx.node.has_side_effect(_update_function())


def _tensor_meta(shape: tuple[int, ...], dtype: torch.dtype):
    return _extract_tensor_metadata(torch.empty(shape, dtype=dtype, device="meta"))


def _attr(graph: fx.Graph, module: torch.nn.Module, target: str) -> fx.Node:
    """A get_attr node of a norm's parameter or buffer (`target`: the norm's path, a dot, the tensor's name on
    `module`, the norm), with its shape on it. Made as a plain node: `Graph.get_attr` would look the path up
    through the model again, and the model's hundred norms times five tensors made a third of this pass's time."""
    node = graph.create_node("get_attr", target)
    node.meta["tensor_meta"] = _extract_tensor_metadata(getattr(module, target.rsplit(".", 1)[1]))
    return node


def split_training_batch_norms(gm: fx.GraphModule) -> int:
    """Rewrites every training-mode batch norm that tracks running statistics (see the module's doc);
    the number rewritten. Needs shapes on the graph (`tensor_meta`) and sets them on what it adds. One
    update call, before the output, takes every norm's statistics."""
    graph = gm.graph
    updates: list[tuple] = []
    calls = collections.Counter(n.target for n in graph.nodes if n.op == "call_module")
    for node in list(graph.nodes):
        module = module_of(gm, node)
        if not isinstance(module, torch.nn.modules.batchnorm._BatchNorm) or not module.training or \
                not module.track_running_stats or module.running_mean is None or len(node.args) != 1 or \
                calls[node.target] > 1:  # a norm called twice updates its statistics twice, in order
            continue
        source = meta(node.args[0])
        if source is None or len(source.shape) < 2 or not source.dtype.is_floating_point:
            continue
        shape = tuple(source.shape)
        per_channel = math.prod(shape) // shape[1]
        if per_channel < 2:
            continue  # torch refuses it (one value per channel): leave the library call to say so
        dims = (0,) + tuple(range(2, len(shape)))
        target = node.target
        with graph.inserting_before(node):
            x = node.args[0]
            weight = _attr(graph, module, f"{target}.weight") if module.affine else None
            bias = _attr(graph, module, f"{target}.bias") if module.affine else None
            normed = graph.call_function(F.batch_norm, (x, None, None, weight, bias, True, 0.0, module.eps))
            mean = graph.call_function(torch.mean, (x, dims))
            var = graph.call_function(torch.var, (x, dims), {"correction": 0})
        normed.meta = dict(node.meta)
        for made in (mean, var):
            made.meta["tensor_meta"] = _tensor_meta((shape[1],), source.dtype)
        node.replace_all_uses_with(normed)
        graph.erase_node(node)
        updates.append((target, module, mean, var, per_channel, module.momentum))
    if not updates:
        return 0
    output = next(n for n in graph.nodes if n.op == "output")
    with graph.inserting_before(output):
        buffers = [[_attr(graph, module, f"{target}.{name}") for target, module, *_ in updates]
                   for name in ("running_mean", "running_var", "num_batches_tracked")]
        _, _, means, variances, counts, momenta = (list(column) for column in zip(*updates))
        update = graph.call_function(UPDATE, (*buffers, means, variances, counts, momenta))
        update._rename("running_statistics")  # not the function's own name
    graph.lint()
    gm.recompile()
    return len(updates)
