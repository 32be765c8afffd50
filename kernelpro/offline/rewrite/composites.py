"""Losses and distances that PyTorch computes as one opaque call, written out as the ops they are.

`nn.TripletMarginLoss`, `F.smooth_l1_loss`, `F.cosine_similarity` and their kin are single nodes
of the traced graph, which the fusion has no kernel for: they stayed library calls, each launching
several kernels of its own (a triplet loss reads its anchor twice and writes two distance vectors
and a loss vector before its mean). `decompose` replaces each with the elementwise ops, vector
norms and reductions of its documented definition, which the partitioner then fuses: a triplet
loss becomes one row kernel that reads anchor, positive and negative once, and a small mean.

Each definition follows PyTorch's documentation of the function (and its reference implementation
in `torch._refs`): the same operations in the same order, so the values differ from the library's
only by floating-point rounding, which the harness's tolerance judges. Arguments the rewrite does
not cover (a deprecated `size_average`, `log_target=True` with `batchmean`, integer targets) leave
the call as it is.

A softmax over trailing dimensions flattened for it (`x.view(b, c, -1).softmax(-1).view(b, c, d, h, w)`,
a "spatial softmax") is written out too, over those dimensions of the unflattened tensor: max, exp of
the difference, sum and quotient, the order torch's softmax computes them in. The row kernels cannot
take the reshapes around the library's softmax, so what comes before and after it (a clamp, a scale)
stayed separate kernels; written out, it all becomes one row kernel over the original shape.
"""

from __future__ import annotations

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F
from torch.fx.proxy import GraphAppendingTracer

from kernelpro.offline.ir.ops import resolve
from kernelpro.offline.rewrite.passes import is_op, meta

_REDUCTIONS = ("mean", "sum", "none")


def _reduce(loss, reduction: str):
    if reduction == "mean":
        return torch.mean(loss)
    if reduction == "sum":
        return torch.sum(loss)
    return loss


def _pairwise_distance(x1, x2, p=2.0, eps=1e-6, keepdim=False):
    return torch.linalg.vector_norm(x1 - x2 + eps, ord=p, dim=-1, keepdim=keepdim)


def _triplet(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False, reduction="mean"):
    d_ap = _pairwise_distance(anchor, positive, p, eps)
    d_an = _pairwise_distance(anchor, negative, p, eps)
    if swap:
        d_an = torch.minimum(d_an, _pairwise_distance(positive, negative, p, eps))
    return _reduce(torch.clamp_min(margin + d_ap - d_an, 0.0), reduction)


def _cosine_similarity(x1, x2, dim=1, eps=1e-8):
    n1 = torch.clamp_min(torch.linalg.vector_norm(x1, ord=2, dim=dim, keepdim=True), eps)
    n2 = torch.clamp_min(torch.linalg.vector_norm(x2, ord=2, dim=dim, keepdim=True), eps)
    return torch.sum((x1 / n1) * (x2 / n2), dim=dim)


def _mse(x, y, reduction="mean"):
    return _reduce((x - y) * (x - y), reduction)


def _l1(x, y, reduction="mean"):
    return _reduce(torch.abs(x - y), reduction)


def _smooth_l1(x, y, reduction="mean", beta=1.0):
    z = torch.abs(x - y)
    if beta == 0.0:
        return _reduce(z, reduction)
    return _reduce(torch.where(z < beta, 0.5 * z * z / beta, z - 0.5 * beta), reduction)


def _huber(x, y, reduction="mean", delta=1.0):
    z = torch.abs(x - y)
    return _reduce(torch.where(z < delta, 0.5 * z * z, delta * (z - 0.5 * delta)), reduction)


def _soft_margin(x, y, reduction="mean"):
    return _reduce(torch.log1p(torch.exp(-y * x)), reduction)


def _margin_ranking(x1, x2, target, margin=0.0, reduction="mean"):
    return _reduce(torch.clamp_min(-target * (x1 - x2) + margin, 0.0), reduction)


