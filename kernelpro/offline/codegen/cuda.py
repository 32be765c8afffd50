"""Render fused groups as CUDA C++ instead of Triton: the `cuda_kernels` move's backend.

The same groups (`kernelpro.offline.fuse.partition`) as the Triton generator, float32 only:

- **pointwise**: each thread handles `vec` consecutive elements; the inputs read at
  the output's own offsets and the outputs move as one 16-byte `float4` when every
  such pointer is 16-byte aligned and the size is a multiple of 4 (the launcher
  checks and otherwise runs the `vec = 1` instance); broadcast inputs are scalar
  loads that stay in cache;
- **row**: a warp per row (`rows_per_block` rows per block) or a block per row;
  each thread walks the row `items` apart, reductions finish with warp shuffles
  (`__shfl_xor_sync`) and, across warps, one shared-memory exchange. Rows of up to
  16 items per thread are read once into registers and every pass reuses them;
- **split** (few long rows): a block per (chunk, row), a kernel per reduction level
  writing partial results to a workspace, a last one writing the outputs; `float4`
  loads and stores when the reduced part is contiguous.

Host launchers take raw pointers and the stream as integers, are `extern "C"` and
return NULL or the CUDA error message, so the .cu source needs no torch header and no
Python binding: `load_inline` builds it with one nvcc run of seconds, and the candidate
opens it with ctypes (`wrapper.NATIVE_HELPER`). Expressions come from the Triton steps, translated by
their syntax tree (`kernelpro.offline.codegen.c_expr`).
"""

from __future__ import annotations

import hashlib
import math
import re

import torch

from kernelpro.offline.codegen import triton as triton_gen
from kernelpro.offline.codegen.c_expr import c_expr
from kernelpro.offline.ir import windows
from kernelpro.offline.fuse.groups import Group, Step
from kernelpro.launch.device import Device, wave_fill
from kernelpro.offline.codegen.common import (Layout, RowSpace, describe_config, index_lines, inputs_doc, kernel_header,
                                              layout, needed_steps, offset_expr)
from kernelpro.offline.codegen.triton_configs import split_chunks
from kernelpro.offline.ir.windows import Dialect
from kernelpro.offline.codegen.wrapper import Wrapper, native_loader, output_names, python_wrapper

CACHE_ITEMS = 16  # a row of at most this many items per thread stays in registers between passes

# -- indexing -------------------------------------------------------------------------------------
C = Dialect(divide="/", integer="LL", declare="const long long {name} = {expr};")
WINDOWS = windows.Syntax(  # how a CUDA kernel reads a pool's window (`kernelpro.offline.ir.windows`)
    dialect=C, start="float {acc} = {value};", load="const float {tap} = ({mask}) ? __ldg({ptr} + {offset}) : {other};",
    plain="const float {tap} = __ldg({ptr} + {offset});",
    take_max="{acc} = ({tap} > {acc} || {tap} != {tap}) ? {tap} : {acc};", take_sum="{acc} = {acc} + {tap};",
    both="({a}) && ({b})", lowest="(-INFINITY)", zero="0.0f", minimum="min({a}, {b})", maximum="max({a}, {b})",
    divide="{acc} = {acc} / (float)({count});", divide_number="{acc} = {acc} / {number}f;",
    loop="for (long long {i} = 0; {i} < {n}; ++{i}) {{", end="}")


def _unravel(lay: Layout, reduced: bool, source: str, prefix: str) -> tuple[list[str], dict[int, str]]:
    return index_lines(lay, reduced, source, prefix, C)


def _offset(strides: list[int], names: dict[int, str], dims: list[int]) -> str:
    return offset_expr(strides, names, dims, C)


def _read(item, lay: Layout, names: dict[int, str], dims: list[int]) -> list[str]:
    """Lines that leave a full-shaped input's value at these indices in `item.var`: one load, or the
    maximum or average of a pool's window (`kernelpro.offline.ir.windows`)."""
    offset = _offset(lay.strides[item.var], names, dims)
    if item.window is None:
        return [f"const float {item.var} = __ldg({item.var}_ptr + {offset});"]
    return triton_gen.window_lines(item, lay, names, offset, "", WINDOWS)


def _prune(lines: list[str]) -> list[str]:
    """Drop index variables that nothing reads (nvcc warns about them), and then those that only
    the dropped ones read."""
    while True:
        text = "\n".join(lines)
        kept = []
        for line in lines:
            match = re.match(r"\s*const long long (\w+) = ", line)
            if match and len(re.findall(rf"\b{match.group(1)}\b", text)) == 1:
                continue
            kept.append(line)
        if len(kept) == len(lines):
            return kept
        lines = kept


