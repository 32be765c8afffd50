"""The algebraic graph moves on a torch.fx graph with shapes (ShapeProp's `tensor_meta`), and the helpers every
rewrite uses.

Each move is a table of rules on the engine of `kernelpro.offline.rewrite.rules`; it changes the graph in place
and returns how many rewrites it made. A rule only rewrites what is exactly equivalent for finite inputs:
identities, reductions over size-1 dimensions, double transposes and negations, chains of scalar multiplies and
adds, a max-pool moved before the non-decreasing activation that fed it, constant results of a reduction over a
size-1 dimension. The folds into a linear's or convolution's weights and bias are in `weights`, the rewrites into
library calls in `library`. Parameter-only subgraphs are left to `foldable_nodes`, which codegen precomputes at
init.
"""

from __future__ import annotations

import math
import operator

import torch
import torch.fx as fx
import torch.nn.functional as F

from kernelpro.offline.rewrite.rules import Move, Pattern, Rule, finish_graph

SCALAR = (int, float)
ADD = (operator.add, torch.add)
SUB = (operator.sub, torch.sub)
MUL = (operator.mul, torch.mul)
DIV = (operator.truediv, torch.div)
NEG = (operator.neg, torch.neg)
MATMUL = (operator.matmul, torch.matmul, torch.bmm, torch.mm)
SOFTMAX = (torch.softmax, F.softmax)
# Elementwise functions with f(0) == 0, so a zero tensor stays zero.
ZERO_PRESERVING_FN = {F.relu, torch.relu, F.gelu, torch.tanh, F.silu, torch.sin, torch.abs, F.leaky_relu,
                      F.hardtanh, F.relu6, torch.sinh, torch.asinh, torch.atan, torch.tan, torch.neg, operator.neg}
ZERO_PRESERVING_METHOD = {"relu", "tanh", "sin", "abs", "neg", "sinh", "atan"}
ZERO_PRESERVING_MODULE = (torch.nn.ReLU, torch.nn.GELU, torch.nn.Tanh, torch.nn.SiLU, torch.nn.LeakyReLU,
                          torch.nn.Hardtanh, torch.nn.ReLU6, torch.nn.Identity, torch.nn.Dropout)
REDUCTIONS = {"sum": (torch.sum,), "mean": (torch.mean,), "amax": (torch.amax,), "amin": (torch.amin,),
              "logsumexp": (torch.logsumexp,)}
RANDOM_OPS = {torch.rand, torch.randn, torch.randint, torch.rand_like, torch.randn_like, torch.bernoulli,
              torch.multinomial, torch.normal, F.dropout}


def meta(node) -> torch.fx.passes.shape_prop.TensorMetadata | None:
    value = node.meta.get("tensor_meta") if isinstance(node, fx.Node) else None
    return value if hasattr(value, "shape") else None


def is_op(node, functions=(), methods=()) -> bool:
    if not isinstance(node, fx.Node):
        return False
    if node.op == "call_function":
        return node.target in functions
    return node.op == "call_method" and node.target in methods


def arg(node: fx.Node, index: int, name: str, default=None):
    if len(node.args) > index:
        return node.args[index]
    return node.kwargs.get(name, default)


def module_of(gm: fx.GraphModule, node) -> torch.nn.Module | None:
    if isinstance(node, fx.Node) and node.op == "call_module":
        return gm.get_submodule(node.target)
    return None


def _replace(node: fx.Node, value) -> None:
    node.replace_all_uses_with(value)


def substitute(gm: fx.GraphModule, node: fx.Node, target, args: tuple, kwargs: dict | None = None) -> fx.Node:
    """A call to `target` in place of `node`: inserted just before it, with its shape metadata."""
    with gm.graph.inserting_before(node):
        call = gm.graph.call_function(target, args, kwargs or {})
    call.meta = dict(node.meta)
    node.replace_all_uses_with(call)
    return call


