"""What the kernel generator knows about PyTorch ops: pointwise math and row operations.

`resolve(gm, node)` names a traced node's operation and binds its arguments
(functions, methods and modules alike). Pointwise ops map to one Triton
expression over float32 values (`POINTWISE`); row operations (reductions,
softmax, normalizations) expand into reductions and pointwise steps in
`kernelpro.offline.fuse.partition`. Every expression computes in float32, whatever the
tensors' dtype; stores cast back.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import torch
import torch.fx as fx
import torch.nn as nn
import torch.nn.functional as F

#: The module name of the functions a candidate defines itself (generated kernels' calls, the batch-norm update):
#: torch.fx keeps such a call in the graph, and the candidate's source defines it rather than importing it.
GENERATED_MODULE = "__kp_generated__"

#: the convolution modules and functions by their spatial rank, plain and transposed: every stage that recognises
#: or writes one reads these (torch.conv1d and F.conv1d are one object, as are the others)
CONV_MODULES: dict[type, int] = {nn.Conv1d: 1, nn.Conv2d: 2, nn.Conv3d: 3}
TRANSPOSED_CONV_MODULES: dict[type, int] = {nn.ConvTranspose1d: 1, nn.ConvTranspose2d: 2, nn.ConvTranspose3d: 3}
CONV_FUNCTIONS: dict = {F.conv1d: 1, F.conv2d: 2, F.conv3d: 3}
TRANSPOSED_CONV_FUNCTIONS: dict = {F.conv_transpose1d: 1, F.conv_transpose2d: 2, F.conv_transpose3d: 3}

Operand = str | float | int | bool | None  # an expression (a value's name) or a Python constant


def lit(value: Operand) -> str:
    """A constant or a value's name as Triton source."""
    if isinstance(value, bool):
        return "1.0" if value else "0.0"
    if isinstance(value, (int, float)):
        number = float(value)
        if math.isnan(number):
            return 'float("nan")'
        if math.isinf(number):
            return 'float("inf")' if number > 0 else 'float("-inf")'
        return repr(number)
    return str(value)


def _pow(a: Operand, p: Operand) -> str:
    if isinstance(a, (int, float)) and not isinstance(p, (int, float)):  # c ** x
        if a <= 0:
            raise Unsupported("a non-positive base to a tensor power")
        return f"tl.exp2({p} * {math.log2(a)!r})"
    if not isinstance(p, (int, float)):
        raise Unsupported("a tensor exponent")
    if p == int(p) and 0 <= p <= 4:
        return "(" + " * ".join([a] * int(p)) + ")" if p else "1.0"
    if p == -1:
        return f"(1.0 / {a})"
    if p == 0.5:
        return f"tl.sqrt({a})"
    if p == -0.5:
        return f"tl.rsqrt({a})"
    return f"tl.exp2({lit(p)} * tl.log2({a}))"  # NaN for a negative base, as torch gives


def _clamp(x, low, high) -> str:
    """Bounds by constants, written as selects so that a NaN passes through as in torch (tl.maximum and
    fmaxf would return the bound)."""
    if low is not None and high is not None:
        if not (isinstance(low, (int, float)) and isinstance(high, (int, float))):  # torch: min(max(x, low), high)
            return _clamp(_clamp(x, low, None), None, high)
        if low > high:
            return f"tl.where({x} != {x}, {x}, {lit(high)})"  # torch: every number becomes max
        return f"tl.where({x} < {lit(low)}, {lit(low)}, tl.where({x} > {lit(high)}, {lit(high)}, {x}))"
    if low is not None:
        return f"tl.where({x} < {lit(low)}, {lit(low)}, {x})"
    return x if high is None else f"tl.where({x} > {lit(high)}, {lit(high)}, {x})"


def _extreme(a, b, larger: bool) -> str:
    """torch.maximum/minimum: a NaN in either operand gives NaN."""
    a, b = lit(a), lit(b)
    return f"tl.where({a} != {a}, {a}, tl.where({a} {'>' if larger else '<'} {b}, {a}, {b}))"


