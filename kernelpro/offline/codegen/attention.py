"""Attention without softmax as one Triton kernel: f(masked_fill((q @ k^T) * scale, mask, -inf)) @ v, never writing
the scores out.

Softmax attention becomes scaled_dot_product_attention (the `attention_to_sdpa` move). A model that puts another
pointwise function f on the scores (minGPT's ReLU attention: `relu` of the causally masked scores) has no library
call; eager writes the batch x heads x L x S scores, masks them, applies f (each a read and a write of them) and
multiplies them with v. `find` recognizes the form: f is a chain of pointwise ops on the scores alone, and with a
mask, f(-inf) must be 0 (checked by running f on -inf), so a masked score adds nothing to its row's sum. The mask
must be the same for every batch and head (an L x S boolean, as a causal mask is).

The kernel runs one program per (batch x head, block of BLOCK_M queries). It walks the keys in blocks of BLOCK_N:
the block's scores with `tl.dot` (float32 operands multiplied as fp32, `input_precision="ieee"`, unless TF32 is
allowed: then on operands rounded to TF32 to nearest, as cuBLAS rounds them), f on them, and the product with v's
block added to a float32 accumulator; the output is written once. A block of the mask with no score kept is skipped,
one with every score kept is not read: the wrapper folds the mask into a map of its BLOCK_M x BLOCK_N tiles first (0
none kept, 1 some, 2 all), so a causal mask costs about half the products. The values differ from eager's only by the
order of the sums over the keys.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.fx as fx

from kernelpro.launch.device import Device
from kernelpro.offline.codegen.common import disjoint_groups, next_pow2, tf32_rounded
from kernelpro.offline.codegen.wrapper import Wrapper, python_wrapper
from kernelpro.offline.fuse.groups import Group, Input, Output, shape_of
from kernelpro.offline.ir.ops import Unsupported, emit_pointwise, resolve
from kernelpro.offline.rewrite.library import attention_scores
from kernelpro.offline.rewrite.passes import MATMUL, is_identity_dropout, is_op, meta

#: (BLOCK_M, BLOCK_N, num_warps), analytic order. Compiled for sm_90 with 64 values per head (Triton 3.9, fp32
#: operands as `ieee`; tests/test_attention_kernel.py), the first four use 159 to 254 registers a thread and spill
#: nothing; 64 x 32 on 4 warps spilled 4 bytes, 32-query blocks 300 bytes and more: they come last, for tuning
TILES = ((64, 64, 8), (64, 64, 4), (128, 64, 8), (128, 32, 8), (64, 32, 4), (32, 64, 4), (32, 32, 2))


@dataclass
class AttentionGroup(Group):
    """`logical` is the output's shape (batch, heads, L, D) or (batch, L, D); `expr` is f over the score `s`."""
    batch: int = 1
    heads: int = 1
    length: int = 0  # L, the queries
    keys: int = 0  # S
    depth: int = 0  # D, q's and k's last dim
    width: int = 0  # v's last dim
    scale: float = 1.0
    expr: str = "s"
    masked: bool = False
    tf32: bool = False


def _score_function(gm: fx.GraphModule, scores: fx.Node, product: fx.Node, masked: bool) -> tuple[str, list] | None:
    """(f's float32 expression over `s`, f's nodes) for the chain of pointwise ops from `scores` to the product's
    left operand, each read by the next alone; None where an op is not pointwise on the scores alone, or where a
    masked score would not come out 0."""
    chain, node = [], product.args[0]
    while node is not scores:
        if not isinstance(node, fx.Node) or len(node.users) != 1:
            return None
        chain.append(node)
        if is_identity_dropout(gm, node):
            node = node.args[0]
            continue
        res = resolve(gm, node)
        tensors = [a for a in (res.args.values() if res else ()) if isinstance(a, fx.Node)]
        if res is None or res.row or len(tensors) != 1 or shape_of(tensors[0]) != shape_of(node):
            return None
        node = tensors[0]
    if len(scores.users) != 1:
        return None
    chain.reverse()
    expr = "s"
    for node in chain:
        if is_identity_dropout(gm, node):
            continue
        res = resolve(gm, node)
        try:
            expr = "(" + emit_pointwise(res.op, {name: (expr if isinstance(a, fx.Node) else a)
                                                 for name, a in res.args.items()}) + ")"
        except (Unsupported, KeyError):
            return None
    if masked and not _zero_at_minus_inf(gm, chain):
        return None
    return expr, chain


