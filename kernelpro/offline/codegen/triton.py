"""Render a fused group as a readable Triton kernel and the Python wrapper that launches it.

Four shapes of kernel:

- **pointwise**: one element per lane over the flattened output; each input is read
  at its own broadcast offsets (the dimensions are merged first, so a contiguous
  input is read at `idx`);
- **row, one pass**: `BLOCK_R` rows per program, each whole row in registers
  (`BLOCK_C` >= the row length); reductions along axis 1;
- **row, looped**: one pass over the row per reduction level (the values a pass
  needs are recomputed from the inputs), then a last pass that writes the
  full-shaped outputs; a variance rides in its mean's pass (Welford) and a
  softmax's sum of exponentials in its max's (online softmax), so a norm or a
  softmax reads its row twice;
- **row, split** (few long rows): a program per (row, chunk); a kernel per
  reduction level writes each chunk's partial results to a workspace and folds
  those of the levels before it, and a last kernel writes the outputs.

Every kernel exposes its launch parameters (`BLOCK`, `BLOCK_R`, `BLOCK_C`,
`CHUNK`, `num_warps`). `configs` lists them ranked by an analytic model (vector width,
occupancy from an estimate of registers, waves per SM, bytes in flight);
tuning moves walk down that list.
"""

from __future__ import annotations

import math
from dataclasses import replace

from kernelpro.offline.codegen.common import (TRITON, Layout, RowSpace, block_index, describe_config, eviction,
                                              index_lines, inputs_doc, kernel_header, layout, masked_load,
                                              needed_steps, next_pow2, offset_expr)
# every backend offers configs, render and features; the Triton backend's ranking is its own module
from kernelpro.offline.codegen.triton_configs import configs  # noqa: F401
from kernelpro.offline.codegen.wrapper import Wrapper, output_names, python_wrapper
from kernelpro.offline.fuse.groups import Group, Step
from kernelpro.offline.ir import windows
from kernelpro.offline.rewrite.passes import meta

TANH_HELPER = '''@triton.jit
def _kp_tanh(x):
    """tanh from exp (Triton's interpreter has no libdevice): odd, and exact at large |x|."""
    e = tl.exp(-2.0 * tl.abs(x))
    t = (1.0 - e) / (1.0 + e)
    return tl.where(x < 0, -t, t)
'''


#: How a Triton kernel reads a pool's window (`kernelpro.offline.ir.windows`).
WINDOWS = windows.Syntax(
    dialect=TRITON, start="{acc} = tl.full([BLOCK], {value}, tl.float32)",
    load="{tap} = tl.load({ptr} + {offset}, mask={mask}, other={other}).to(tl.float32)",
    plain="{tap} = tl.load({ptr} + {offset}).to(tl.float32)",
    take_max="{acc} = tl.where(({tap} > {acc}) | ({tap} != {tap}), {tap}, {acc})", take_sum="{acc} = {acc} + {tap}",
    both="({a}) & ({b})", lowest='float("-inf")', zero="0.0", minimum="tl.minimum({a}, {b})",
    maximum="tl.maximum({a}, {b})", divide="{acc} = {acc} / ({count}).to(tl.float32)",
    divide_number="{acc} = {acc} / {number}", loop="for {i} in range({n}):", end="")
#: The same in a row kernel, whose values are blocks of rows by columns.
ROW_WINDOWS = replace(WINDOWS, start="{acc} = tl.full(mask.shape, {value}, tl.float32)")


# -- kernels --------------------------------------------------------------------------------------
def window_lines(item, lay: Layout, names: dict[int, str], offset: str, mask: str,
                 syntax: windows.Syntax) -> list[str]:
    """The lines that leave a window input's maximum or average in `item.var` (`windows.load_lines`):
    `offset` is its first tap's, and each spatial dim's pooled index is its name in `names` (a dim
    of one element has none)."""
    index = {d: names[p] for p, dims in enumerate(lay.dims) for d in dims if d in item.window.spatial and p in names}
    return windows.load_lines(item.var, item.window, offset, index, mask, syntax)


