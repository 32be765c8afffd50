"""Convolutions as implicit GEMMs in Triton, with the epilogue after them inside: the move `triton_conv`.

At bf16 or fp16 the tolerance is 1e-2 and a convolution of our own can take the epilogue in
registers. At fp32 the reference's convolutions run on TF32 tensor cores (cuDNN's choice), and a
kernel that rounds differently fails KernelBench's 1e-4 tolerance (docs/kernelbench.md). There the
kernel rounds both operands to TF32 to nearest as it loads them (`TF32_NEAREST`), so its products
are exact and only the order of the float32 sums differs from a cuDNN kernel that rounds them so;
whether cuDNN's do is measured on the reference (the variant `tf32_operands`), and the offline
coder offers the move at fp32 only where eager matched itself under it. Depthwise convolutions
stay cuDNN's at fp32 (the variant leaves them as they are).

`attach` finds the pointwise groups that are the epilogue of a zero-padded 1-D, 2-D or 3-D
convolution, forward or transposed (`nn.Conv*d`, `nn.ConvTranspose*d`, `F.conv*d`,
`F.conv_transpose*d`; any stride, padding, dilation, output padding and groups; every use of its
output inside the group) and marks them with a `Conv`; `render` writes one of two kernels:

- **implicit GEMM** (`tl.dot` on tensor cores, float32 accumulate): per group of channels, a
  [positions x (input channels x taps)] tile of the input, gathered through the convolution's
  index arithmetic (zero outside the padding), times the weight's [(input channels x taps) x
  output channels] tile. Rows are output positions (image, then each spatial index), columns
  output channels; a third grid axis walks the channel groups. A transposed convolution is
  split into sub-pixel phases (`phases`): output o reads input i at tap t where i * stride = o +
  padding - t * dilation, so the outputs of one residue of o modulo the stride read one fixed
  subset of the taps, at exact offsets; each phase is a dense implicit GEMM of its own (one
  launch each, its numbers as constexprs), and no tap between input elements is visited (the
  gradient form visited every tap and masked off all but 1/s^d of them at stride s).
- **depthwise** (each output channel reads one input channel: groups = input channels, fewer
  than 16 output channels per group): no product to tile, so a [positions x channels] tile
  accumulates tap by tap in float32.

Both add the bias and run the epilogue's steps (`gemm.epilogue`, with the channel as the
column) before one store per output. The input and weight are read contiguous (NCDHW).

Rounding follows eager's: eager rounds the convolution's result to bf16, then the biased result,
then each epilogue op's result, and a kernel that keeps float32 throughout is more accurate but
strays past the 1e-2 tolerance where the epilogue cancels (h - y near zero; measured on the H100:
1 element in 10^5). So the float32 values are rounded to the input's dtype at those same points
and the math between them stays float32, as each eager op computes it.
"""

from __future__ import annotations

import itertools
import math
import re
from dataclasses import dataclass

import torch.fx as fx

from kernelpro.offline.codegen import gemm
from kernelpro.offline.fuse.groups import Group, shape_of
from kernelpro.offline.ir.ops import (CONV_FUNCTIONS, CONV_MODULES, TRANSPOSED_CONV_FUNCTIONS,
                                      TRANSPOSED_CONV_MODULES, Attr, attr_shape)
from kernelpro.harness import variants
from kernelpro.harness.records import HALF_PRECISIONS
from kernelpro.launch.device import Device, wave_fill
from kernelpro.offline.codegen.common import describe_config, inputs_doc, next_pow2, tf32_rounded
from kernelpro.offline.codegen.wrapper import Wrapper, output_names, python_wrapper

HALF = HALF_PRECISIONS
#: operand elements of a tile (BLOCK_M + BLOCK_N) x BLOCK_K from which an fp32 implicit GEMM runs on 8 warps: with 4,
#: a 128 x 64 x 32 tile spilled registers for sm_90 (VGG16's 512-channel layers, level2/78 and 100's transposed 3-D
#: convolutions; `scripts/compile_for_gpu.py --static`), as the bf16 one does not
FP32_WIDE_TILE = 6144
#: Transposed convolutions are offered (at bf16/fp16, like the rest of the move) since the sub-pixel split:
#: on the H100 its kernels were correct on 4 of 5 KernelBench shapes, where the gradient-form gather before
#: it computed wrong values on level2/26; the fifth, level2/26, missed bf16's tolerance on a handful of
#: elements by rounding (accumulation order; the search judges every candidate). They mostly lose to cuDNN
#: (0.20x-0.93x; 1.03x on level2/100; docs/kernelbench.md). False leaves them cuDNN calls.
TRANSPOSED = True
ELEMENT_BYTES = {"bf16": 2, "fp16": 2, "fp32": 4}


