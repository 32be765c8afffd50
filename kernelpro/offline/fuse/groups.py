"""What a fused group is, and how one is built from the nodes the partitioner chose.

A group is an iteration space (the full logical shape; the reduced dimensions; a
split for group norm), its external inputs (each with the shape it is viewed at),
ordered steps (float32 expressions and reductions) and outputs. `build` turns a
set of graph nodes into one; `kernelpro.offline.fuse.partition` decides which nodes, and
`kernelpro.offline.codegen.triton` / `kernelpro.offline.codegen.cuda` render it.
"""

from __future__ import annotations

import math
import operator
import re
from dataclasses import dataclass, field

import torch
import torch.fx as fx

from kernelpro.offline.ir.ops import (CONV_MODULES, TRANSPOSED_CONV_MODULES, INPLACE_METHODS, Resolved, Unsupported,
                                      Attr, attr_shape, emit_pointwise, lit)
from kernelpro.offline.rewrite.passes import meta
from kernelpro.offline.ir.windows import Window, pool_args, window_of

MAX_ONE_PASS = 16384  # the longest row the one-pass variant keeps in registers (elements)
MAX_ELEMENTS = 2**31 - 1  # int32 offsets: beyond, only pointwise groups, whose Triton kernels then index in int64
RESHAPES = {"view", "reshape", "unsqueeze", "squeeze", "flatten"}


@dataclass
class Step:
    var: str
    kind: str  # "full" (a value per element) or "row" (a value per row)
    expr: str = ""  # a float32 Triton expression over earlier vars
    reduce: str = ""  # "sum", "max", "min", "argmax" or "argmin" of `operand` over the reduced dimensions
    operand: str = ""
    deps: tuple[str, ...] = ()
    level: int = 0  # the last pass over the row it waits for (a reduction: the pass that computes it; 0: none)
    # a sum of squares about a row mean: the var of the sum whose mean (sum / row length) centres it;
    # a backend that loops over the row may compute both in that sum's pass (Welford), one read fewer
    moment: str = ""
    # a sum of exp(a - m), m the row max of a: the var of that max; a backend that loops over the row may
    # compute both in the max's pass (online softmax: the sum rescaled whenever the running max grows)
    shifted: str = ""


@dataclass
class Input:
    var: str
    source: object  # fx.Node or Attr
    shape: tuple[int, ...]  # the tensor's own shape
    view: tuple[int, ...]  # the shape it is read at, aligned to the logical rank (1 = broadcast)
    kind: str  # "full", or "row" when it is broadcast over every reduced dimension
    label: str = ""
    window: Window | None = None  # a pool of this tensor, read in place (`view` is then the pooled shape)

    @property
    def dtype(self) -> torch.dtype | None:
        """The traced dtype of a graph value (None for a parameter or buffer: the model's own precision)."""
        traced = meta(self.source) if isinstance(self.source, fx.Node) else None
        return traced.dtype if traced is not None else None


@dataclass
class Output:
    var: str
    node: fx.Node
    shape: tuple[int, ...]
    kind: str
    integer: bool = False  # argmax/argmin indices (int64)


