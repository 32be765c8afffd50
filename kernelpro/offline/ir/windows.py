"""Pools read in place by a generated pointwise kernel.

A max- or average-pool whose result feeds only a pointwise chain joins that chain's
kernel as a *window input*: the kernel runs over the pooled shape, and each element loads
its window of the pool's input (the convolution output, say) and reduces it, before the
chain's ops. The pooled tensor is never written and read back, and the pool is no kernel
of its own. Windows follow torch's semantics: a max-pool pads with -inf and lets a NaN in
a window win, with dilation; an average divides by the window's size within the padded
input (`count_include_pad`, the default) or within the input, or by `divisor_override`;
both honour ceil_mode. Partial windows are bounds-checked, taps that can never leave the
input are not, and taps known to lie outside are dropped. A window of up to `UNROLLED_TAPS`
taps is written out tap by tap; a larger one (two 3-D max-pools merged into one 6x6x6
window: 216 taps) is a loop over its taps, since Triton's compile time grows with every
load written out (15 s for that kernel unrolled on a 2-core box).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass, replace

import torch
import torch.fx as fx
import torch.nn.functional as F

_MODULES = {torch.nn.MaxPool1d: ("max", 1), torch.nn.MaxPool2d: ("max", 2), torch.nn.MaxPool3d: ("max", 3),
            torch.nn.AvgPool1d: ("avg", 1), torch.nn.AvgPool2d: ("avg", 2), torch.nn.AvgPool3d: ("avg", 3)}
_FUNCTIONS = {F.max_pool1d: ("max", 1), F.max_pool2d: ("max", 2), F.max_pool3d: ("max", 3),
              torch.max_pool1d: ("max", 1), torch.max_pool2d: ("max", 2), torch.max_pool3d: ("max", 3),
              F.avg_pool1d: ("avg", 1), F.avg_pool2d: ("avg", 2), F.avg_pool3d: ("avg", 3)}
_PARAMS = {"max": ("input", "kernel_size", "stride", "padding", "dilation", "ceil_mode", "return_indices"),
           "avg": ("input", "kernel_size", "stride", "padding", "ceil_mode", "count_include_pad",
                   "divisor_override")}
#: the most taps a window's loads are written out for; a larger window is a loop over its taps
UNROLLED_TAPS = 32
_DEFAULTS = {"stride": None, "padding": 0, "dilation": 1, "ceil_mode": False, "return_indices": False,
             "count_include_pad": True, "divisor_override": None}


@dataclass(frozen=True)
class Window:
    op: str  # "max_pool2d", "avg_pool2d", ...
    kernel: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    spatial: tuple[int, ...]  # the group's logical dims the window slides along
    extent: tuple[int, ...]  # the input's size along them
    pooled: tuple[int, ...]  # the output's size along them
    strides: tuple[int, ...]  # the input's element stride along each logical dim of the group
    count_include_pad: bool = True  # an average: divide by the taps within the padded input, not the input
    divisor: int | None = None  # an average: divisor_override

    @property
    def average(self) -> bool:
        return self.op.startswith("avg")

    @property
    def taps(self) -> int:
        """Loads per pooled element: one per position of the window."""
        return math.prod(self.kernel)

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
        if self.average and (self.divisor or not self.count_include_pad):
            text += f", divisor {self.divisor}" if self.divisor else ", padding not counted"
        return text


def contiguous_strides(shape: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(math.prod(shape[d + 1:]) for d in range(len(shape)))


def as_tuple(value, rank: int) -> tuple[int, ...] | None:
    if isinstance(value, int):
        return (value,) * rank
    if isinstance(value, (tuple, list)) and all(isinstance(v, int) for v in value):
        return tuple(value) * rank if len(value) == 1 else tuple(value) if len(value) == rank else None
    return None


def pool_args(gm: fx.GraphModule, node: fx.Node) -> tuple[str, int, dict] | None:
    """("max" or "avg", spatial rank, bound arguments) of a pool that returns its values alone; None
    otherwise."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        if type(module) not in _MODULES or len(node.args) != 1 or node.kwargs:
            return None
        kind, rank = _MODULES[type(module)]
        bound = {name: getattr(module, name, _DEFAULTS.get(name)) for name in _PARAMS[kind][1:]}
        bound["input"] = node.args[0]
    elif node.op == "call_function" and node.target in _FUNCTIONS:
        kind, rank = _FUNCTIONS[node.target]
        bound = {name: _DEFAULTS[name] for name in _PARAMS[kind][2:]}
        bound.update(zip(_PARAMS[kind], node.args))
        if any(k not in _PARAMS[kind] for k in node.kwargs):
            return None
        bound.update(node.kwargs)
    else:
        return None
    if bound.get("return_indices") or "kernel_size" not in bound or not isinstance(bound["input"], fx.Node):
        return None
    if bound["stride"] in (None, [], ()):
        bound["stride"] = bound["kernel_size"]
    return kind, rank, bound


