"""Graph moves that fold work into a linear layer's or a convolution's weights and bias (computed once, at init):
a scalar multiply after it, a batch norm on running statistics after a convolution, a convolution's bias moved
after a max pool (which commutes with adding a per-channel constant), and a transposed convolution with stride 1 as
the convolution it is (its weight flipped and its channels swapped, once). `move_bias` also serves the fusion stage,
which moves a bias into the kernel after the convolution."""

from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from kernelpro.offline.ir.ops import CONV_FUNCTIONS, CONV_MODULES, TRANSPOSED_CONV_FUNCTIONS, TRANSPOSED_CONV_MODULES
from kernelpro.offline.rewrite.passes import (DIV, MAX_POOL, MUL, arg, is_op, max_pool_of_values, module_of, scaled_by,
                                              substitute)
from kernelpro.offline.rewrite.rules import Move, Pattern, Rule


_CONV_MODULES = tuple(CONV_MODULES)
_CONV_BY_DIMS = {rank: conv for conv, rank in CONV_FUNCTIONS.items()}  # spatial dims -> functional convolution
_TRANSPOSED_MODULES = tuple(TRANSPOSED_CONV_MODULES)
_TRANSPOSED_BY_DIMS = {rank: conv for conv, rank in TRANSPOSED_CONV_FUNCTIONS.items()}


def _with_folded_weights(gm: fx.GraphModule, node: fx.Node, producer: fx.Node, module: torch.nn.Module,
                         weight: fx.Node, bias: fx.Node | None) -> None:
    """`node` becomes the functional linear/conv of `producer`'s input with these weight and bias nodes
    (parameter-only nodes a pass created, each marked to be folded at init)."""
    for created in (weight, bias):
        if created is not None:
            created.meta["kp_fold"] = True
    _as_functional(gm, node, module, producer.args[0], weight, bias)


def _as_functional(gm: fx.GraphModule, node: fx.Node, module: torch.nn.Module, x, weight, bias) -> None:
    """`node` becomes the functional linear/conv that `module` computes, on `x` with these weight and bias."""
    if isinstance(module, torch.nn.Linear):
        substitute(gm, node, F.linear, (x, weight, bias))
    elif isinstance(module, _TRANSPOSED_MODULES):  # the module's output_padding (no output_size given)
        substitute(gm, node, _TRANSPOSED_BY_DIMS[len(module.kernel_size)],
                    (x, weight, bias, module.stride, module.padding, module.output_padding, module.groups,
                     module.dilation))
    else:
        substitute(gm, node, _CONV_BY_DIMS[len(module.kernel_size)],
                    (x, weight, bias, module.stride, module.padding, module.dilation, module.groups))


