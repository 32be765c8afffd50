"""A Triton GEMM with its epilogue inside: the alternative to a library matmul plus an epilogue kernel.

`attach` finds the pointwise groups that are the epilogue of a matmul or linear
(2-D weight, or a batched product: bmm, or matmul of two operands with the same batch
dimensions; every use of the product inside the group) and marks them with a
`Gemm`; `render` writes one kernel that tiles the product (grouped tile order so
neighbouring programs share the panels they read, float32 accumulation), adds the
bias, applies the epilogue's steps to the accumulator in registers and stores
each output once. The library call and the round trip of its output through
memory are gone.

The operands are read through their strides: a transposed operand (`x.T @ y`, `x @ w.t()`)
is read where it lies instead of being copied first, and a batched product may broadcast one
side over the batch (`[m, k] @ [b, k, n]`: that side's batch stride is 0).

Precision: float32 operands are multiplied with `input_precision="ieee"` (plain
FMA, like the reference) or "tf32x3" (three TF32 products, an error near
float32's); plain "tf32" only where the `tf32_matmul` move allowed it, on operands rounded to TF32 to nearest as
they load (`common.TF32_NEAREST`), as cuBLAS's TF32 products round them: Triton's own plain TF32 truncates.
"""

from __future__ import annotations

import dataclasses
import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx

from kernelpro.offline.fuse.groups import Group, is_pointwise, shape_of
from kernelpro.offline.ir.ops import Attr, attr_shape, resolve
from kernelpro.launch.device import Device, wave_fill
from kernelpro.offline.codegen.common import (block_index, describe_config, index_lines, inputs_doc, masked_load,
                                          next_pow2, offset_expr, layout, tf32_rounded)
from kernelpro.offline.codegen.wrapper import Wrapper, output_names, python_wrapper

MIN_SIZE = 16  # tl.dot wants every tile dimension >= 16: a smaller dimension is masked within a tile of 32
# a product with a dimension under MIN_SIZE (a matrix-vector product, a small K) is taken only when it moves this
# many elements: a small classifier head stays the library's, a 2^26-element matrix-vector product is ours
SMALL_DIM_MIN_ELEMENTS = 2**20
# split-K: a grid under one wave of tiles gets SPLIT_K slices of K, one program per (tile, slice), each writing a
# float32 partial tile; a second kernel sums the slices in a fixed order and runs the epilogue
SPLIT_K = (2, 4, 8, 16)
SPLIT_K_MIN_K = 1024
SHARED_BYTES = 227 * 1024  # per block on sm_90
# TF32 tensor cores (wgmma) read both operands K-major: Triton transposes an N-contiguous float32 b tile by
# tile, which halved the rate on the H100 (32-36 against 70-76 TFLOP/s, benchmarks/kernel_rates.py). A
# K-major copy of b (8 bytes an element of b, read and written) costs less than that once a has this many
# rows (the copy over the product's time is about 90 / m at those rates).
K_MAJOR_MIN_M = 128


@dataclass
class Gemm:
    node: fx.Node  # the matmul or linear
    a: object  # fx.Node [..., K]
    b: object  # fx.Node or Attr: [N, K] for linear ("nk"), [K, N] for matmul ("kn")
    bias: object | None
    b_layout: str
    m: int
    n: int
    k: int
    a_shape: tuple[int, ...]
    b_shape: tuple[int, ...]
    var: str  # the epilogue's input that is the product
    tf32: bool = False  # the tf32_matmul move is on
    backend: str = "triton"  # "triton" (this module) or "cute" (kernelpro.offline.codegen.cute_gemm)
    batch: int = 1  # a batched product: `batch` products of [m x k] @ [k x n], one per grid row
    a_batched: bool = True  # (batched products) False: one `a` broadcast over the batch
    b_batched: bool = True
    dtype: str = "fp32"  # the precision the candidate runs at (the CuTe GEMM is instantiated for it)

    def sources(self) -> list:
        return [self.a, self.b] + ([self.bias] if self.bias is not None else [])


