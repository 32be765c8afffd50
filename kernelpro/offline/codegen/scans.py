"""Cumulative sums and products as one Triton kernel each, with the ops around them read in place.

KernelBench writes its scans the way PyTorch users do: `torch.cumsum(x, dim)`, a reverse one as
`x.flip(d).cumsum(d).flip(d)`, an exclusive one as
`torch.cat((zeros, torch.cumsum(x.narrow(d, 0, n - 1), d)), d)` (or `x[..., :-1]`), a masked one as
`torch.cumsum(x * mask, d)`. Eager runs each op as its own kernel: a reverse cumsum reads and writes
the tensor three times. `find` recognizes the scan with its surroundings:

- a prologue of pointwise ops over tensors of the scan's shape (read per element, in float32);
- a `flip` of the scanned dimension before the scan (the kernel walks the row backwards) and, or not,
  one after it (where it stores);
- a `narrow`/slice that drops the row's last element before the scan and a `cat` of zeros (ones for a
  product) in front after it: the exclusive scan, whose element i combines elements 0 .. i-1.

The kernel runs one program per row (the other dimensions), walks the row in chunks of BLOCK with
`tl.cumsum` / `tl.cumprod` inside a chunk and a float32 carry between chunks, and writes the result
once: one read and one write of the tensor. Lanes outside the row hold the identity (0, or 1), so the
chunk's last lane is its total. A row is walked by one program, so there must be rows enough to fill
the GPU: at least two per SM.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from kernelpro.offline.fuse.groups import Group, Input, Output, is_pointwise, shape_of
from kernelpro.offline.ir.ops import Unsupported, emit_pointwise, resolve
from kernelpro.offline.rewrite.passes import arg, meta
from kernelpro.launch.device import Device
from kernelpro.offline.codegen.common import disjoint_groups, next_pow2
from kernelpro.offline.codegen.wrapper import Wrapper, output_names, python_wrapper

_SCANS = {torch.cumsum: "cumsum", torch.cumprod: "cumprod"}
_IDENTITY = {"cumsum": 0.0, "cumprod": 1.0}
MIN_ROWS_PER_SM = 2
BLOCKS = (256, 512, 1024, 2048, 4096)


@dataclass
class ScanGroup(Group):
    """A scan: `logical` is the scanned tensor's shape; the rest says how the row is walked and stored."""
    op: str = "cumsum"
    dim: int = 0
    reverse: bool = False  # walk the row from its end
    store_flipped: bool = False  # a reverse scan not flipped back: element k is stored at L-1-k
    exclusive: bool = False  # element i combines 0 .. i-1 (i+1 .. L-1 when reversed)
    expr: str = ""  # the prologue's float32 expression over the inputs' loaded values
    out_dtype: str = "torch.float32"
    extra: list = field(default_factory=list)


def _is_scan(node: fx.Node) -> str | None:
    if node.op == "call_function" and node.target in _SCANS:
        return _SCANS[node.target]
    if node.op == "call_method" and node.target in ("cumsum", "cumprod"):
        return node.target
    return None


def _flip_of(node, dim: int, rank: int) -> fx.Node | None:
    """The input of `node` when it is a flip of exactly `dim`."""
    if not isinstance(node, fx.Node) or not ((node.op == "call_method" and node.target == "flip") or (
            node.op == "call_function" and node.target is torch.flip)):
        return None
    dims = node.args[1:] if node.op == "call_method" and len(node.args) > 2 else (arg(node, 1, "dims"),)
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = tuple(dims[0])
    if not all(isinstance(d, int) for d in dims) or {d % rank for d in dims} != {dim}:
        return None
    return node.args[0]