@dataclass
class Group:
    kind: str  # "pointwise" or "row"
    logical: tuple[int, ...]
    reduced: frozenset = frozenset()
    split: dict = field(default_factory=dict)  # logical dim -> (outer, inner); the inner part is reduced
    inputs: list[Input] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    outputs: list[Output] = field(default_factory=list)
    nodes: list[fx.Node] = field(default_factory=list)
    ops: list[str] = field(default_factory=list)  # the reference's ops, in order (names and comments)
    after_anchor: bool = False  # reads a matmul/conv output: an epilogue
    name: str = ""
    gemm: object = None  # a `gemm.Gemm` when a Triton GEMM computes the product this epilogue reads

    @property
    def wide(self) -> bool:
        """Whether a tensor it reads or writes has more elements than int32 offsets reach (a pointwise group
        only: its Triton kernel then indexes in int64; the CUDA kernels always do)."""
        return any(math.prod(shape) > MAX_ELEMENTS for shape in
                   [self.logical] + [i.shape for i in self.inputs] + [o.shape for o in self.outputs])

    @property
    def fused_ops(self) -> str:
        """The reference's ops this group computes, for comments and docstrings."""
        return " -> ".join(op for op in self.ops if op not in ("identity", "getitem"))

    @property
    def row_length(self) -> int:
        """Elements reduced per row (1 for a pointwise group)."""
        return math.prod(s for d, s in enumerate(self.logical) if d in self.reduced) * math.prod(
            inner for _, inner in self.split.values())

    @property
    def row_count(self) -> int:
        return math.prod(self.logical) // self.row_length

    @property
    def row_stride(self) -> int:
        """Elements between consecutive elements of a row in the full-shaped tensors (read in the logical order):
        1 when the reduced dimensions are the innermost, as in a softmax over the last dim; 4095 for a mean over
        dim 1 of a (128, 4096, 4095) tensor, whose neighbouring *rows* are the contiguous ones (1 for a pointwise
        group)."""
        last = max([*self.reduced, *self.split], default=None)
        return 1 if last is None else math.prod(self.logical[last + 1:])

    def levels(self) -> int:
        return max((s.level for s in self.steps if s.reduce), default=0)

    def reductions(self, level: int) -> list[Step]:
        """The reductions computed by pass `level` over the row, in step order."""
        return [s for s in self.steps if s.reduce and s.level == level]

    def _riders(self, link: str) -> dict[str, Step]:
        """var -> the reduction whose `link` field names it, where that reduction comes in the pass right
        after the named one's: the pairs a looping kernel may compute in one pass."""
        levels = {s.var: s.level for s in self.steps}
        named = [(getattr(s, link), s) for s in self.steps]
        return {var: s for var, s in named if var and levels[var] == s.level - 1}

    def moments(self) -> dict[str, Step]:
        """sum var -> the sum of squares about that sum's mean (one pass with it: Welford)."""
        return self._riders("moment")

    def online_sums(self) -> dict[str, Step]:
        """max var -> the sum of exp(operand - max) over the same row (one pass with it: online softmax)."""
        return self._riders("shifted")

    def statistics_levels(self) -> list[int]:
        """The levels a looping kernel reads the row for, before its outputs: those with a reduction that rides
        in no earlier pass (a moment with its sum, an online sum of exponentials with its max)."""
        hoisted = {s.var for s in self.moments().values()} | {s.var for s in self.online_sums().values()}
        return sorted({s.level for s in self.steps if s.reduce and s.var not in hoisted})

    def passes(self) -> int:
        """Reads of the row by a kernel that cannot keep it: one per reduction level, one for full outputs."""
        return self.levels() + any(o.kind == "full" for o in self.outputs)

    def bytes_moved(self) -> int:
        """Bytes per call at float32: each input read once, each output written once."""
        return 4 * (sum(math.prod(i.shape) for i in self.inputs) + sum(math.prod(o.shape) for o in self.outputs))


_ANCHOR_FUNCTIONS = (operator.matmul, torch.matmul, torch.bmm, torch.mm, torch.addmm, torch.baddbmm, torch.einsum,
                     torch.nn.functional.linear, torch.nn.functional.conv1d, torch.nn.functional.conv2d,
                     torch.nn.functional.conv3d, torch.nn.functional.conv_transpose1d,
                     torch.nn.functional.conv_transpose2d, torch.nn.functional.conv_transpose3d,
                     torch.nn.functional.scaled_dot_product_attention)
_ANCHOR_MODULES = (torch.nn.Linear, *CONV_MODULES, *TRANSPOSED_CONV_MODULES, torch.nn.Bilinear)