def _pointwise_kernel(group: Group, lay: Layout, persistent_grid: bool = False) -> list[str]:
    """One element per lane; `persistent_grid`: PROGRAMS programs, each striding over the blocks."""
    params = [f"{i.var}_ptr" for i in group.inputs] + [f"out{k}_ptr" for k in range(len(group.outputs))]
    lines = ["@triton.jit", f"def {group.name}_kernel({', '.join(params)}, n_elements, BLOCK: tl.constexpr"
             + ("", ", PROGRAMS: tl.constexpr")[persistent_grid] + "):", "    # " + kernel_header(group)] + inputs_doc(group)
    start = len(lines)
    program = "tl.program_id(0).to(tl.int64)" if group.wide else "tl.program_id(0)"  # past 2^31 elements
    lines += [f"    idx = {program} * BLOCK + tl.arange(0, BLOCK)", "    mask = idx < n_elements"]
    index, names = index_lines(lay, False, "idx", "i")
    lines += ["    " + line for line in index]
    dims = list(range(len(lay.sizes)))
    for item in group.inputs:
        offset = offset_expr(lay.strides[item.var], names, dims)
        if item.window is None:
            lines.append(masked_load(item, offset, "mask", "    "))
        else:  # a pool read in place: the maximum or average of its window
            lines += ["    " + line for line in window_lines(item, lay, names, offset, "mask", WINDOWS)]
    lines += [f"    {s.var} = {s.expr}" for s in group.steps]
    for k, out in enumerate(group.outputs):
        lines.append(f"    tl.store(out{k}_ptr + idx, {out.var}, mask=mask)")
    if persistent_grid:  # the same body, once per block this program strides over
        loop = ["    # persistent: PROGRAMS programs stride over the blocks (the rest of the SMs stay idle)",
                "    for first in range(tl.program_id(0) * BLOCK, n_elements, PROGRAMS * BLOCK):",
                "        idx = first + tl.arange(0, BLOCK)"]
        lines = lines[:start] + loop + ["    " + line for line in lines[start + 1:]]
    return lines


_IDENTITY = {"sum": "0.0", "max": 'float("-inf")', "min": 'float("inf")', "argmax": 'float("-inf")',
             "argmin": 'float("inf")'}


class _Rows(RowSpace):
    """What every Triton row kernel shares: the row index, the row inputs, the column loads, the steps."""

    def __init__(self, group: Group, lay: Layout):
        super().__init__(group, "r", "j", lay=lay)
        self.group = group
        self.length = group.row_length
        self.full_outputs = [(k, o) for k, o in enumerate(group.outputs) if o.kind == "full"]
        self.row_set, self.col_set = set(self.keep_names.values()), set(self.col_names.values())
        self.full_offset = block_index(offset_expr(lay.strides["full"], self.names, self.keep + self.red),
                                  self.row_set, self.col_set)
        self.row_steps = [s for s in group.steps if s.kind == "row" and not s.reduce]

    def start(self, name: str, params: list[str], what: str, program_rows: str) -> list[str]:
        """The signature, the comment, the row index and the per-row inputs."""
        lines = ["@triton.jit", f"def {name}({', '.join(params)}):",
                 "    # " + kernel_header(self.group) + f"; rows of {self.length} reduced element(s), {what}"]
        return lines + inputs_doc(self.group) + self.row_start(program_rows, "    ")

    def row_start(self, program_rows: str, indent: str) -> list[str]:
        """The row index `r` (a [rows, 1] block), its mask and the per-row inputs."""
        lines = [f"{indent}r = {program_rows}", f"{indent}row_mask = r < n_rows"]
        lines += [indent + line for line in self.row_index]
        for item in self.group.inputs:
            if item.kind == "row":
                lines.append(masked_load(item, offset_expr(self.lay.strides[item.var], self.keep_names, self.keep),
                                         "row_mask", indent))
        return lines

    def body(self, steps: list[Step], roots: list[str], indent: str, evict: str = "") -> list[str]:
        """Column indices, the full-shaped loads these steps (and roots) read (`evict`: their eviction policy, as
        `masked_load` takes it), then the steps."""
        used = {d for s in steps for d in s.deps} | set(roots)
        out = [indent + line for line in self.col_index]
        for item in self.full_inputs:
            if item.var not in used:
                continue
            offset = offset_expr(self.lay.strides[item.var], self.names, self.keep + self.red)
            if item.window is not None:  # a pool read in place: the maximum or average of its window
                out += [indent + line for line in window_lines(
                    item, self.lay, self.names, block_index(offset, self.row_set, self.col_set), "mask", ROW_WINDOWS)]
            else:
                out.append(masked_load(item, offset if offset == "0" else block_index(offset, self.row_set, self.col_set),
                                 "mask", indent, evict))
        return out + [f"{indent}{s.var} = {s.expr}" for s in steps if not s.reduce]

    def row_lines(self, level: int, indent: str = "    ") -> list[str]:
        return [f"{indent}{step.var} = {step.expr}" for step in self.row_steps if step.level == level]

    def accumulate(self, reductions: list[Step], moments: dict[str, Step], indent: str,
                   online: dict[str, Step] | None = None) -> list[str]:
        """Inside a loop over the row: the pass's values, folded into `acc_<var>` per reduction; a sum
        with a moment (`moments`: sum var -> its sum of centred squares) is a Welford update per lane
        instead: the lane's count, mean and sum of squared deviations (`n_`, `mean_`, `m2_<var>`). A max
        with an online sum (`online`: max var -> the sum of exp(operand - max)) keeps that sum per lane
        too, relative to the lane's running max and rescaled when the max grows."""
        roots = [s.operand for s in reductions]
        lines = self.body(needed_steps(self.group, roots, "full"), roots, indent)
        for s in reductions:
            value = f"tl.where(mask, {s.operand}, {_IDENTITY[s.reduce]})"
            if s.var in (online or {}):
                total = online[s.var].var
                lines += [f"{indent}grown = tl.maximum(acc_{s.var}, {value})",
                          f"{indent}acc_{total} = acc_{total} * tl.where(grown == acc_{s.var}, 1.0, "
                          f"tl.exp(acc_{s.var} - grown)) + tl.where(mask & (grown > {_IDENTITY['max']}), "
                          f"tl.exp({s.operand} - grown), 0.0)",
                          f"{indent}acc_{s.var} = grown"]
                continue
            if s.var in moments:  # every lane still in the row has seen `start // BLOCK_C + 1` values
                lines += [f"{indent}delta = tl.where(mask, {s.operand} - mean_{s.var}, 0.0)",
                          f"{indent}n_{s.var} = n_{s.var} + tl.where(mask, 1.0, 0.0)",
                          f"{indent}mean_{s.var} = mean_{s.var} + delta * (1.0 / (start // BLOCK_C + 1))",
                          f"{indent}m2_{s.var} = m2_{s.var} + delta * tl.where(mask, {s.operand} - mean_{s.var}, 0.0)"]
                continue
            update = {"sum": f"acc_{s.var} + {value}", "max": f"tl.maximum(acc_{s.var}, {value})",
                      "min": f"tl.minimum(acc_{s.var}, {value})"}[s.reduce]
            lines.append(f"{indent}acc_{s.var} = {update}")
        return lines

    def outputs(self, indent: str, evict: str = "") -> list[str]:
        """The full-shaped outputs: their loads and steps, then the stores (`evict`: the eviction policy of both,
        for a pass that reads its inputs for the last time and writes outputs no one reads back)."""
        roots = [o.var for _, o in self.full_outputs]
        lines = self.body(needed_steps(self.group, roots, "full"), roots, indent, evict)
        return lines + [f"{indent}tl.store(out{k}_ptr + {self.full_offset}, {o.var}, mask=mask{eviction(evict)})"
                        for k, o in self.full_outputs]