def _kl_div(x, target, reduction="mean", log_target=False):
    if log_target:
        loss = torch.exp(target) * (target - x)
    else:  # xlogy(target, target) - target * input: 0 * log 0 counts as 0
        loss = torch.where(target == 0, 0.0, target * torch.log(target)) - target * x
    if reduction == "batchmean":
        return torch.sum(loss) / meta_size(x, 0)
    return _reduce(loss, reduction)


def meta_size(proxy, dim: int) -> int:
    """A dimension of a traced value, known from its shape metadata (the problems' shapes are fixed)."""
    return int(meta(proxy.node).shape[dim])


#: target -> (definition, the function's parameters in call order)
_FUNCTIONS: dict[object, tuple] = {
    F.pairwise_distance: (_pairwise_distance, ("x1", "x2", "p", "eps", "keepdim")),
    torch.pairwise_distance: (_pairwise_distance, ("x1", "x2", "p", "eps", "keepdim")),
    F.triplet_margin_loss: (_triplet, ("anchor", "positive", "negative", "margin", "p", "eps", "swap",
                                       "size_average", "reduce", "reduction")),
    F.cosine_similarity: (_cosine_similarity, ("x1", "x2", "dim", "eps")),
    torch.cosine_similarity: (_cosine_similarity, ("x1", "x2", "dim", "eps")),
    F.mse_loss: (_mse, ("input", "target", "size_average", "reduce", "reduction")),
    F.l1_loss: (_l1, ("input", "target", "size_average", "reduce", "reduction")),
    F.smooth_l1_loss: (_smooth_l1, ("input", "target", "size_average", "reduce", "reduction", "beta")),
    F.huber_loss: (_huber, ("input", "target", "reduction", "delta")),
    F.soft_margin_loss: (_soft_margin, ("input", "target", "size_average", "reduce", "reduction")),
    F.margin_ranking_loss: (_margin_ranking, ("input1", "input2", "target", "margin", "size_average", "reduce",
                                              "reduction")),
    F.kl_div: (_kl_div, ("input", "target", "size_average", "reduce", "reduction", "log_target")),
}


def _module_call(module: nn.Module) -> tuple | None:
    """(definition, keyword arguments from the module's attributes) for the loss and distance modules."""
    if isinstance(module, nn.TripletMarginLoss):
        return _triplet, dict(margin=module.margin, p=module.p, eps=module.eps, swap=module.swap,
                              reduction=module.reduction)
    if isinstance(module, nn.PairwiseDistance):
        return _pairwise_distance, dict(p=module.norm, eps=module.eps, keepdim=module.keepdim)
    if isinstance(module, nn.CosineSimilarity):
        return _cosine_similarity, dict(dim=module.dim, eps=module.eps)
    if isinstance(module, nn.SmoothL1Loss):
        return _smooth_l1, dict(reduction=module.reduction, beta=module.beta)
    if isinstance(module, nn.HuberLoss):
        return _huber, dict(reduction=module.reduction, delta=module.delta)
    if isinstance(module, nn.KLDivLoss):
        return _kl_div, dict(reduction=module.reduction, log_target=module.log_target)
    if isinstance(module, nn.MarginRankingLoss):
        return _margin_ranking, dict(margin=module.margin, reduction=module.reduction)
    for kind, definition in ((nn.MSELoss, _mse), (nn.L1Loss, _l1), (nn.SoftMarginLoss, _soft_margin)):
        if type(module) is kind:
            return definition, dict(reduction=module.reduction)
    return None


def _bound(node: fx.Node, params: tuple[str, ...]) -> dict | None:
    bound = dict(zip(params, node.args))
    for name, value in node.kwargs.items():
        if name in params:
            bound[name] = value
        elif value is not None:  # an argument the definition does not take (a loss's element `weight`)
            return None
    if bound.pop("size_average", None) is not None or bound.pop("reduce", None) is not None:
        return None  # the deprecated reduction arguments: left to the library
    return bound