def window_of(found: tuple[str, int, dict], logical: tuple[int, ...],
              input_shape: tuple[int, ...] | None) -> Window | None:
    """The window of a pool (`pool_args`' answer for its node), for a group over `logical` (the pool's
    output shape)."""
    if input_shape is None:
        return None
    kind, rank, bound = found
    params = [as_tuple(bound.get(name, 1), rank) for name in ("kernel_size", "stride", "padding", "dilation")]
    if any(p is None for p in params) or len(input_shape) != len(logical) or len(logical) < rank + 1:
        return None
    divisor = bound.get("divisor_override")
    if not isinstance(bound.get("count_include_pad", True), bool) or not (divisor is None or isinstance(divisor, int)):
        return None
    kernel, stride, padding, dilation = params
    spatial = tuple(range(len(logical) - rank, len(logical)))
    if any(input_shape[d] != logical[d] for d in range(len(logical)) if d not in spatial):
        return None
    return Window(f"{kind}_pool{rank}d", kernel, stride, padding, dilation, spatial,
                  tuple(input_shape[d] for d in spatial), tuple(logical[d] for d in spatial),
                  contiguous_strides(input_shape), bound.get("count_include_pad", True), divisor or None)


# -- code ------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Dialect:
    """How index arithmetic is written: Triton's Python (`codegen.triton`), or C (`codegen.cuda`)."""
    divide: str = "//"
    integer: str = ""  # suffix of an integer literal
    declare: str = "{name} = {expr}"


@dataclass(frozen=True)
class Syntax:
    """How a backend writes the loads (Triton: a block of lanes; C: one element per thread); its
    integer declarations and literals are its index `dialect`."""
    dialect: Dialect
    start: str  # the accumulator's first value: {acc}, {value}
    load: str  # one tap's value: {ptr}, {offset}, {mask}, {other} (a C load runs only where {mask} holds)
    plain: str  # one tap's value where no lane can be out of bounds
    take_max: str  # the running maximum takes the tap: {acc}, {tap}
    take_sum: str  # the running sum adds the tap
    both: str  # two conditions
    lowest: str  # -inf
    zero: str
    minimum: str  # of two integers
    maximum: str
    divide: str  # {acc} by an integer count computed per element
    divide_number: str  # {acc} by a count that every window has: {number}, a float literal
    loop: str  # a loop's first line: {i} from 0 up to {n}; its body is indented by four spaces
    end: str  # the line that closes a loop ("" where indentation alone does)


def _divisor(var: str, window: Window, fixed: dict[int, int], syntax: Syntax) -> tuple[list[str], set[int]]:
    """An average's divisor as (factors, dims whose first row it reads): per spatial dim, the taps within
    the padded input (count_include_pad) or within the input, a number where every window has the same."""
    if window.divisor:
        return [str(window.divisor)], set()
    factors, used, n = [], set(), syntax.dialect.integer
    for k, size in enumerate(window.kernel):
        limit = window.extent[k] + (window.padding[k] if window.count_include_pad else 0)
        clip_low = not window.count_include_pad and window.padding[k] > 0  # padding before the input: uncounted
        if k in fixed:
            start = fixed[k]
            factors.append(str(min(start + size, limit) - (max(start, 0) if clip_low else start)))
            continue
        clip_high = (window.pooled[k] - 1) * window.stride[k] - window.padding[k] + size > limit
        if not clip_high and not clip_low:
            factors.append(str(size))
            continue
        first = f"{var}_s{k}"
        high = syntax.minimum.format(a=f"{first} + {size}{n}", b=f"{limit}{n}") if clip_high else f"{first} + {size}{n}"
        low = syntax.maximum.format(a=first, b=f"0{n}") if clip_low else first
        factors.append(f"({high} - {low})")
        used.add(k)
    return factors, used