def _pointers(group: Group) -> tuple[list[str], list[str]]:
    return [f"{i.var}_ptr" for i in group.inputs], [f"out{k}_ptr" for k in range(len(group.outputs))]


_FOLD = {"sum": "tl.sum", "max": "tl.max", "min": "tl.min", "argmax": "tl.argmax", "argmin": "tl.argmin"}


def _row_kernel(group: Group, lay: Layout, looped: bool) -> list[str]:
    inputs, outputs = _pointers(group)
    rows = _Rows(group, lay)
    length = rows.length
    lines = rows.start(f"{group.name}_kernel", inputs + outputs + ["n_rows", "BLOCK_R: tl.constexpr",
                                                                    "BLOCK_C: tl.constexpr"],
                       "a loop over each row per pass" if looped else "each row in registers, one pass",
                       "tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]")
    lines += rows.row_lines(0)
    if not looped:  # the steps in order: reductions read the row straight from registers
        lines += ["    j = tl.arange(0, BLOCK_C)[None, :]", f"    mask = row_mask & (j < {length})"]
        lines += rows.body([], [i.var for i in rows.full_inputs], "    ")
        for s in group.steps:
            if s.reduce:
                lines.append(f"    {s.var} = {_FOLD[s.reduce]}(tl.where(mask, {s.operand}, {_IDENTITY[s.reduce]}), "
                             "1)[:, None]")
            elif not (s in rows.row_steps and s.level == 0):
                lines.append(f"    {s.var} = {s.expr}")
        lines += [f"    tl.store(out{k}_ptr + {rows.full_offset}, {o.var}, mask=mask)" for k, o in rows.full_outputs]
    else:
        # a sum of squares about a row mean is computed in the pass of that mean's sum (Welford per
        # lane, merged across lanes as Chan et al. do), so a normalization reads its row twice, not 3x
        # likewise a softmax's sum of exponentials in the pass of its max (online softmax): the row is
        # read twice (statistics, outputs), not three times
        moments, online = group.moments(), group.online_sums()
        hoisted = {s.var for s in moments.values()} | {s.var for s in online.values()}
        passes = 0
        for level in range(1, group.levels() + 1):
            reductions = [s for s in group.reductions(level) if s.var not in hoisted]
            if reductions:
                passes += 1
                lines += _accumulators(reductions, moments, online, "BLOCK_R, BLOCK_C", "    ")
                welford = [moments[s.var].var for s in reductions if s.var in moments]
                shifted = [online[s.var].var for s in reductions if s.var in online]
                lines += [f"    for start in range(0, {length}, BLOCK_C):  # pass {passes}" + (
                              f", with {', '.join(welford)} (Welford per lane)" if welford else "") + (
                              f", with {', '.join(shifted)} (online softmax per lane)" if shifted else ""),
                          "        j = start + tl.arange(0, BLOCK_C)[None, :]", f"        mask = row_mask & (j < {length})"]
                lines += rows.accumulate(reductions, moments, "        ", online)
                for s in reductions:
                    if s.var in online:  # each lane's sum brought to the row's max (a lane that saw none adds 0)
                        lines += _online_merge(f"acc_{s.var}", f"acc_{online[s.var].var}", s.var,
                                               online[s.var].var, "    ")
                        continue
                    if s.var not in moments:
                        lines.append(f"    {s.var} = {_FOLD[s.reduce]}(acc_{s.var}, 1)[:, None]")
                        continue
                    m2 = moments[s.var].var
                    lines += [f"    {s.var} = tl.sum(n_{s.var} * mean_{s.var}, 1)[:, None]",
                              f"    spread = mean_{s.var} - {s.var} / {float(length)!r}",
                              f"    {m2} = tl.sum(m2_{s.var} + n_{s.var} * spread * spread, 1)[:, None]"]
            lines += rows.row_lines(level)
        if rows.full_outputs:
            lines += [f"    for start in range(0, {length}, BLOCK_C):  # the outputs",
                      "        j = start + tl.arange(0, BLOCK_C)[None, :]", f"        mask = row_mask & (j < {length})"]
            lines += rows.outputs("        ")
    lines += [f"    tl.store(out{k}_ptr + r, {o.var}, mask=row_mask)" for k, o in enumerate(group.outputs)
              if o.kind == "row"]
    return lines