@dataclass
class Conv:
    node: fx.Node  # the convolution
    x: object  # fx.Node [N, C, *spatial]
    weight: object  # fx.Node or Attr [C_out, C / groups, *kernel]
    bias: object | None
    var: str  # the epilogue's input that is the convolution's output
    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    stride: tuple[int, ...]
    padding: tuple[int, ...]
    dilation: tuple[int, ...]
    groups: int
    dtype: str = "bf16"
    backend: str = "conv"  # how the worker picks this module as the generator
    transposed: bool = False  # a transposed convolution: weight [C, C_out / groups, *kernel]

    def sources(self) -> list:
        return [self.x, self.weight] + ([self.bias] if self.bias is not None else [])

    @property
    def channels_per_group(self) -> int:
        return self.x_shape[1] // self.groups

    @property
    def out_per_group(self) -> int:
        return self.w_shape[1] if self.transposed else self.w_shape[0] // self.groups

    @property
    def channels_out(self) -> int:
        return self.out_shape[1]

    @property
    def label(self) -> str:
        """What the kernel computes, in words (comments and docstrings)."""
        conv = "transposed convolution" if self.transposed else "convolution"
        return f"depthwise {conv}" if self.depthwise else conv

    @property
    def taps(self) -> int:
        return math.prod(self.w_shape[2:])

    @property
    def m(self) -> int:  # output positions: images x output spatial size
        return self.out_shape[0] * math.prod(self.out_shape[2:])

    @property
    def k(self) -> int:  # the reduction of one output: input channels of its group x taps
        return self.channels_per_group * self.taps

    @property
    def depthwise(self) -> bool:
        return self.channels_per_group == 1 and self.out_per_group < gemm.MIN_SIZE

    @property
    def subpixel(self) -> bool:
        """A transposed convolution's implicit GEMM: one launch per sub-pixel phase (`phases`)."""
        return self.transposed and not self.depthwise

    def flops(self) -> int:
        """The useful multiply-adds x 2: each input element meets each tap of its group's outputs (what a
        transposed convolution's sub-pixel phases compute, no tap between input elements visited)."""
        if self.transposed:
            return 2 * math.prod(self.x_shape) * self.out_per_group * self.taps
        return 2 * self.m * self.channels_out * self.k


@dataclass(frozen=True)
class Phase:
    """One sub-pixel phase of a transposed convolution: per spatial dim, the outputs o = rho + stride * g
    (g < count), which read only the taps t = first + step * n (n < taps), those where o + padding -
    t * dilation is a multiple of the stride (step = stride / gcd(stride, dilation)); input i = g +
    (rho + padding - t * dilation) / stride, an exact division. Each phase is a dense convolution."""

    rho: tuple[int, ...]
    first: tuple[int, ...]
    taps: tuple[int, ...]
    count: tuple[int, ...]