def _params(group: Group) -> list[str]:
    return [f"const float* __restrict__ {i.var}_ptr" for i in group.inputs] + [
        f"{'long long' if o.integer else 'float'}* __restrict__ out{k}_ptr" for k, o in enumerate(group.outputs)]


def _comment(group: Group) -> list[str]:
    return [f"// {group.name}: {kernel_header(group)}"] + inputs_doc(group, comment="//")


# -- pointwise ------------------------------------------------------------------------------------
def _pointwise(group: Group, config: dict) -> tuple[list[str], list[str]]:
    lay = layout(group)
    n = math.prod(group.logical)
    dims = list(range(len(lay.sizes)))
    direct = [i for i in group.inputs if lay.strides[i.var] == lay.strides["full"] and i.window is None]  # at the
    # output offset (a window whose first tap moves like the output, stride 1, still reads its taps)
    threads = config["threads"]
    kernel = _comment(group) + [
        "template <int VEC>",
        f"__global__ void __launch_bounds__({threads}) {group.name}_kernel({', '.join(_params(group))}) {{",
        "    const long long base = ((long long)blockIdx.x * blockDim.x + threadIdx.x) * VEC;",
        f"    if (base >= {n}LL) return;"]
    for item in direct:
        kernel += [f"    float {item.var}_v[VEC];", f"    kp_load<VEC>({item.var}_v, {item.var}_ptr + base);"]
    kernel += [f"    float out{k}_v[VEC];" for k, o in enumerate(group.outputs)]
    kernel += ["#pragma unroll", "    for (int e = 0; e < VEC; ++e) {", "        const long long idx = base + e;"]
    index, names = _unravel(lay, False, "idx", "i")
    kernel += ["        " + line for line in index]
    for item in group.inputs:
        if item in direct:
            kernel.append(f"        const float {item.var} = {item.var}_v[e];")
        else:
            kernel += ["        " + line for line in _read(item, lay, names, dims)]
    kernel += [f"        const float {s.var} = {c_expr(s.expr)};" for s in group.steps]
    kernel += [f"        out{k}_v[e] = {o.var};" for k, o in enumerate(group.outputs)]
    kernel += ["    }"] + [f"    kp_store<VEC>(out{k}_ptr + base, out{k}_v);" for k in range(len(group.outputs))]
    kernel = _prune(kernel + ["}"])
    vector_pointers = [f"{i.var}" for i in direct] + [f"out{k}" for k in range(len(group.outputs))]
    aligned = " | ".join(vector_pointers)
    args = ", ".join([f"(const float*){i.var}" for i in group.inputs] + [f"(float*)out{k}" for k in
                                                                         range(len(group.outputs))])
    vectors = n % 4 == 0 and config["vec"] == 4  # then only the pointers' alignment is left to check
    launcher = [f"    const bool vec4 = (({aligned}) & 15) == 0;" if vectors else "    const bool vec4 = false;",
                f"    const long long per_block = (long long){threads} * (vec4 ? 4 : 1);",
                f"    const unsigned blocks = (unsigned)(({n}LL + per_block - 1) / per_block);",
                f"    if (vec4) {group.name}_kernel<4><<<blocks, {threads}, 0, (cudaStream_t)stream>>>({args});",
                f"    else {group.name}_kernel<1><<<blocks, {threads}, 0, (cudaStream_t)stream>>>({args});"]
    return kernel, launcher


# -- rows -----------------------------------------------------------------------------------------
_IDENTITY = {"sum": "0.0f", "max": "(-INFINITY)", "min": "INFINITY", "argmax": "(-INFINITY)", "argmin": "INFINITY"}
_COMBINE = {"sum": "{a} + {b}", "max": "fmaxf({a}, {b})", "min": "fminf({a}, {b})"}


_OP_CODE = {"sum": 0, "max": 1, "min": 2}  # kp_combine's OP


def _row_space(group: Group) -> RowSpace:
    return RowSpace(group, "row", "c", C)