def _gelu(x, approximate="none") -> str:
    if approximate == "tanh":
        return f"(0.5 * {x} * (1.0 + _kp_tanh(0.7978845608028654 * ({x} + 0.044715 * {x} * {x} * {x}))))"
    return f"(0.5 * {x} * (1.0 + tl.erf({x} * 0.7071067811865476)))"


def _softplus(x, beta=1.0, threshold=20.0) -> str:
    scaled = f"({x} * {lit(beta)})"
    return f"tl.where({scaled} > {lit(threshold)}, {x}, tl.log(1.0 + tl.exp({scaled})) / {lit(beta)})"


def _elu(x, alpha=1.0, scale=1.0) -> str:
    body = f"tl.where({x} > 0, {x}, {lit(alpha)} * (tl.exp({x}) - 1.0))"
    return body if scale == 1.0 else f"({lit(scale)} * {body})"


def _div(a, b, rounding_mode=None) -> str:
    if rounding_mode is not None:
        raise Unsupported(f"division with rounding_mode={rounding_mode!r}")
    return f"({lit(a)} / {lit(b)})"


def _to(x, *args, **kwargs) -> str:
    dtypes = [a for a in list(args) + list(kwargs.values()) if isinstance(a, torch.dtype)]
    if any(d != torch.float32 for d in dtypes):
        raise Unsupported("a cast to a dtype other than float32")
    return x


SELU_ALPHA, SELU_SCALE = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946


@dataclass(frozen=True)
class Pointwise:
    params: tuple[str, ...]  # parameter names in order; the rest of the signature is ignored
    defaults: dict
    emit: object  # (*operands) -> expression


def _pw(params: str, emit, **defaults) -> Pointwise:
    return Pointwise(tuple(params.split()), defaults, emit)