def is_anchor(gm: fx.GraphModule, node) -> bool:
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_module":
        return isinstance(gm.get_submodule(node.target), _ANCHOR_MODULES)
    if node.op == "call_method":
        return node.target in ("matmul", "bmm", "mm")
    return node.op == "call_function" and node.target in _ANCHOR_FUNCTIONS


def shape_of(node) -> tuple[int, ...] | None:
    m = meta(node)
    return tuple(m.shape) if m is not None else None


def broadcastable(shape: tuple, to: tuple) -> bool:
    return len(shape) <= len(to) and all(a in (1, b) for a, b in zip(shape[::-1], to[::-1]))


def _aligned(shape: tuple, rank: int) -> tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _dims(dim, rank: int) -> frozenset | None:
    if dim is None:
        return frozenset(range(rank))
    dims = dim if isinstance(dim, (tuple, list)) else (dim,)
    if not all(isinstance(d, int) for d in dims):
        return None
    return frozenset(d % rank for d in dims)


def is_inplace(node: fx.Node, gm: fx.GraphModule) -> bool:
    if node.op == "call_method" and node.target in INPLACE_METHODS:
        return True
    if node.kwargs.get("inplace"):
        return True
    return node.op == "call_module" and bool(getattr(gm.get_submodule(node.target), "inplace", False))


def is_eval_norm(res: Resolved) -> bool:
    """Batch norm with running statistics, or instance norm without input statistics: a per-channel affine."""
    return (res.op == "batch_norm" and not res.args["training"]) or (
        res.op == "instance_norm" and not res.args["use_input_stats"])


def is_pointwise(res: Resolved | None) -> bool:
    """Whether a resolved op belongs in a pointwise group: element by element, or an eval-mode norm."""
    return res is not None and (not res.row or is_eval_norm(res))


def norm_order(res: Resolved) -> float | None:
    """The order of a vector norm (torch.norm's p, linalg.vector_norm's ord) the kernels compute: 1, 2 (the
    Frobenius norm too), any other positive number, or inf; None for what they do not (nuc, 0, -inf)."""
    order = res.args.get("p", res.args.get("ord"))
    if order == "fro" or order is None:
        return 2.0
    if isinstance(order, bool) or not isinstance(order, (int, float)) or not order > 0:
        return None
    return float(order)