def _row(group: Group, config: dict) -> tuple[list[str], list[str]]:
    space = _row_space(group)
    lay, keep, red, names, full_inputs = space.lay, space.keep, space.red, space.names, space.full_inputs
    row_index, keep_names, col_index = space.row_index, space.keep_names, space.col_index
    length, rows = group.row_length, group.row_count
    warp = config["variant"] == "warp"
    threads = 32 * config["rows_per_block"] if warp else config["threads"]
    width = 32 if warp else threads
    items = math.ceil(length / width)
    cached = items <= CACHE_ITEMS
    kernel = _comment(group) + [
        f"// rows of {length} element(s): {'a warp' if warp else 'a block'} per row, {items} per thread"
        + (", read once into registers" if cached else ", re-read every pass"),
        f"__global__ void __launch_bounds__({threads}) {group.name}_kernel({', '.join(_params(group))}) {{"]
    if warp:
        kernel += [f"    const long long row = (long long)blockIdx.x * {config['rows_per_block']} + threadIdx.x / 32;",
                   "    const int lane = threadIdx.x % 32;", f"    if (row >= {rows}LL) return;  // the whole warp"]
    else:
        kernel += ["    const long long row = blockIdx.x;", "    const int lane = threadIdx.x;"]
    kernel += ["    " + line for line in row_index]
    for item in group.inputs:
        if item.kind == "row":
            kernel.append(f"    const float {item.var} = __ldg({item.var}_ptr + "
                          f"{_offset(lay.strides[item.var], keep_names, keep)});")

    # re-reading the row: a sum of squares about a row mean comes from the pass of that mean's sum
    # (Welford per thread, merged across the row with two block sums), one read of the row fewer
    moments = {} if cached else group.moments()
    hoisted = {s.var for s in moments.values()}
    pass_reductions = [[s for s in group.reductions(level) if s.var not in hoisted]
                       for level in range(1, group.levels() + 1)]
    passes = [needed_steps(group, [s.operand for s in reductions], "full") for reductions in pass_reductions]
    read_by_passes = {d for chosen in passes for s in chosen for d in s.deps} | {
        s.operand for s in group.steps if s.reduce}
    cache = [i for i in full_inputs if i.var in read_by_passes] if cached else []  # the rest: read where used

    # a row that the threads cover exactly needs no bounds check, and without it the compiler can
    # issue the unrolled iterations' loads together instead of one load (and a branch) at a time
    bound = [f"        if (c >= {length}LL) break;"] if length % width else []

    def loop(body: list[str], loads: list) -> list[str]:
        out = ["#pragma unroll" if cached else "#pragma unroll 4", f"    for (int t = 0; t < {items}; ++t) {{",
               f"        const long long c = lane + (long long)t * {width};"] + bound
        out += ["        " + line for line in col_index]
        for item in loads:
            if item in cache:
                out.append(f"        const float {item.var} = {item.var}_c[t];")
            else:
                out += ["        " + line for line in _read(item, lay, names, keep + red)]
        return _prune(out + ["        " + line for line in body] + ["    }"])  # the loop is its own scope

    if cache:  # one read of the row
        kernel += [f"    float {i.var}_c[{items}];" for i in cache]
        kernel += loop([line for i in cache for line in (
            [f"{i.var}_c[t] = __ldg({i.var}_ptr + {_offset(lay.strides[i.var], names, keep + red)});"]
            if i.window is None else _read(i, lay, names, keep + red) + [f"{i.var}_c[t] = {i.var};"])], [])
    row_steps = [s for s in group.steps if s.kind == "row" and not s.reduce]

    def row_lines(level: int) -> list[str]:  # the per-row values once the passes up to `level` are done
        return [f"    const float {s.var} = {c_expr(s.expr)};" for s in row_steps if s.level == level]

    kernel += row_lines(0)

    def steps(chosen: list[Step]) -> list[str]:
        return [f"const float {s.var} = {c_expr(s.expr)};" for s in chosen if not s.reduce]

    def used(chosen: list[Step], roots: list[str]) -> list:
        wanted = {d for s in chosen for d in s.deps} | set(roots)
        return [i for i in full_inputs if i.var in wanted]

    for level, (chosen, reductions) in enumerate(zip(passes, pass_reductions), start=1):
        if not reductions:  # its only reduction came with the pass before (a moment)
            kernel += row_lines(level)
            continue
        roots = [s.operand for s in reductions]
        body = steps(chosen)
        for s in reductions:
            if s.var in moments:  # Welford: this thread has seen t + 1 values of the row
                kernel.append(f"    float n_{s.var} = 0.0f, mean_{s.var} = 0.0f, m2_{s.var} = 0.0f;")
                body += [f"const float delta_{s.var} = {s.operand} - mean_{s.var};", f"n_{s.var} += 1.0f;",
                         f"mean_{s.var} += delta_{s.var} * kp_div(1.0f, n_{s.var});",
                         f"m2_{s.var} += delta_{s.var} * ({s.operand} - mean_{s.var});"]
            elif s.reduce in ("argmax", "argmin"):
                kernel += [f"    float acc_{s.var} = {_IDENTITY[s.reduce]};", f"    long long at_{s.var} = KP_NO_INDEX;"]
                better = ">" if s.reduce == "argmax" else "<"
                body.append(f"if (t == 0 || {s.operand} {better} acc_{s.var}) "
                            f"{{ acc_{s.var} = {s.operand}; at_{s.var} = c; }}")
            else:
                kernel.append(f"    float acc_{s.var} = {_IDENTITY[s.reduce]};")
                body.append(f"acc_{s.var} = {_COMBINE[s.reduce].format(a=f'acc_{s.var}', b=s.operand)};")
        kernel += loop(body, used(chosen, roots))
        for s in reductions:
            if s.var in moments:
                block_sum = "kp_warp<0>" if warp else f"kp_block<{threads}, 0>"
                m2 = moments[s.var].var
                kernel += [f"    const float {s.var} = {block_sum}(n_{s.var} * mean_{s.var});",
                           f"    const float spread_{s.var} = mean_{s.var} - {s.var} / {float(length)!r}f;",
                           f"    const float {m2} = {block_sum}(m2_{s.var} + n_{s.var} * spread_{s.var} * "
                           f"spread_{s.var});"]
            elif s.reduce in ("argmax", "argmin"):
                largest = int(s.reduce == "argmax")
                call = f"kp_warp_arg<{largest}>" if warp else f"kp_block_arg<{threads}, {largest}>"
                kernel += [f"    {call}(acc_{s.var}, at_{s.var});", f"    const float {s.var} = (float)at_{s.var};"]
            else:
                call = f"kp_warp<{_OP_CODE[s.reduce]}>" if warp else f"kp_block<{threads}, {_OP_CODE[s.reduce]}>"
                kernel.append(f"    const float {s.var} = {call}(acc_{s.var});")
        kernel += row_lines(level)
    full_outputs = [(k, o) for k, o in enumerate(group.outputs) if o.kind == "full"]
    if full_outputs:
        roots = [o.var for _, o in full_outputs]
        chosen = needed_steps(group, roots, "full")
        out_offset = _offset(lay.strides["full"], names, keep + red)
        body = steps(chosen) + [f"out{k}_ptr[{out_offset}] = {o.var};" for k, o in full_outputs]
        kernel += loop(body, used(chosen, roots))
    row_outputs = [(k, o) for k, o in enumerate(group.outputs) if o.kind == "row"]
    if row_outputs:
        kernel.append("    if (lane == 0) {")
        kernel += [f"        out{k}_ptr[row] = {'(long long)' if o.integer else ''}{o.var};" for k, o in row_outputs]
        kernel.append("    }")
    kernel = _prune(kernel + ["}"])
    args = ", ".join([f"(const float*){i.var}" for i in group.inputs] + [
        f"({'long long' if o.integer else 'float'}*)out{k}" for k, o in enumerate(group.outputs)])
    blocks = math.ceil(rows / config["rows_per_block"]) if warp else rows
    launcher = [f"    {group.name}_kernel<<<{blocks}u, {threads}, 0, (cudaStream_t)stream>>>({args});"]
    return kernel, launcher