def workspaces(group: Group, chunk: int, last: int | None = None) -> list[tuple[str, tuple[int, int]]]:
    """The split variant's partial-result buffers (name, [rows, chunks]) of the levels up to `last`
    (default: all), level by level: the order of the kernels' parameters and of the launches' arguments."""
    shape = (group.row_count, math.ceil(group.row_length / chunk))
    last = group.levels() if last is None else last
    return [(f"ws_{s.var}", shape) for level in range(1, last + 1) for s in group.reductions(level)]


SPLIT_PARAMS = ["n_rows", "CHUNK: tl.constexpr", "BLOCK_C: tl.constexpr", "NCHUNKS: tl.constexpr",
                "NCHUNKS_P2: tl.constexpr"]


def split_passes(group: Group) -> list[tuple[int, list[Step], int]]:
    """The split variant's passes over the row: (level, the reductions it accumulates, the last level whose
    workspaces its kernel takes). A sum of squares about a row mean (`Group.moments`) is accumulated in the
    pass of that mean's sum, Welford per lane and per chunk, so its own level needs no pass: a training-mode
    batch norm reads its input twice (statistics, outputs), not three times."""
    moments = group.moments()
    hoisted = {s.var for s in moments.values()}
    passes = []
    for level in range(1, group.levels() + 1):
        reductions = [s for s in group.reductions(level) if s.var not in hoisted]
        if reductions:
            passes.append((level, reductions, level + 1 if any(s.var in moments for s in reductions) else level))
    return passes