def scalar_binary(node: fx.Node, ops) -> tuple[fx.Node, float] | None:
    """(tensor operand, scalar) for `t op s` (and `s op t` for commutative ops)."""
    if not is_op(node, ops, {o.__name__ for o in ops if hasattr(o, "__name__")} & {"add", "sub", "mul", "div"}):
        return None
    if len(node.args) != 2 or node.kwargs:
        return None
    a, b = node.args
    if isinstance(a, fx.Node) and isinstance(b, SCALAR) and not isinstance(b, bool):
        return a, float(b)
    if ops in (ADD, MUL) and isinstance(b, fx.Node) and isinstance(a, SCALAR) and not isinstance(a, bool):
        return b, float(a)
    return None


_METADATA = {"size", "dim", "numel", "nelement", "ndimension", "item", "tolist", "stride"}


def specialize_scalars(gm: fx.GraphModule, inputs: list) -> int:
    """Python numbers computed from the inputs' shapes (x.shape[0], d // h, math.sqrt(d)) become
    constants: the problem's shapes are fixed, and the rewrites need to see the scalars."""
    values: dict[fx.Node, object] = {}
    if not any(node.op == "call_method" and node.target in _METADATA or
               node.op == "call_function" and node.target is getattr for node in gm.graph.nodes):
        return 0  # no node asks a tensor for a size: nothing to specialize, and no run needed

    class Recorder(fx.Interpreter):
        def run_node(self, node):
            value = super().run_node(node)
            values[node] = value
            return value

    with torch.no_grad():
        Recorder(gm).run(*inputs)
    count = 0
    for node, value in values.items():
        if node.op in ("call_function", "call_method") and type(value) in (int, float) and node.users:
            node.replace_all_uses_with(value)  # type: ignore[arg-type]
            count += 1
    finish_graph(gm)
    return count


def scaled_by(node) -> tuple[fx.Node, float] | None:
    """(tensor, factor) for `t * s`, `s * t` or `t / s` with a Python scalar s."""
    found = scalar_binary(node, MUL)
    if found:
        return found
    found = scalar_binary(node, DIV)
    if found:
        return found[0], (1.0 / found[1] if found[1] else math.inf)
    return None


# -- algebraic simplification ---------------------------------------------------------------------
def is_identity_dropout(gm: fx.GraphModule, node) -> bool:
    """nn.Identity, or a dropout that passes its input through: in eval mode, or with p = 0. A dropout
    with p > 0 in training mode (KernelBench runs models so) is random and stays."""
    module = module_of(gm, node)
    if isinstance(module, torch.nn.Identity):
        return True
    if isinstance(module, torch.nn.Dropout):
        return not module.training or module.p == 0
    if is_op(node, (F.dropout,)):
        return arg(node, 2, "training", True) is False or arg(node, 1, "p", 0.5) == 0
    return False


