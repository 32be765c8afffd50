"""Products repeated at every step of a loop that the trace unrolled, batched into one.

A recurrent cell written out by hand (`for t in range(T): h = tanh(linear(cat(x[t], h)))`, then a linear layer on
each step's output, stacked) traces into T copies of each product, each a small matrix product with its own launch.
Two rules make fewer and larger ones:
- the input's share of a linear layer over cat(x[t], h): the layer's weight split by columns, x's share computed
  for every step at once (one product over all of x, the bias in it), and each step adds h's share to its row of it
  (`addmm`: one product a step instead of a concatenation and a product);
- stack(linear(h_0), ..., linear(h_T-1)) is linear(stack(h_0, ..., h_T-1)): one product over the stack.
Exact in real arithmetic; in floating point each dot product is split in two (the first rule) or computed by
another kernel of the library, and the harness checks the tolerance as for any candidate.
"""

from __future__ import annotations

import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from kernelpro.offline.rewrite.passes import arg, is_op, meta
from kernelpro.offline.rewrite.reduce import Weight, linear_product
from kernelpro.offline.rewrite.rules import Move, Pattern, Rule


def _step_input(gm: fx.GraphModule, node) -> tuple[tuple, fx.Node, int, fx.Node] | None:
    """(the product, x, t, h) for a product of cat((x[t], h), dim=-1) with 2-D x[t] and h, x[t] the t-th slice of x
    along its first dim; None otherwise."""
    product = linear_product(gm, node)
    cat = product[0] if product else None
    if cat is None or not is_op(cat, (torch.cat,), {"cat"}) or len(cat.users) != 1:
        return None
    parts, dim = cat.args[0], arg(cat, 1, "dim", 0)
    if not isinstance(parts, (list, tuple)) or len(parts) != 2 or dim not in (-1, 1):
        return None
    first, h = parts
    if not (is_op(first, (operator.getitem,)) and isinstance(first.args[1], int) and isinstance(h, fx.Node)):
        return None
    x = first.args[0]
    if not (meta(first) and meta(h) and meta(x)) or len(meta(first).shape) != 2 or len(meta(h).shape) != 2 or \
            len(meta(x).shape) != 3:
        return None
    return product, x, first.args[1], h


def _recurrences(gm: fx.GraphModule) -> dict:
    """The products of cat((x[t], h)) that share a weight and an x, in groups of two or more (one alone gains
    nothing): each product's group (x, weight, orientation, bias) with its t and h, and each group's first product in
    the graph's order."""
    groups: dict[tuple, list[tuple[fx.Node, int, fx.Node]]] = {}
    for node in gm.graph.nodes:
        found = _step_input(gm, node)
        if found is not None:
            product, x, t, h = found
            groups.setdefault((x,) + tuple(product[1:]), []).append((node, t, h))
    kept = {key: steps for key, steps in groups.items() if len(steps) >= 2}
    return {"steps": {node: (key, t, h) for key, steps in kept.items() for node, t, h in steps},
            "first": {key: steps[0][0] for key, steps in kept.items()}, "projected": {}}


def _weight_node(graph: fx.Graph, weight: Weight) -> fx.Node:
    return graph.get_attr(weight) if isinstance(weight, str) else weight


def _folded(node: fx.Node) -> fx.Node:
    node.meta["kp_fold"] = True
    return node


def _hoist_input_share(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """linear(cat((x[t], h))) -> addmm(P[t], h, W_h), P = linear(x, W_x, b) once for the group, before its first
    step; W_x and W_h (the weight's columns for x and for h, W_h as [K_h, N]) are computed once, at init."""
    if node not in state["steps"]:
        return False
    key, t, h = state["steps"][node]
    x, weight, over, bias = key
    graph, width = gm.graph, meta(x).shape[-1]
    if key not in state["projected"]:
        with graph.inserting_before(state["first"][key]):
            whole = _weight_node(graph, weight)
            rest = meta(h).shape[-1]
            if over == 0:  # W [N, K]: the columns are the inputs
                w_x = _folded(graph.call_function(torch.narrow, (whole, 1, 0, width)))
                w_h = _folded(graph.call_method("contiguous", (_folded(graph.call_method(
                    "t", (_folded(graph.call_function(torch.narrow, (whole, 1, width, rest))),))),)))
                b = _weight_node(graph, bias) if bias is not None else None
                projected = graph.call_function(F.linear, (x, w_x, b))
            else:  # W [K, N]: the rows are
                w_x = _folded(graph.call_function(torch.narrow, (whole, 0, 0, width)))
                w_h = _folded(graph.call_function(torch.narrow, (whole, 0, width, rest)))
                projected = graph.call_function(torch.matmul, (x, w_x))
        state["projected"][key] = projected, w_h
    projected, w_h = state["projected"][key]
    with graph.inserting_before(node):
        row = graph.call_function(operator.getitem, (projected, t))
        step = graph.call_function(torch.addmm, (row, h, w_h))
    step.meta = dict(node.meta)
    node.replace_all_uses_with(step)
    return True


def _batch_stacked_products(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """stack((linear(h_0), ..., linear(h_T-1)), dim) -> linear(stack((h_0, ..., h_T-1), dim)): every element a
    product by one weight and bias, used only there, the new dim not the last (the features stay last)."""
    items = node.args[0] if node.args else None
    if not is_op(node, (torch.stack,), {"stack"}) or not isinstance(items, (list, tuple)) or len(items) < 2:
        return False
    products = [linear_product(gm, item) for item in items]
    if any(p is None for p in products) or len(set(items)) != len(items) or any(len(i.users) != 1 for i in items):
        return False
    first = items[0]
    if any(i.op != first.op or i.target != first.target or tuple(i.args[1:]) != tuple(first.args[1:]) or
           i.kwargs != first.kwargs or p[1:] != products[0][1:] for i, p in zip(items, products)):  # one weight
        return False
    inputs = [p[0] for p in products]
    if not all(meta(i) for i in inputs) or len({tuple(meta(i).shape) for i in inputs}) != 1:
        return False
    rank, dim = len(meta(inputs[0]).shape), arg(node, 1, "dim", 0)
    dim = dim + rank + 1 if isinstance(dim, int) and dim < 0 else dim
    if not isinstance(dim, int) or not 0 <= dim < rank:
        return False
    graph = gm.graph
    with graph.inserting_before(node):
        stacked = graph.call_function(torch.stack, (inputs, dim))
        batched = graph.create_node(first.op, first.target, (stacked,) + tuple(first.args[1:]), dict(first.kwargs))
    batched.meta = dict(node.meta)
    node.replace_all_uses_with(batched)
    return True


batch_step_products = Move("batch_step_products", (
    Rule("linear(cat((x[t], h))) at every step -> addmm(P[t], h, W_h), P = linear(x, W_x, b) once",
         Pattern(), _hoist_input_share),
    Rule("stack((linear(h_0), ..., linear(h_T-1))) -> linear(stack((h_0, ..., h_T-1)))",
         Pattern((torch.stack,), frozenset({"stack"})), _batch_stacked_products),
), prepare=_recurrences)

STEPS = {"batch_step_products": batch_step_products}