def _operands(gm: fx.GraphModule, node: fx.Node):
    """(a, b, bias, b_layout) of a linear or a matmul of a matrix by a 2-D one; None otherwise."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if type(module) is not torch.nn.Linear or len(node.args) != 1:
            return None
        bias = Attr(f"{node.target}.bias") if module.bias is not None else None
        return node.args[0], Attr(f"{node.target}.weight"), bias, "nk"
    if node.op == "call_function" and node.target is torch.nn.functional.linear:
        names = ("input", "weight", "bias")
        bound = dict(zip(names, node.args)) | dict(node.kwargs)
        if set(bound) - set(names) or "weight" not in bound:
            return None
        return bound["input"], bound["weight"], bound.get("bias"), "nk"
    matmul = (node.op == "call_function" and node.target in (operator.matmul, torch.matmul, torch.mm, torch.bmm)) \
        or (node.op == "call_method" and node.target in ("matmul", "mm", "bmm"))
    if matmul and len(node.args) == 2 and not node.kwargs:
        return node.args[0], node.args[1], None, "kn"
    if node.op == "call_function" and node.target is torch.einsum and len(node.args) == 3 and not node.kwargs \
            and isinstance(node.args[0], str) and _einsum_is_matmul(node.args[0]):
        return node.args[1], node.args[2], None, "kn"
    return None


def _einsum_is_matmul(equation: str) -> bool:
    """Whether an einsum of two operands is torch.matmul's product: `bijl,lk->bijk` (the last index of a
    against a matrix's first) or `sij,sjk->sik` (the same batch indices on both sides, in order)."""
    equation = equation.replace(" ", "")
    if "->" not in equation or "." in equation or equation.count(",") != 1:
        return False
    inputs, out = equation.split("->")
    a, b = inputs.split(",")
    if len(set(a)) != len(a) or len(set(b)) != len(b) or len(a) < 2 or len(b) < 2:
        return False
    if len(b) == 2:
        rows, (inner, column) = a[:-1], b
        return a[-1] == inner and column not in a and out == rows + column
    batch = a[:-2]
    return len(a) == len(b) and b[:-2] == batch and a[-1] == b[-2] and b[-1] not in a and \
        out == batch + a[-2] + b[-1]


def _operand_shape(gm: fx.GraphModule, value) -> tuple[int, ...] | None:
    if isinstance(value, Attr):
        return attr_shape(gm, value)
    return shape_of(value) if isinstance(value, fx.Node) else None


def gemm_for(gm: fx.GraphModule, group: Group, tf32: bool) -> Gemm | None:
    if group.wide:  # its tiles index in int32
        return None
    for item in group.inputs:
        node = item.source
        if not isinstance(node, fx.Node) or item.view != group.logical or shape_of(node) != group.logical:
            continue
        operands = _operands(gm, node)
        if operands is None or any(user not in group.nodes for user in node.users):
            continue
        a, b, bias, b_layout = operands
        a_shape, b_shape = _operand_shape(gm, a), _operand_shape(gm, b)
        if a_shape is None or b_shape is None or len(a_shape) < 2 or len(b_shape) < 2:
            continue
        batch, a_batched, b_batched = 1, True, True
        n, k = (b_shape if b_layout == "nk" else b_shape[-2:][::-1])
        product = tuple(a_shape[:-1]) + (n,)
        if len(b_shape) > 2:  # batched: each side has the batch dimensions, or one matrix broadcast over them
            sides = _batch_sides(tuple(a_shape[:-2]), tuple(b_shape[:-2]))
            if b_layout != "kn" or sides is None:
                continue
            batch_shape, a_batched, b_batched = sides
            batch = math.prod(batch_shape)
            product = batch_shape + (a_shape[-2], n)
        m = math.prod(product[:-1]) // batch
        if a_shape[-1] != k or tuple(group.logical) != product or batch >= 65536:
            continue
        if bias is not None and _operand_shape(gm, bias) != (n,):
            continue
        if max(m * k, n * k, m * n) >= 2**31 or (min(m, n, k) < MIN_SIZE and max(m * k, n * k, m * n) <
                                                   SMALL_DIM_MIN_ELEMENTS):
            continue
        return Gemm(node, a, b, bias, b_layout, m, n, k, a_shape, b_shape, item.var, tf32, batch=batch,
                    a_batched=a_batched, b_batched=b_batched)
    return None