def _split_kernels(group: Group, lay: Layout) -> list[str]:
    """Few long rows: each row cut into NCHUNKS chunks, a program per (row, chunk).

    One kernel per pass (`split_passes`) writes each chunk's partial results to workspaces `ws_<var>`
    [rows, NCHUNKS]; later kernels fold the partials of the levels before theirs (NCHUNKS values per row)
    and go on; the last kernel writes the outputs, chunk by chunk. A sum with a moment stores the chunk's
    sum and its sum of squared deviations about the chunk's own mean; the fold merges them as Chan et al. do.
    """
    inputs, outputs = _pointers(group)
    rows = _Rows(group, lay)
    length, levels = rows.length, group.levels()
    moments = group.moments()
    program_rows = "tl.program_id(0) + tl.arange(0, 1)[:, None]"
    chunk_loop = ["    for start in range(0, CHUNK, BLOCK_C):",
                  "        j = tl.program_id(1) * CHUNK + start + tl.arange(0, BLOCK_C)[None, :]",
                  f"        mask = row_mask & (j < {length})"]

    def pointers(last: int) -> list[str]:  # the workspaces' parameters; CHUNK is a launch constant
        return [f"{ws}_ptr" for ws, _ in workspaces(group, 1, last)]

    def partials(var: str, other: str = "0.0") -> str:  # a row's partial results of `var`, one per chunk
        return f"tl.load(ws_{var}_ptr + r * NCHUNKS + k, mask=row_mask & (k < NCHUNKS), other={other})"

    def fold_partials(below: int) -> list[str]:
        return _fold_lines(group, rows, below, partials, {}, "    ")

    def store_partials(reductions: list[Step]) -> list[str]:
        return _store_lines(reductions, moments, {}, "ws_{}_ptr + r * NCHUNKS + tl.program_id(1)", "    ")

    kernels, passes = [], split_passes(group)
    for number, (level, reductions, last) in enumerate(passes, 1):
        welford = [moments[s.var].var for s in reductions if s.var in moments]
        lines = rows.start(f"{group.name}_pass{level}_kernel", inputs + pointers(last) + SPLIT_PARAMS,
                           f"pass {number} of {len(passes)}: one chunk's partial results" + (
                               f", with {', '.join(welford)} (Welford per lane)" if welford else ""), program_rows)
        lines += rows.row_lines(0) + fold_partials(level - 1)
        lines += _accumulators(reductions, moments, {}, "1, BLOCK_C", "    ")
        lines += chunk_loop + rows.accumulate(reductions, moments, "        ")
        kernels += lines + store_partials(reductions) + ["", ""]
    lines = rows.start(f"{group.name}_kernel", inputs + pointers(levels) + outputs + SPLIT_PARAMS,
                       "the outputs of one chunk from the folded partials", program_rows)
    lines += rows.row_lines(0) + fold_partials(levels)
    return kernels + lines + _chunk_outputs(rows, chunk_loop, "tl.program_id(1)", "    ")


LAGGED_PARAMS = ["ticket_ptr", "count_ptr"] + SPLIT_PARAMS + ["LAG: tl.constexpr"]


def _lagged_kernel(group: Group, lay: Layout) -> list[str]:
    """Many long rows, one pass of statistics: one persistent kernel that takes (pass, row, chunk) tickets in order
    from a counter in global memory. A row's statistics ticket for a chunk stores its partial results and counts
    itself on the row's counter; its output ticket for that chunk waits on that counter until all NCHUNKS chunks
    are in, folds their partials and writes the chunk's outputs. Tickets run pass 1 of row r + LAG before the
    outputs of row r, so each row is read a second time about LAG rows after the first, while it is still in L2:
    the row is read once from DRAM where a looped kernel, which cannot keep it, reads it twice. An output ticket
    only waits on statistics tickets handed out before it, to programs already running that never wait: no
    program waits on one that cannot run (and in Triton's interpreter, where programs run one after another, the
    first program takes every ticket in order)."""
    inputs, outputs = _pointers(group)
    rows = _Rows(group, lay)
    length = rows.length
    moments, online = group.moments(), group.online_sums()
    (level,) = group.statistics_levels()
    hoisted = {s.var for s in moments.values()} | {s.var for s in online.values()}
    reductions = [s for s in group.reductions(level) if s.var not in hoisted]
    riders = [moments[s.var].var for s in reductions if s.var in moments] + [
        online[s.var].var for s in reductions if s.var in online]
    params = inputs + [f"{ws}_ptr" for ws, _ in workspaces(group, 1)] + outputs + LAGGED_PARAMS
    lines = ["@triton.jit", f"def {group.name}_kernel({', '.join(params)}):",
             "    # " + kernel_header(group) + f"; rows of {length} reduced element(s) in chunks, persistent: "
             "each ticket is one chunk's statistics or one chunk's outputs" + (
                 f" ({', '.join(riders)} in the pass of the statistics they ride with)" if riders else "")]
    lines += inputs_doc(group)
    lines += ["    lead = tl.minimum(n_rows, LAG)  # rows whose statistics come first",
              "    paired = 2 * (n_rows - lead)  # then statistics of row lead + i, outputs of row i, in turn",
              "    t = tl.atomic_add(ticket_ptr, 1)",
              "    while t < 2 * n_rows * NCHUNKS:",
              "        slot = t // NCHUNKS",
              "        c = t % NCHUNKS",
              "        i = slot - lead",
              "        statistics = (slot < lead) | ((i >= 0) & (i < paired) & (i % 2 == 0))",
              "        row = tl.where(slot < lead, slot, tl.where(i < paired, tl.where(i % 2 == 0, lead + i // 2, "
              "i // 2), n_rows - lead + i - paired))"]
    lines += rows.row_start("row + tl.arange(0, 1)[:, None]", "        ")
    lines += rows.row_lines(0, "        ")
    chunk_loop = ["            for start in range(0, CHUNK, BLOCK_C):",
                  "                j = c * CHUNK + start + tl.arange(0, BLOCK_C)[None, :]",
                  f"                mask = row_mask & (j < {length})"]
    lines.append("        if statistics:")
    lines += _accumulators(reductions, moments, online, "1, BLOCK_C", "            ")
    lines += chunk_loop + rows.accumulate(reductions, moments, "                ", online)
    lines += _store_lines(reductions, moments, online, "ws_{}_ptr + r * NCHUNKS + c", "            ", "lane_spread")
    lines += ["            tl.atomic_add(count_ptr + row, 1)  # after the stores (release)",
              "        else:",
              "            while tl.atomic_add(count_ptr + row, 0) < NCHUNKS:  # the row's statistics, every chunk's",
              "                pass"]

    def partials(var: str, other: str = "0.0") -> str:  # past L1: other SMs wrote them
        return (f"tl.load(ws_{var}_ptr + r * NCHUNKS + k, mask=row_mask & (k < NCHUNKS), other={other}, "
                'cache_modifier=".cg")')
    lines += _fold_lines(group, rows, group.levels(), partials, online, "            ")
    # the row's second read and the outputs go first from the L2, so the rows read ahead stay in it
    return lines + _chunk_outputs(rows, chunk_loop, "c", "            ", "evict_first") + [
        "        t = tl.atomic_add(ticket_ptr, 1)"]