def load_lines(var: str, window: Window, corner: str, index: dict[int, str | None], mask: str,
               syntax: Syntax) -> list[str]:
    """Lines that leave the window's maximum or average in `var`: `corner` is the offset of the unpadded
    first tap, `index` names the pooled index along each spatial dim (None where that dim has one
    element), `mask` says which lanes are live ("" where all are)."""
    # along a dim of one pooled element, the first tap's row is known: taps outside the input are dropped
    fixed = {k: -window.padding[k] for k, d in enumerate(window.spatial) if index.get(d) is None}
    shift = sum(window.padding[k] * window.strides[d] for k, d in enumerate(window.spatial))
    write = _tap_loop if window.taps > UNROLLED_TAPS else _taps_written_out
    taps_lines, used = write(var, window, corner, fixed, shift, mask, syntax)
    if window.average:
        factors, counted = _divisor(var, window, fixed, syntax)
        used |= counted
        number = math.prod(int(f) for f in factors if f.isdigit())
        counts = [f for f in factors if not f.isdigit()]
        if counts:
            taps_lines.append(syntax.divide.format(acc=var, count=" * ".join(counts + ([str(number)] if number != 1
                                                                                      else []))))
        elif number != 1:
            taps_lines.append(syntax.divide_number.format(acc=var, number=repr(float(number))))
    lines = []
    for k in sorted(used):  # the first tap's input row along a spatial dim whose taps are bounds-checked
        origin = f"{index[window.spatial[k]]} * {window.stride[k]}{syntax.dialect.integer}"
        if window.padding[k]:
            origin = f"{origin} - {window.padding[k]}{syntax.dialect.integer}"
        lines.append(syntax.dialect.declare.format(name=f"{var}_s{k}", expr=origin))
    return lines + [syntax.start.format(acc=var, value=_identity(window, syntax))] + taps_lines


def _identity(window: Window, syntax: Syntax) -> str:
    """The accumulator's first value, and a masked-off tap's: 0 for an average, -inf for a maximum."""
    return syntax.zero if window.average else syntax.lowest


def _inside(window: Window, fixed: dict[int, int], k: int, tap: int) -> bool:
    """Whether tap `tap` along spatial dim `k` can lie inside the input: always, unless the dim has one pooled
    element (`fixed`: its first row), whose taps are known."""
    return k not in fixed or 0 <= fixed[k] + tap * window.dilation[k] < window.extent[k]


def _may_start_before(window: Window, k: int, at: int) -> bool:
    """Whether a tap `at` rows into the window along spatial dim `k` may lie in the padding before the input."""
    return at < window.padding[k]


def _may_run_past(window: Window, k: int, at: int) -> bool:
    """Whether a tap `at` rows into the window along `k` may lie past the input's end (padding, ceil_mode)."""
    return (window.pooled[k] - 1) * window.stride[k] - window.padding[k] + at >= window.extent[k]


def _all_of(checks: list[str], syntax: Syntax) -> str:
    condition = checks[0] if checks else ""
    for check in checks[1:]:
        condition = syntax.both.format(a=condition, b=check)
    return condition


def _at(corner: str, offset: str | int, syntax: Syntax) -> str:
    if isinstance(offset, str):
        return f"{corner} + {offset}"
    n = syntax.dialect.integer
    return f"{corner} + {offset}{n}" if offset > 0 else f"{corner} - {-offset}{n}" if offset < 0 else corner