def _batch_sides(a_batch: tuple, b_batch: tuple):
    """(batch shape, a batched?, b batched?) of a batched product whose sides both carry the batch
    dimensions, or one of which is a single matrix broadcast over them; None for other broadcasts."""
    try:
        shape = tuple(torch.broadcast_shapes(a_batch, b_batch))
    except RuntimeError:
        return None
    a_batched, b_batched = a_batch == shape, b_batch == shape
    if not (a_batched or math.prod(a_batch) == 1) or not (b_batched or math.prod(b_batch) == 1):
        return None
    return shape, a_batched, b_batched


def expose_bare_products(gm: fx.GraphModule, takes=None) -> list[fx.Node]:
    """A product with no pointwise use (one the model returns, as in a level-1 GEMM, or one a group norm,
    a pooling or a reduction reads) has no epilogue group for `attach` to find: it gets an exact one,
    `* 1.0`, which the GEMM's epilogue then computes in registers, and what read the product reads the
    GEMM's output. The nodes made; `drop_unused` takes back those no GEMM took. `takes(node)`: is it a
    product (default: a matmul or linear this module computes)."""
    takes = takes or (lambda node: _operands(gm, node) is not None)
    made = []
    for node in list(gm.graph.nodes):
        if not takes(node) or not node.users or any(is_pointwise(resolve(gm, u)) for u in node.users):
            continue
        with gm.graph.inserting_after(node):
            identity = gm.graph.call_function(operator.mul, (node, 1.0))
        identity.meta = dict(node.meta)
        node.replace_all_uses_with(identity, delete_user_cb=lambda user, made_now=identity: user is not made_now)
        made.append(identity)
    if made:
        gm.graph.lint()
        gm.recompile()
    return made


def drop_unused(gm: fx.GraphModule, groups: list[Group], made: list[fx.Node]) -> list[Group]:
    """The groups without the `* 1.0` epilogues that no GEMM took, and those nodes gone from the graph, but for
    those a row kernel took in as its prologue (a product too small for a GEMM, read by a group norm): erasing
    them there left the row group holding an erased node (torch.fx warned when the group was replaced)."""
    taken = {node for group in groups if group.gemm is not None for node in group.nodes}
    unused = [node for node in made if node not in taken]
    kept = [g for g in groups if not (g.gemm is None and set(g.nodes) <= set(unused))]
    inside = {node for group in kept for node in group.nodes}  # a row kernel took it in: it computes the `* 1.0`
    gone = [node for node in unused if node not in inside]
    for node in gone:
        node.replace_all_uses_with(node.args[0])
        gm.graph.erase_node(node)
    if gone:
        gm.recompile()
    return kept


def row_taken_epilogues(gm: fx.GraphModule, groups: list[Group]) -> set[fx.Node]:
    """The pointwise users of the products no Triton GEMM took that a row group took in as its prologue
    (with fuse_reductions, the group norm after a linear takes the linear's `* 1.0` or its activation):
    started as epilogues instead (`fusion.partition(..., epilogues=)`), they let a GEMM take the product."""
    taken = products_taken(groups)
    in_rows = {node for group in groups if group.kind == "row" for node in group.nodes}
    return {user for node in gm.graph.nodes if node not in taken and _operands(gm, node) is not None
            for user in node.users if user in in_rows and is_pointwise(resolve(gm, user))}


def products_taken(groups: list[Group]) -> set[fx.Node]:
    """The products the Triton GEMMs of `groups` compute."""
    return {group.gemm.node for group in groups if group.gemm is not None}


def attach(gm: fx.GraphModule, groups: list[Group], tf32: bool) -> int:
    """Mark the epilogue groups whose product a Triton GEMM can compute (where no group computes it already, as an
    attention kernel does its products); how many."""
    count = 0
    taken = set().union(*(group.nodes for group in groups))  # an epilogue group never holds its own product
    for group in groups:
        if group.kind == "pointwise" and group.after_anchor:
            group.gemm = gemm_for(gm, group, tf32)
            if group.gemm is not None and group.gemm.node in taken:
                group.gemm = None
            if group.gemm is not None:
                group.name = group.name.replace("fused_", "gemm_", 1)
                count += 1
    return count