def _zero_at_minus_inf(gm: fx.GraphModule, chain: list) -> bool:
    """Whether f, the chain's ops run by torch on -inf, gives 0."""
    value = torch.tensor([-math.inf])
    try:
        for node in chain:
            if node.op == "call_module":
                value = gm.get_submodule(node.target)(value.clone())
                continue
            args = [value.clone() if isinstance(a, fx.Node) else a for a in node.args]
            kwargs = {k: (value.clone() if isinstance(a, fx.Node) else a) for k, a in node.kwargs.items()}
            value = getattr(torch.Tensor, node.target)(*args, **kwargs) if node.op == "call_method" \
                else node.target(*args, **kwargs)
    except Exception:  # noqa: BLE001 - an op that cannot run on a probe is not taken
        return False
    return isinstance(value, torch.Tensor) and value.numel() == 1 and float(value) == 0.0


def _group(gm: fx.GraphModule, node: fx.Node, exclude: set, tf32: bool) -> AttentionGroup | None:
    if not is_op(node, MATMUL, {"matmul", "bmm"}) or len(node.args) != 2 or node.kwargs:
        return None
    probs, v = node.args
    if not isinstance(probs, fx.Node) or not (meta(node) and meta(v) and meta(probs)):
        return None
    start = probs  # down f's chain (each op read by the next alone) to the scores
    while isinstance(start, fx.Node) and len(start.users) == 1 and start.op != "placeholder" \
            and attention_scores(start) is None:
        start = start.args[0] if start.args and isinstance(start.args[0], fx.Node) else None
    scores = attention_scores(start) if isinstance(start, fx.Node) else None
    if scores is None:
        return None
    found = _score_function(gm, start, node, scores.mask is not None)
    if found is None:
        return None
    expr, chain = found
    out, q, k = tuple(meta(node).shape), tuple(meta(scores.q).shape), tuple(meta(scores.k).shape)
    rank = len(out)
    if rank not in (3, 4) or len(tuple(meta(v).shape)) != rank or len(k) != rank or len(q) != rank:
        return None
    if any(meta(t).dtype is not torch.float32 for t in (scores.q, scores.k, v, node)):
        return None
    lead, (length, depth), (keys, width) = out[:-2], q[-2:], tuple(meta(v).shape)[-2:]
    if q[:-2] != lead or k[:-2] != lead or tuple(meta(v).shape)[:-2] != lead or k[-2:] != (keys, depth) \
            or out[-2:] != (length, width) or min(depth, width) < 1 or max(depth, width) > 256:
        return None
    mask = scores.mask
    if mask is not None:
        shape = tuple(meta(mask).shape)
        if len(shape) < 2 or shape[-2:] != (length, keys) or any(d != 1 for d in shape[:-2]):
            return None  # a mask per batch or head: not taken
    members = [scores.product] + scores.chain[::-1] + chain + [node]
    if len(scores.transpose.users) == 1:
        members.insert(0, scores.transpose)
    if any(n in exclude for n in members):
        return None
    inside = set(members)
    if any(u not in inside for n in members[:-1] for u in n.users):
        return None
    batch, heads = (lead[0], lead[1]) if rank == 4 else (lead[0], 1)
    group = AttentionGroup(kind="attention", logical=out, batch=batch, heads=heads, length=length, keys=keys,
                           depth=depth, width=width, scale=scores.scale, expr=expr, masked=mask is not None,
                           tf32=tf32)
    for var, source in (("q", scores.q), ("k", scores.k), ("v", v)) + ((("mask", mask),) if mask is not None else ()):
        group.inputs.append(Input(var, source, tuple(shape_of(source)), tuple(shape_of(source)), "full", source.name))
    group.outputs.append(Output("out0", node, out, "full"))
    order = {n: i for i, n in enumerate(gm.graph.nodes)}
    group.nodes = sorted(inside, key=order.get)
    group.ops = [n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "op") for n in group.nodes]
    return group