def _chunk_outputs(rows: _Rows, chunk_loop: list[str], chunk: str, indent: str, evict: str = "") -> list[str]:
    """A chunk's full-shaped outputs (`chunk_loop`: the loop over its columns; `evict`: the eviction policy of their
    loads and stores), and the row's own outputs written by the first chunk's program (`chunk`: the chunk's
    index)."""
    lines = chunk_loop + rows.outputs(indent + "    ", evict) if rows.full_outputs else []
    row_outputs = [(k, o) for k, o in enumerate(rows.group.outputs) if o.kind == "row"]
    if row_outputs:
        lines.append(f"{indent}first = (r * 0 + {chunk}) == 0")
        lines += [f"{indent}tl.store(out{k}_ptr + r, {o.var}, mask=row_mask & first)" for k, o in row_outputs]
    return lines


def _accumulators(reductions: list[Step], moments: dict[str, Step], online: dict[str, Step], shape: str,
                  indent: str) -> list[str]:
    """A pass's accumulators per lane: a Welford count, mean and squares for a sum with a moment, the running
    max and its sum of exponentials for a max with an online sum, else the reduction's identity."""
    lines = []
    for s in reductions:
        names = ["n_", "mean_", "m2_"] if s.var in moments else ["acc_"]
        lines += [f"{indent}{name}{s.var} = tl.full([{shape}], {_IDENTITY[s.reduce]}, tl.float32)" for name in names]
        if s.var in online:
            lines.append(f"{indent}acc_{online[s.var].var} = tl.full([{shape}], 0.0, tl.float32)")
    return lines


def _fold_lines(group: Group, rows: _Rows, below: int, partials, online: dict[str, Step],
                indent: str) -> list[str]:
    """The row's statistics of the levels up to `below` from its chunks' partial results (`partials(var, other)`:
    a [1, NCHUNKS_P2] load of them), then each level's row steps. A sum with a moment merges the chunks' sums and
    sums of squares about their own means as Chan et al. do; a max with an online sum brings each chunk's sum of
    exponentials to the row's max (a chunk whose max is the row's adds its own: no exp(-inf - -inf))."""
    moments = group.moments()
    hoisted = {s.var for s in moments.values()} | {s.var for s in online.values()}
    length = rows.length
    lines = [f"{indent}k = tl.arange(0, NCHUNKS_P2)[None, :]"] if below >= 1 else []
    if any(s.var in moments for level in range(1, below + 1) for s in group.reductions(level)):
        lines.append(f"{indent}counts = tl.maximum(tl.minimum(CHUNK, {length} - k * CHUNK), 1).to(tl.float32)")
    for level in range(1, below + 1):
        for s in group.reductions(level):
            if s.var in hoisted:
                continue  # folded with its sum, or with its max
            if s.var in online:
                total = online[s.var].var
                lines += [f"{indent}part_{s.var} = {partials(s.var, _IDENTITY['max'])}",
                          f"{indent}part_{total} = {partials(total)}"]
                lines += _online_merge(f"part_{s.var}", f"part_{total}", s.var, total, indent)
                continue
            lines.append(f"{indent}{s.var} = {_FOLD[s.reduce]}({partials(s.var, _IDENTITY[s.reduce])}, 1)[:, None]")
            if s.var in moments:  # each chunk's mean against the row's, weighted by the chunk's count
                m2 = moments[s.var].var
                lines += [f"{indent}spread = tl.where(k < NCHUNKS, {partials(s.var)} / counts - {s.var} / "
                          f"{float(length)!r}, 0.0)",
                          f"{indent}{m2} = tl.sum({partials(m2)} + counts * spread * spread, 1)[:, None]"]
        lines += rows.row_lines(level, indent)
    return lines