# -- launch configurations ------------------------------------------------------------------------
_TILES = ((128, 128, 32, 8, 3), (128, 256, 32, 8, 3), (256, 128, 32, 8, 3), (128, 64, 32, 4, 4),
          (64, 128, 32, 4, 4), (64, 64, 32, 4, 4), (64, 64, 64, 4, 3), (32, 64, 32, 4, 4), (64, 32, 32, 4, 4),
          (32, 32, 32, 4, 3))


# ptxas spills a tile whose float32 accumulator takes more than this many registers per thread: compiled for sm_90
# by Triton 3.6, every 128x256 and 256x128 tile on 8 warps (128 accumulator registers) of every GEMM of our
# KernelBench half's levels 1-2 spilled in tf32x3 and `ieee`, 148 of 148 (56-1,424 bytes of stack), and 36 of 74 in
# plain TF32; of the other 504 and 252 configurations 16 and 1 spilled, 8 of them by 8 bytes (the captures in
# tests/data/captures/gemm_registers{,_tf32}_sm90_triton3.6_2026-11-29.json). On an
# H200 the 128x256 tf32x3 tile ran at 0.69x of the 128x128 one it followed in the list (level2/59), so such tiles
# are tried after every other.
ACCUMULATOR_REGISTERS = 64


def accumulator_registers(config: dict) -> int:
    """Float32 accumulator registers per thread of a configuration's output tile."""
    return config["BLOCK_M"] * config["BLOCK_N"] // (32 * config["num_warps"])


def configs(group: Group, device: Device = Device()) -> list[dict]:
    """Tile shapes x input precisions, best first: full last waves, then reuse per byte loaded (the worker
    then moves the tiles that spill last: `spilling_last`)."""
    g = group.gemm
    precisions = (("tf32", 1.0),) if g.tf32 else (("tf32x3", 1.0), ("ieee", 0.35))
    ranked = []
    for bm, bn, bk, warps, stages in _TILES:
        if 4 * stages * bk * (bm + bn) > SHARED_BYTES or bm > max(32, next_pow2(g.m)) \
                or bn > max(32, next_pow2(g.n)):
            continue  # a tile far wider than the matrix only wastes lanes
        tiles = math.ceil(g.m / bm) * math.ceil(g.n / bn) * g.batch
        reuse = (bm * bn / (bm + bn)) / 64.0  # outputs per element loaded, against 128x128's
        splits = [1] + [s for s in SPLIT_K if tiles < device.sms and g.k >= SPLIT_K_MIN_K and g.k // s >= 4 * bk
                        and s * g.batch * g.m * g.n < 2**31]
        for split in splits:
            tail = wave_fill(tiles * split / device.sms)
            # the partial tiles' round trip (written and read once each) against the operands' bytes
            workspace = 1 / (1 + 2 * split * g.m * g.n / (g.m * g.k + g.n * g.k)) if split > 1 else 1.0
            for precision, weight in precisions:
                score = round(tail * math.sqrt(min(1.0, reuse)) * weight * workspace, 6)
                config = {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "GROUP_M": 8, "num_warps": warps,
                          "num_stages": stages, "precision": precision}
                if precision != "ieee" and g.b_layout == "kn" and g.m >= K_MAJOR_MIN_M:
                    config["b_k_major"] = True
                if split > 1:
                    config["SPLIT_K"] = split
                ranked.append((score, config))
    ranked.sort(key=lambda item: (-item[0], sorted(item[1].items())))
    return [dict(config, score=score) for score, config in ranked]


def spills(config: dict) -> bool:
    """Whether ptxas is expected to spill this configuration's tile: its accumulator takes more than
    ACCUMULATOR_REGISTERS per thread. In the captures every such tf32x3 and `ieee` tile spilled; of the plain TF32
    ones (`tf32_matmul`) 36 of 74 did (up to 1,096 bytes: it depends on the epilogue), so they are held back too."""
    return accumulator_registers(config) > ACCUMULATOR_REGISTERS


def spilling_last(ranked: list[dict]) -> list[dict]:
    """A ranked list (the analytic one, or a launch model's order of it) with the tiles that spill moved after
    the others, each part in its order. Applied after ranking so that a learned model sees the analytic ranks
    it was trained on."""
    return sorted(ranked, key=spills)