POINTWISE: dict[str, Pointwise] = {
    "add": _pw("input other alpha", lambda a, b, alpha=1: f"({lit(a)} + {lit(b)})" if alpha == 1
               else f"({lit(a)} + {lit(b)} * {lit(alpha)})", alpha=1),
    "sub": _pw("input other alpha", lambda a, b, alpha=1: f"({lit(a)} - {lit(b)})" if alpha == 1
               else f"({lit(a)} - {lit(b)} * {lit(alpha)})", alpha=1),
    "rsub": _pw("input other alpha", lambda a, b, alpha=1: f"({lit(b)} - {lit(a)} * {lit(alpha)})", alpha=1),
    "mul": _pw("input other", lambda a, b: f"({lit(a)} * {lit(b)})"),
    "div": _pw("input other rounding_mode", _div, rounding_mode=None),
    "neg": _pw("input", lambda a: f"(-{a})"),
    "abs": _pw("input", lambda a: f"tl.abs({a})"),
    "exp": _pw("input", lambda a: f"tl.exp({a})"),
    "exp2": _pw("input", lambda a: f"tl.exp2({a})"),
    "expm1": _pw("input", lambda a: f"(tl.exp({a}) - 1.0)"),
    "log": _pw("input", lambda a: f"tl.log({a})"),
    "log2": _pw("input", lambda a: f"tl.log2({a})"),
    "log1p": _pw("input", lambda a: f"tl.log(1.0 + {a})"),
    "sqrt": _pw("input", lambda a: f"tl.sqrt({a})"),
    "rsqrt": _pw("input", lambda a: f"tl.rsqrt({a})"),
    "reciprocal": _pw("input", lambda a: f"(1.0 / {a})"),
    "square": _pw("input", lambda a: f"({a} * {a})"),
    "sin": _pw("input", lambda a: f"tl.sin({a})"),
    "cos": _pw("input", lambda a: f"tl.cos({a})"),
    "floor": _pw("input", lambda a: f"tl.floor({a})"),
    "ceil": _pw("input", lambda a: f"tl.ceil({a})"),
    "sign": _pw("input", lambda a: f"(({a} > 0).to(tl.float32) - ({a} < 0).to(tl.float32))"),
    "pow": _pw("input exponent", _pow),
    "sigmoid": _pw("input", lambda a: f"tl.sigmoid({a})"),
    "tanh": _pw("input", lambda a: f"_kp_tanh({a})"),
    "erf": _pw("input", lambda a: f"tl.erf({a})"),
    "relu": _pw("input", lambda a: _clamp(a, 0.0, None)),
    "relu6": _pw("input", lambda a: _clamp(a, 0.0, 6.0)),
    "leaky_relu": _pw("input negative_slope", lambda a, s=0.01: f"tl.where({a} > 0, {a}, {a} * {lit(s)})",
                      negative_slope=0.01),
    "gelu": _pw("input approximate", _gelu, approximate="none"),
    "silu": _pw("input", lambda a: f"({a} * tl.sigmoid({a}))"),
    "mish": _pw("input", lambda a: f"({a} * _kp_tanh({_softplus(a)}))"),
    "softplus": _pw("input beta threshold", _softplus, beta=1.0, threshold=20.0),
    "hardtanh": _pw("input min_val max_val", _clamp, min_val=-1.0, max_val=1.0),
    "hardswish": _pw("input", lambda a: f"({a} * {_clamp(f'({a} + 3.0)', 0.0, 6.0)} / 6.0)"),
    "hardsigmoid": _pw("input", lambda a: _clamp(f"({a} / 6.0 + 0.5)", 0.0, 1.0)),
    "elu": _pw("input alpha", _elu, alpha=1.0),
    "selu": _pw("input", lambda a: _elu(a, SELU_ALPHA, SELU_SCALE)),
    "celu": _pw("input alpha", lambda a, alpha=1.0: f"tl.where({a} > 0, {a}, {lit(alpha)} * "
                f"(tl.exp({a} / {lit(alpha)}) - 1.0))", alpha=1.0),
    "softsign": _pw("input", lambda a: f"({a} / (1.0 + tl.abs({a})))"),
    "clamp": _pw("input min max", _clamp, min=None, max=None),
    "clamp_min": _pw("input min", lambda a, low: _clamp(a, low, None)),
    "clamp_max": _pw("input max", lambda a, high: _clamp(a, None, high)),
    "maximum": _pw("input other", lambda a, b: _extreme(a, b, True)),
    "minimum": _pw("input other", lambda a, b: _extreme(a, b, False)),
    "where": _pw("condition input other", lambda c, a, b: f"tl.where({lit(c)} != 0, {lit(a)}, {lit(b)})"),
    "masked_fill": _pw("input mask value", lambda a, m, v: f"tl.where({lit(m)} != 0, {lit(v)}, {lit(a)})"),
    "gt": _pw("input other", lambda a, b: f"({lit(a)} > {lit(b)}).to(tl.float32)"),
    "lt": _pw("input other", lambda a, b: f"({lit(a)} < {lit(b)}).to(tl.float32)"),
    "ge": _pw("input other", lambda a, b: f"({lit(a)} >= {lit(b)}).to(tl.float32)"),
    "le": _pw("input other", lambda a, b: f"({lit(a)} <= {lit(b)}).to(tl.float32)"),
    "eq": _pw("input other", lambda a, b: f"({lit(a)} == {lit(b)}).to(tl.float32)"),
    "ne": _pw("input other", lambda a, b: f"({lit(a)} != {lit(b)}).to(tl.float32)"),
    "identity": _pw("input", lambda a: a),
}

