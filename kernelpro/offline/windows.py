"""Max-pools read in place by a generated pointwise kernel.

A max-pool whose result feeds only a pointwise chain joins that chain's kernel as a
*window input*: the kernel runs over the pooled shape, and each element loads its window
of the pool's input (the convolution output, say) and takes the maximum, before the
chain's ops. The pooled tensor is never written and read back, and the pool is no
kernel of its own. Windows follow torch's max_pool semantics: padding is -inf, a NaN
in a window wins, dilation and ceil_mode are honoured (partial windows are
bounds-checked; taps that can never leave the input are not).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import torch
import torch.fx as fx
import torch.nn.functional as F

_MODULES = (torch.nn.MaxPool1d, torch.nn.MaxPool2d, torch.nn.MaxPool3d)
_FUNCTIONS = {F.max_pool1d: 1, F.max_pool2d: 2, F.max_pool3d: 3, torch.max_pool1d: 1, torch.max_pool2d: 2,
              torch.max_pool3d: 3}
_PARAMS = ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices")


@dataclass(frozen=True)
class Window:
    op: str  # "max_pool2d"
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    spatial: tuple[int, ...]  # the group's logical dims the window slides along
    extent: tuple[int, ...]  # the input's size along them
    pooled: tuple[int, ...]  # the output's size along them
    strides: tuple[int, ...]  # the input's element stride along each logical dim of the group

    def corner(self) -> list[int]:
        """Strides of the window's first tap per logical dim (a pooled step moves `stride` input rows)."""
        steps = dict(zip(self.spatial, self.stride))
        return [s * steps.get(d, 1) for d, s in enumerate(self.strides)]

    def over(self, order: tuple[int, ...], shape: tuple[int, ...]) -> Window:
        """The same window for a group whose logical dims are `order` of these, reading an input of
        `shape` (in that order) from contiguous memory."""
        spatial = tuple(order.index(d) for d in self.spatial)
        if list(spatial) != sorted(spatial):
            raise ValueError("a permutation that reorders the spatial dims")
        return replace(self, spatial=spatial, strides=contiguous_strides(shape))

    def describe(self) -> str:
        text = f"{self.op} window {'x'.join(map(str, self.kernel))}, stride {'x'.join(map(str, self.stride))}"
        if any(self.padding):
            text += f", padding {'x'.join(map(str, self.padding))}"
        if any(d != 1 for d in self.dilation):
            text += f", dilation {'x'.join(map(str, self.dilation))}"
        return text


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))


def _tuple(value, rank: int) -> tuple[int, ...] | None:
    if isinstance(value, int):
        return (value,) * rank
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value) * rank if len(value) == 1 else tuple(value) if len(value) == rank else None
    return None