def features(group: Group) -> dict:
    g = group.gemm
    return {"kind": "gemm", "m": g.m, "n": g.n, "k": g.k, "batch": g.batch, "b_layout": g.b_layout,
            "bias": g.bias is not None, "inputs": len(group.inputs), "outputs": len(group.outputs),
            "steps": len(group.steps), "bytes": 4 * g.batch * (g.m * g.k + g.n * g.k + g.m * g.n * len(group.outputs))}


# -- the kernel -----------------------------------------------------------------------------------
def _tile_lines(g: Gemm, rl: str) -> list[str]:
    """The program's output tile: rows `rl` (within its own product) and columns `j`, in grouped order."""
    return ["    pid = tl.program_id(0)",
            f"    tiles_m = tl.cdiv({g.m}, BLOCK_M)", f"    tiles_n = tl.cdiv({g.n}, BLOCK_N)",
            "    # grouped order: GROUP_M row tiles in a row sweep the same columns of b while they are in cache",
            "    width = GROUP_M * tiles_n", "    first_m = (pid // width) * GROUP_M",
            "    rows_here = tl.minimum(tiles_m - first_m, GROUP_M)",
            "    pid_m = first_m + (pid % width) % rows_here", "    pid_n = (pid % width) // rows_here",
            f"    {rl} = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]",
            "    j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]"]


def _kernel(group: Group, split: bool = False) -> list[str]:
    """The GEMM kernel; `split`: the split-K partial kernel, whose programs each take a slice of K
    (program_id(2)) and store a float32 partial tile, with no bias and no epilogue (`_split_epilogue`)."""
    g = group.gemm
    rest = [i for i in group.inputs if i.var != g.var]
    if split:
        params = ["a_ptr", "b_ptr", "ws_ptr"]
    else:
        params = ["a_ptr", "b_ptr"] + (["bias_ptr"] if g.bias is not None else []) + [f"{i.var}_ptr" for i in rest]
        params += [f"out{k}_ptr" for k in range(len(group.outputs))]
    params += ["stride_am", "stride_ak", "stride_bk", "stride_bn"]
    params += ["stride_ab", "stride_bb"] if g.batch > 1 else []
    b_read = "weight [N, K]" if g.b_layout == "nk" else "[K, N]"
    rl = "rl" if g.batch > 1 else "r"  # a tile's rows within its own product
    what = ("one slice of K per program_id(2), a float32 partial tile stored for the epilogue kernel" if split
            else "float32 accumulate, then the epilogue in registers: " + group.fused_ops)
    lines = ["@triton.jit",
             f"def {group.name}_{'partial_' if split else ''}kernel({', '.join(params)}, BLOCK_M: tl.constexpr, "
             "BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, PRECISION: tl.constexpr"
             + (", K_PER: tl.constexpr):" if split else "):"),
             f"    # {f'{g.batch} x ' if g.batch > 1 else ''}[{g.m} x {g.k}] @ {b_read} -> [{g.m} x {g.n}]"
             + (" + bias" if g.bias is not None and not split else "") + f", {what}"]
    lines += [] if split else inputs_doc(group, rest)
    lines += _tile_lines(g, rl)
    if g.batch > 1:  # one product per grid row: its operands' offsets (0 for a side broadcast), its output rows
        lines += ["    batch = tl.program_id(1).to(tl.int64)",
                  "    a_ptr += batch * stride_ab", "    b_ptr += batch * stride_bb",
                  f"    r = batch * {g.m} + {rl}  # rows of the [batch x m] output, for the epilogue"]
    first = "first" if split else "0"
    lines += ["    first = tl.program_id(2) * K_PER  # this program's slice of K"] if split else []
    lines += ["    kk = tl.arange(0, BLOCK_K)",
              "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
              f"    for start in range({first}, {'first + K_PER' if split else g.k}, BLOCK_K):",
              "        ka = start + kk[None, :]", "        kb = start + kk[:, None]",
              "        # both operands through their strides: a transposed one is read where it lies",
              f"        a = tl.load(a_ptr + {rl} * stride_am + ka * stride_ak, mask=({rl} < {g.m}) & (ka < {g.k}), "
              "other=0.0)"]
    lines += [f"        b = tl.load(b_ptr + kb * stride_bk + j * stride_bn, mask=(kb < {g.k}) & (j < {g.n}), other=0.0)",
              *(tf32_rounded("a", "b") if g.tf32 else []),  # plain TF32: rounded as cuBLAS's TF32 rounds
              "        acc = tl.dot(a, b, acc, input_precision=PRECISION)",
              f"    mask = ({rl} < {g.m}) & (j < {g.n})"]
    if split:
        return lines + [f"    tl.store(ws_ptr + (tl.program_id(2) * {g.batch * g.m} + r) * {g.n} + j, acc, mask=mask)"]
    return lines + _bias_and_epilogue(group, rest)