def find(gm: fx.GraphModule, exclude: set, tf32: bool = False) -> list[AttentionGroup]:
    """Every attention without softmax the kernel takes, in graph order (`exclude`: nodes other kernels took)."""
    return disjoint_groups(list(gm.graph.nodes), lambda node: _group(gm, node, set(exclude), tf32),
                           lambda group, index: f"attention_{index}")


# -- launch configurations and rendering ------------------------------------------------------------------
def configs(group: AttentionGroup, device: Device = Device()) -> list[dict]:
    """Query and key blocks and warps, in TILES' order; blocks much longer than the sequence are left out."""
    return [{"BLOCK_M": m, "BLOCK_N": n, "num_warps": warps, "score": round(1.0 / (1 + rank), 6)}
            for rank, (m, n, warps) in enumerate(TILES)
            if m <= max(32, next_pow2(group.length)) and n <= max(32, next_pow2(group.keys))]


def features(group: AttentionGroup) -> dict:
    rows = group.batch * group.heads * group.length
    tensors = rows * group.depth + group.batch * group.heads * group.keys * (group.depth + group.width) \
        + rows * group.width
    return {"kind": "attention", "elements": rows * group.keys, "rows": rows, "row_length": group.keys,
            "depth": group.depth, "inputs": len(group.inputs), "outputs": 1, "masked": group.masked,
            "flops": 2 * rows * group.keys * (group.depth + group.width),
            "bytes": 4 * tensors + (group.length * group.keys if group.masked else 0)}


def _kernel(group: AttentionGroup) -> list[str]:
    precision = "tf32" if group.tf32 else "ieee"
    params = ["q_ptr", "k_ptr", "v_ptr", "keep_ptr", "live_ptr", "out_ptr", "sqb", "sqh", "sqt", "sqd", "skb", "skh",
              "skt", "skd", "svb", "svh", "svt", "svd", "BLOCK_M: tl.constexpr", "BLOCK_N: tl.constexpr",
              "BLOCK_D: tl.constexpr", "BLOCK_E: tl.constexpr", "MASKED: tl.constexpr"]
    lines = ["@triton.jit", f"def {group.name}_kernel({', '.join(params)}):",
             f"    # {' -> '.join(group.ops)}: f(s) = {group.expr}, over L={group.length} queries and "
             f"S={group.keys} keys, D={group.depth}, {group.width} values per key; float32 accumulate",
             "    bh = tl.program_id(0)",
             "    mb = tl.program_id(1)",
             f"    b = bh // {group.heads}",
             f"    h = bh % {group.heads}",
             "    rows = mb * BLOCK_M + tl.arange(0, BLOCK_M)",
             "    d = tl.arange(0, BLOCK_D)",
             "    e = tl.arange(0, BLOCK_E)",
             f"    q = tl.load(q_ptr + b * sqb + h * sqh + rows[:, None] * sqt + d[None, :] * sqd, "
             f"mask=(rows[:, None] < {group.length}) & (d[None, :] < {group.depth}), other=0.0)",
             *(tf32_rounded("q", indent="    ") if group.tf32 else []),  # TF32's operands as cuBLAS rounds them
             "    acc = tl.zeros([BLOCK_M, BLOCK_E], dtype=tl.float32)",
             f"    for nb in range(0, tl.cdiv({group.keys}, BLOCK_N)):",
             "        state = 2",
             "        if MASKED:",
             f"            state = tl.load(live_ptr + mb * tl.cdiv({group.keys}, BLOCK_N) + nb)",
             "        if state != 0:",
             "            cols = nb * BLOCK_N + tl.arange(0, BLOCK_N)",
             f"            kt = tl.load(k_ptr + b * skb + h * skh + cols[None, :] * skt + d[:, None] * skd, "
             f"mask=(cols[None, :] < {group.keys}) & (d[:, None] < {group.depth}), other=0.0)",
             *(tf32_rounded("kt", indent=" " * 12) if group.tf32 else []),
             f"            s = tl.dot(q, kt, input_precision=\"{precision}\") * {group.scale!r}",
             f"            p = tl.where(cols[None, :] < {group.keys}, {group.expr}, 0.0)",
             "            if MASKED:",
             "                if state == 1:",
             f"                    keep = tl.load(keep_ptr + rows[:, None] * {group.keys} + cols[None, :], "
             f"mask=(rows[:, None] < {group.length}) & (cols[None, :] < {group.keys}), other=0)",
             "                    p = tl.where(keep != 0, p, 0.0)",
             f"            vb = tl.load(v_ptr + b * svb + h * svh + cols[:, None] * svt + e[None, :] * svd, "
             f"mask=(cols[:, None] < {group.keys}) & (e[None, :] < {group.width}), other=0.0)",
             *(tf32_rounded("p", "vb", indent=" " * 12) if group.tf32 else []),
             f"            acc += tl.dot(p, vb, input_precision=\"{precision}\")",
             f"    out = out_ptr + bh * {group.length * group.width} + rows[:, None] * {group.width} + e[None, :]",
             f"    tl.store(out, acc, mask=(rows[:, None] < {group.length}) & (e[None, :] < {group.width}))"]
    return lines