def _supported(kwargs: dict, tensors: list) -> bool:
    reduction = kwargs.get("reduction", "mean")
    if reduction not in _REDUCTIONS + ("batchmean",):
        return False
    if any(isinstance(v, fx.Node) for k, v in kwargs.items() if k not in ("target",)):
        return False  # a margin or an order computed in forward: not a constant
    metas = [meta(t) for t in tensors]
    if any(m is None or not m.dtype.is_floating_point for m in metas):
        return False  # integer targets (class indices) or a value without a known shape
    if any(tuple(m.shape) != tuple(metas[0].shape) for m in metas):
        return False  # broadcasting between the operands: as the library does it, not rewritten
    order = kwargs.get("p", 2.0)
    return isinstance(order, (int, float)) and not isinstance(order, bool) and order > 0


_RESHAPES = ((torch.reshape, torch.flatten), {"view", "reshape", "flatten"})  # is_op's functions, methods


def _softmax_dim(gm: fx.GraphModule, node: fx.Node) -> tuple[fx.Node, int] | None:
    """(input, dim) of a softmax node (function, method or module, as the fusion resolves it) without a
    dtype; None for anything else."""
    res = resolve(gm, node)
    if res is None or res.op != "softmax" or len(node.args) > 2:  # a third positional argument is a dtype
        return None
    source, dim = res.args["input"], res.args["dim"]
    return (source, dim) if isinstance(source, fx.Node) and isinstance(dim, int) else None


def _softmax_over(x, dims: tuple[int, ...]):
    top = torch.amax(x, dim=dims, keepdim=True)
    e = torch.exp(x - top)
    return e / torch.sum(e, dim=dims, keepdim=True)


def flattened_softmaxes(gm: fx.GraphModule) -> int:
    """Rewrites each softmax over trailing dimensions flattened for it, whose result is reshaped straight
    back (see the module's doc), into the softmax over those dimensions of the unflattened tensor."""
    count = 0
    for node in list(gm.graph.nodes):
        found = _softmax_dim(gm, node)
        if found is None:
            continue
        flat, dim = found
        if not is_op(flat, *_RESHAPES) or len(flat.users) != 1 or len(node.users) != 1:
            continue
        back, = node.users
        source = flat.args[0]
        shapes = [meta(n) for n in (source, flat, back)]
        if not is_op(back, *_RESHAPES) or any(m is None for m in shapes) or not shapes[0].dtype.is_floating_point:
            continue
        full, flattened, restored = (tuple(m.shape) for m in shapes)
        dim = dim % len(flattened) if flattened else dim
        # the flattened tensor keeps the leading dims and joins the rest into its last one, the softmax's
        if restored != full or dim != len(flattened) - 1 or flattened[:dim] != full[:dim] or len(full) <= dim + 1:
            continue
        tracer = GraphAppendingTracer(gm.graph)
        with gm.graph.inserting_before(back):
            result = _softmax_over(fx.Proxy(source, tracer), tuple(range(dim, len(full))))
        back.replace_all_uses_with(result.node)
        for dead in (back, node, flat):
            gm.graph.erase_node(dead)
        count += 1
    return count


def decompose(gm: fx.GraphModule) -> int:
    """Rewrites every loss and distance call it knows into its definition's ops, and every flattened
    softmax (`flattened_softmaxes`); how many it rewrote."""
    count = flattened_softmaxes(gm)
    for node in list(gm.graph.nodes):
        if node.op == "call_module":
            found = _module_call(gm.get_submodule(node.target))
            if found is None or node.kwargs or not all(isinstance(a, fx.Node) for a in node.args):
                continue
            definition, kwargs = found
            tensors = list(node.args)
        elif node.op == "call_function" and node.target in _FUNCTIONS:
            definition, params = _FUNCTIONS[node.target]
            bound = _bound(node, params)
            if bound is None:
                continue
            names = [p for p in params if isinstance(bound.get(p), fx.Node)]
            tensors = [bound.pop(p) for p in names]
            if len(tensors) < 2 or names != list(params[:len(names)]):
                continue
            kwargs = bound
        else:
            continue
        if not _supported(kwargs, tensors):
            continue
        tracer = GraphAppendingTracer(gm.graph)
        with gm.graph.inserting_before(node):
            result = definition(*(fx.Proxy(t, tracer) for t in tensors), **kwargs)
        node.replace_all_uses_with(result.node)
        gm.graph.erase_node(node)
        count += 1
    if count:
        gm.graph.lint()
        gm.recompile()
    return count