_FUNCTIONS = {
    operator.add: "add", torch.add: "add", operator.sub: "sub", torch.sub: "sub", torch.rsub: "rsub",
    operator.mul: "mul", torch.mul: "mul", operator.truediv: "div", torch.div: "div", torch.true_divide: "div",
    operator.neg: "neg", torch.neg: "neg", torch.abs: "abs", operator.abs: "abs", torch.exp: "exp",
    torch.exp2: "exp2", torch.expm1: "expm1", torch.log: "log", torch.log2: "log2", torch.log1p: "log1p",
    torch.sqrt: "sqrt", torch.rsqrt: "rsqrt", torch.reciprocal: "reciprocal", torch.square: "square",
    torch.sin: "sin", torch.cos: "cos", torch.floor: "floor", torch.ceil: "ceil", torch.sign: "sign",
    torch.pow: "pow", operator.pow: "pow", torch.sigmoid: "sigmoid", F.sigmoid: "sigmoid", torch.tanh: "tanh",
    F.tanh: "tanh", torch.erf: "erf", torch.relu: "relu", F.relu: "relu", F.relu6: "relu6",
    F.leaky_relu: "leaky_relu", F.gelu: "gelu", F.silu: "silu", F.mish: "mish", F.softplus: "softplus",
    F.hardtanh: "hardtanh", F.hardswish: "hardswish", F.hardsigmoid: "hardsigmoid", F.elu: "elu", F.selu: "selu",
    torch.selu: "selu", F.celu: "celu", F.softsign: "softsign", torch.clamp: "clamp", torch.clip: "clamp",
    torch.clamp_min: "clamp_min", torch.clamp_max: "clamp_max", torch.maximum: "maximum",
    torch.minimum: "minimum", torch.where: "where", torch.masked_fill: "masked_fill", torch.gt: "gt", operator.gt: "gt", torch.lt: "lt",
    operator.lt: "lt", torch.ge: "ge", operator.ge: "ge", torch.le: "le", operator.le: "le", torch.eq: "eq",
    torch.ne: "ne", torch.clone: "identity", torch.detach: "identity",
}
_METHODS = {name: name for name in POINTWISE if name not in ("identity", "rsub")}
# clone and detach copy a value (forward runs under no_grad): inside a kernel, whose outputs are fresh
# tensors, they are the value itself.
_METHODS.update({"clip": "clamp", "true_divide": "div", "float": "identity", "contiguous": "identity",
                 "clone": "identity", "detach": "identity",
                 "relu_": "relu", "sigmoid_": "sigmoid", "tanh_": "tanh", "clamp_": "clamp", "mul_": "mul",
                 "add_": "add", "sub_": "sub", "div_": "div", "neg_": "neg", "abs_": "abs", "exp_": "exp"})
INPLACE_METHODS = {name for name in _METHODS if name.endswith("_")}  # they mutate their first argument
_MODULES: dict[type, tuple[str, dict]] = {
    nn.ReLU: ("relu", {}), nn.ReLU6: ("relu6", {}), nn.Sigmoid: ("sigmoid", {}), nn.Tanh: ("tanh", {}),
    nn.SiLU: ("silu", {}), nn.Mish: ("mish", {}), nn.Hardswish: ("hardswish", {}),
    nn.Hardsigmoid: ("hardsigmoid", {}), nn.SELU: ("selu", {}), nn.Softsign: ("softsign", {}),
    nn.Identity: ("identity", {}),
    nn.LeakyReLU: ("leaky_relu", {"negative_slope": "negative_slope"}),
    nn.GELU: ("gelu", {"approximate": "approximate"}),
    nn.Softplus: ("softplus", {"beta": "beta", "threshold": "threshold"}),
    nn.Hardtanh: ("hardtanh", {"min_val": "min_val", "max_val": "max_val"}),
    nn.ELU: ("elu", {"alpha": "alpha"}), nn.CELU: ("celu", {"alpha": "alpha"}),
}
#: Row operations: reductions along dimensions, softmax, and the normalizations.
ROW_FUNCTIONS = {
    torch.sum: "sum", torch.mean: "mean", torch.amax: "amax", torch.amin: "amin", torch.max: "max",
    torch.min: "min", torch.var: "var", torch.std: "std", torch.logsumexp: "logsumexp", torch.argmax: "argmax",
    torch.argmin: "argmin", torch.softmax: "softmax", F.softmax: "softmax", torch.log_softmax: "log_softmax",
    F.log_softmax: "log_softmax", F.layer_norm: "layer_norm", F.group_norm: "group_norm",
    F.instance_norm: "instance_norm", F.batch_norm: "batch_norm", F.normalize: "normalize",
    torch.norm: "norm", torch.linalg.vector_norm: "vector_norm",
}
ROW_METHODS = {"sum", "mean", "amax", "amin", "max", "min", "var", "std", "logsumexp", "argmax", "argmin",
               "softmax", "log_softmax", "norm"}