def _drop_last_of(node, dim: int, rank: int) -> fx.Node | None:
    """The input of `node` when it drops the last element along `dim` (narrow or a slice)."""
    if not isinstance(node, fx.Node) or shape_of(node) is None or not node.args or not isinstance(node.args[0],
                                                                                                 fx.Node):
        return None
    source = node.args[0]
    full = shape_of(source)
    if full is None or len(full) != rank:
        return None
    if (node.op == "call_method" and node.target == "narrow") or (
            node.op == "call_function" and node.target is torch.narrow):
        d, start, length = (arg(node, 1, "dim"), arg(node, 2, "start"), arg(node, 3, "length"))
        ok = isinstance(d, int) and d % rank == dim and start == 0 and length == full[dim] - 1
        return source if ok else None
    if node.op == "call_function" and node.target is operator.getitem and isinstance(node.args[1], tuple):
        index = node.args[1]
        if Ellipsis in index:
            at = index.index(Ellipsis)
            index = index[:at] + (slice(None),) * (rank - len(index) + 1) + index[at + 1:]
        if len(index) > rank or not all(isinstance(s, slice) for s in index):
            return None
        index = index + (slice(None),) * (rank - len(index))
        for d, s in enumerate(index):
            wanted = (None, None, None) if d != dim else None
            parts = (s.start, s.stop, s.step)
            if d != dim and parts != wanted:
                return None
            if d == dim and not (s.start in (None, 0) and s.step in (None, 1) and s.stop in (-1, full[dim] - 1)):
                return None
        return source
    return None


def _constant_fill(node, value: float) -> list[fx.Node] | None:
    """The nodes that make `node`, when it is a tensor filled with `value` made from nothing but shapes
    (zeros_like of a slice, torch.zeros of sizes); None otherwise."""
    if not isinstance(node, fx.Node):
        return None
    makers = {0.0: (torch.zeros_like, torch.zeros), 1.0: (torch.ones_like, torch.ones)}[value]
    if node.op != "call_function" or node.target not in makers:
        return None
    if node.kwargs.get("dtype") is not None:
        return None
    chain = [node]
    source = node.args[0] if node.target in (torch.zeros_like, torch.ones_like) else None
    while isinstance(source, fx.Node) and len(source.users) == 1 and source.op in ("call_method", "call_function") \
            and (source.target in ("select", "unsqueeze", "narrow", "view", "reshape") or source.target in (
                torch.select, torch.unsqueeze, operator.getitem)):
        chain.append(source)
        source = source.args[0]
    return chain