def phases(c: Conv) -> list[Phase]:
    """A transposed convolution split into prod(stride) dense convolutions (sub-pixel), so no tap that
    lands between input elements is visited. A phase may have no taps (its outputs are the bias)."""
    per_dim = []
    for out, k, s, p, dil in zip(c.out_shape[2:], c.w_shape[2:], c.stride, c.padding, c.dilation):
        options = []
        for rho in range(min(s, out)):
            hit = [t for t in range(k) if (rho + p - t * dil) % s == 0]
            options.append((rho, hit[0] if hit else 0, len(hit), -(-(out - rho) // s)))
        per_dim.append(options)
    return [Phase(*map(tuple, zip(*combo))) for combo in itertools.product(*per_dim)]


def _tuple(value, nd: int) -> tuple[int, ...] | None:
    if isinstance(value, int):
        return (value,) * nd
    if isinstance(value, (tuple, list)) and len(value) == nd and all(isinstance(v, int) for v in value):
        return tuple(value)
    return None


def _operands(gm: fx.GraphModule, node: fx.Node):
    """(nd, x, weight, bias, stride, padding, dilation, groups) of a zero-padded convolution; or why not."""
    if node.op == "call_module":
        module = gm.get_submodule(node.target)
        nd, transposed = CONV_MODULES.get(type(module)), False
        if nd is None:
            nd, transposed = TRANSPOSED_CONV_MODULES.get(type(module)), True
        if nd is None or len(node.args) != 1 or node.kwargs:
            return None
        if module.padding_mode != "zeros":
            return f"{module.padding_mode} padding"
        padding = 0 if module.padding == "valid" else module.padding
        bias = Attr(f"{node.target}.bias") if module.bias is not None else None
        return (nd, node.args[0], Attr(f"{node.target}.weight"), bias, module.stride, padding, module.dilation,
                module.groups, transposed)
    if node.op == "call_function" and (node.target in CONV_FUNCTIONS or node.target in TRANSPOSED_CONV_FUNCTIONS):
        transposed = node.target in TRANSPOSED_CONV_FUNCTIONS
        names = ("input", "weight", "bias", "stride", "padding", "output_padding", "groups", "dilation") \
            if transposed else ("input", "weight", "bias", "stride", "padding", "dilation", "groups")
        bound = {"bias": None, "stride": 1, "padding": 0, "dilation": 1, "groups": 1, "output_padding": 0} \
            | dict(zip(names, node.args)) | dict(node.kwargs)
        if set(bound) - set(names) - {"output_padding"} or "weight" not in bound or "input" not in bound:
            return None
        padding = 0 if bound["padding"] == "valid" else bound["padding"]
        nd = (TRANSPOSED_CONV_FUNCTIONS if transposed else CONV_FUNCTIONS)[node.target]
        return (nd, bound["input"], bound["weight"], bound["bias"], bound["stride"], padding, bound["dilation"],
                bound["groups"], transposed)
    return None


def _shape(gm: fx.GraphModule, value) -> tuple[int, ...] | None:
    if isinstance(value, Attr):
        return attr_shape(gm, value)
    return shape_of(value) if isinstance(value, fx.Node) else None


def _conv_for(gm: fx.GraphModule, group: Group, precision: str, reasons: list[str]) -> Conv | None:
    if group.wide:  # its tiles index in int32
        reasons.append("a tensor of more than 2^31 elements")
        return None
    for item in group.inputs:
        node = item.source
        if not isinstance(node, fx.Node) or item.view != group.logical or shape_of(node) != group.logical:
            continue
        found = _operands(gm, node)
        if found is None:
            continue
        if isinstance(found, str):
            reasons.append(f"{node.name}: {found}")
            continue
        if any(user not in group.nodes for user in node.users):
            reasons.append(f"{node.name}: its output is also used outside the epilogue")
            continue
        nd, x, weight, bias, stride, padding, dilation, groups, transposed = found
        if transposed and not TRANSPOSED:
            reasons.append(f"{node.name}: transposed convolutions stay cuDNN calls (conv_gemm.TRANSPOSED is off)")
            continue
        stride, padding, dilation = _tuple(stride, nd), _tuple(padding, nd), _tuple(dilation, nd)
        x_shape, w_shape = _shape(gm, x), _shape(gm, weight)
        if None in (stride, padding, dilation, x_shape, w_shape) or not isinstance(groups, int) \
                or len(x_shape) != nd + 2 or len(w_shape) != nd + 2:
            reasons.append(f"{node.name}: padding, stride or shapes the kernel does not take (unbatched input, "
                           "'same' padding)")
            continue
        if transposed:  # the output's size also depends on output_padding: read from the traced shape
            out = tuple(group.logical)
            spatial = zip(out[2:], x_shape[2:], w_shape[2:], stride, padding, dilation)
            fits = x_shape[1] == w_shape[0] and w_shape[0] % groups == 0 \
                and out[:2] == (x_shape[0], w_shape[1] * groups) \
                and all(0 <= o - ((size - 1) * s - 2 * p + d * (k - 1) + 1) < max(s, d)
                        for o, size, k, s, p, d in spatial)
        else:
            out = (x_shape[0], w_shape[0]) + tuple(
                (size + 2 * p - d * (k - 1) - 1) // s + 1
                for size, k, s, p, d in zip(x_shape[2:], w_shape[2:], stride, padding, dilation))
            fits = out == tuple(group.logical) and x_shape[1] == w_shape[1] * groups and w_shape[0] % groups == 0
        if not fits:
            continue
        if bias is not None and _shape(gm, bias) != (out[1],):
            continue
        if max(math.prod(x_shape), math.prod(out), math.prod(w_shape)) >= 2**31:
            reasons.append(f"{node.name}: over 2^31 elements (int32 offsets)")
            continue
        if not is_conv(gm, node, precision):  # its reason is left_to_cudnn's
            continue
        return Conv(node, x, weight, bias, item.var, tuple(x_shape), tuple(w_shape), out, stride, padding, dilation,
                    groups, dtype=precision, transposed=transposed)
    return None


def is_conv(gm: fx.GraphModule, node: fx.Node, precision: str | None = None) -> bool:
    """Whether `node` is a convolution this module takes: at any precision (None), or at `precision` (at fp32 not
    a depthwise one, one input channel per group)."""
    found = _operands(gm, node)
    if found is None or isinstance(found, str):
        return False
    x_shape, groups = _shape(gm, found[1]), found[7]
    if precision is None or precision in HALF or not isinstance(groups, int) or x_shape is None or len(x_shape) < 2:
        return True
    return variants.rounds_operands(x_shape[1], groups)  # the convolutions the reference's variant rounds


def left_to_cudnn(gm: fx.GraphModule, precision: str) -> list[str]:
    """Why each convolution this module takes at some precision is not taken at `precision` (at fp32 the depthwise
    ones), one reason each."""
    return [f"{node.name}: at {precision} a depthwise convolution stays cuDNN's (no TF32 operands)"
            for node in gm.graph.nodes if is_conv(gm, node) and not is_conv(gm, node, precision)]


def attach(gm: fx.GraphModule, groups: list[Group], precision: str, reasons: list[str] | None = None) -> int:
    """Mark the epilogue groups whose convolution a Triton kernel computes; how many. At fp32 not the depthwise ones
    (module docstring)."""
    reasons = [] if reasons is None else reasons
    count = 0
    for group in groups:
        if group.kind == "pointwise" and group.after_anchor and group.gemm is None:
            group.gemm = _conv_for(gm, group, precision, reasons)
            if group.gemm is not None:
                group.name = group.name.replace("fused_", "conv_", 1)
                count += 1
    return count


# -- launch configurations ------------------------------------------------------------------------
_TILES = ((128, 128, 32, 8, 3), (128, 64, 32, 4, 3), (64, 128, 32, 4, 3), (64, 64, 32, 4, 3), (128, 32, 32, 4, 3),
          (64, 32, 32, 4, 3), (32, 64, 32, 4, 3), (128, 16, 32, 4, 3), (64, 16, 16, 4, 3), (32, 32, 16, 4, 2),
          (16, 16, 16, 2, 2))
_DEPTHWISE_TILES = ((128, 32, 4), (64, 64, 4), (256, 16, 4), (128, 16, 4), (64, 32, 4), (32, 32, 2), (16, 16, 1))


def configs(group: Group, device: Device = Device()) -> list[dict]:
    """Tile shapes, best first: full last waves, then outputs per element loaded; tiles far wider than
    the problem are left out."""
    c = group.gemm
    ranked = []
    if c.depthwise:
        for bm, bn, warps in _DEPTHWISE_TILES:
            if bn > max(16, next_pow2(c.channels_out)) or bm > max(16, next_pow2(c.m)):
                continue
            tail = wave_fill(math.ceil(c.m / bm) * math.ceil(c.channels_out / bn) / device.sms)
            ranked.append((round(tail * (1.0 if bm * bn >= 2048 else bm * bn / 2048), 6),
                           {"BLOCK_M": bm, "BLOCK_N": bn, "num_warps": warps}))
    else:
        for bm, bn, bk, warps, stages in _TILES:
            if bm > max(16, next_pow2(c.m)) or bn > max(16, next_pow2(c.out_per_group)) \
                    or bk > max(16, next_pow2(c.k)):
                continue
            tail = wave_fill(math.ceil(c.m / bm) * math.ceil(c.out_per_group / bn) * c.groups / device.sms)
            reuse = (bm * bn / (bm + bn)) / 64.0
            if c.dtype not in HALF and (bm + bn) * bk >= FP32_WIDE_TILE:
                warps = max(warps, 8)  # fp32 tiles, rounded in registers, twice the bytes: spread over more threads
            ranked.append((round(tail * math.sqrt(min(1.0, reuse)), 6),
                           {"BLOCK_M": bm, "BLOCK_N": bn, "BLOCK_K": bk, "num_warps": warps, "num_stages": stages}))
    ranked.sort(key=lambda item: (-item[0], sorted(item[1].items())))
    return [dict(config, score=score) for score, config in ranked]


def features(group: Group) -> dict:
    c = group.gemm
    size = ELEMENT_BYTES.get(c.dtype, 4)
    return {"kind": "depthwise_conv" if c.depthwise else "conv", "transposed": c.transposed, "m": c.m,
            "n": c.channels_out, "k": c.k, "groups": c.groups, "taps": c.taps, "flops": c.flops(),
            "bias": c.bias is not None,
            "inputs": len(group.inputs), "outputs": len(group.outputs), "steps": len(group.steps),
            "bytes": size * (math.prod(c.x_shape) + math.prod(c.w_shape) + math.prod(c.out_shape) * len(group.outputs))}


# -- the kernels ----------------------------------------------------------------------------------
def _spatial_lines(source: str, prefix: str, sizes, bounded: bool) -> list[str]:
    """Unravel `source`, a flat index over `sizes` (numbers, or constexpr names; last fastest; with more
    dims before them unless `bounded`), into `{prefix}0`, `{prefix}1`, ..."""
    lines = []
    for d, size in enumerate(sizes):
        rest = sizes[d + 1:]
        inner = math.prod(rest) if all(isinstance(n, int) for n in rest) else f"({' * '.join(rest)})"
        expr = source if inner == 1 else f"({source} // {inner})"
        if d or not bounded:
            expr = f"{expr} % {size}"
        lines.append(f"{prefix}{d} = {expr}")
    return lines


def _gather(c: Conv, taps: list[str], rows: str, extra_mask: str) -> tuple[list[str], str, str]:
    """(lines, offset, mask) of the input element each output position reads at each tap: the spatial
    input index per dim, in bounds or masked off (zero padding). A transposed convolution's output o
    gets input i at tap t where i * stride = o + padding - t * dilation: masked off where that is not
    a multiple of the stride (the gradient form, every tap visited: the depthwise kernel's; the implicit
    GEMM splits a transposed convolution into sub-pixel phases instead, `_subpixel_lines`)."""
    lines, offset_terms, masks = [], [], [f"({rows} < {c.m})"] + ([extra_mask] if extra_mask else [])
    spatial = c.x_shape[2:]
    for d, (size, s, p, dil) in enumerate(zip(spatial, c.stride, c.padding, c.dilation)):
        tap = (f"{taps[d]}" + (f" * {dil}" if dil != 1 else "")) if taps[d] != "0" else ""
        if c.transposed:
            lines.append(f"u{d} = o{d}" + (f" + {p}" if p else "") + (f" - {tap}" if tap else ""))
            lines.append(f"i{d} = u{d} // {s}" if s != 1 else f"i{d} = u{d}")
            masks.append(f"(u{d} >= 0) & (i{d} < {size})" + (f" & (u{d} % {s} == 0)" if s != 1 else ""))
        else:
            lines.append(f"i{d} = o{d}" + (f" * {s}" if s != 1 else "") + (f" - {p}" if p else "")
                         + (f" + {tap}" if tap else ""))
            if p or s * (c.out_shape[2 + d] - 1) + dil * (c.w_shape[2 + d] - 1) >= size:
                masks.append(f"(i{d} >= 0) & (i{d} < {size})" if p else f"(i{d} < {size})")
        stride = math.prod(spatial[d + 1:])
        offset_terms.append(f"i{d}" + (f" * {stride}" if stride != 1 else ""))
    return lines, " + ".join(offset_terms), " & ".join(masks)


def _product_lines(c: Conv) -> list[str]:
    """The kernel body up to the product's value in `c.var` (before the epilogue)."""
    if c.subpixel:
        return _subpixel_lines(c)
    spatial_out = c.out_shape[2:]
    plane = math.prod(c.x_shape[2:])  # input elements per channel
    lines = ["    pid_m = tl.program_id(0)", "    pid_n = tl.program_id(1)",
             "    r = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # output positions: image, then spatial",
             f"    img = r // {math.prod(spatial_out)}"]
    lines += ["    " + line for line in _spatial_lines("r", "o", spatial_out, False)]
    if c.depthwise:
        per = c.out_per_group
        lines += ["    j = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]  # output channels",
                  f"    ci = j // {per}  # the one input channel each reads" if per != 1 else "    ci = j",
                  "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)",
                  f"    for t in range({c.taps}):"]
        lines += ["        " + line for line in _spatial_lines("t", "t", c.w_shape[2:], True)]
        taps = [f"t{d}" for d in range(len(spatial_out))]
        gather, offset, mask = _gather(c, taps, "r", f"(j < {c.channels_out})")
        lines += ["        " + line for line in gather]
        lines += [f"        a = tl.load(x_ptr + img * {c.x_shape[1] * plane} + ci * {plane} + {offset}, "
                  f"mask={mask}, other=0.0).to(tl.float32)",
                  f"        w = tl.load(w_ptr + j * {c.taps} + t, mask=j < {c.channels_out}, other=0.0).to(tl.float32)",
                  "        acc += a * w",
                  f"    mask = (r < {c.m}) & (j < {c.channels_out})"]
    else:
        per = c.out_per_group
        lines += _group_lines(c) + [
                  f"    for start in range(0, {c.k}, BLOCK_K):",
                  "        q = start + kk[None, :]  # the reduction index: input channel, then tap",
                  f"        ci = q // {c.taps}" if c.taps != 1 else "        ci = q"]
        if c.taps != 1:
            lines += [f"        t = q % {c.taps}"]
            lines += ["        " + line for line in _spatial_lines("t", "t", c.w_shape[2:], True)]
            taps = [f"t{d}" for d in range(len(spatial_out))]
        else:
            taps = ["0"] * len(spatial_out)
        gather, offset, mask = _gather(c, taps, "r", f"(q < {c.k})")
        lines += ["        " + line for line in gather]
        lines += [f"        a = tl.load(x_ptr + img * {c.x_shape[1] * plane} + ci * {plane} + {offset}, "
                  f"mask={mask}, other=0.0)",
                  "        qb = start + kk[:, None]",
                  f"        b = tl.load(w_ptr + cj * {c.k} + qb, mask=(qb < {c.k}) & (cj < {per}), other=0.0)",  # [C_out, C / g, *k]
                  *_product(c),
                  f"    mask = (r < {c.m}) & (cj < {per})"]
    return lines + _rounded(c)


def _product(c: Conv) -> list[str]:
    """The tile's product into the accumulator: at fp32 on operands rounded to TF32 (exact products on TF32 tensor
    cores), else on the bf16/fp16 operands as loaded."""
    if c.dtype in HALF:
        return ["        acc = tl.dot(a, b, acc)"]
    return tf32_rounded("a", "b") + ['        acc = tl.dot(a, b, acc, input_precision="tf32")']


def _group_lines(c: Conv) -> list[str]:
    """An implicit GEMM's tile of output channels within its group (grid axis 2), the input and weight
    pointers moved to the group, and the accumulator."""
    per = c.out_per_group
    return ["    grp = tl.program_id(2)",
            "    cj = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]  # output channels within the group",
            f"    j = grp * {per} + cj  # output channels",
            f"    x_ptr += grp * {c.channels_per_group * math.prod(c.x_shape[2:])}", f"    w_ptr += grp * {per * c.k}",
            "    kk = tl.arange(0, BLOCK_K)",
            "    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)"]


def _rounded(c: Conv) -> list[str]:
    """The accumulator rounded as eager rounds: cuDNN's convolution to the tensors' dtype, then the bias
    added and rounded again; torch's own depthwise kernel (bf16) adds the bias in its float32 accumulator
    and rounds once."""
    lines = []
    bias = f"tl.load(bias_ptr + j, mask=j < {c.channels_out}, other=0.0).to(tl.float32)"
    if c.bias is not None and c.depthwise:
        lines.append(f"    {c.var} = (acc + {bias}).to(x_ptr.dtype.element_ty).to(tl.float32)")
    else:
        lines.append(f"    {c.var} = acc.to(x_ptr.dtype.element_ty).to(tl.float32)")
        if c.bias is not None:
            lines.append(f"    {c.var} = ({c.var} + {bias}).to(x_ptr.dtype.element_ty).to(tl.float32)")
    return lines


def _subpixel_lines(c: Conv) -> list[str]:
    """A transposed convolution's implicit GEMM over one sub-pixel phase (`Phase`; the phase's numbers
    come as constexprs: RHO, TAP (first tap), NT (taps), Q (outputs) per dim; KP, NTAPS, MP): rows are
    the phase's outputs, the reduction its input channels x its own taps only."""
    nd = len(c.out_shape) - 2
    spatial_out, spatial_in, kernel = c.out_shape[2:], c.x_shape[2:], c.w_shape[2:]
    plane = math.prod(spatial_in)
    per = c.out_per_group
    counts, taps = [f"Q{d}" for d in range(nd)], [f"NT{d}" for d in range(nd)]
    lines = ["    pid_m = tl.program_id(0)", "    pid_n = tl.program_id(1)",
             "    rp = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)[:, None]  # the phase's outputs: image, then position",
             f"    img = rp // ({' * '.join(counts)})"]
    lines += ["    " + line for line in _spatial_lines("rp", "g", counts, False)]
    lines += [f"    o{d} = RHO{d} + {s} * g{d}" if s != 1 else f"    o{d} = RHO{d} + g{d}"
              for d, s in enumerate(c.stride)]
    flat = " + ".join(f"o{d}" + (f" * {math.prod(spatial_out[d + 1:])}" if d < nd - 1 else "") for d in range(nd))
    lines += [f"    r = img * {math.prod(spatial_out)} + {flat}  # the output position the epilogue indexes"]
    lines += _group_lines(c) + [
              "    for start in range(0, KP, BLOCK_K):",
              "        q = start + kk[None, :]  # the phase's reduction index: input channel, then its taps",
              "        ci = q // NTAPS", "        n = q % NTAPS"]
    steps = [s // math.gcd(s, dil) for s, dil in zip(c.stride, c.dilation)]
    masks, offsets = ["(rp < MP)", "(q < KP)"], []
    lines += ["        " + line for line in _spatial_lines("n", "n", taps, True)]
    for d, (size, s, p, dil, step) in enumerate(zip(spatial_in, c.stride, c.padding, c.dilation, steps)):
        lines.append(f"        t{d} = TAP{d} + {step} * n{d}")
        lines.append(f"        i{d} = g{d} + (RHO{d} + {p} - t{d}" + (f" * {dil}" if dil != 1 else "") + f") // {s}  # exact")
        masks.append(f"(i{d} >= 0) & (i{d} < {size})")
        offsets.append(f"i{d}" + (f" * {math.prod(spatial_in[d + 1:])}" if d < nd - 1 else ""))
    lines += [f"        a = tl.load(x_ptr + img * {c.x_shape[1] * plane} + ci * {plane} + {' + '.join(offsets)}, "
              f"mask={' & '.join(masks)}, other=0.0)",
              "        qb = start + kk[:, None]", "        nb = qb % NTAPS"]
    lines += ["        " + line for line in _spatial_lines("nb", "nb", taps, True)]
    tap = " + ".join(f"(TAP{d} + {step} * nb{d})" + (f" * {math.prod(kernel[d + 1:])}" if d < nd - 1 else "")
                     for d, step in enumerate(steps))
    lines += [f"        b = tl.load(w_ptr + (qb // NTAPS) * {per * c.taps} + cj * {c.taps} + {tap}, "
              f"mask=(qb < KP) & (cj < {per}), other=0.0)",
              *_product(c),
              f"    mask = (rp < MP) & (cj < {per})"]
    return lines + _rounded(c)


def _phase_constants(c: Conv, phase: Phase) -> str:
    """The constexpr arguments of one phase's launch (NT and NTAPS at least 1: a phase without taps has
    KP = 0, and its loop never runs)."""
    parts = [f"RHO{d}={phase.rho[d]}, TAP{d}={phase.first[d]}, NT{d}={max(1, phase.taps[d])}, Q{d}={phase.count[d]}"
             for d in range(len(phase.rho))]
    ntaps = math.prod(phase.taps)
    return ", ".join(parts + [f"KP={c.channels_per_group * ntaps}", f"NTAPS={max(1, ntaps)}",
                              f"MP={c.out_shape[0] * math.prod(phase.count)}"])


def rounding(group: Group) -> str:
    """How the epilogue's steps round: to the input's dtype after each, as eager does at bf16/fp16, unless
    a step is a cast to float32 (a bare variable), after which eager computes in float32."""
    if any(re.fullmatch(r"\w+", s.expr.strip()) for s in group.steps):
        return ""
    return "x_ptr.dtype.element_ty"


def _kernel(group: Group) -> list[str]:
    c = group.gemm
    rest = [i for i in group.inputs if i.var != c.var]
    params = ["x_ptr", "w_ptr"] + (["bias_ptr"] if c.bias is not None else []) + [f"{i.var}_ptr" for i in rest]
    params += [f"out{k}_ptr" for k in range(len(group.outputs))]
    block_k = "" if c.depthwise else ", BLOCK_K: tl.constexpr"
    if c.subpixel:  # one launch per phase, its numbers as constexprs
        names = [f"{n}{d}" for d in range(len(c.stride)) for n in ("RHO", "TAP", "NT", "Q")] + ["KP", "NTAPS", "MP"]
        block_k += "".join(f", {n}: tl.constexpr" for n in names)
    shape = "x".join(map(str, c.x_shape))
    what = f"{c.label}, tap by tap" if c.depthwise else \
        f"{c.label} as an implicit GEMM ([{c.m} x {c.k}] @ [{c.k} x {c.out_per_group}] per group of {c.groups})"
    if c.subpixel:
        what = (f"{c.label} as implicit GEMMs, one per sub-pixel phase ({len(phases(c))}: each output reads only "
                f"the taps that land on input elements)")
    lines = ["@triton.jit",
             f"def {group.name}_kernel({', '.join(params)}, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr{block_k}):",
             f"    # {what}: input [{shape}], weight [{'x'.join(map(str, c.w_shape))}], stride {list(c.stride)}, "
             f"padding {list(c.padding)}, dilation {list(c.dilation)}" + (" + bias" if c.bias is not None else "")
             + f"; float32 accumulate, then the epilogue in registers: {group.fused_ops}"]
    lines += inputs_doc(group, rest)
    return lines + _product_lines(c) + gemm.epilogue(group, rest, 1, rounding(group))


def render(group: Group, config: dict) -> str:
    """The kernel and its wrapper (which takes x, weight, bias, then the epilogue's inputs)."""
    c = group.gemm
    rest = [i for i in group.inputs if i.var != c.var]
    args = ["x", "w"] + (["bias"] if c.bias is not None else []) + [i.var for i in rest]
    shapes = [c.x_shape, c.w_shape] + ([(c.channels_out,)] if c.bias is not None else []) + [i.shape for i in rest]
    outs = output_names(len(group.outputs))
    bm, bn = config["BLOCK_M"], config["BLOCK_N"]
    if c.depthwise:
        grid = f"(triton.cdiv({c.m}, {bm}), triton.cdiv({c.channels_out}, {bn}))"
        blocks = f"BLOCK_M={bm}, BLOCK_N={bn}"
    else:
        grid = f"(triton.cdiv({c.m}, {bm}), triton.cdiv({c.out_per_group}, {bn}), {c.groups})"
        blocks = f"BLOCK_M={bm}, BLOCK_N={bn}, BLOCK_K={config['BLOCK_K']}, num_stages={config['num_stages']}"
    launch = [f"    grid = {grid}",
              f"    {group.name}_kernel[grid]({', '.join(args + outs)}, {blocks}, num_warps={config['num_warps']})"]
    if c.subpixel:
        launch = []
        for phase in phases(c):
            rows = c.out_shape[0] * math.prod(phase.count)
            launch += [f"    {group.name}_kernel[(triton.cdiv({rows}, {bm}), triton.cdiv({c.out_per_group}, {bn}), "
                       f"{c.groups})]({', '.join(args + outs)}, {blocks}, {_phase_constants(c, phase)}, "
                       f"num_warps={config['num_warps']})"]
    kind = c.label if c.depthwise else f"{c.label} (implicit GEMM)"
    wrapper = Wrapper(name=group.name, args=args, shapes=shapes,
                      doc=f"{kind} + {group.fused_ops}: one Triton kernel with the epilogue inside "
                          f"(launch: {describe_config(config)}).",
                      outputs=[(out.shape, "x.dtype") for out in group.outputs], device="x.device", launch=launch)
    return "\n".join(_kernel(group) + ["", ""] + python_wrapper(wrapper)) + "\n"