def _neutral_scalar(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    source = None
    for ops, neutral in ((MUL, 1.0), (DIV, 1.0), (ADD, 0.0), (SUB, 0.0)):
        found = scalar_binary(node, ops)
        if found and found[1] == neutral and meta(found[0]) and meta(node) and \
                meta(found[0]).shape == meta(node).shape and meta(found[0]).dtype == meta(node).dtype:
            source = found[0]
    return _replaced_by(node, source)


def _identity_module(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    return is_identity_dropout(gm, node) and _replaced_by(node, node.args[0])


def _unchanging_view(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    if not (meta(node) and meta(node.args[0])):
        return False
    before, after = meta(node.args[0]), meta(node)
    same = before.shape == after.shape and before.dtype == after.dtype and before.stride == after.stride
    if same and node.target != "to" or (node.target == "to" and same and not node.kwargs.get("copy")):
        return _replaced_by(node, node.args[0])
    return False


def _replaced_by(node: fx.Node, source) -> bool:
    """Every use of `node` reads `source` instead, where that is a node; whether it was."""
    if not isinstance(source, fx.Node):
        return False
    _replace(node, source)
    return True


_ARITHMETIC = Pattern(MUL + DIV + ADD + SUB, frozenset({"mul", "div", "add", "sub"}))
simplify_identities = Move("simplify_identities", (
    Rule("x * 1, x / 1, x + 0, x - 0 -> x (same shape and dtype)", _ARITHMETIC, _neutral_scalar),
    Rule("nn.Identity(x), dropout(x) in eval or with p = 0 -> x",
         Pattern((F.dropout,), modules=(torch.nn.Identity, torch.nn.Dropout)), _identity_module),
    Rule("reshape/view/flatten/contiguous/to(x) -> x where shape, dtype and strides stay",
         Pattern((torch.reshape,), frozenset({"reshape", "view", "contiguous", "to", "flatten"})), _unchanging_view),
))


def reduced_dims(node: fx.Node, rank: int) -> list[int] | None:
    dims = arg(node, 1, "dim")
    if dims is None:
        return None
    dims = [dims] if isinstance(dims, int) else list(dims)
    return [d % rank for d in dims] if all(isinstance(d, int) for d in dims) else None


def _size1_reduction(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    source = node.args[0] if node.args else None
    shape = meta(source).shape if meta(source) else None
    kind = next((name for name, fns in REDUCTIONS.items() if is_op(node, fns, {name})), None)
    values_of_max = None
    if kind is None and is_op(node, (torch.max, torch.min), {"max", "min"}) and shape is not None:
        users = list(node.users)
        if users and all(u.op == "call_function" and u.target in (getattr, operator.getitem) and
                         u.args[1] in ("values", 0) for u in users):
            values_of_max = users
            kind = "max"
    if kind is None or shape is None:
        return False
    dims = reduced_dims(node, len(shape))
    if not dims or any(shape[d] != 1 for d in dims) or node.kwargs.get("dtype") is not None:
        return False
    keepdim = bool(arg(node, 2, "keepdim", False))
    with gm.graph.inserting_after(node):
        value = source if keepdim else gm.graph.call_method("squeeze", (source, tuple(sorted(dims))))
    if values_of_max is not None:
        for user in values_of_max:
            _replace(user, value)
    else:
        _replace(node, value)
    return True


simplify_size1_reductions = Move("simplify_size1_reductions", (
    Rule("sum/mean/amax/amin/logsumexp(x) over size-1 dims, max(x, dim).values over a size-1 dim -> x (squeezed)",
         Pattern(tuple(f for fns in REDUCTIONS.values() for f in fns) + (torch.max, torch.min),
                 frozenset(REDUCTIONS) | {"max", "min"}), _size1_reduction),
))


def transpose_dims(node: fx.Node, rank: int) -> tuple[int, int] | None:
    if is_op(node, (torch.transpose,), {"transpose"}) and len(node.args) == 3:
        a, b = node.args[1], node.args[2]
        return tuple(sorted((a % rank, b % rank))) if isinstance(a, int) and isinstance(b, int) else None
    if is_op(node, (torch.t,), {"t"}) and rank == 2:
        return (0, 1)
    return None


def _double_negation(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    inner = node.args[0] if node.args else None
    return isinstance(inner, fx.Node) and is_op(inner, NEG, {"neg"}) and _replaced_by(node, inner.args[0])


def _double_transpose(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    inner = node.args[0] if node.args else None
    if not isinstance(inner, fx.Node):
        return False
    rank = len(meta(node).shape) if meta(node) else None
    return bool(rank and transpose_dims(node, rank) and transpose_dims(node, rank) == transpose_dims(inner, rank)) \
        and _replaced_by(node, inner.args[0])


simplify_double_ops = Move("simplify_double_ops", (
    Rule("-(-x) -> x", Pattern(NEG, frozenset({"neg"})), _double_negation),
    Rule("transpose(transpose(x, a, b), a, b) -> x, t(t(x)) -> x",
         Pattern((torch.transpose, torch.t), frozenset({"transpose", "t"})), _double_transpose),
))


def _scalar_chain(gm: fx.GraphModule, node: fx.Node, state) -> bool:
    outer = next(((ops, found) for ops in (MUL, DIV, ADD, SUB) if (found := scalar_binary(node, ops))), None)
    if outer is None:
        return False
    ops, (inner, b) = outer
    if len(inner.users) != 1:
        return False
    first = next(((iops, found) for iops in (MUL, DIV, ADD, SUB) if (found := scalar_binary(inner, iops))), None)
    if first is None:
        return False
    iops, (x, a) = first
    multiplicative = {id(MUL), id(DIV)}
    if (id(ops) in multiplicative) != (id(iops) in multiplicative):
        return False
    if id(ops) in multiplicative:
        factor = (a if iops is MUL else 1.0 / a) * (b if ops is MUL else 1.0 / b) if a and b else None
        if factor is None or not math.isfinite(factor):
            return False
        substitute(gm, node, operator.mul, (x, factor))
    else:
        substitute(gm, node, operator.add, (x, (a if iops is ADD else -a) + (b if ops is ADD else -b)))
    return True


combine_scalar_ops = Move("combine_scalar_ops", (
    Rule("(x * a) * b -> x * (a*b), (x * a) / b -> x * (a/b), (x + a) ± b -> x + (a ± b), x used once between",
         _ARITHMETIC, _scalar_chain),
))


_MAX_POOLS = (torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.MaxPool3d)
_MAX_POOL_FNS = (F.max_pool1d, F.max_pool2d, F.max_pool3d)


def _monotone(gm: fx.GraphModule, node) -> bool:
    """Whether the node is a pointwise op that never decreases (relu, relu6, hardtanh, leaky_relu with
    a slope >= 0, clamp by numbers): max over a window commutes with it exactly."""
    module = module_of(gm, node)
    if module is not None:
        return type(module) in (torch.nn.ReLU, torch.nn.ReLU6) or (
            type(module) is torch.nn.Hardtanh and module.min_val <= module.max_val) or (
            type(module) is torch.nn.LeakyReLU and module.negative_slope >= 0)
    if is_op(node, (F.relu, torch.relu, F.relu6, F.hardtanh), {"relu"}):
        return True
    if is_op(node, (F.leaky_relu,)):
        slope = arg(node, 1, "negative_slope", 0.01)
        return isinstance(slope, SCALAR) and slope >= 0
    if is_op(node, (torch.clamp,), {"clamp"}):
        bounds = [arg(node, 1, "min"), arg(node, 2, "max")]
        return all(b is None or isinstance(b, SCALAR) for b in bounds) and any(b is not None for b in bounds)
    return False


def max_pool_of_values(gm: fx.GraphModule, node) -> bool:
    """A max pool (module or functional) that returns its values alone, not their indices."""
    module = module_of(gm, node)
    if isinstance(module, _MAX_POOLS):
        return not module.return_indices
    return is_op(node, _MAX_POOL_FNS) and not arg(node, 6, "return_indices", False)


def _activation_after_pool(gm: fx.GraphModule, pool: fx.Node, state) -> bool:
    if not max_pool_of_values(gm, pool):
        return False
    act = pool.args[0] if pool.args else None
    if not isinstance(act, fx.Node) or len(act.users) != 1 or not act.args or \
            not isinstance(act.args[0], fx.Node) or not _monotone(gm, act):
        return False
    run_before(gm, pool, act)
    return True


def run_before(gm: fx.GraphModule, node: fx.Node, producer: fx.Node) -> None:
    """`node` applied to `producer`'s first input, then `producer` (with its other arguments) to that: the two swap
    places. `producer` must have `node` as its only user; what used `node` uses the moved producer."""
    graph = gm.graph
    node.replace_input_with(producer, producer.args[0])
    with graph.inserting_after(node):
        moved = graph.create_node(producer.op, producer.target, (node,) + tuple(producer.args[1:]),
                                  dict(producer.kwargs))
    moved.meta = dict(node.meta)
    node.replace_all_uses_with(moved, delete_user_cb=lambda user: user is not moved)
    graph.erase_node(producer)


MAX_POOL = Pattern(_MAX_POOL_FNS, modules=_MAX_POOLS)
pool_before_activation = Move("pool_before_activation", (
    Rule("max_pool(act(x)) -> act(max_pool(x)) for a non-decreasing act whose only user is the pool "
         "(the activation runs on the smaller tensor)", MAX_POOL, _activation_after_pool),
))


def _constant_kind(gm: fx.GraphModule, node) -> float | None:
    """0.0 or 1.0 when the node is known to be a tensor of that constant everywhere (finite inputs)."""
    if not isinstance(node, fx.Node):
        return None
    return node.meta.get("kp_constant")


def _mark_constants(gm: fx.GraphModule) -> dict | None:
    """a - a = 0, softmax over a size-1 dim = 1, log_softmax there = 0, and zeros kept through f(0)=0: each node known
    to be a tensor of one constant is marked (`kp_constant`); what the rule needs, or None where none is."""
    marked = 0
    for node in gm.graph.nodes:
        source = node.args[0] if node.args else None
        if is_op(node, SUB, {"sub"}) and len(node.args) == 2 and node.args[0] is node.args[1]:
            node.meta["kp_constant"] = 0.0
        elif is_op(node, SOFTMAX + (torch.log_softmax, F.log_softmax), {"softmax", "log_softmax"}) and meta(source):
            dim = arg(node, 1, "dim")
            shape = meta(source).shape
            if isinstance(dim, int) and shape[dim % len(shape)] == 1:
                node.meta["kp_constant"] = 0.0 if "log" in str(getattr(node.target, "__name__", node.target)) else 1.0
        elif _constant_kind(gm, source) == 0.0 and len(node.args) == 1 and not node.kwargs and (
                is_op(node, tuple(ZERO_PRESERVING_FN), ZERO_PRESERVING_METHOD)
                or isinstance(module_of(gm, node), ZERO_PRESERVING_MODULE)):
            node.meta["kp_constant"] = 0.0
        elif _constant_kind(gm, source) == 0.0 and scaled_by(node):
            node.meta["kp_constant"] = 0.0
        else:
            continue
        marked += 1
    if not marked:
        return None
    inputs = [n for n in gm.graph.nodes if n.op == "placeholder" and meta(n) and meta(n).dtype.is_floating_point]
    return {"inputs": inputs, "output": next(n for n in gm.graph.nodes if n.op == "output")}


def _fresh_constant(gm: fx.GraphModule, node: fx.Node, state: dict) -> bool:
    """The outermost constant nodes (a user that is not itself constant) become a fresh tensor of the constant,
    where their dtype is the inputs'."""
    value, info, inputs = node.meta.get("kp_constant"), meta(node), state["inputs"]
    if value is None or info is None or not inputs or meta(inputs[0]).dtype != info.dtype:
        return False
    if all(u.meta.get("kp_constant") is not None for u in node.users) and state["output"] not in node.users:
        return False
    with gm.graph.inserting_after(inputs[-1]):
        dtype = gm.graph.call_function(getattr, (inputs[0], "dtype"))
        device = gm.graph.call_function(getattr, (inputs[0], "device"))
    with gm.graph.inserting_before(node):
        fill = torch.zeros if value == 0.0 else torch.ones
        fresh = gm.graph.call_function(fill, (tuple(info.shape),), {"dtype": dtype, "device": device})
    fresh.meta = {"tensor_meta": info}
    _replace(node, fresh)
    return True


constant_results = Move("constant_results", (
    Rule("a - a -> zeros, softmax over a size-1 dim -> ones, log_softmax there -> zeros, f(zeros) -> zeros for "
         "f(0) = 0", Pattern(), _fresh_constant),
), prepare=_mark_constants)


# -- constant folding ----------------------------------------------------------------------------------
def foldable_nodes(gm: fx.GraphModule) -> list[fx.Node]:
    """Compute nodes whose inputs are only parameters, buffers and constants (no random ops, no modules)."""
    constant: set[fx.Node] = set()
    for node in gm.graph.nodes:
        if node.op == "get_attr":
            constant.add(node)
        elif node.op in ("call_function", "call_method") and node.target not in RANDOM_OPS:
            inputs = node.all_input_nodes
            if inputs and all(i in constant for i in inputs):
                constant.add(node)
    return [n for n in gm.graph.nodes if n in constant and n.op != "get_attr"]


def fold_boundary(gm: fx.GraphModule, nodes: list[fx.Node]) -> list[fx.Node]:
    """The folded nodes whose values the rest of the graph uses."""
    chosen = set(nodes)
    return [n for n in nodes if any(u not in chosen for u in n.users)]


# the algebraic moves by name (the weight folds: weights; library calls: library; reductions over weights: reduce)
ALGEBRAIC = {
    "simplify_identities": simplify_identities,
    "simplify_size1_reductions": simplify_size1_reductions,
    "simplify_double_ops": simplify_double_ops,
    "combine_scalar_ops": combine_scalar_ops,
    "pool_before_activation": pool_before_activation,
    "constant_results": constant_results,
}