def _online_merge(maxes: str, totals: str, into_max: str, into_total: str, indent: str) -> list[str]:
    """Running maxima and their sums of exponentials (each relative to its own max) merged along axis 1: the max of
    the maxima, and each sum brought to it. A sum whose max is the merged one adds itself as it is, so one that saw
    only -inf adds its 0 instead of 0 * exp(-inf - -inf) = NaN."""
    return [f"{indent}{into_max} = tl.max({maxes}, 1)[:, None]",
            f"{indent}{into_total} = tl.sum(tl.where({maxes} == {into_max}, {totals}, {totals} * "
            f"tl.exp({maxes} - {into_max})), 1)[:, None]"]


def _store_lines(reductions: list[Step], moments: dict[str, Step], online: dict[str, Step], where: str,
                 indent: str, spread: str = "spread") -> list[str]:
    """A chunk's partial results, each stored at `where` (a pointer expression with `{}` for the var): a
    reduction's fold of its lanes; a sum with a moment, the chunk's sum and its squares about its own mean (`spread`
    names the lanes' means less the chunk's: the lagged kernel's branches must not share a name of two shapes); a
    max with an online sum, the chunk's max and its sum of exponentials relative to that max."""
    lines = []
    for s in reductions:
        if s.var in online:
            total = online[s.var].var
            lines += _online_merge(f"acc_{s.var}", f"acc_{total}", "chunk_max", "chunk_total", indent)
            lines += [f"{indent}tl.store({where.format(s.var)}, chunk_max, mask=row_mask)",
                      f"{indent}tl.store({where.format(total)}, chunk_total, mask=row_mask)"]
        elif s.var not in moments:
            lines.append(f"{indent}tl.store({where.format(s.var)}, {_FOLD[s.reduce]}(acc_{s.var}, 1)[:, None], "
                         "mask=row_mask)")
        else:
            m2 = moments[s.var].var  # the chunk's lanes merged: its sum, and squares about its own mean
            lines += [f"{indent}chunk_sum = tl.sum(n_{s.var} * mean_{s.var}, 1)[:, None]",
                      f"{indent}{spread} = mean_{s.var} - chunk_sum / tl.maximum(tl.sum(n_{s.var}, 1)[:, None], 1.0)",
                      f"{indent}tl.store({where.format(s.var)}, chunk_sum, mask=row_mask)",
                      f"{indent}tl.store({where.format(m2)}, tl.sum(m2_{s.var} + n_{s.var} * {spread} * {spread}, "
                      "1)[:, None], mask=row_mask)"]
    return lines


def features(group: Group) -> dict:
    """What a launch-configuration model would learn from (recorded with every measured time). `row_stride` only
    where rows are strided (neighbouring rows contiguous instead), so that the records of every other kernel, and
    the instances they make in a launch dataset, stay what they were before it was recorded."""
    out = {"kind": group.kind, "elements": math.prod(group.logical), "row_length": group.row_length,
           "rows": group.row_count, "inputs": len(group.inputs), "outputs": len(group.outputs),
           "steps": len(group.steps), "levels": group.levels(), "bytes": group.bytes_moved()}
    return out | ({"row_stride": group.row_stride} if group.row_stride > 1 else {})


# -- the wrapper ----------------------------------------------------------------------------------
def _dtype_of(group: Group, node) -> str:
    """An output's dtype as the wrapper writes it: that of the first input traced with the output's dtype (the
    model's precision, whatever a harness casts it to), else the traced dtype itself. Not simply the first input's:
    that may be a boolean mask (`masked_fill`) or a float64 tensor cast down inside the chain."""
    wanted = meta(node).dtype if meta(node) is not None else None
    for item in group.inputs:
        if wanted is None or item.dtype == wanted:
            return f"{item.var}.dtype"
    return str(wanted)