def _scalar_into_weights(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    found = scaled_by(node)
    if not found:
        return False
    producer, scalar = found
    module = module_of(gm, producer)
    if not isinstance(module, (torch.nn.Linear, *_CONV_MODULES)) or \
            len(producer.users) != 1 or not math.isfinite(scalar) or \
            getattr(module, "padding_mode", "zeros") != "zeros":
        return False
    graph = gm.graph
    with graph.inserting_before(producer):
        weight = graph.call_function(operator.mul, (graph.get_attr(f"{producer.target}.weight"), scalar))
        bias = None
        if module.bias is not None:
            bias = graph.call_function(operator.mul, (graph.get_attr(f"{producer.target}.bias"), scalar))
    _with_folded_weights(gm, node, producer, module, weight, bias)
    return True


fold_scalar_into_weights = Move("fold_scalar_into_weights", (
    Rule("linear(x) * s -> linear with W*s, b*s (conv alike; or / s), the product its only user; folded at init",
         Pattern(MUL + DIV, frozenset({"mul", "div"})), _scalar_into_weights),
))


_BATCH_NORMS = (torch.nn.BatchNorm1d, torch.nn.BatchNorm2d, torch.nn.BatchNorm3d)


def _batch_norm_into_conv(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """conv(x) then a batch norm on running statistics (eval mode), the norm the conv's only user:
    one conv with scaled weights, W * g/sqrt(var+eps) per output channel, and bias
    (b - mean) * g/sqrt(var+eps) + beta (folded at init)."""
    norm, conv = module_of(gm, node), module_of(gm, node.args[0] if node.args else None)
    if not isinstance(norm, _BATCH_NORMS) or norm.training or norm.running_var is None or \
            not isinstance(conv, _CONV_MODULES) or len(node.args[0].users) != 1 or \
            getattr(conv, "padding_mode", "zeros") != "zeros" or conv.out_channels != norm.num_features:
        return False
    graph, producer = gm.graph, node.args[0]
    created = []

    def call(target, *args):
        created.append(graph.call_function(target, args))
        return created[-1]

    with graph.inserting_before(producer):
        scale = call(torch.rsqrt, call(operator.add, graph.get_attr(f"{node.target}.running_var"), norm.eps))
        if norm.affine:
            scale = call(operator.mul, scale, graph.get_attr(f"{node.target}.weight"))
        shape = (-1,) + (1,) * (conv.weight.dim() - 1)
        weight = call(operator.mul, graph.get_attr(f"{producer.target}.weight"), call(torch.reshape, scale, shape))
        shift = call(operator.neg, graph.get_attr(f"{node.target}.running_mean"))
        if conv.bias is not None:
            shift = call(operator.add, graph.get_attr(f"{producer.target}.bias"), shift)
        bias = call(operator.mul, shift, scale)
        if norm.affine:
            bias = call(operator.add, bias, graph.get_attr(f"{node.target}.bias"))
    for made in created:
        made.meta["kp_fold"] = True
    _with_folded_weights(gm, node, producer, conv, weight, bias)
    return True


fold_batch_norm = Move("fold_batch_norm", (
    Rule("batch_norm(conv(x)) on running statistics -> conv(x) with W * g/sqrt(var+eps) and bias "
         "(b - mean) * g/sqrt(var+eps) + beta, folded at init", Pattern(modules=_BATCH_NORMS), _batch_norm_into_conv),
))


_CONV_FNS = CONV_FUNCTIONS | TRANSPOSED_CONV_FUNCTIONS


def _conv_bias(gm: fx.GraphModule, conv) -> tuple[fx.Node, int] | None:
    """(the bias node, spatial dims) of a convolution or transposed convolution with a bias in zero
    padding (a transposed one called on its input alone); None otherwise."""
    module = module_of(gm, conv)
    if isinstance(module, _CONV_MODULES + _TRANSPOSED_MODULES):
        if module.bias is None or getattr(module, "padding_mode", "zeros") != "zeros" or \
                len(conv.args) + len(conv.kwargs) != 1:
            return None
        with gm.graph.inserting_before(conv):
            return gm.graph.get_attr(f"{conv.target}.bias"), len(module.kernel_size)
    if is_op(conv, tuple(_CONV_FNS)) and isinstance(arg(conv, 2, "bias"), fx.Node):
        return arg(conv, 2, "bias"), _CONV_FNS[conv.target]
    return None


def _without_bias(gm: fx.GraphModule, conv: fx.Node) -> None:
    """The convolution node computes the same convolution without its bias."""
    module = module_of(gm, conv)
    if module is None:
        if len(conv.args) > 2:
            conv.args = conv.args[:2] + (None,) + conv.args[3:]
        else:
            conv.kwargs = {**conv.kwargs, "bias": None}
        return
    with gm.graph.inserting_before(conv):
        weight = gm.graph.get_attr(f"{conv.target}.weight")
    _as_functional(gm, conv, module, conv.args[0], weight, None)


def move_bias(gm: fx.GraphModule, conv: fx.Node, after: fx.Node) -> bool:
    """Whether `conv` had a bias (`_conv_bias`) that now comes after `after` (the convolution itself, or
    an op its bias commutes with): every user of `after` reads after + bias (per channel) instead, and
    the convolution runs without it. The bias's reshape is a view of a parameter (or of a folded bias):
    computed once, at init."""
    found = _conv_bias(gm, conv)
    if found is None:
        return False
    bias, spatial = found
    graph = gm.graph
    with graph.inserting_after(after):
        shaped = graph.call_function(torch.reshape, (bias, (-1,) + (1,) * spatial))
    shaped.meta["kp_fold"] = True
    with graph.inserting_after(shaped):
        added = graph.call_function(operator.add, (after, shaped))
    added.meta = dict(after.meta)
    after.replace_all_uses_with(added, delete_user_cb=lambda user: user is not added)
    _without_bias(gm, conv)
    return True


def _bias_after_pool(gm: fx.GraphModule, pool: fx.Node, state) -> bool:
    """max_pool(conv(x) + b) -> max_pool(conv(x)) + b for a convolution with a bias whose only user is the
    pool: the maximum over a window commutes with adding a per-channel constant (padding is -inf, which
    stays -inf), so the bias is added to the pooled tensor, and the convolution runs without the
    separate bias-add kernel cuDNN launches for it."""
    if not max_pool_of_values(gm, pool):
        return False
    conv = pool.args[0] if pool.args else None
    return isinstance(conv, fx.Node) and len(conv.users) == 1 and move_bias(gm, conv, pool)


bias_after_pool = Move("bias_after_pool", (
    Rule("max_pool(conv(x) + b) -> max_pool(conv(x)) + b, the pool the convolution's only user", MAX_POOL,
         _bias_after_pool),
))


def _transposed_as_conv(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """An nn.ConvTranspose*d with stride 1 and no output padding -> the convolution it is: the weight's channel
    dims swapped within each group and its kernel flipped (computed once, at init), padding dilation x (kernel -
    1) - padding on each side. Each output sums the same products; the float sums may come in another order.
    cuDNN runs a transposed convolution as a convolution's data gradient, with its own algorithms; this runs the
    forward ones (and `cudnn_benchmark` then times the forward ones)."""
    module = module_of(gm, node)
    if not isinstance(module, _TRANSPOSED_MODULES) or len(node.args) != 1 or node.kwargs \
            or not isinstance(module.padding, tuple):
        return False
    rank = len(module.kernel_size)
    padding = tuple(d * (k - 1) - p for k, p, d in zip(module.kernel_size, module.padding, module.dilation))
    if tuple(module.stride) != (1,) * rank or any(module.output_padding) or min(padding) < 0:
        return False
    groups, graph = module.groups, gm.graph
    with graph.inserting_before(node):
        made = [graph.get_attr(f"{node.target}.weight")]  # [C_in, C_out / groups, *kernel]
        made.append(graph.call_method("unflatten", (made[-1], 0, (groups, module.in_channels // groups))))
        made.append(graph.call_method("transpose", (made[-1], 1, 2)))  # [groups, C_out / groups, C_in / groups, ...]
        made.append(graph.call_method("flatten", (made[-1], 0, 1)))
        made.append(graph.call_method("flip", (made[-1], tuple(range(2, 2 + rank)))))
        bias = graph.get_attr(f"{node.target}.bias") if module.bias is not None else None
    for created in made[1:]:
        created.meta["kp_fold"] = True
    substitute(gm, node, _CONV_BY_DIMS[rank], (node.args[0], made[-1], bias, (1,) * rank, padding, module.dilation,
                                                groups))
    return True


transposed_as_conv = Move("transposed_as_conv", (
    Rule("conv_transpose(x, W) with stride 1, no output padding -> conv(x, flip(W per group, channels swapped)), "
         "padding d(k - 1) - p; the weight made at init", Pattern(modules=_TRANSPOSED_MODULES), _transposed_as_conv),
))


# the weight folds by move name
WEIGHTS = {"fold_scalar_into_weights": fold_scalar_into_weights, "fold_batch_norm": fold_batch_norm,
           "bias_after_pool": bias_after_pool, "transposed_as_conv": transposed_as_conv}
