"""A reduction over a linear layer's output features, taken over its weights first; an average pool taken before
the product it follows.

sum(x @ W^T + b, dim=-1) is x @ W.sum(0) + b.sum(): the sum (or mean) of a product's columns is the
product with the sum (or mean) of the weight's rows, a matrix-vector product instead of a matrix
product (KernelBench's level2/14 sums a 1024 x 8192 x 8192 GEMM's output over its 8192 features; level2/51
takes its mean). The reduced weights and the product with them are taken in float64 and the result cast
back. What lies between the product and the reduction must commute with it: multiplying or
dividing by a number, adding or subtracting a number or a parameter vector over the features (its sum or
mean then). The reduced weights and bias are computed once, at init, like the other folded weights. Exact in
real arithmetic; in floating point the sums are taken in another order, and the harness checks the
tolerance as for any candidate: on level2/14 at KernelBench's size, on the CPU, the exact result itself is
more than 1e-4 from the float32 reference on 4 of 1,024 outputs (sums of 8,192 terms near 5,000 in size
that nearly cancel), so whether the move passes there depends on the reference's own rounding.

An average pool commutes with the products it follows: over a linear layer's output features (its weight rows and
bias averaged in windows, at init), and over the positions of a 1 x 1 convolution (the pool first, then the
convolution on the pooled positions).
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from kernelpro.offline.rewrite.rules import Move, Pattern, Rule
from kernelpro.offline.rewrite.passes import (ADD, DIV, MUL, SUB, reduced_dims, run_before, scalar_binary,
                                              transpose_dims, arg, is_op, meta, module_of)
from kernelpro.offline.ir.windows import as_tuple, pool_args
from kernelpro.offline.ir.ops import CONV_FUNCTIONS, CONV_MODULES

_REDUCE = {"sum": (torch.sum, "sum"), "mean": (torch.mean, "mean")}


def _reduction(node) -> tuple[str, bool] | None:
    """("sum" or "mean", keepdim) for a sum or mean over the last dim alone, without a dtype."""
    kind = next((name for name, (fn, method) in _REDUCE.items() if is_op(node, (fn,), {method})), None)
    source = node.args[0] if kind and node.args else None
    shape = meta(source).shape if isinstance(source, fx.Node) and meta(source) else None
    if kind is None or shape is None or len(shape) < 2 or node.kwargs.get("dtype") is not None:
        return None
    if reduced_dims(node, len(shape)) != [len(shape) - 1]:
        return None
    return kind, bool(arg(node, 2, "keepdim", False))


def _parameter(node) -> bool:
    return isinstance(node, fx.Node) and node.op == "get_attr"


Weight = fx.Node | str  # a get_attr node, or the qualified name of a module's parameter


def linear_product(gm: fx.GraphModule, node) -> tuple[fx.Node, Weight, int, Weight | None] | None:
    """(x, weight, the weight's dim over the output features, bias or None) of a linear layer or of a product
    with a parameter matrix: nn.Linear, F.linear, x @ W.T, x @ W. Nothing is added to the graph."""
    if not isinstance(node, fx.Node):
        return None
    module = module_of(gm, node)
    if isinstance(module, torch.nn.Linear) and len(node.args) == 1 and not node.kwargs:
        return node.args[0], f"{node.target}.weight", 0, f"{node.target}.bias" if module.bias is not None else None
    if is_op(node, (F.linear,)) and _parameter(arg(node, 1, "weight")):
        bias = arg(node, 2, "bias")
        return (node.args[0], arg(node, 1, "weight"), 0, bias) if bias is None or _parameter(bias) else None
    if not is_op(node, (operator.matmul, torch.matmul, torch.mm), {"matmul", "mm"}) or len(node.args) != 2:
        return None
    x, right = node.args
    if _parameter(right) and meta(right) is not None and len(meta(right).shape) == 2:
        return x, right, 1, None
    if not isinstance(right, fx.Node) or len(right.users) != 1:
        return None
    transposed = transpose_dims(right, 2) == (0, 1) or (right.op == "call_function" and right.target is getattr
                                                          and right.args[1:] == ("T",))
    matrix = right.args[0] if transposed else None
    if _parameter(matrix) and meta(matrix) is not None and len(meta(matrix).shape) == 2:
        return x, matrix, 0, None
    return None


def _vector_term(node: fx.Node) -> tuple[fx.Node, fx.Node] | None:
    """(value, p) for value + p, p + value or value - p with a parameter p over the last dim alone."""
    if not is_op(node, ADD + SUB, {"add", "sub"}) or len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    orders = ((a, b), (b, a)) if node.target in ADD or node.target == "add" else ((a, b),)
    for value, term in orders:
        shape = meta(term).shape if _parameter(term) and meta(term) else None
        if isinstance(value, fx.Node) and shape is not None and len(shape) >= 1 and all(s == 1 for s in shape[:-1]):
            return value, term
    return None


def _step(node) -> tuple[fx.Node, str, object] | None:
    """(the value it changes, "mul"/"div"/"add"/"sub", the number or parameter) for an op that commutes with
    the reduction: value * n, value / n, value + n, value - n (numbers), value +/- p (a parameter vector)."""
    if not isinstance(node, fx.Node):
        return None
    for ops, name in ((MUL, "mul"), (DIV, "div"), (ADD, "add"), (SUB, "sub")):
        found = scalar_binary(node, ops)
        if found:
            return found[0], name, found[1]
    term = _vector_term(node)
    if term is not None:
        return term[0], "sub" if (node.target in SUB or node.target == "sub") else "add", term[1]
    return None


def _reduce_before_product(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """sum/mean(steps(linear(x)), dim=-1) -> steps'(x @ reduced weight + reduced bias), see the module doc."""
    graph = gm.graph
    found = _reduction(node)
    if found is None:
        return False
    kind, keepdim = found
    steps, current = [], node.args[0]
    while linear_product(gm, current) is None and (step := _step(current)) is not None and len(current.users) == 1:
        steps.insert(0, step)
        current = step[0]
    product = linear_product(gm, current)
    if product is None or len(current.users) != 1:
        return False
    features = meta(current).shape[-1]
    x, weight, over, bias = product
    reduce = torch.sum if kind == "sum" else torch.mean

    if any(isinstance(operand, fx.Node) and meta(operand).shape[-1] != features for _, _, operand in steps):
        return False  # a parameter of one element added to every feature: not a vector over them

    def folded(made: fx.Node) -> fx.Node:  # a parameter-only value: computed once, at init
        made.meta["kp_fold"] = True
        return made

    def reduced(source: Weight, *dims, wide: bool = False) -> fx.Node:
        value = graph.get_attr(source) if isinstance(source, str) else source
        if wide:
            value = folded(graph.call_method("double", (value,)))
        return folded(graph.call_function(reduce, (value,) + dims))

    with graph.inserting_before(node):
        # float64 products and sums: the reordered sum then stays as close to the exact one as it can, so
        # the float32 reference's own rounding is all that separates them (one matrix-vector product: cheap)
        column = folded(graph.call_function(torch.unsqueeze, (reduced(weight, over, wide=True), 1)))
        value = graph.call_function(torch.matmul, (graph.call_method("double", (x,)), column))
        if bias is not None:
            value = graph.call_function(operator.add, (value, reduced(bias, wide=True)))
        value = graph.call_method("type_as", (value, x))
        for _, name, operand in steps:
            if isinstance(operand, fx.Node):  # a parameter vector: by its own sum or mean
                operand = reduced(operand)
            elif name in ("add", "sub") and kind == "sum":  # a number added to every feature, summed
                operand = operand * features
            value = graph.call_function(getattr(operator, "truediv" if name == "div" else name),
                                        (value, operand))
        if not keepdim:
            value = graph.call_function(torch.squeeze, (value, -1))
    node.replace_all_uses_with(value)
    return True


reduce_before_product = Move("reduce_before_product", (
    Rule("sum/mean(steps(linear(x)), dim=-1) -> steps'(x @ reduced weight + reduced bias)", Pattern(),
         _reduce_before_product),
))


def _feature_pool(gm: fx.GraphModule, node) -> tuple[fx.Node, int] | None:
    """(the 2-D value, the window) of avg_pool1d(value.unsqueeze(1)).squeeze(1) with non-overlapping windows
    (stride = kernel), no padding, no ceil_mode and no divisor override: each output feature the mean of its
    own `window` features."""
    if not is_op(node, (torch.squeeze,), {"squeeze"}) or arg(node, 1, "dim") not in (1, -2) or len(node.args) < 2:
        return None
    pool = node.args[0]
    found = pool_args(gm, pool) if isinstance(pool, fx.Node) and len(pool.users) == 1 else None
    if found is None or found[:2] != ("avg", 1):
        return None
    bound = found[2]
    kernel, stride, padding = (as_tuple(bound.get(name, 0), 1) for name in ("kernel_size", "stride", "padding"))
    if None in (kernel, stride, padding) or kernel != stride or padding != (0,) or bound.get("ceil_mode") or \
            bound.get("divisor_override"):
        return None
    lifted = bound["input"]
    if not is_op(lifted, (torch.unsqueeze,), {"unsqueeze"}) or arg(lifted, 1, "dim") != 1 or len(lifted.users) != 1:
        return None
    value = lifted.args[0]
    return (value, kernel[0]) if isinstance(value, fx.Node) and meta(value) and len(meta(value).shape) == 2 else None


def _pool_before_product(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """avg_pool1d over a linear layer's output features (as x.unsqueeze(1) pooled and squeezed) -> the linear
    layer with its weight rows and bias averaged in windows: a GEMM with `window` times fewer columns
    (KernelBench's level2/98 pools 8192 features by 16). The averaged weights are computed once, at init, in
    float64 and cast back."""
    graph = gm.graph
    found = _feature_pool(gm, node)
    product = linear_product(gm, found[0]) if found else None
    if product is None or len(found[0].users) != 1:
        return False
    (value, window), (x, weight, over, bias) = found, product
    features = meta(value).shape[-1]
    kept = features // window * window

    def averaged(source: Weight, dim: int, shape: tuple[int, ...]) -> fx.Node:
        """The windows' means along `dim` (reshaped to `shape`, the windows in its last or middle dim)."""
        tensor = graph.get_attr(source) if isinstance(source, str) else source
        made = [graph.call_method("double", (tensor,))]
        made.append(graph.call_function(torch.narrow, (made[-1], dim, 0, kept)))
        made.append(graph.call_method("reshape", (made[-1], shape)))
        made.append(graph.call_function(torch.mean, (made[-1], shape.index(window))))
        made.append(graph.call_method("type_as", (made[-1], tensor)))
        for item in made:
            item.meta["kp_fold"] = True
        return made[-1]

    with graph.inserting_before(node):
        groups = features // window
        if over == 1:  # x @ W with W [K, N]: the columns are the features
            pooled = graph.call_function(torch.matmul, (x, averaged(weight, 1, (-1, groups, window))))
        else:  # W [N, K]: the rows are; the windows' dim is the middle one
            pooled_bias = averaged(bias, 0, (groups, window)) if bias is not None else None
            pooled = graph.call_function(F.linear, (x, averaged(weight, 0, (groups, window, -1)), pooled_bias))
    pooled.meta = dict(node.meta)
    node.replace_all_uses_with(pooled)
    return True


_AVG_POOLS = (torch.nn.AvgPool1d, torch.nn.AvgPool2d, torch.nn.AvgPool3d)


def _pointwise_conv_rank(gm: fx.GraphModule, node) -> int | None:
    """The spatial rank of a convolution with a 1 x ... x 1 kernel, stride 1 and no padding (a product of each
    position's channels with the weights, plus the bias), or None."""
    module = module_of(gm, node)
    if type(module) in CONV_MODULES:
        if len(node.args) != 1 or node.kwargs or getattr(module, "padding_mode", "zeros") != "zeros":
            return None
        rank = CONV_MODULES[type(module)]
        ones, zeros = (1,) * rank, (0,) * rank
        padding = module.padding if module.padding != "valid" else zeros
        return rank if (tuple(module.kernel_size), tuple(module.stride), tuple(padding)) == (ones, ones, zeros) \
            else None
    if not is_op(node, tuple(CONV_FUNCTIONS)) or not meta(node.args[1] if len(node.args) > 1 else None):
        return None
    rank = CONV_FUNCTIONS[node.target]
    stride, padding = as_tuple(arg(node, 3, "stride", 1), rank), arg(node, 4, "padding", 0)
    padding = (0,) * rank if padding == "valid" else as_tuple(padding, rank)
    kernel = tuple(meta(node.args[1]).shape[2:])
    return rank if (kernel, stride, padding) == ((1,) * rank, (1,) * rank, (0,) * rank) else None


def _pool_before_pointwise_conv(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """avg_pool(conv(x)) with a 1 x 1 convolution, no padding in the pool -> conv(avg_pool(x)): each output is
    W @ (the window's mean of x) + b, which is the window's mean of W @ x + b. The convolution runs on the pooled
    positions (a 2 x 2 pool: a quarter of the products), and the pool on the convolution's input channels
    (DenseNet's transition layers: batch norm, ReLU, a 1 x 1 convolution halving the channels, a 2 x 2 average
    pool). Exact in real arithmetic; in floating point the sums are taken in another order. Not at fp32: there
    cuDNN's convolutions round their operands to TF32 (PyTorch's default), so the pooled inputs are rounded
    differently, and KernelBench's level3/13 on an H200 had 8.97% of its output outside fp32's 1e-4."""
    if gm.meta.get("kp_precision", "fp32") == "fp32":
        return False
    found = pool_args(gm, node)
    if found is None or found[0] != "avg":
        return False
    _, rank, bound = found
    conv = bound["input"]
    if len(conv.users) != 1 or _pointwise_conv_rank(gm, conv) != rank or not isinstance(conv.args[0], fx.Node):
        return False
    if as_tuple(bound.get("padding", 0), rank) != (0,) * rank or bound.get("divisor_override") is not None:
        return False
    run_before(gm, node, conv)
    return True


pool_before_product = Move("pool_before_product", (
    Rule("avg_pool1d over linear(x)'s features -> linear(x) with its weight rows and bias averaged in windows",
         Pattern((torch.squeeze,), frozenset({"squeeze"})), _pool_before_product),
    Rule("avg_pool(conv1x1(x)) -> conv1x1(avg_pool(x)) (no padding in the pool): the products on the pooled "
         "positions", Pattern((F.avg_pool1d, F.avg_pool2d, F.avg_pool3d), modules=_AVG_POOLS),
         _pool_before_pointwise_conv),
))


REWRITES = {"reduce_before_product": reduce_before_product, "pool_before_product": pool_before_product}