def row_space(res: Resolved, shape: tuple[int, ...]) -> tuple[frozenset, dict] | None:
    """(reduced logical dims, split) of a row operation on an input of `shape`; None if unsupported."""
    rank, args = len(shape), res.args
    if res.op in ("sum", "mean", "amax", "amin", "logsumexp", "var", "std"):
        dims = _dims(args["dim"], rank)
    elif res.op in ("norm", "vector_norm"):
        dims = _dims(args["dim"], rank) if norm_order(res) is not None else None
    elif res.op in ("max", "min", "argmax", "argmin", "softmax", "log_softmax"):
        if args["dim"] is None and res.op in ("softmax", "log_softmax"):
            return None
        dims = _dims(args["dim"], rank)
    elif res.op == "normalize":
        dims = _dims(args["dim"] if args["dim"] is not None else 1, rank) if args.get("p", 2) in (2, 2.0) else None
    elif res.op == "layer_norm":
        normalized = args["normalized_shape"]
        normalized = tuple(normalized) if isinstance(normalized, (tuple, list, torch.Size)) else (normalized,)
        if not all(isinstance(n, int) for n in normalized) or tuple(shape[rank - len(normalized):]) != normalized:
            return None
        dims = frozenset(range(rank - len(normalized), rank))
    elif res.op == "group_norm":
        groups = args["num_groups"]
        if rank < 2 or not isinstance(groups, int) or shape[1] % groups:
            return None
        return frozenset(range(2, rank)), {1: (groups, shape[1] // groups)}
    elif res.op == "instance_norm" and args["use_input_stats"] and rank >= 3:
        dims = frozenset(range(2, rank))
    elif res.op == "batch_norm" and args["training"] and rank >= 2 and args["running_mean"] is None:
        dims = frozenset({0} | set(range(2, rank)))
    else:
        return None
    if not dims or all(shape[d] == 1 for d in dims):
        return None  # nothing to reduce: simplify_size1_reductions's business, not a kernel's
    return dims, {}


class _Builder:
    """Lays out one group's steps from its member nodes, in graph order."""

    def __init__(self, gm: fx.GraphModule, group: Group):
        self.gm, self.group = gm, group
        self.vars: dict[fx.Node, tuple] = {}  # node -> (var, kind, shape); a pair of those for max/min with dim
        self.count = 0
        self._seen: dict[tuple, str] = {}  # what each expression or reduction was computed as (see expr)

    @property
    def keepdim_shape(self) -> tuple[int, ...]:
        return tuple(1 if d in self.group.reduced else s for d, s in enumerate(self.group.logical))

    @property
    def row_broadcasts(self) -> tuple:
        """The shapes of a per-row value that broadcast over the rows as torch broadcasts them: kept dims, and
        the reduced dims dropped where those lead (a whole-tensor norm's 0-d value, a sum over dim 0)."""
        squeezed = tuple(s for d, s in enumerate(self.group.logical) if d not in self.group.reduced)
        leading = self.group.reduced == frozenset(range(len(self.group.reduced))) and not self.group.split
        return (self.keepdim_shape, None) + ((squeezed,) if leading else ())

    def tensor(self, value, view: tuple[int, ...] | None = None) -> tuple[str, str, tuple | None]:
        """(var, kind, shape) of a member's result or of an external input."""
        if isinstance(value, fx.Node) and value in self.vars:
            entry = self.vars[value]
            if isinstance(entry, list):
                raise Unsupported("a (values, indices) pair used as a tensor")
            return entry
        shape = attr_shape(self.gm, value) if isinstance(value, Attr) else shape_of(value)
        if shape is None:
            raise Unsupported("an input without a known shape")
        logical = self.group.logical
        if view is None:
            if not broadcastable(shape, logical):
                raise Unsupported("an input that does not broadcast to the group's shape")
            view = _aligned(shape, len(logical))
        if math.prod(shape) > MAX_ELEMENTS and self.group.kind == "row":
            raise Unsupported("a tensor too large for 32-bit offsets (in a row kernel)")
        for existing in self.group.inputs:
            if existing.source == value and existing.view == view and existing.window is None:
                return existing.var, existing.kind, existing.view
        reduced = self.group.reduced | set(self.group.split)
        kind = "row" if self.group.kind == "row" and all(view[d] == 1 for d in reduced) else "full"
        var = f"x{len(self.group.inputs)}"
        label = value.name if isinstance(value, fx.Node) else value.target
        self.group.inputs.append(Input(var, value, shape, view, kind, label))
        return var, kind, view

    def fresh(self) -> str:
        self.count += 1
        return f"v{self.count}"

    def _level(self, deps: tuple[str, ...]) -> int:
        levels = {s.var: s.level for s in self.group.steps}
        return max((levels.get(d, 0) for d in deps), default=0)  # inputs (x...) wait for no pass

    def expr(self, text: str, kind: str) -> str:
        if (kind, text) in self._seen:  # the same value computed again (siblings: a mean, a var and a norm)
            return self._seen[(kind, text)]
        known = {s.var for s in self.group.steps} | {i.var for i in self.group.inputs}
        var = self.fresh()
        deps = tuple(dict.fromkeys(t for t in re.findall(r"\b[vx]\d+\b", text) if t in known))
        self.group.steps.append(Step(var, kind, expr=text, deps=deps, level=self._level(deps)))
        self._seen[(kind, text)] = var
        return var

    def reduce(self, how: str, operand: str, moment: str = "", shifted: str = "") -> str:
        key = ("reduce", how, operand, moment, shifted)
        if key in self._seen:  # one reduction per value: a long row is then read once for it, not once per user
            return self._seen[key]
        var = self.fresh()
        self.group.steps.append(Step(var, "row", reduce=how, operand=operand, deps=(operand,),
                                     level=self._level((operand,)) + 1, moment=moment, shifted=shifted))
        self._seen[key] = var
        return var

    # -- one member ---------------------------------------------------------------------------
    def add(self, node: fx.Node, res: Resolved | None) -> None:
        pool = pool_args(self.gm, node) if res is None else None
        if pool is not None:
            self.group.ops.append(self._window(node, pool))
            return
        if res is None:  # getitem on (values, indices), or a reshape of a per-row value
            self._relabel(node)
        elif not res.row:
            self._pointwise(node, res)
        elif is_eval_norm(res):
            self._eval_norm(node, res)
        else:
            self._row(node, res)
        self.group.ops.append(res.op if res else node.target if isinstance(node.target, str) else "getitem")

    def _pointwise(self, node: fx.Node, res: Resolved) -> None:
        operands, kinds, row_shapes = {}, [], []
        for name, value in res.args.items():
            if isinstance(value, (fx.Node, Attr)):
                var, kind, shape = self.tensor(value)
                operands[name] = var
                kinds.append(kind)
                if kind == "row" and isinstance(value, fx.Node) and value in self.vars:
                    row_shapes.append(shape)
            elif isinstance(value, (list, tuple)) or (value is not None and not isinstance(value, (int, float, bool,
                                                                                                   str))):
                raise Unsupported(f"a {type(value).__name__} argument")
            else:
                operands[name] = value
        if not kinds:
            raise Unsupported("no tensor operand")
        kind = "full" if "full" in kinds else "row"
        shape = shape_of(node)
        if self.group.kind == "row":
            if kind == "full":
                if shape != self.group.logical or any(s not in self.row_broadcasts for s in row_shapes):
                    raise Unsupported("a per-row value broadcast the wrong way")
            elif any(s != shape for s in row_shapes if s is not None) or (
                    shape != self.keepdim_shape and any(i.kind == "row" and math.prod(i.shape) != 1
                                                        for i in self.group.inputs if i.var in operands.values())):
                raise Unsupported("per-row values of different shapes")
        var = self.expr(emit_pointwise(res.op, operands), kind)
        self.vars[node] = (var, kind, shape)

    def _window(self, node: fx.Node, pool: tuple[str, int, dict]) -> str:
        """A pool (`pool` is its `pool_args`) whose input the kernel reads in place, window by window;
        the pool's name."""
        source = pool[2]["input"]
        shape = shape_of(source)
        window = window_of(pool, self.group.logical, shape)
        if window is None or self.group.split or shape_of(node) != self.group.logical:
            raise Unsupported("a pool the kernel cannot read in place")
        if math.prod(shape) > MAX_ELEMENTS and self.group.kind == "row":
            raise Unsupported("a tensor too large for 32-bit offsets (in a row kernel)")
        var = f"x{len(self.group.inputs)}"
        self.group.inputs.append(Input(var, source, shape, self.group.logical, "full", source.name, window))
        self.vars[node] = (var, "full", self.group.logical)
        return window.op

    def _eval_norm(self, node: fx.Node, res: Resolved) -> None:
        a = res.args
        x, kind, _ = self.tensor(a["input"])
        channel = tuple(s if d == 1 else 1 for d, s in enumerate(self.group.logical))
        rm, _, _ = self.tensor(a["running_mean"], channel)
        rv, _, _ = self.tensor(a["running_var"], channel)
        text = f"({x} - {rm}) * tl.rsqrt({rv} + {lit(a['eps'])})"
        if a["weight"] is not None:
            text = f"{text} * {self.tensor(a['weight'], channel)[0]}"
        if a["bias"] is not None:
            text = f"{text} + {self.tensor(a['bias'], channel)[0]}"
        if shape_of(node) != self.group.logical:
            raise Unsupported("a normalization outside the group's shape")
        self.vars[node] = (self.expr(text, kind), kind, shape_of(node))

    def _relabel(self, node: fx.Node) -> None:
        source = node.args[0]
        entry = self.vars.get(source)
        if node.op == "call_function" and isinstance(entry, list):
            if node.target is operator.getitem and node.args[1] in (0, 1):
                self.vars[node] = entry[node.args[1]]
                return
            if node.target is getattr and node.args[1] in ("values", "indices"):
                self.vars[node] = entry[("values", "indices").index(node.args[1])]
                return
        shape = shape_of(node)
        if entry is None or isinstance(entry, list) or entry[1] != "row" or shape is None or \
                math.prod(shape) != self.group.row_count:
            raise Unsupported("a reshape of anything but a per-row value")
        squeezed = tuple(s for d, s in enumerate(self.group.logical) if d not in self.group.reduced)
        if shape not in (self.keepdim_shape, squeezed) or self.group.split:
            raise Unsupported("a reshape that changes the row layout")
        self.vars[node] = (entry[0], "row", shape)

    def _row(self, node: fx.Node, res: Resolved) -> None:
        a, op = res.args, res.op
        x, kind, _ = self.tensor(a["input"])
        if kind != "full" or shape_of(a["input"]) != self.group.logical:
            raise Unsupported("a row operation on a value of another shape")
        space = row_space(res, self.group.logical)
        if space is None or space[0] != self.group.reduced or space[1] != self.group.split:
            raise Unsupported("a row operation over other dimensions")
        count = lit(float(self.group.row_length))
        shape = shape_of(node) if op not in ("max", "min") or a["dim"] is None else None

        def mean(value: str) -> str:
            return self.expr(f"{self.reduce('sum', value)} / {count}", "row")

        def centred_squares(value: str) -> tuple[str, str]:  # the centred values, the sum of their squares
            total = self.reduce("sum", value)
            centred = self.expr(f"({value} - {self.expr(f'{total} / {count}', 'row')})", "full")
            return centred, self.reduce("sum", self.expr(f"({centred} * {centred})", "full"), moment=total)

        if op == "sum":
            out = self.reduce("sum", x)
        elif op == "mean":
            out = mean(x)
        elif op in ("amax", "amin") or (op in ("max", "min") and a["dim"] is None):
            out = self.reduce("max" if op in ("amax", "max") else "min", x)
        elif op in ("argmax", "argmin"):
            out = self.reduce(op, x)
        elif op in ("max", "min"):
            wants_indices = any(u.args[1:2] in ((1,), ("indices",)) for u in node.users)
            values = self.reduce(op, x)
            indices = self.reduce("arg" + op, x) if wants_indices else values
            keep = self.keepdim_shape if a["keepdim"] else tuple(
                s for d, s in enumerate(self.group.logical) if d not in self.group.reduced)
            self.vars[node] = [(values, "row", keep), (indices, "row", keep)]
            return
        elif op in ("var", "std"):
            correction = a["correction"] if a["correction"] is not None else (
                0 if a["unbiased"] is False else 1)
            _, total = centred_squares(x)
            out = self.expr(f"{total} / {lit(float(self.group.row_length - correction))}", "row")
            if op == "std":
                out = self.expr(f"tl.sqrt({out})", "row")
        elif op in ("logsumexp", "softmax", "log_softmax"):
            top = self.reduce("max", x)
            exps = self.expr(f"tl.exp({x} - {top})", "full")
            total = self.reduce("sum", exps, shifted=top)
            if op == "logsumexp":
                out = self.expr(f"({top} + tl.log({total}))", "row")
            elif op == "softmax":
                out = self.expr(f"({exps} / {total})", "full")
            else:
                out = self.expr(f"({x} - {top} - tl.log({total}))", "full")
        elif op in ("norm", "vector_norm"):
            order = norm_order(res)
            if order == 2.0:
                out = self.expr(f"tl.sqrt({self.reduce('sum', self.expr(f'({x} * {x})', 'full'))})", "row")
            elif order == 1.0:
                out = self.reduce("sum", self.expr(f"tl.abs({x})", "full"))
            elif order == math.inf:
                out = self.reduce("max", self.expr(f"tl.abs({x})", "full"))
            else:
                powered = self.expr(f"tl.exp2({lit(order)} * tl.log2(tl.abs({x})))", "full")
                out = self.expr(f"tl.exp2(tl.log2({self.reduce('sum', powered)}) / {lit(order)})", "row")
        elif op == "normalize":
            norm = self.expr(f"tl.sqrt({self.reduce('sum', self.expr(f'({x} * {x})', 'full'))})", "row")
            out = self.expr(f"({x} / tl.maximum({norm}, {lit(a['eps'] if a['eps'] is not None else 1e-12)}))",
                            "full")
        else:  # layer_norm, group_norm, instance_norm, batch_norm (batch statistics)
            centred, squares = centred_squares(x)
            var = self.expr(f"{squares} / {count}", "row")
            out = self.expr(f"({centred} * tl.rsqrt({var} + {lit(a['eps'])}))", "full")
            view = None if op == "layer_norm" else tuple(s if d == 1 else 1 for d, s in enumerate(self.group.logical))
            for name, symbol in (("weight", "*"), ("bias", "+")):
                if a[name] is not None:
                    param = self.tensor(a[name], view)[0]
                    out = self.expr(f"({out} {symbol} {param})", "full")
        kind = next(s.kind for s in self.group.steps if s.var == out)
        self.vars[node] = (out, kind, shape if kind == "row" else self.group.logical)


def build(gm: fx.GraphModule, kind: str, logical: tuple, reduced: frozenset, split: dict,
          members: list[fx.Node], resolved: dict) -> Group:
    """Lay out a group from its members (in graph order); raises Unsupported when it cannot be one kernel."""
    group = Group(kind=kind, logical=tuple(logical), reduced=reduced, split=dict(split))
    builder = _Builder(gm, group)
    for node in members:
        builder.add(node, resolved.get(node))
    member_set = set(members)
    for node in members:
        outside = [u for u in node.users if u not in member_set]
        if not outside:
            continue
        entry = builder.vars[node]
        if isinstance(entry, list):
            raise Unsupported("a (values, indices) pair used outside the group")
        var, value_kind, shape = entry
        step = next((s for s in group.steps if s.var == var), None)
        integer = step is not None and step.reduce in ("argmax", "argmin")
        m = meta(node)
        if m is None or not (m.dtype.is_floating_point or integer):
            raise Unsupported("an output that is not a float tensor")
        if var.startswith("x"):
            window = next((i.window for i in group.inputs if i.var == var), None)
            if window is None:
                raise Unsupported("an output that is an input")
            var = builder.expr(f"({var})", "full")  # a pool alone: the kernel writes the windows' results
        group.outputs.append(Output(var, node, tuple(m.shape), value_kind, integer))
    if not group.outputs or all(re.fullmatch(r"[vx]\d+", s.expr) for s in group.steps):
        raise Unsupported("nothing to compute")
    if group.kind == "row" and group.row_length > MAX_ONE_PASS and any(
            s.reduce in ("argmax", "argmin") for s in group.steps):
        raise Unsupported("argmax over a row too long for one pass")
    if not group.inputs:
        raise Unsupported("no tensor inputs")
    if not logical:  # SwinV2's clamped logit scale, say: a kernel over one element is never worth a launch
        raise Unsupported("a zero-dimensional result")
    if math.prod(logical) > MAX_ELEMENTS and group.kind == "row":
        raise Unsupported("a tensor too large for 32-bit offsets (in a row kernel)")
    group.nodes = list(members)
    group.after_anchor = any(is_anchor(gm, i.source) for i in group.inputs)
    return group