def render(group: Group, config: dict) -> str:
    """The Triton kernel(s) and the Python wrapper that launches them, as source."""
    lay = layout(group)
    variant = config.get("variant")
    if group.kind == "pointwise":
        kernel = _pointwise_kernel(group, lay, "PROGRAMS" in config)
    elif variant == "split":
        kernel = _split_kernels(group, lay)
    elif variant == "lagged":
        kernel = _lagged_kernel(group, lay)
    else:
        kernel = _row_kernel(group, lay, variant == "looped")
    args = [i.var for i in group.inputs]
    outs = output_names(len(group.outputs))
    launch = ", ".join(args + outs)
    warps = config["num_warps"]
    if group.kind == "pointwise":
        n = math.prod(group.logical)
        grid, extra = (f"{config['PROGRAMS']}", f", PROGRAMS={config['PROGRAMS']}") if "PROGRAMS" in config else (
            f"triton.cdiv({n}, {config['BLOCK']})", "")
        launches = [f"    {group.name}_kernel[({grid},)]({launch}, {n}, BLOCK={config['BLOCK']}{extra}, num_warps={warps})"]
    elif variant == "split":
        launches = _split_launches(group, config, args, outs)
    elif variant == "lagged":
        launches = _lagged_launches(group, config, args, outs)
    else:
        rows = group.row_count
        launches = [f"    {group.name}_kernel[(triton.cdiv({rows}, {config['BLOCK_R']}),)]({launch}, {rows}, "
                    f"BLOCK_R={config['BLOCK_R']}, BLOCK_C={config['BLOCK_C']}, num_warps={warps})"]
    wrapper = Wrapper(
        name=group.name, args=args, shapes=[i.shape for i in group.inputs],
        doc=f'{group.fused_ops}: {"Triton kernels" if variant == "split" else "one Triton kernel"} '
            f'(launch: {describe_config(config)}).',
        outputs=[(out.shape, "torch.int64" if out.integer else _dtype_of(group, out.node)) for out in group.outputs],
        device=f"{args[0]}.device", launch=launches)
    return "\n".join(kernel + ["", ""] + python_wrapper(wrapper)) + "\n"


def _split_launches(group: Group, config: dict, args: list[str], outs: list[str]) -> list[str]:
    """Workspaces for the partial results, a launch per pass, then the output launch."""
    rows, chunks = group.row_count, math.ceil(group.row_length / config["CHUNK"])
    constants = (f"CHUNK={config['CHUNK']}, BLOCK_C={config['BLOCK_C']}, NCHUNKS={chunks}, "
                 f"NCHUNKS_P2={next_pow2(chunks)}, num_warps={config['num_warps']}")
    lines = [f"    # {chunks} chunks of {config['CHUNK']} per row; a partial result per (row, chunk) and reduction"]
    spaces = workspaces(group, config["CHUNK"])
    lines += [f"    {ws} = torch.empty({shape!r}, device={args[0]}.device, dtype=torch.float32)" for ws, shape in spaces]
    for level, _, last in split_passes(group):
        upto = [ws for ws, _ in workspaces(group, config["CHUNK"], last)]
        lines.append(f"    {group.name}_pass{level}_kernel[({rows}, {chunks})]({', '.join(args + upto)}, {rows}, "
                     f"{constants})")
    grid = chunks if any(o.kind == "full" for o in group.outputs) else 1
    names = [ws for ws, _ in spaces]
    lines.append(f"    {group.name}_kernel[({rows}, {grid})]({', '.join(args + names + outs)}, {rows}, {constants})")
    return lines


def _lagged_launches(group: Group, config: dict, args: list[str], outs: list[str]) -> list[str]:
    """Workspaces for the partial results, the ticket and the rows' counters (zeroed each call), one launch."""
    rows, chunks = group.row_count, math.ceil(group.row_length / config["CHUNK"])
    device = f"{args[0]}.device"
    lines = [f"    # {chunks} chunks of {config['CHUNK']} per row; tickets: each chunk's statistics, then its outputs",
             f"    # {config['LAG']} rows later"]
    spaces = workspaces(group, config["CHUNK"])
    lines += [f"    {ws} = torch.empty({shape!r}, device={device}, dtype=torch.float32)" for ws, shape in spaces]
    lines.append(f"    counters = torch.zeros({rows + 1}, device={device}, dtype=torch.int32)  # the ticket, then a "
                 "count per row")
    pointers = ", ".join(args + [ws for ws, _ in spaces] + outs)
    lines.append(f"    {group.name}_kernel[({config['PROGRAMS']},)]({pointers}, counters, "
                 f"counters[1:], {rows}, CHUNK={config['CHUNK']}, BLOCK_C={config['BLOCK_C']}, NCHUNKS={chunks}, "
                 f"NCHUNKS_P2={next_pow2(chunks)}, LAG={config['LAG']}, num_warps={config['num_warps']})")
    return lines