class _Finder:
    def __init__(self, gm: fx.GraphModule, exclude: set, device: Device):
        self.gm, self.exclude, self.device = gm, exclude, device
        self.order = {n: i for i, n in enumerate(gm.graph.nodes)}

    def prologue(self, value: fx.Node, shape: tuple, members: set, inputs: list) -> str:
        """The float32 expression of `value` over loaded inputs, taking in the pointwise ops that feed only
        the scan; `members` and `inputs` (fx nodes, in load order) grow."""
        res = resolve(self.gm, value) if value.op in ("call_function", "call_method", "call_module") else None
        if is_pointwise(res) and not res.row and value not in self.exclude and shape_of(value) == shape and all(
                u in members for u in value.users) and meta(value) is not None:
            operands = {}
            for name, arg in res.args.items():
                if isinstance(arg, fx.Node):
                    if shape_of(arg) != shape:
                        raise Unsupported("a prologue operand of another shape")
                    members.add(value)
                    operands[name] = self.prologue(arg, shape, members, inputs)
                elif arg is None or isinstance(arg, (int, float, bool, str)):
                    operands[name] = arg
                else:
                    raise Unsupported(f"a {type(arg).__name__} argument")
            members.add(value)
            return f"({emit_pointwise(res.op, operands)})"
        if value not in inputs:
            inputs.append(value)
        return f"x{inputs.index(value)}"

    def group(self, scan: fx.Node, op: str) -> ScanGroup | None:
        source = scan.args[0]
        out_meta, in_meta = meta(scan), meta(source) if isinstance(source, fx.Node) else None
        dim = arg(scan, 1, "dim")
        if out_meta is None or in_meta is None or not isinstance(dim, int) or scan.kwargs.get("dtype") is not None:
            return None
        if not out_meta.dtype.is_floating_point or len(scan.users) != 1 or len(out_meta.shape) == 0:
            return None
        rank = len(out_meta.shape)
        dim %= rank
        members, reverse, exclusive, store_flipped = {scan}, False, False, False
        flipped = _flip_of(source, dim, rank)
        if flipped is not None and len(source.users) == 1:
            members.add(source)
            source, reverse = flipped, True
        dropped = _drop_last_of(source, dim, rank) if not reverse else None
        if dropped is not None and len(source.users) == 1:
            members.add(source)
        output = scan
        user = next(iter(scan.users))
        if reverse:
            back = _flip_of(user, dim, rank)
            if back is not None and len(user.users) >= 1:
                members.add(user)
                output = user
            else:
                store_flipped = True
        elif dropped is not None:
            fill = self._exclusive_cat(user, scan, dim, op)
            if fill is None:
                members.discard(source)  # a scan of the shorter row: the slice stays a tensor input
                dropped = None
            else:
                members.update(fill + [user])
                output, exclusive, source = user, True, dropped
        shape = tuple(shape_of(source) or ())
        logical = tuple(shape_of(output) or ())
        if len(shape) != rank or shape != logical:
            return None
        rows = math.prod(shape) // shape[dim]
        if rows < MIN_ROWS_PER_SM * self.device.sms or math.prod(shape) > 2**31 - 1:
            return None  # a program per row: too few rows to fill the GPU, or offsets past int32
        inputs: list = []
        try:
            expr = self.prologue(source, shape, members, inputs)
        except Unsupported:
            return None
        if any(n in self.exclude for n in members):
            return None
        group = ScanGroup(kind="scan", logical=logical, op=op, dim=dim, reverse=reverse, store_flipped=store_flipped,
                          exclusive=exclusive, expr=expr, out_dtype=str(out_meta.dtype))
        for k, node in enumerate(inputs):
            group.inputs.append(Input(f"x{k}", node, tuple(shape_of(node)), shape, "full", node.name))
        group.outputs.append(Output("out0", output, logical, "full"))
        group.nodes = sorted(members, key=self.order.get)
        group.ops = [n.target if isinstance(n.target, str) else getattr(n.target, "__name__", "op") for n in group.nodes]
        return group

    def _exclusive_cat(self, cat, scan: fx.Node, dim: int, op: str) -> list[fx.Node] | None:
        """The fill's nodes when `cat` puts a constant slice (the scan's identity) before the scan along `dim`."""
        if not (cat.op == "call_function" and cat.target is torch.cat):
            return None
        parts, d = arg(cat, 0, "tensors"), arg(cat, 1, "dim", 0)
        if not isinstance(parts, (list, tuple)) or len(parts) != 2 or parts[1] is not scan or not isinstance(d, int):
            return None
        rank = len(shape_of(scan))
        fill = _constant_fill(parts[0], _IDENTITY[op])
        if d % rank != dim or fill is None or len(parts[0].users) != 1:
            return None
        fill_shape = shape_of(parts[0])
        expected = tuple(1 if k == dim else s for k, s in enumerate(shape_of(scan)))
        return fill if fill_shape == expected and meta(parts[0]).dtype == meta(scan).dtype else None


def find(gm: fx.GraphModule, exclude: set, device: Device = Device()) -> list[ScanGroup]:
    """Every scan the kernel takes, with what it takes around it, in graph order."""
    finder = _Finder(gm, set(exclude), device)
    return disjoint_groups(list(gm.graph.nodes), lambda node: finder.group(node, _is_scan(node))
                           if _is_scan(node) and node not in exclude else None,
                           lambda group, index: f"scan_{group.op}_{index}")


# -- launch configurations and rendering ------------------------------------------------------------------
def configs(group: ScanGroup, device: Device = Device()) -> list[dict]:
    """BLOCK elements per chunk and warps, ranked: few chunks per row with no lane idle at the row's end,
    four to sixteen elements per thread."""
    length = group.logical[group.dim]
    ranked = []
    for block in BLOCKS:
        if block > max(256, next_pow2(length)):
            continue
        chunks = math.ceil(length / block)
        idle = chunks * block / length - 1  # lanes past the row's end, as a share
        for warps in (2, 4, 8, 16):
            per_thread = block / (32 * warps)
            if not 2 <= per_thread <= 32:
                continue
            score = 1 / (1 + idle) / (1 + 0.02 * chunks) / (1 + abs(math.log2(per_thread / 8)) * 0.1)
            ranked.append((score, {"BLOCK": block, "num_warps": warps}))
    ranked.sort(key=lambda item: (-item[0], sorted(item[1].items())))
    return [dict(config, score=round(score, 6)) for score, config in ranked]


