"""An einsum of three or more operands as pairwise contractions, in the order that does the fewest products.

Without opt_einsum installed, `torch.einsum` contracts its operands left to right, whatever their sizes: for
`ij,jk,kl->il` with a 4096 x 16, a 16 x 4096 and a 4096 x 16 matrix it builds the 4096 x 4096 product first
(537 M multiply-adds in all) where contracting the last two first costs 2 M. The rule works out every order of
pairwise contractions on the traced shapes (up to `MAX_OPERANDS`), and where the cheapest costs at most half of
left to right, writes it out as one two-operand einsum per step. The sums are the same; their rounding differs
with the order, as it does under opt_einsum. With opt_einsum installed torch already picks such an order, and
the rewrite only saves it working the order out at every call.
"""

from __future__ import annotations

import math
from functools import cache

import torch
import torch.fx as fx

from kernelpro.offline.rewrite.passes import meta, substitute

MAX_OPERANDS = 6
#: the rewrite is made where the best order costs at most this share of left to right
WORTH = 0.5


def parse(node: fx.Node) -> tuple[list[str], str, list[fx.Node], dict[str, int]] | None:
    """(each operand's indices, the output's, the operands, each index's size) of an einsum call with an explicit
    output, no ellipsis and no index repeated within one operand; None for any other call."""
    if node.op != "call_function" or node.target is not torch.einsum or node.kwargs or len(node.args) < 2:
        return None
    equation, operands = node.args[0], list(node.args[1:])
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = list(operands[0])
    if not isinstance(equation, str) or "->" not in equation or "." in equation:
        return None
    inputs, output = equation.replace(" ", "").split("->")
    terms = inputs.split(",")
    if len(terms) != len(operands) or not 3 <= len(terms) <= MAX_OPERANDS:
        return None
    sizes: dict[str, int] = {}
    for term, operand in zip(terms, operands):
        shape = meta(operand).shape if isinstance(operand, fx.Node) and meta(operand) else None
        if shape is None or len(shape) != len(term) or len(set(term)) != len(term) or not term.isalpha():
            return None
        for index, size in zip(term, shape):
            if sizes.setdefault(index, int(size)) != int(size):
                return None  # a size-1 index broadcast against a larger one: left as it is
    if len(set(output)) != len(output) or not set(output) <= set(sizes):
        return None
    return terms, output, operands, sizes


def _pair(terms: tuple[str, ...], i: int, j: int, output: str, sizes: dict[str, int]) -> tuple[str, int]:
    """The indices the contraction of terms i and j keeps (those another operand or the output still needs,
    in the order they first appear) and its multiply-adds."""
    needed = set(output).union(*(term for k, term in enumerate(terms) if k not in (i, j)))
    both = terms[i] + "".join(index for index in terms[j] if index not in terms[i])
    return "".join(index for index in both if index in needed), math.prod(sizes[index] for index in both)


def _after(items: tuple, i: int, j: int, result) -> tuple:
    """What is left once items i and j are contracted: the others in order, the result last (a step's convention)."""
    return tuple(item for k, item in enumerate(items) if k not in (i, j)) + (result,)


def order_cost(terms: tuple[str, ...], output: str, sizes: dict[str, int], steps) -> int:
    """The multiply-adds of contracting `terms` pair by pair as `steps` say ((i, j) of the terms left then;
    the result goes last)."""
    total, terms = 0, tuple(terms)
    for i, j in steps:
        kept, cost = _pair(terms, i, j, output, sizes)
        total += cost
        terms = _after(terms, i, j, kept)
    return total


def best_order(terms: tuple[str, ...], output: str, sizes: dict[str, int]) -> tuple[int, tuple]:
    """(multiply-adds, steps) of the cheapest order of pairwise contractions, every order tried."""
    @cache
    def search(left: tuple[str, ...]) -> tuple[int, tuple]:
        if len(left) == 1:
            return 0, ()
        best = None
        for i in range(len(left)):
            for j in range(i + 1, len(left)):
                kept, cost = _pair(left, i, j, output, sizes)
                below, steps = search(_after(left, i, j, kept))
                if best is None or cost + below < best[0]:
                    best = (cost + below, ((i, j),) + steps)
        return best

    return search(tuple(terms))


def left_to_right(count: int) -> tuple:
    """torch's own order without opt_einsum: the first two, then the result with the next."""
    return ((0, 1),) + tuple((0, count - k - 1) for k in range(1, count - 1))


def ordered_einsum(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    parsed = parse(node)
    if parsed is None:
        return False
    terms, output, operands, sizes = parsed
    cost, steps = best_order(tuple(terms), output, sizes)
    if cost > WORTH * order_cost(tuple(terms), output, sizes, left_to_right(len(terms))):
        return False
    left, values = tuple(terms), tuple(operands)
    for number, (i, j) in enumerate(steps):
        last = number == len(steps) - 1
        kept = output if last else _pair(left, i, j, output, sizes)[0]
        equation = f"{left[i]},{left[j]}->{kept}"
        if last:
            substitute(gm, node, torch.einsum, (equation, values[i], values[j]))
            break
        with gm.graph.inserting_before(node):
            value = gm.graph.call_function(torch.einsum, (equation, values[i], values[j]))
        left, values = _after(left, i, j, kept), _after(values, i, j, value)
    return True