def _bias_and_epilogue(group: Group, rest: list) -> list[str]:
    """After the product is in `acc`: the bias added to it, then the epilogue's steps and stores."""
    g = group.gemm
    product = f"acc + tl.load(bias_ptr + j, mask=j < {g.n}, other=0.0).to(tl.float32)" if g.bias is not None else "acc"
    return [f"    {g.var} = {product}"] + epilogue(group, rest, len(group.logical) - 1)


def _split_epilogue(group: Group) -> list[str]:
    """Split-K's second kernel: per output tile, the partial tiles summed in slice order (the same sum every
    call), then the bias and the epilogue, as the one-kernel GEMM runs them."""
    g = group.gemm
    rest = [i for i in group.inputs if i.var != g.var]
    params = ["ws_ptr"] + (["bias_ptr"] if g.bias is not None else []) + [f"{i.var}_ptr" for i in rest]
    params += [f"out{k}_ptr" for k in range(len(group.outputs))]
    rl = "rl" if g.batch > 1 else "r"
    lines = ["@triton.jit",
             f"def {group.name}_kernel({', '.join(params)}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, "
             "GROUP_M: tl.constexpr, SPLIT_K: tl.constexpr):",
             f"    # split-K's partial [{g.m} x {g.n}] tiles summed" + (" + bias" if g.bias is not None else "")
             + f", then the epilogue in registers: {group.fused_ops}"]
    lines += inputs_doc(group, rest) + _tile_lines(g, rl)
    if g.batch > 1:
        lines += ["    batch = tl.program_id(1).to(tl.int64)", f"    r = batch * {g.m} + {rl}"]
    lines += [f"    mask = ({rl} < {g.m}) & (j < {g.n})",
              "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
              "    for part in range(SPLIT_K):",
              f"        acc += tl.load(ws_ptr + (part * {g.batch * g.m} + r) * {g.n} + j, mask=mask, other=0.0)"]
    return lines + _bias_and_epilogue(group, rest)


def epilogue(group: Group, rest: list, column: int, rounding: str = "") -> list[str]:
    """The lines after the product: the epilogue's other inputs `rest` loaded, its steps, its stores.
    The product's value is in `group.gemm.var`, as a [BLOCK_M, BLOCK_N] tile whose rows `r` are the
    flat index over every logical dim but `column` and whose columns `j` index `column`; `mask` is set.
    `rounding`: a Triton dtype expression each step's float32 result is rounded to, as eager rounds
    each op's result to the tensors' dtype (empty: none)."""
    lay = layout(dataclasses.replace(group, reduced=frozenset({column}), split={}))
    keep = [d for d, red in enumerate(lay.reduced) if not red]
    red = [d for d, red_ in enumerate(lay.reduced) if red_]
    index, names = index_lines(lay, False, "r", "r")
    _, col_names = index_lines(lay, True, "j", "c")
    names |= col_names
    row_set, col_set = {n for d, n in names.items() if d in keep}, {n for d, n in names.items() if d in red}
    lines = ["    " + line for line in index]
    for item in rest:
        offset = offset_expr(lay.strides[item.var], names, keep + red)
        lines.append(masked_load(item, offset if offset == "0" else block_index(offset, row_set, col_set), "mask", "    "))
    lines += [f"    {s.var} = ({s.expr}).to({rounding}).to(tl.float32)" if rounding else f"    {s.var} = {s.expr}"
              for s in group.steps]
    out_offset = block_index(offset_expr(lay.strides["full"], names, keep + red), row_set, col_set)
    lines += [f"    tl.store(out{k}_ptr + {out_offset}, {o.var}, mask=mask)" for k, o in enumerate(group.outputs)]
    return lines


