"""Graph rewrites into library calls, on a torch.fx graph with shapes (see `passes`).

Attention written out by hand, softmax((q @ k^T) * s) @ v with an optional boolean mask
filled with -inf, becomes `scaled_dot_product_attention` (a causal mask built as
`ones(L, S).triu(1)` becomes `is_causal=True`, any other mask its complement as
`attn_mask`). An nn.MultiheadAttention whose averaged weights nobody reads is called with
`need_weights=False`, so it runs scaled_dot_product_attention instead of writing out every head's
weights. `x @ W.t()` becomes `linear`, transposes around a matmul are dropped, and an einsum of three or more
operands contracts them pairwise in the cheapest order (`einsum`). A
product with a diagonal matrix built from a vector, `diag(v) @ B` or `A @ diag(v)`, becomes the
broadcast multiply it is (the same sums without the zeros: n^2 work instead of n^3).
Each pass returns how many rewrites it made.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn.functional as F

from kernelpro.offline.rewrite.einsum import ordered_einsum
from kernelpro.offline.rewrite.rules import Move, Pattern, Rule
from kernelpro.offline.rewrite.passes import (MATMUL, SOFTMAX, scaled_by, substitute, transpose_dims, arg,
                                        is_identity_dropout, is_op, meta)
from kernelpro.offline.ir.windows import as_tuple, pool_args


def _is_last_two_transpose(node, rank: int) -> bool:
    return transpose_dims(node, rank) == (rank - 2, rank - 1) if rank >= 2 else False


def _masked_with_minus_inf(node) -> tuple[fx.Node, fx.Node] | None:
    """(scores, mask) for scores.masked_fill(mask, -inf) or torch.masked_fill(scores, mask, -inf)."""
    if not is_op(node, (torch.masked_fill,), {"masked_fill"}) or len(node.args) != 3 or node.kwargs:
        return None
    scores, mask, value = node.args
    if isinstance(scores, fx.Node) and isinstance(mask, fx.Node) and isinstance(value, float) \
            and value == -math.inf:
        return scores, mask
    return None


def _is_causal_mask(mask: fx.Node, scores_shape) -> bool:
    """A bool mask (with shape metadata) that is ones(L, S).triu(1), cast to bool before or after the
    triu: True above the diagonal, the positions `is_causal=True` leaves out, for scores whose last
    dims are (L, S)."""
    triu = mask
    if (is_op(triu, (), {"bool"}) and len(triu.args) == 1) or \
            (is_op(triu, (), {"to"}) and len(triu.args) == 2 and triu.args[1] is torch.bool):
        triu = triu.args[0]
    if not is_op(triu, (torch.triu,), {"triu"}) or arg(triu, 1, "diagonal", 0) != 1:
        return False
    ones = triu.args[0]
    if is_op(ones, (), {"bool"}) and len(ones.args) == 1:
        ones = ones.args[0]
    shape = tuple(meta(mask).shape)
    return is_op(ones, (torch.ones,)) and len(shape) == 2 and shape == tuple(scores_shape[-2:])


@dataclass
class Scores:
    """Attention's scores as written out by hand: masked_fill((q @ k^T) * scale, mask, -inf), the mask optional and
    before or among the scalings. `k` is the key tensor before its transpose; `chain` holds the scaling and masking
    nodes, from the last one back; `mask` is True where a score is filled with -inf."""
    q: fx.Node
    k: fx.Node
    product: fx.Node  # q @ k^T
    transpose: fx.Node  # k^T
    scale: float
    mask: fx.Node | None
    chain: list


def attention_scores(node) -> Scores | None:
    """What `node` is when it is attention's scores (see `Scores`), each step read by the next alone; None
    otherwise. With a mask, only a positive overall scale keeps -inf at -inf, so the scale must be one."""
    scores, scale, chain, mask = node, 1.0, [], None
    while True:
        found, masked = scaled_by(scores), _masked_with_minus_inf(scores)
        if found:
            scale *= found[1]
            chain.append(scores)
            scores = found[0]
        elif masked and mask is None:
            chain.append(scores)
            scores, mask = masked
        else:
            break
    if not is_op(scores, MATMUL, {"matmul", "bmm"}) or not meta(scores) or len(scores.users) != 1:
        return None
    q, kt = scores.args
    if not (meta(q) and meta(kt)) or not _is_last_two_transpose(kt, len(meta(kt).shape)):
        return None
    rank = len(meta(scores).shape)
    if any(len(meta(t).shape) != rank for t in (q, kt)) or any(len(c.users) != 1 for c in chain[1:]) \
            or not math.isfinite(scale) or (mask is not None and scale <= 0):
        return None
    if mask is not None and (not meta(mask) or meta(mask).dtype is not torch.bool):
        return None
    return Scores(q, kt.args[0], scores, kt, scale, mask, chain)


def _attention_to_sdpa(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """softmax(masked_fill((q @ k^T) * s [/ s], mask, -inf)) @ v over the last dim (mask optional, before
    or among the scalings) -> scaled_dot_product_attention(q, k, v, scale, is_causal or attn_mask=~mask)."""
    if not is_op(node, MATMUL, {"matmul", "bmm"}) or len(node.args) != 2:
        return False
    probs, v = node.args
    if is_identity_dropout(gm, probs) and len(probs.users) == 1:
        probs = probs.args[0]  # a dropout that passes its input through (eval mode, or p = 0)
    if not is_op(probs, SOFTMAX, {"softmax"}) or len(probs.users) != 1 or not meta(probs):
        return False
    rank = len(meta(probs).shape)
    if arg(probs, 1, "dim") not in (-1, rank - 1) or probs.kwargs.get("dtype") is not None:
        return False
    scores = attention_scores(probs.args[0])
    if scores is None or len(probs.args[0].users) != 1 or not meta(v) or len(meta(v).shape) != rank:
        return False
    kwargs: dict = {"scale": scores.scale}
    if scores.mask is not None:
        if _is_causal_mask(scores.mask, meta(scores.product).shape):
            kwargs["is_causal"] = True
        else:
            with gm.graph.inserting_before(node):
                keep = gm.graph.call_function(torch.logical_not, (scores.mask,))
            keep.meta = dict(scores.mask.meta)
            kwargs["attn_mask"] = keep
    substitute(gm, node, F.scaled_dot_product_attention, (scores.q, scores.k, v), kwargs)
    return True


def _attention_without_weights(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """nn.MultiheadAttention(q, k, v)[0], its averaged weights unused -> the same call with need_weights=False.
    Asked for its weights (the default), the module writes out softmax(q @ k^T) for every head, a
    batch x heads x L x S tensor, and averages it over the heads; without them it calls
    scaled_dot_product_attention. Exact up to the attention kernel's rounding where its dropout is inactive
    (an active one draws a different mask inside scaled_dot_product_attention)."""
    module = gm.get_submodule(node.target)
    if len(node.args) > 4 or node.kwargs.get("need_weights", True) is False or (module.training and module.dropout):
        return False  # a fifth positional argument is need_weights itself
    if not node.users or any(not (is_op(user, (operator.getitem,)) and user.args[1] == 0) for user in node.users):
        return False
    node.kwargs = {**node.kwargs, "need_weights": False}
    return True


attention_to_sdpa = Move("attention_to_sdpa", (
    Rule("softmax(masked_fill((q @ k^T) * s, mask, -inf)) @ v -> "
         "scaled_dot_product_attention(q, k, v, scale, is_causal or attn_mask=~mask)",
         Pattern(MATMUL, frozenset({"matmul", "bmm"})), _attention_to_sdpa),
    Rule("MultiheadAttention(q, k, v)[0] -> MultiheadAttention(q, k, v, need_weights=False)[0]",
         Pattern(modules=(torch.nn.MultiheadAttention,)), _attention_without_weights),
))


def _transposed_weight(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    if len(node.args) != 2:
        return False
    x, wt = node.args
    if meta(wt) and len(meta(wt).shape) == 2 and _is_last_two_transpose(wt, 2) and meta(x) and len(meta(x).shape) >= 1:
        substitute(gm, node, F.linear, (x, wt.args[0]))
        return True
    return False


def _transposed_product(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    inner = node.args[0] if node.args else None
    rank = len(meta(node).shape) if meta(node) else 0
    if _is_last_two_transpose(node, rank) and is_op(inner, MATMUL, {"matmul", "bmm"}) and len(inner.users) == 1:
        a, b = inner.args
        if all(meta(t) and len(meta(t).shape) == rank and _is_last_two_transpose(t, rank) for t in (a, b)):
            substitute(gm, node, torch.matmul, (b.args[0], a.args[0]))
            return True
    return False


_MATRIX_PRODUCT = Pattern((operator.matmul, torch.matmul, torch.mm), frozenset({"matmul", "mm"}))
transposed_matmuls = Move("transposed_matmuls", (
    Rule("x @ W.t() -> linear(x, W) for a 2-D W", _MATRIX_PRODUCT, _transposed_weight),
    Rule("(a^T @ b^T)^T -> b @ a", Pattern(), _transposed_product),
    Rule("einsum(a, b, c, ...) -> pairwise einsums in the order of fewest products", Pattern((torch.einsum,)),
         ordered_einsum),
))


def _diagonal_of(node) -> fx.Node | None:
    """v for a 2-D diagonal matrix made from a 1-D v: torch.diag(v) (main diagonal) or diag_embed(v)."""
    if is_op(node, (torch.diag,), {"diag"}) and arg(node, 1, "diagonal", 0) == 0:
        vector = node.args[0]
    elif is_op(node, (torch.diag_embed,), {"diag_embed"}) and len(node.args) == 1 and not node.kwargs:
        vector = node.args[0]
    else:
        return None
    return vector if isinstance(vector, fx.Node) and meta(vector) and len(meta(vector).shape) == 1 else None


def _diagonal_products(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    """diag(v) @ B -> v[:, None] * B and A @ diag(v) -> A * v, for 2-D A and B: every term the matmul
    adds besides these products is an exact zero."""
    if not is_op(node, (operator.matmul, torch.matmul, torch.mm), {"matmul", "mm"}) or len(node.args) != 2 \
            or node.kwargs:
        return False
    left, right = node.args
    row_scale, column_scale = _diagonal_of(left), _diagonal_of(right)
    if row_scale is not None and meta(right) and len(meta(right).shape) == 2:
        with gm.graph.inserting_before(node):
            column = gm.graph.call_function(torch.unsqueeze, (row_scale, 1))
        substitute(gm, node, operator.mul, (column, right))
    elif column_scale is not None and meta(left) and len(meta(left).shape) == 2:
        substitute(gm, node, operator.mul, (left, column_scale))
    else:
        return False
    return True


diagonal_products = Move("diagonal_products", (
    Rule("diag(v) @ B -> v[:, None] * B, A @ diag(v) -> A * v (2-D A, B)", _MATRIX_PRODUCT, _diagonal_products),
))


_MAX_POOL_BY_RANK = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}


def _plain_max_pool(gm: fx.GraphModule, node) -> tuple[int, tuple[int, ...], tuple[int, ...]] | None:
    """(rank, kernel, stride) of a max pool of values alone without padding, dilation or ceil_mode."""
    found = pool_args(gm, node) if isinstance(node, fx.Node) else None
    if found is None or found[0] != "max":
        return None
    _, rank, bound = found
    kernel, stride, padding, dilation = (as_tuple(bound.get(name, default), rank) for name, default in
                                         (("kernel_size", None), ("stride", None), ("padding", 0), ("dilation", 1)))
    if None in (kernel, stride, padding, dilation) or bound.get("ceil_mode") or any(padding) or \
            any(d != 1 for d in dilation):
        return None
    return rank, kernel, stride


def _merge_max_pools(gm: fx.GraphModule, outer: fx.Node, state) -> bool:
    """max_pool(k2, s2)(max_pool(k1, s1)(x)) -> max_pool((k2 - 1) * s1 + k1, s1 * s2)(x), per spatial dim, for two
    max pools without padding, dilation or ceil_mode where the first's windows leave no gap (s1 <= k1) and it
    feeds only the second: the maximum of the windows' maxima is the maximum over their union, one contiguous
    window, and the outputs' sizes agree (checked on the traced shapes). One pass over the input instead of two,
    and the first pool's output is never written."""
    second = _plain_max_pool(gm, outer)
    inner = outer.args[0] if second and outer.args else None
    first = _plain_max_pool(gm, inner)
    if not first or len(inner.users) != 1 or first[0] != second[0] or \
            any(s1 > k1 for k1, s1 in zip(first[1], first[2])):
        return False
    rank, (k1, s1), (k2, s2) = first[0], (first[1], first[2]), (second[1], second[2])
    kernel = tuple((b - 1) * a_stride + a for a, a_stride, b in zip(k1, s1, k2))
    stride = tuple(a * b for a, b in zip(s1, s2))
    source, expected = meta(inner.args[0]), meta(outer)
    if source is None or expected is None or tuple(expected.shape[-rank:]) != tuple(
            (n - k) // s + 1 for n, k, s in zip(source.shape[-rank:], kernel, stride)):
        return False
    merged = substitute(gm, outer, _MAX_POOL_BY_RANK[rank], (inner.args[0], kernel, stride))
    merged.meta = dict(outer.meta)
    return True  # both pools are left without users: finish_graph drops them


merge_max_pools = Move("merge_max_pools", (
    Rule("max_pool(k2, s2)(max_pool(k1, s1)(x)) -> max_pool((k2 - 1) * s1 + k1, s1 * s2)(x) where s1 <= k1",
         Pattern(), _merge_max_pools),
))


LIBRARY = {"attention_to_sdpa": attention_to_sdpa, "transposed_matmuls": transposed_matmuls,
           "diagonal_products": diagonal_products, "merge_max_pools": merge_max_pools}