def features(group: ScanGroup) -> dict:
    elements = math.prod(group.logical)
    return {"kind": "scan", "elements": elements, "row_length": group.logical[group.dim],
            "rows": elements // group.logical[group.dim], "inputs": len(group.inputs), "outputs": 1,
            "reverse": group.reverse, "exclusive": group.exclusive,
            "bytes": 4 * elements * (len(group.inputs) + 1)}


def _kernel(group: ScanGroup) -> list[str]:
    length = group.logical[group.dim]
    inner = math.prod(group.logical[group.dim + 1:])
    identity = repr(_IDENTITY[group.op])
    params = [f"{i.var}_ptr" for i in group.inputs] + ["out0_ptr"]
    walk = "backwards" if group.reverse else "forwards"
    kind = "exclusive" if group.exclusive else "inclusive"
    lines = ["@triton.jit", f"def {group.name}_kernel({', '.join(params)}, BLOCK: tl.constexpr):",
             f"    # {kind} {group.op} along dim {group.dim} of {list(group.logical)}, each row walked {walk} in "
             f"chunks of BLOCK with a float32 carry: {' -> '.join(group.ops)}",
             "    row = tl.program_id(0)",
             f"    base = (row // {inner}) * {length * inner} + row % {inner}" if inner > 1 else
             f"    base = row * {length}",
             f"    carry = tl.full((), {identity}, tl.float32)",
             "    lane = tl.arange(0, BLOCK)",
             f"    for start in range(0, {length}, BLOCK):",
             "        k = start + lane",
             f"        inside = k < {length}",
             f"        pos = {length - 1} - k" if group.reverse else "        pos = k"]
    if group.exclusive:
        step = "+ 1" if group.reverse else "- 1"
        bound = f"(src < {length})" if group.reverse else "(src >= 0)"
        lines += [f"        src = pos {step}  # the element before, in the walk's order", f"        valid = inside & {bound}"]
    else:
        lines += ["        src = pos", "        valid = inside"]
    for item in group.inputs:
        lines.append(f"        {item.var} = tl.load({item.var}_ptr + base + src * {inner}, mask=valid).to(tl.float32)")
    scan = "tl.cumsum" if group.op == "cumsum" else "tl.cumprod"
    combine = "+" if group.op == "cumsum" else "*"
    where = f"{length - 1} - pos" if group.store_flipped else "pos"
    lines += [f"        v = tl.where(valid, {group.expr}, {identity})",
              f"        s = carry {combine} {scan}(v, axis=0)",
              f"        tl.store(out0_ptr + base + ({where}) * {inner}, s, mask=inside)",
              "        carry = tl.sum(tl.where(lane == BLOCK - 1, s, 0.0), axis=0)  # the chunk's last lane"]
    return lines


def render(group: ScanGroup, config: dict) -> str:
    rows = math.prod(group.logical) // group.logical[group.dim]
    args = [i.var for i in group.inputs]
    launch = [f"    {group.name}_kernel[({rows},)]({', '.join(args + output_names(1))}, BLOCK={config['BLOCK']}, "
              f"num_warps={config['num_warps']})"]
    wrapper = Wrapper(name=group.name, args=args, shapes=[i.shape for i in group.inputs],
                      doc=f"{' -> '.join(group.ops)}: one Triton scan kernel, a program per row "
                          f"(launch: BLOCK={config['BLOCK']}, num_warps={config['num_warps']}).",
                      outputs=[(group.logical, group.out_dtype)], device=f"{args[0]}.device", launch=launch)
    return "\n".join(_kernel(group) + ["", ""] + python_wrapper(wrapper)) + "\n"