def _operand_views(g: Gemm) -> tuple[list[str], list[str]]:
    """The wrapper's lines that see a and b as matrices (a view where their strides allow, a copy where
    not), and the kernel's stride arguments: a's row and column, b's k and n, then the batch strides."""
    if g.batch > 1:
        a_view = f"a.reshape(-1, {g.m}, {g.k})" if g.a_batched else f"a.reshape({g.m}, {g.k})"
        b_view = f"b.reshape(-1, {g.k}, {g.n})" if g.b_batched else f"b.reshape({g.k}, {g.n})"
        batch = ["a.stride(0)" if g.a_batched else "0", "b.stride(0)" if g.b_batched else "0"]
        return [f"    a, b = {a_view}, {b_view}"], ["a.stride(-2), a.stride(-1)", "b.stride(-2), b.stride(-1)"] + batch
    # (a product of batch 1 may still carry size-1 batch dimensions on b: its last two are the matrix)
    b_strides = "b.stride(1), b.stride(0)" if g.b_layout == "nk" else "b.stride(-2), b.stride(-1)"
    return [f"    a = a.reshape(-1, {g.k})"], ["a.stride(0), a.stride(1)", b_strides]


def render(group: Group, config: dict) -> str:
    """The GEMM kernel and its wrapper, as source (the wrapper takes a, b, bias, then the epilogue's inputs)."""
    g = group.gemm
    rest = [i for i in group.inputs if i.var != g.var]
    args = ["a", "b"] + (["bias"] if g.bias is not None else []) + [i.var for i in rest]
    shapes = [g.a_shape, g.b_shape] + ([(g.n,)] if g.bias is not None else []) + [i.shape for i in rest]
    outs = output_names(len(group.outputs))
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    views, strides = _operand_views(g)
    if config.get("b_k_major"):
        views = ["    if b.dtype == torch.float32 and b.stride(-1) == 1 and b.stride(-2) != 1:",
                 "        b = b.mT.contiguous().mT  # K-major, as TF32 tensor cores read it"] + views
    constants = (f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={config['BLOCK_K']}, GROUP_M={config['GROUP_M']}, "
                 f"PRECISION={config['precision']!r}, num_warps={config['num_warps']}, num_stages={config['num_stages']}")
    split = config.get("SPLIT_K", 1)
    grid = f"    grid = (triton.cdiv({g.m}, {bm}) * triton.cdiv({g.n}, {bn}), {g.batch})"
    if split > 1:
        per = math.ceil(g.k / split / config["BLOCK_K"]) * config["BLOCK_K"]
        launch = views + [grid, f"    # {split} slices of K ({per} each): partial tiles, then their sum and the epilogue",
                          f"    ws = torch.empty(({split}, {g.batch * g.m}, {g.n}), device=a.device, dtype=torch.float32)",
                          f"    {group.name}_partial_kernel[grid + ({split},)](a, b, ws, {', '.join(strides)}, {constants}, "
                          f"K_PER={per})",
                          f"    {group.name}_kernel[grid]({', '.join(['ws'] + args[2:] + outs)}, BLOCK_M={bm}, "
                          f"BLOCK_N={bn}, GROUP_M={config['GROUP_M']}, SPLIT_K={split}, num_warps={config['num_warps']})"]
        kernels = _kernel(group, split=True) + ["", ""] + _split_epilogue(group)
        how = f"a split-K Triton GEMM ({split} slices of K) and an epilogue kernel"
    else:
        launch = views + [grid, f"    {group.name}_kernel[grid]({', '.join(args + outs + strides)}, {constants})"]
        kernels = _kernel(group)
        how = "one Triton GEMM with the epilogue inside"
    wrapper = Wrapper(name=group.name, args=args, shapes=shapes,
                      doc=f"matmul + {group.fused_ops}: {how} (launch: {describe_config(config)}).",
                      outputs=[(out.shape, "a.dtype") for out in group.outputs], device="a.device", launch=launch,
                      ready_args={"a": "{}", "b": "{}"})
    return "\n".join(kernels + ["", ""] + python_wrapper(wrapper)) + "\n"