def _strides(name: str, rank: int) -> str:
    """A tensor's (batch, head, row, column) strides as launch arguments; 0 for the head of a 3-D tensor."""
    if rank == 4:
        return ", ".join(f"{name}.stride({d})" for d in range(4))
    return f"{name}.stride(0), 0, {name}.stride(1), {name}.stride(2)"


def render(group: AttentionGroup, config: dict) -> str:
    block_m, block_n, warps = config["BLOCK_M"], config["BLOCK_N"], config["num_warps"]
    rank = len(group.logical)
    args = [i.var for i in group.inputs]
    tiles_m, tiles_n = math.ceil(group.length / block_m), math.ceil(group.keys / block_n)
    if group.masked:  # the mask's tiles: 0 none kept, 1 some, 2 all
        workspaces = [f"    keep = torch.logical_not(mask.reshape({group.length}, {group.keys})).to(torch.int8)",
                      f"    tiles = torch.nn.functional.pad(keep, (0, {tiles_n * block_n - group.keys}, 0, "
                      f"{tiles_m * block_m - group.length})).view({tiles_m}, {block_m}, {tiles_n}, {block_n})",
                      "    live = (tiles.amax(dim=(1, 3)) + tiles.amin(dim=(1, 3))).contiguous()"]
        masks = "keep, live"
    else:
        workspaces, masks = [], "q, q"  # unread: MASKED is False
    launch = [f"    {group.name}_kernel[({group.batch * group.heads}, {tiles_m})](q, k, v, {masks}, out0, "
              f"{_strides('q', rank)}, {_strides('k', rank)}, {_strides('v', rank)}, BLOCK_M={block_m}, "
              f"BLOCK_N={block_n}, BLOCK_D={max(16, next_pow2(group.depth))}, "
              f"BLOCK_E={max(16, next_pow2(group.width))}, MASKED={group.masked}, num_warps={warps})"]
    wrapper = Wrapper(name=group.name, args=args, shapes=[i.shape for i in group.inputs],
                      doc=f"{' -> '.join(group.ops)}: one Triton kernel, the scores never written "
                          f"(launch: BLOCK_M={block_m}, BLOCK_N={block_n}, num_warps={warps}).",
                      outputs=[(group.logical, "torch.float32")], device="q.device", launch=launch, ready="{}",
                      workspaces=workspaces)
    return "\n".join(_kernel(group) + ["", ""] + python_wrapper(wrapper)) + "\n"


__all__ = ["AttentionGroup", "configs", "features", "find", "render"]