def _take(var: str, tap: str, window: Window, at: str, condition: str, syntax: Syntax) -> list[str]:
    """The lines that load one tap (at offset `at`, where `condition` holds, if any) and fold it into `var`."""
    load = syntax.load if condition else syntax.plain
    return [load.format(tap=tap, ptr=f"{var}_ptr", mask=condition, offset=at, other=_identity(window, syntax)),
            (syntax.take_sum if window.average else syntax.take_max).format(acc=var, tap=tap)]


def _taps_written_out(var: str, window: Window, corner: str, fixed: dict[int, int], shift: int, mask: str,
                      syntax: Syntax) -> tuple[list[str], set[int]]:
    """One load per tap, each with only the bounds checks its position can need."""
    lines, used = [], set()
    for number, taps in enumerate(itertools.product(*(range(k) for k in window.kernel))):
        if not all(_inside(window, fixed, k, tap) for k, tap in enumerate(taps)):
            continue
        checks = [mask] if mask else []
        for k, tap in enumerate(taps):
            at = tap * window.dilation[k]
            if k in fixed:
                continue
            if _may_start_before(window, k, at):
                checks.append(f"{var}_s{k} + {at} >= 0" if at else f"{var}_s{k} >= 0")
                used.add(k)
            if _may_run_past(window, k, at):
                checks.append(f"{var}_s{k} + {at} < {window.extent[k]}" if at else f"{var}_s{k} < {window.extent[k]}")
                used.add(k)
        condition = _all_of(checks, syntax)
        offset = sum(tap * window.dilation[k] * window.strides[d] for k, (tap, d) in
                     enumerate(zip(taps, window.spatial))) - shift
        lines += _take(var, f"{var}_t{number}", window, _at(corner, offset, syntax), condition, syntax)
    return lines, used


def _tap_loop(var: str, window: Window, corner: str, fixed: dict[int, int], shift: int, mask: str,
              syntax: Syntax) -> tuple[list[str], set[int]]:
    """One loop over the window's taps (along a dim of one pooled element, only over those inside the input),
    each tap's row along every spatial dim unravelled from the loop's counter, bounds-checked along the dims
    where some tap can leave the input."""
    n, divide, declare = syntax.dialect.integer, syntax.dialect.divide, syntax.dialect.declare
    spans = []  # per spatial dim: (first tap, taps looped over)
    for k, size in enumerate(window.kernel):
        inside = [tap for tap in range(size) if _inside(window, fixed, k, tap)]
        spans.append((inside[0], inside[-1] - inside[0] + 1) if inside else (0, 0))
    count = math.prod(span for _, span in spans)
    if count == 0:  # every tap outside the input: the window's value is where it starts
        return [], set()
    counter, body, used, checks, offsets = f"{var}_n", [], set(), [mask] if mask else [], []
    for k, (first, span) in enumerate(spans):
        inner = math.prod(s for _, s in spans[k + 1:])
        row = counter if inner == 1 else f"({counter} {divide} {inner}{n})"
        if k:
            row = f"{row} % {span}{n}"
        if first:
            row = f"{first}{n} + {row}"
        body.append(declare.format(name=f"{var}_k{k}", expr=row if span > 1 else f"{first}{n}"))
        at = f"{var}_k{k} * {window.dilation[k]}{n}" if window.dilation[k] != 1 else f"{var}_k{k}"
        stride = window.strides[window.spatial[k]]
        offsets.append(at if stride == 1 else f"{at} * {stride}{n}")
        if k in fixed:
            continue
        last = (first + span - 1) * window.dilation[k]
        if _may_start_before(window, k, first * window.dilation[k]):
            checks.append(f"{var}_s{k} + {at} >= 0")
            used.add(k)
        if _may_run_past(window, k, last):
            checks.append(f"{var}_s{k} + {at} < {window.extent[k]}{n}")
            used.add(k)
    condition = _all_of(checks, syntax)
    offset = " + ".join(offsets) + (f" - {shift}{n}" if shift else "")
    body += _take(var, f"{var}_t", window, _at(corner, offset, syntax), condition, syntax)
    lines = [syntax.loop.format(i=counter, n=count)] + ["    " + line for line in body]
    return lines + ([syntax.end] if syntax.end else []), used