def workspaces(group: Group, config: dict, last: int | None = None) -> list[tuple[str, tuple[int, int]]]:
    """The split variant's partial-result buffers (name, [rows, chunks]) up to level `last`; none otherwise."""
    return triton_gen.workspaces(group, config["chunk"], last) if config.get("variant") == "split" else []


def _split(group: Group, config: dict) -> tuple[list[str], list[str]]:
    """Few long rows: a block per (chunk, row); a kernel per reduction level writes each chunk's partial
    results, the next ones fold them (a block reduction over the chunks), the last writes the outputs."""
    space = _row_space(group)
    lay, keep, red, names, full_inputs = space.lay, space.keep, space.red, space.names, space.full_inputs
    row_index, keep_names, col_index = space.row_index, space.keep_names, space.col_index
    length, rows, levels = group.row_length, group.row_count, group.levels()
    threads, chunk = config["threads"], config["chunk"]
    chunks = math.ceil(length / chunk)
    row_steps = [s for s in group.steps if s.kind == "row" and not s.reduce]
    reductions = group.reductions

    def start(name: str, last: int, outputs: bool, what: str) -> list[str]:
        params = [f"const float* __restrict__ {i.var}_ptr" for i in group.inputs]
        params += [f"float* __restrict__ {ws}" for ws, _ in workspaces(group, config, min(last, levels))]
        if outputs:
            params += [f"{'long long' if o.integer else 'float'}* __restrict__ out{k}_ptr"
                       for k, o in enumerate(group.outputs)]
        lines = _comment(group) + [f"// rows of {length} element(s) in {chunks} chunks of {chunk}, a block per "
                                   f"(chunk, row): {what}",
                                   *template,
                                   f"__global__ void __launch_bounds__({threads}) {name}({', '.join(params)}) {{",
                                   "    const long long row = blockIdx.y;", "    const int lane = threadIdx.x;",
                                   f"    const long long first = (long long)blockIdx.x * {chunk}LL;"]
        lines += ["    " + line for line in row_index]
        lines += [f"    const float {i.var} = __ldg({i.var}_ptr + {_offset(lay.strides[i.var], keep_names, keep)});"
                  for i in group.inputs if i.kind == "row"]
        lines += [f"    const float {s.var} = {c_expr(s.expr)};" for s in row_steps if s.level == 0]
        for level in range(1, last):  # the partial results of the passes before: fold them
            for s in reductions(level):
                lines += [f"    float acc_{s.var} = {_IDENTITY[s.reduce]};",
                          f"    for (int k = lane; k < {chunks}; k += {threads}) "
                          f"acc_{s.var} = {_COMBINE[s.reduce].format(a=f'acc_{s.var}', b=f'ws_{s.var}[row * {chunks}LL + k]')};",
                          f"    const float {s.var} = kp_block<{threads}, {_OP_CODE[s.reduce]}>(acc_{s.var});"]
            lines += [f"    const float {s.var} = {c_expr(s.expr)};" for s in row_steps if s.level == level]
        return lines

    # 16-byte accesses when the reduced part is one contiguous run and every row starts 16-byte aligned (the
    # launcher checks the pointers and otherwise runs the VEC = 1 instance)
    contiguous = lambda strides: strides[red[0]] == 1 and all(strides[d] % 4 == 0 for d in keep)  # noqa: E731
    vector = len(red) == 1 and length % 4 == 0 and contiguous(lay.strides["full"])
    vectors = [i for i in full_inputs if contiguous(lay.strides[i.var]) and i.window is None] if vector else []
    at_c0 = keep_names | {red[0]: "c0"} if vector else names
    # chunks that the threads cover exactly: a loop of known trip count, with no bound check between the
    # unrolled steps, so their loads go out together
    exact = length % chunk == 0 and chunk % (threads * (4 if vector else 1)) == 0

    def loop(chosen: list[Step], roots: list[str], tail: list[str], stores=()) -> list[str]:
        """The chunk's elements (`c`), `VEC` at a time; `stores`: the (output, var) pairs written."""
        wanted = {d for s in chosen for d in s.deps} | set(roots)
        out = [] if exact else [
            f"    const long long last = first + {chunk}LL < {length}LL ? first + {chunk}LL : {length}LL;"]
        if vector:
            out += ["#pragma unroll 4", f"    for (int t = 0; t < {chunk} / ({threads} * VEC); ++t) {{",
                    f"        const long long c0 = first + ((long long)t * {threads} + lane) * VEC;"] if exact else [
                    "#pragma unroll 2", f"    for (long long c0 = first + (long long)lane * VEC; c0 < last; "
                                        f"c0 += {threads}LL * VEC) {{"]
            for item in [i for i in vectors if i.var in wanted]:
                out += [f"        float {item.var}_v[VEC];", f"        kp_load<VEC>({item.var}_v, {item.var}_ptr + "
                        f"{_offset(lay.strides[item.var], at_c0, keep + red)});"]
            out += [f"        float out{k}_v[VEC];" for k, _ in stores]
            out += ["#pragma unroll", "        for (int e = 0; e < VEC; ++e) {", "            const long long c = c0 + e;"]
        elif exact:
            out += ["#pragma unroll 4", f"    for (int t = 0; t < {chunk // threads}; ++t) {{",
                    f"        const long long c = first + (long long)t * {threads} + lane;"]
        else:
            out += ["#pragma unroll 4", f"    for (long long c = first + lane; c < last; c += {threads}) {{"]
        body = " " * (12 if vector else 8)
        out += [body + line for line in col_index]
        out += [f"{body}const float {i.var} = {i.var}_v[e];" for i in vectors if i.var in wanted]
        out += [body + line for i in full_inputs if i.var in wanted and i not in vectors
                for line in _read(i, lay, names, keep + red)]
        out += [f"{body}const float {s.var} = {c_expr(s.expr)};" for s in chosen if not s.reduce]
        if vector:
            out += [f"{body}out{k}_v[e] = {var};" for k, var in stores]
            out += [body + line for line in tail] + ["        }"]
            at = _offset(lay.strides["full"], at_c0, keep + red)
            out += [f"        kp_store<VEC>(out{k}_ptr + {at}, out{k}_v);" for k, _ in stores]
        else:
            out_offset = _offset(lay.strides["full"], names, keep + red)
            out += [f"{body}out{k}_ptr[{out_offset}] = {var};" for k, var in stores]
            out += [body + line for line in tail]
        return out + ["    }"]

    def launch(name: str, grid: str, args: list[str]) -> str:
        call = f"<<<{grid}, {threads}, 0, (cudaStream_t)stream>>>({', '.join(args)});"
        return f"    if (vec4) {name}<4>{call}\n    else {name}<1>{call}" if vector else f"    {name}{call}"

    template = ["template <int VEC>"] if vector else []

    full_outputs = [(k, o) for k, o in enumerate(group.outputs) if o.kind == "full"]
    aligned = [i.var for i in vectors] + [f"out{k}" for k, _ in full_outputs]
    launcher = [f"    const bool vec4 = (({' | '.join(aligned)}) & 15) == 0;"] if vector else []
    kernel = []
    grid = f"dim3({chunks}u, {rows}u)"
    for level in range(1, levels + 1):
        name = f"{group.name}_pass{level}_kernel"
        lines = start(name, level, False, f"pass {level} of {levels}, one chunk's partial results")
        mine = reductions(level)
        lines += [f"    float acc_{s.var} = {_IDENTITY[s.reduce]};" for s in mine]
        roots = [s.operand for s in mine]
        lines += loop(needed_steps(group, roots, "full"), roots,
                      [f"acc_{s.var} = {_COMBINE[s.reduce].format(a=f'acc_{s.var}', b=s.operand)};" for s in mine])
        for s in mine:
            lines += [f"    const float part_{s.var} = kp_block<{threads}, {_OP_CODE[s.reduce]}>(acc_{s.var});",
                      f"    if (lane == 0) ws_{s.var}[row * {chunks}LL + blockIdx.x] = part_{s.var};"]
        kernel += _prune(lines + ["}"]) + [""]
        args = [f"(const float*){i.var}" for i in group.inputs] + [f"(float*){ws}" for ws, _ in
                                                                    workspaces(group, config, level)]
        launcher.append(launch(name, grid, args))
    lines = start(f"{group.name}_kernel", levels + 1, True, "the outputs from the folded partial results")
    if full_outputs:
        roots = [o.var for _, o in full_outputs]
        lines += loop(needed_steps(group, roots, "full"), roots, [], [(k, o.var) for k, o in full_outputs])
    row_outputs = [(k, o) for k, o in enumerate(group.outputs) if o.kind == "row"]
    if row_outputs:
        lines += ["    if (lane == 0 && blockIdx.x == 0) {"] + [
            f"        out{k}_ptr[row] = {'(long long)' if o.integer else ''}{o.var};" for k, o in row_outputs] + ["    }"]
    kernel += _prune(lines + ["}"])
    args = [f"(const float*){i.var}" for i in group.inputs] + [
        f"(float*){ws}" for ws, _ in workspaces(group, config)] + [
        f"({'long long' if o.integer else 'float'}*)out{k}" for k, o in enumerate(group.outputs)]
    launcher.append(launch(f"{group.name}_kernel", grid if full_outputs else f"dim3(1u, {rows}u)", args))
    return kernel, launcher