_ROW_PARAMS = {
    "sum": "input dim keepdim", "mean": "input dim keepdim", "amax": "input dim keepdim",
    "amin": "input dim keepdim", "max": "input dim keepdim", "min": "input dim keepdim",
    "var": "input dim unbiased keepdim correction", "std": "input dim unbiased keepdim correction",
    "logsumexp": "input dim keepdim", "argmax": "input dim keepdim", "argmin": "input dim keepdim",
    "softmax": "input dim", "log_softmax": "input dim",
    "layer_norm": "input normalized_shape weight bias eps",
    "group_norm": "input num_groups weight bias eps",
    "instance_norm": "input running_mean running_var weight bias use_input_stats momentum eps",
    "batch_norm": "input running_mean running_var weight bias training momentum eps",
    "normalize": "input p dim eps",
    "norm": "input p dim keepdim", "vector_norm": "input ord dim keepdim",
}
_ROW_DEFAULTS = {"keepdim": False, "dim": None, "unbiased": None, "correction": None, "weight": None, "bias": None,
                 "eps": 1e-5, "running_mean": None, "running_var": None, "use_input_stats": True, "momentum": 0.1,
                 "training": False}
_ROW_OP_DEFAULTS = {"normalize": {"p": 2.0, "dim": 1, "eps": 1e-12}, "norm": {"p": "fro"}, "vector_norm": {"ord": 2}}


def _row_bind(op: str, args: tuple, kwargs: dict) -> dict:
    return _bind(tuple(_ROW_PARAMS[op].split()), {**_ROW_DEFAULTS, **_ROW_OP_DEFAULTS.get(op, {})}, args, kwargs)


class Unsupported(Exception):
    """The generator has no kernel for this op (or these arguments)."""


@dataclass
class Resolved:
    op: str
    args: dict  # parameter -> fx.Node | constant
    row: bool  # a row operation, not pointwise


def _bind(params: tuple[str, ...], defaults: dict, args: tuple, kwargs: dict) -> dict:
    bound = dict(defaults)
    for name, value in zip(params, args):
        bound[name] = value
    for name, value in kwargs.items():
        if name == "dtype" and value is not None:
            raise Unsupported("an explicit dtype")
        if name in params:
            bound[name] = value
        elif name not in ("inplace", "out", "dtype", "memory_format", "non_blocking", "copy", "_stacklevel"):
            raise Unsupported(f"argument {name}")
    missing = [p for p in params if p not in bound]
    if missing:
        raise Unsupported(f"missing {', '.join(missing)}")
    return bound


#: Adaptive pools, which are row operations when they pool to one element: spatial rank of each.
_ADAPTIVE = {F.adaptive_avg_pool1d: 1, torch.adaptive_avg_pool1d: 1, F.adaptive_avg_pool2d: 2,
             F.adaptive_avg_pool3d: 3}
_ADAPTIVE_MODULES = {nn.AdaptiveAvgPool1d: ("mean", 1), nn.AdaptiveAvgPool2d: ("mean", 2),
                     nn.AdaptiveAvgPool3d: ("mean", 3), nn.AdaptiveMaxPool1d: ("amax", 1),
                     nn.AdaptiveMaxPool2d: ("amax", 2), nn.AdaptiveMaxPool3d: ("amax", 3)}


def _global_pool(op: str, source, rank: int, output_size) -> Resolved | None:
    """An adaptive pool to one element per channel: the mean (or max) over its last `rank` dims, kept."""
    sizes = output_size if isinstance(output_size, (tuple, list)) else (output_size,)
    if not all(size == 1 for size in sizes) or len(sizes) not in (1, rank):
        return None
    return Resolved(op, {"input": source, "dim": tuple(range(-rank, 0)), "keepdim": True}, True)


