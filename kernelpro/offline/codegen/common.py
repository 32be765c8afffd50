"""What every backend of the code generator shares: a group's iteration space merged into as few dims as its
accesses allow (`layout`), the index arithmetic that unravels it in Triton's or C's dialect (`index_lines`,
`offset_expr`, `RowSpace`), the Triton loads the Triton backends share (`block_index`, `masked_load`), the steps a
pass needs, and the comments every kernel opens with."""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass, field

from kernelpro.offline.fuse.groups import Group, Step
from kernelpro.offline.ir.windows import Dialect


#: an fp32 tile's values rounded to TF32, to nearest with ties away from zero (`cvt.rna.tf32.f32`; the reference's
#: variant rounds alike, harness/variants.tf32_nearest), as a Triton expression of `{v}`. Triton's plain-TF32 dot
#: does not round: the tensor cores read the top 19 bits of each float32 operand, which truncates towards zero, a
#: bias that adds up along K, where cuBLAS's and cuDNN's TF32 products round to nearest (Triton's issue 4574). Under
#: `tf32_matmul`, `triton_gemm` on level2/55 (positive inputs, 8,192-long rows) put all of its outputs outside 1e-4
#: where eager under TF32 stayed within (H100, 2026-12-06). A kernel that multiplies in TF32 rounds its operands first.
TF32_NEAREST = "(({v}.to(tl.int32, bitcast=True) + 4096) & -8192).to(tl.float32, bitcast=True)"


def tf32_rounded(*names: str, indent: str = "        ") -> list[str]:
    """Lines that round each named float32 tile to TF32 in place (`TF32_NEAREST`), before a plain-TF32 `tl.dot`."""
    return [f"{indent}{name} = " + TF32_NEAREST.format(v=name) for name in names]


def next_pow2(n: int) -> int:
    return 1 << max(0, (n - 1).bit_length())


def disjoint_groups(nodes, make: Callable, name: Callable) -> list:
    """The groups `make(node)` finds from each node in turn (None: none there), but for those that share a node
    with an earlier one; each named `name(group, its index)`."""
    groups: list = []
    taken: set = set()
    for node in nodes:
        group = make(node) if node not in taken else None
        if group is None or taken & set(group.nodes):
            continue
        group.name = name(group, len(groups))
        taken.update(group.nodes)
        groups.append(group)
    return groups


# -- the iteration space --------------------------------------------------------------------------
@dataclass
class Layout:
    sizes: list[int]
    reduced: list[bool]
    strides: dict[str, list[int]]  # access ("full", or an input var) -> stride per dim
    dims: list[tuple[int, ...]] = field(default_factory=list)  # the logical dims each dim stands for


def layout(group: Group) -> Layout:
    dims: list[tuple[int, bool]] = []
    origin: list[int] = []  # the logical dim of each entry of dims
    for d, size in enumerate(group.logical):
        if d in group.split:
            outer, inner = group.split[d]
            dims += [(outer, False), (inner, True)]
            origin += [d, d]
        else:
            dims.append((size, d in group.reduced))
            origin.append(d)

    def expand(view: tuple[int, ...]) -> list[int]:
        strides = []
        for d, size in enumerate(view):
            stride = math.prod(view[d + 1:]) if size != 1 else 0
            if d in group.split:
                strides += [stride * group.split[d][1], stride] if size != 1 else [0, 0]
            else:
                strides.append(stride)
        return strides

    accesses = {"full": expand(group.logical)}
    accesses.update({i.var: expand(i.view) if i.window is None else i.window.corner() for i in group.inputs})
    spatial = {d for i in group.inputs if i.window is not None for d in i.window.spatial}
    if spatial:  # a window's dims keep an index each (its bounds checks): a pseudo-access no merge fits
        accesses["_window"] = [1 if d in spatial else 0 for d in origin]
    keep = [k for k, (size, _) in enumerate(dims) if size != 1] or [0]  # one element: a dim of size 1
    sizes, reduced = [dims[k][0] for k in keep], [dims[k][1] for k in keep]
    strides = {name: [s[k] for k in keep] for name, s in accesses.items()}
    merged_sizes, merged_reduced, merged, merged_dims = [], [], {name: [] for name in strides}, []
    for position, (size, red) in enumerate(zip(sizes, reduced)):
        if merged_sizes and merged_reduced[-1] == red and all(
                merged[name][-1] == s[position] * size for name, s in strides.items()):
            merged_sizes[-1] *= size
            merged_dims[-1] += (origin[keep[position]],)
            for name, s in strides.items():
                merged[name][-1] = s[position]
            continue
        merged_sizes.append(size)
        merged_reduced.append(red)
        merged_dims.append((origin[keep[position]],))
        for name, s in strides.items():
            merged[name].append(s[position])
    merged.pop("_window", None)
    return Layout(merged_sizes, merged_reduced, merged, merged_dims)