# -- launch configurations ------------------------------------------------------------------------
def configs(group: Group, device: Device = Device()) -> list[dict]:
    """Threads per block and elements per thread (pointwise) or the row variant, best first."""
    ranked = []
    if group.kind == "pointwise":
        n = math.prod(group.logical)
        for threads in (128, 256, 512, 1024):
            for vec in (4, 1):
                blocks = math.ceil(n / (threads * vec))
                resident = min(device.threads_per_sm // threads, device.blocks_per_sm)
                tail = wave_fill(blocks / (device.sms * resident))
                score = tail * (1.0 if vec == 4 and n % 4 == 0 else 0.6) * (1.0 if threads == 256 else 0.95)
                ranked.append((round(score, 6), {"threads": threads, "vec": vec}))
    else:
        length, rows = group.row_length, group.row_count
        for per_block in (4, 8, 2, 16):
            items = math.ceil(length / 32)
            waves = rows / per_block / (device.sms * min(device.blocks_per_sm, 64 // per_block))
            tail = min(1.0, waves)
            score = tail * (1.0 if items <= CACHE_ITEMS else 0.5) * (1.0 if length <= 1024 else 0.6)
            ranked.append((round(score, 6), {"variant": "warp", "rows_per_block": per_block}))
        for threads in (128, 256, 512, 1024):
            items = math.ceil(length / threads)
            resident = min(device.threads_per_sm // threads, device.blocks_per_sm)
            tail = min(1.0, rows / (device.sms * resident))
            fill = min(1.0, length / threads)  # lanes with nothing to read are idle
            score = tail * fill * (1.0 if items <= CACHE_ITEMS else 0.5) * (0.9 if length <= 1024 else 1.0)
            ranked.append((round(score, 6), {"variant": "block", "threads": threads}))
        for chunk in split_chunks(group, device):
            for threads in (256, 512, 1024):
                resident = min(device.threads_per_sm // threads, device.blocks_per_sm)
                tail = wave_fill(rows * math.ceil(length / chunk) / (device.sms * resident))
                # the block variant re-reads a long row every pass too; split fills the SMs
                score = tail * min(1.0, chunk / (threads * 8)) / max(1, group.passes()) ** 0.25
                ranked.append((round(score, 6), {"variant": "split", "threads": threads, "chunk": chunk}))
    ranked.sort(key=lambda item: (-item[0], sorted(item[1].items())))
    return [dict(config, score=score) for score, config in ranked]


def features(group: Group) -> dict:
    """The Triton generator's record of the same group (`codegen.triton.features`), marked as a CUDA kernel's."""
    return {"backend": "cuda", **triton_gen.features(group)}


# -- the source -----------------------------------------------------------------------------------
PRELUDE = r'''#include <cuda_runtime.h>
#include <math.h>

#define KP_NO_INDEX 0x7fffffffffffffffLL

// Division as Triton's fp32 `/` compiles it: div.full.f32, full range, within 2 ulp, and without the
// slow-path branch of the IEEE division, which would keep the compiler from issuing an unrolled
// loop's loads together
__device__ __forceinline__ float kp_div(float a, float b) {
    float r;
    asm("div.full.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
    return r;
}
__device__ __forceinline__ float kp_sigmoid(float x) { return kp_div(1.0f, 1.0f + expf(-x)); }

template <int VEC> __device__ __forceinline__ void kp_load(float* dst, const float* src) {
    if constexpr (VEC == 4) *reinterpret_cast<float4*>(dst) = __ldg(reinterpret_cast<const float4*>(src));
    else dst[0] = __ldg(src);
}
template <int VEC> __device__ __forceinline__ void kp_store(float* dst, const float* src) {
    if constexpr (VEC == 4) *reinterpret_cast<float4*>(dst) = *reinterpret_cast<const float4*>(src);
    else dst[0] = src[0];
}

// Warp reductions (OP 0: sum, 1: max, 2: min): five butterfly shuffles leave the result in every lane.
template <int OP> __device__ __forceinline__ float kp_combine(float a, float b) {
    return OP == 0 ? a + b : OP == 1 ? fmaxf(a, b) : fminf(a, b);
}
template <int OP> __device__ __forceinline__ float kp_warp(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = kp_combine<OP>(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}
// The (value, index) of the largest (MAX = 1) or smallest value; ties go to the first index, like torch.
template <int MAX> __device__ __forceinline__ void kp_warp_arg(float& v, long long& at) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        const float w = __shfl_xor_sync(0xffffffffu, v, o);
        const long long b = __shfl_xor_sync(0xffffffffu, at, o);
        if ((MAX ? w > v : w < v) || (w == v && b < at)) { v = w; at = b; }
    }
}
// Block reductions: each warp reduces by shuffles, then every warp reduces the warps' results.
template <int THREADS, int OP> __device__ __forceinline__ float kp_block(float v) {
    __shared__ float part[32];
    v = kp_warp<OP>(v);
    __syncthreads();  // the buffer may still be read from the previous reduction
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = v;
    __syncthreads();
    const float identity = OP == 0 ? 0.0f : OP == 1 ? -INFINITY : INFINITY;
    return kp_warp<OP>(threadIdx.x % 32 < THREADS / 32 ? part[threadIdx.x % 32] : identity);
}
template <int THREADS, int MAX> __device__ __forceinline__ void kp_block_arg(float& v, long long& at) {
    __shared__ float values[32];
    __shared__ long long places[32];
    kp_warp_arg<MAX>(v, at);
    __syncthreads();
    if (threadIdx.x % 32 == 0) { values[threadIdx.x / 32] = v; places[threadIdx.x / 32] = at; }
    __syncthreads();
    const bool live = threadIdx.x % 32 < THREADS / 32;
    v = live ? values[threadIdx.x % 32] : (MAX ? -INFINITY : INFINITY);
    at = live ? places[threadIdx.x % 32] : KP_NO_INDEX;
    kp_warp_arg<MAX>(v, at);
}

static const char* kp_error() {  // what a launcher returns: NULL, or why the launch failed
    const cudaError_t error = cudaGetLastError();
    return error == cudaSuccess ? nullptr : cudaGetErrorString(error);
}
'''


def render_group(group: Group, config: dict) -> tuple[str, int]:
    """(kernel + extern "C" launcher as CUDA source, the launcher's number of arguments)."""
    make = _pointwise if group.kind == "pointwise" else _split if config.get("variant") == "split" else _row
    kernel, launch = make(group, config)
    pointers = [i.var for i in group.inputs] + [ws for ws, _ in workspaces(group, config)] + [
        f"out{k}" for k in range(len(group.outputs))]
    signature = (f'extern "C" const char* {group.name}_launch('
                 f'{", ".join(f"long long {p}" for p in pointers)}, long long stream)')
    source = "\n".join(kernel + ["", signature + " {", f"    // launch: {describe_config(config)}"] + launch + [
        "    return kp_error();", "}"])
    return source, len(pointers) + 1


def cuda_source(parts: list[tuple[str, int]]) -> str:
    return PRELUDE + "\n" + "\n\n".join(source for source, _ in parts) + "\n"


def render(groups: list[Group], chosen: list[dict]) -> str:
    """One Python block: the CUDA source, its load_inline, and a wrapper per group (named like the group)."""
    parts = [render_group(g, c) for g, c in zip(groups, chosen)]
    source = cuda_source(parts)
    name = "kp_cuda_" + hashlib.sha1(source.encode()).hexdigest()[:12]
    entries = {f"{g.name}_launch": arguments for g, (_, arguments) in zip(groups, parts)}
    lines = [f'_KP_CUDA_SOURCE = r"""{source}"""', ""] + native_loader(
        "_kp_cuda", name, entries, ["cuda_sources=[_KP_CUDA_SOURCE]", 'extra_cuda_cflags=["-O3"]'])
    for group, config in zip(groups, chosen):
        args = [i.var for i in group.inputs]
        spaces = workspaces(group, config)
        pointers = ", ".join(f"{a}.data_ptr()" for a in args + [ws for ws, _ in spaces] +
                             output_names(len(group.outputs)))
        lines += ["", ""] + python_wrapper(Wrapper(
            name=group.name, args=args, shapes=[i.shape for i in group.inputs],
            doc=f'{group.fused_ops}: {"CUDA kernels" if config.get("variant") == "split" else "one CUDA kernel"} '
                f'(launch: {describe_config(config)}).',
            dtype="torch.float32", message="float32 inputs of the traced shapes",
            # a boolean mask or a float64 value read by the chain: as float32, as the Triton kernels read it
            ready_args={i.var: "{}.float().contiguous()" for i in group.inputs
                        if i.dtype is not None and i.dtype != torch.float32},
            workspaces=(["    # partial results per (row, chunk) of the split variant"] if spaces else []) +
                       [f"    {ws} = torch.empty({shape!r}, device={args[0]}.device, dtype=torch.float32)"
                        for ws, shape in spaces],
            outputs=[(out.shape, "torch.int64" if out.integer else "torch.float32") for out in group.outputs],
            device=f"{args[0]}.device",
            launch=[f"    _kp_cuda.{group.name}_launch({pointers}, torch.cuda.current_stream().cuda_stream)"]))
    return "\n".join(lines) + "\n"