def _module_op(gm: fx.GraphModule, node: fx.Node) -> Resolved | None:
    module = gm.get_submodule(node.target)
    if type(module) in _ADAPTIVE_MODULES and not getattr(module, "return_indices", False) and len(node.args) == 1:
        op, rank = _ADAPTIVE_MODULES[type(module)]
        return _global_pool(op, node.args[0], rank, module.output_size)
    for kind, (op, attrs) in _MODULES.items():
        if type(module) is kind:
            args = {"input": node.args[0], **{param: getattr(module, attr) for param, attr in attrs.items()}}
            return Resolved(op, args, False)
    if type(module) in (nn.Dropout, nn.Dropout1d, nn.Dropout2d) and (not module.training or module.p == 0):
        return Resolved("identity", {"input": node.args[0]}, False)
    if isinstance(module, (nn.Softmax, nn.LogSoftmax)):
        return Resolved("softmax" if isinstance(module, nn.Softmax) else "log_softmax",
                        {"input": node.args[0], "dim": module.dim}, True)
    prefix = node.target + "."
    param = (lambda name: Attr(prefix + name) if getattr(module, name, None) is not None else None)
    if isinstance(module, nn.LayerNorm):
        return Resolved("layer_norm", {"input": node.args[0], "normalized_shape": tuple(module.normalized_shape),
                                       "weight": param("weight"), "bias": param("bias"), "eps": module.eps}, True)
    if isinstance(module, nn.GroupNorm):
        return Resolved("group_norm", {"input": node.args[0], "num_groups": module.num_groups,
                                       "weight": param("weight"), "bias": param("bias"), "eps": module.eps}, True)
    if isinstance(module, nn.modules.instancenorm._InstanceNorm):
        use_input = module.training or not module.track_running_stats
        return Resolved("instance_norm", {"input": node.args[0], "running_mean": param("running_mean"),
                                          "running_var": param("running_var"), "weight": param("weight"),
                                          "bias": param("bias"), "use_input_stats": use_input,
                                          "momentum": module.momentum, "eps": module.eps}, True)
    if isinstance(module, nn.modules.batchnorm._BatchNorm):
        training = module.training or not module.track_running_stats
        return Resolved("batch_norm", {"input": node.args[0], "running_mean": param("running_mean"),
                                       "running_var": param("running_var"), "weight": param("weight"),
                                       "bias": param("bias"), "training": training, "momentum": module.momentum,
                                       "eps": module.eps}, True)
    return None


@dataclass(frozen=True)
class Attr:
    """A parameter or buffer of a submodule (becomes a get_attr node when the group is built)."""
    target: str


def attr_shape(gm: fx.GraphModule, attr: Attr) -> tuple[int, ...]:
    try:
        return tuple(gm.get_parameter(attr.target).shape)
    except AttributeError:
        return tuple(gm.get_buffer(attr.target).shape)


def resolve(gm: fx.GraphModule, node: fx.Node) -> Resolved | None:
    """The op a node performs, with bound arguments; None when the generator has no kernel for it."""
    try:
        if node.op == "call_module":
            return _module_op(gm, node)
        if node.op == "call_function":
            target = node.target
            if target in ROW_FUNCTIONS and not (target in (torch.max, torch.min) and len(node.args) > 1
                                                 and isinstance(node.args[1], fx.Node)):
                op = ROW_FUNCTIONS[target]
                return Resolved(op, _row_bind(op, node.args, node.kwargs), True)
            if target in _ADAPTIVE:
                bound = _bind(("input", "output_size"), {}, node.args, node.kwargs)
                return _global_pool("mean", bound["input"], _ADAPTIVE[target], bound["output_size"])
            if target in (torch.max, torch.min):  # binary max/min of two tensors
                return Resolved("maximum" if target is torch.max else "minimum",
                                _bind(("input", "other"), {}, node.args, node.kwargs), False)
            name = _FUNCTIONS.get(target)
        elif node.op == "call_method":
            if node.target in ROW_METHODS:
                op = node.target
                return Resolved(op, _row_bind(op, node.args, node.kwargs), True)
            if node.target == "to":
                _to(*node.args, **node.kwargs)
                return Resolved("identity", {"input": node.args[0]}, False)
            name = _METHODS.get(node.target)
        else:
            return None
        if name is None:
            return None
        spec = POINTWISE[name]
        return Resolved(name, _bind(spec.params, spec.defaults, node.args, node.kwargs), False)
    except (Unsupported, TypeError):
        return None


def emit_pointwise(op: str, operands: dict) -> str:
    """The op's expression; each emitter formats its own constants (with `lit`)."""
    spec = POINTWISE[op]
    return spec.emit(*(operands[p] for p in spec.params))