#: Triton's index dialect (Python's integer division, no literal suffix).
TRITON = Dialect()


def index_lines(layout_: Layout, reduced: bool, source: str, prefix: str,
                 dialect: Dialect = TRITON) -> tuple[list[str], dict[int, str]]:
    """Unravel `source` over the kept (or reduced) dims; (lines, dim -> index name)."""
    dims = [d for d, red in enumerate(layout_.reduced) if red == reduced]
    lines, names = [], {}
    if len(dims) == 1:
        return lines, {dims[0]: source}
    for position, d in enumerate(dims):
        divisor = math.prod(layout_.sizes[e] for e in dims[position + 1:])
        expr = source if divisor == 1 else f"({source} {dialect.divide} {divisor}{dialect.integer})"
        if position:
            expr = f"{expr} % {layout_.sizes[d]}{dialect.integer}"
        name = f"{prefix}{position}"
        lines.append(dialect.declare.format(name=name, expr=expr))
        names[d] = name
    return lines, names


def block_index(offset: str, row_names: set[str], col_names: set[str]) -> str:
    """A full-shaped offset that spans [BLOCK_R, BLOCK_C] even when it reads along one axis only."""
    words = set(re.findall(r"\b\w+\b", offset))
    if not words & (row_names | {"r"}):
        offset += " + r * 0"
    if not words & (col_names | {"j"}):
        offset += " + j * 0"
    return offset


def eviction(evict: str) -> str:
    """The keyword argument of a Triton load or store for an eviction policy ("evict_first": the L2 may drop these
    lines first, as a cache hint in the PTX), or nothing for the default ("")."""
    return f", eviction_policy={evict!r}" if evict else ""


def masked_load(item, offset: str, mask: str, indent: str, evict: str = "") -> str:
    """An input's values as float32; one element broadcast to every lane is a scalar load. `evict`: the load's
    eviction policy (`eviction`; a scalar load keeps the default)."""
    if offset == "0":
        return f"{indent}{item.var} = tl.load({item.var}_ptr).to(tl.float32)"
    return (f"{indent}{item.var} = tl.load({item.var}_ptr + {offset}, mask={mask}, other=0.0{eviction(evict)})"
            ".to(tl.float32)")


def offset_expr(strides: list[int], names: dict[int, str], dims: list[int], dialect: Dialect = TRITON) -> str:
    terms = [names[d] if strides[d] == 1 else f"{names[d]} * {strides[d]}{dialect.integer}" for d in dims
             if strides[d]]
    return " + ".join(terms) or "0"


# -- what kernels share ---------------------------------------------------------------------------
def kernel_header(group: Group) -> str:
    what = "epilogue of the library call before it: " if group.after_anchor else ""
    shape = "x".join(str(s) for s in group.logical)
    return f"{what}{group.fused_ops} over [{shape}], float32 math"


def inputs_doc(group: Group, inputs=None, comment: str = "    #") -> list[str]:
    def note(i) -> str:
        if i.window is not None:
            return f" ({i.window.describe()}, read in place)"
        return " (broadcast)" if i.view != group.logical else ""
    return [f"{comment}   {i.var}: {i.label} {list(i.shape)}{note(i)}"
            for i in (group.inputs if inputs is None else inputs)]


def needed_steps(group: Group, roots: list[str], kind: str) -> list[Step]:
    """The steps of `kind` the roots need, in order (per-row values come from earlier passes)."""
    by_var = {s.var: s for s in group.steps}
    wanted, stack = set(), list(roots)
    while stack:
        var = stack.pop()
        step = by_var.get(var)
        if step is None or var in wanted or step.kind != kind:
            continue
        wanted.add(var)
        stack.extend(step.deps if not step.reduce else ())
    return [s for s in group.steps if s.var in wanted]


class RowSpace:
    """A row group's index space, in either dialect: the kept and reduced dims, the lines that unravel a
    row index (`r0, r1, ...`) and a column index (`c0, c1, ...`), and the full-shaped inputs."""

    def __init__(self, group: Group, row_source: str, col_source: str, dialect: Dialect = TRITON,
                 lay: Layout | None = None):
        self.lay = lay = lay or layout(group)
        self.keep = [d for d, red in enumerate(lay.reduced) if not red]
        self.red = [d for d, red in enumerate(lay.reduced) if red]
        self.row_index, self.keep_names = index_lines(lay, False, row_source, "r", dialect)
        self.col_index, self.col_names = index_lines(lay, True, col_source, "c", dialect)
        self.names = self.keep_names | self.col_names
        self.full_inputs = [i for i in group.inputs if i.kind == "full"]


def describe_config(config: dict) -> str:
    return ", ".join(f"{k}={v}" for k, v in config.items() if k != "score")