def pool_args(gm: fx.GraphModule, node: fx.Node) -> tuple[int, dict] | None:
    """(spatial rank, bound arguments) of a max-pool that returns its values alone; None otherwise."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if not isinstance(module, _MODULES) or len(node.args) != 1 or node.kwargs:
            return None
        rank = _MODULES.index(type(module)) + 1
        bound = {name: getattr(module, name) for name in _PARAMS[1:]}
        bound["input"] = node.args[0]
    elif node.op == "call_function" and node.target in _FUNCTIONS:
        rank = _FUNCTIONS[node.target]
        bound = {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "return_indices": False}
        bound.update(zip(_PARAMS, node.args))
        if any(k not in _PARAMS for k in node.kwargs):
            return None
        bound.update(node.kwargs)
    else:
        return None
    if bound.get("return_indices") or "kernel_size" not in bound or not isinstance(bound["input"], fx.Node):
        return None
    if bound["stride"] in (None, [], ()):
        bound["stride"] = bound["kernel_size"]
    return rank, bound


def window_of(gm: fx.GraphModule, node: fx.Node, logical: tuple[int, ...],
              input_shape: tuple[int, ...] | None) -> Window | None:
    """The window a max-pool node reads, for a group over `logical` (the pool's output shape)."""
    found = pool_args(gm, node)
    if found is None or input_shape is None:
        return None
    rank, bound = found
    params = [_tuple(bound[name], rank) for name in ("kernel_size", "stride", "padding", "dilation")]
    if any(p is None for p in params) or len(input_shape) != len(logical) or len(logical) < rank + 1:
        return None
    kernel, stride, padding, dilation = params
    spatial = tuple(range(len(logical) - rank, len(logical)))
    if any(input_shape[d] != logical[d] for d in range(len(logical)) if d not in spatial):
        return None
    return Window(f"max_pool{rank}d", kernel, stride, padding, dilation, spatial,
                  tuple(input_shape[d] for d in spatial), tuple(logical[d] for d in spatial),
                  contiguous_strides(input_shape))


# -- code ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Syntax:
    """How the loads are written: Triton (a block of lanes) or C (one element per thread)."""
    declare: str  # an integer variable
    start: str  # the running maximum's first value
    load: str  # one tap's value: {ptr}, {offset}, {mask} (a C load runs only where {mask} holds)
    plain: str  # one tap's value where no lane can be out of bounds
    take: str  # the running maximum takes the tap: {acc}, {tap}
    both: str  # two conditions
    integer: str = ""


TRITON = Syntax(declare="{name} = {expr}", start='{acc} = tl.full([BLOCK], float("-inf"), tl.float32)',
                load='{tap} = tl.load({ptr} + {offset}, mask={mask}, other=float("-inf")).to(tl.float32)',
                plain="{tap} = tl.load({ptr} + {offset}).to(tl.float32)",
                take="{acc} = tl.where(({tap} > {acc}) | ({tap} != {tap}), {tap}, {acc})", both="({a}) & ({b})")
C = Syntax(declare="const long long {name} = {expr};", start="float {acc} = -INFINITY;",
           load="const float {tap} = ({mask}) ? __ldg({ptr} + {offset}) : -INFINITY;",
           plain="const float {tap} = __ldg({ptr} + {offset});",
           take="{acc} = ({tap} > {acc} || {tap} != {tap}) ? {tap} : {acc};", both="({a}) && ({b})",
           integer="LL")


def load_lines(var: str, window: Window, corner: str, index: dict[int, str | None], mask: str,
               syntax: Syntax) -> list[str]:
    """Lines that leave the window's maximum in `var`: `corner` is the offset of the unpadded first tap,
    `index` names the pooled index along each spatial dim (None where that dim has one element), `mask`
    says which lanes are live ("" where all are)."""
    taps_lines, used = [], set()
    shift = sum(window.padding[k] * window.strides[d] for k, d in enumerate(window.spatial))
    # along a dim of one pooled element, the first tap's row is known: taps outside the input are dropped
    fixed = {k: -window.padding[k] for k, d in enumerate(window.spatial) if index.get(d) is None}
    for number, taps in enumerate(itertools.product(*(range(k) for k in window.kernel))):
        if any(not 0 <= fixed[k] + tap * window.dilation[k] < window.extent[k] for k, tap in enumerate(taps)
               if k in fixed):
            continue
        checks = [mask] if mask else []
        for k, tap in enumerate(taps):
            at = tap * window.dilation[k]
            if k in fixed:
                continue
            if at < window.padding[k]:  # may start in the padding before the input
                checks.append(f"{var}_s{k} + {at} >= 0" if at else f"{var}_s{k} >= 0")
                used.add(k)
            if (window.pooled[k] - 1) * window.stride[k] - window.padding[k] + at >= window.extent[k]:
                # may run past the input's end (padding, ceil_mode)
                checks.append(f"{var}_s{k} + {at} < {window.extent[k]}" if at else f"{var}_s{k} < {window.extent[k]}")
                used.add(k)
        condition = checks[0] if checks else ""
        for check in checks[1:]:
            condition = syntax.both.format(a=condition, b=check)
        offset = sum(tap * window.dilation[k] * window.strides[d] for k, (tap, d) in
                     enumerate(zip(taps, window.spatial))) - shift
        at = f"{corner} + {offset}{syntax.integer}" if offset > 0 else \
            f"{corner} - {-offset}{syntax.integer}" if offset < 0 else corner
        tap_var = f"{var}_t{number}"
        taps_lines.append((syntax.load if condition else syntax.plain).format(tap=tap_var, ptr=f"{var}_ptr",
                                                                            mask=condition, offset=at))
        taps_lines.append(syntax.take.format(acc=var, tap=tap_var))
    lines = []
    for k in sorted(used):  # the first tap's input row along a spatial dim whose taps are bounds-checked
        origin = f"{index[window.spatial[k]]} * {window.stride[k]}{syntax.integer}"
        if window.padding[k]:
            origin = f"{origin} - {window.padding[k]}{syntax.integer}"
        lines.append(syntax.declare.format(name=f"{var}_s{k}", expr=origin))
    return lines + [syntax.start.format(acc=var)] + taps_lines
