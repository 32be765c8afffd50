"""The Python function every generated kernel is called through, for all four backends.

A wrapper makes its inputs ready (contiguous; aligned for TMA), checks them against the
traced shapes (and the dtype where the kernel assumes one), allocates any workspaces and
the outputs, launches, and returns the output or a tuple of them. Only the launch lines
differ between the Triton, CUDA, Triton-GEMM and CUTLASS backends.

The two native backends (CUDA, CUTLASS) share `NATIVE_HELPER`, written once into a
candidate: their launchers are `extern "C"` functions of raw pointers opened with ctypes,
so a build is one nvcc run, with no torch header and no Python binding to compile.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Wrapper:
    name: str
    doc: str  # the docstring: which ops it fuses, how, and the launch configuration
    args: list[str]
    shapes: list[tuple]  # the traced shape of each argument
    outputs: list[tuple[tuple, str]]  # (shape, dtype expression) of each output, named out0, out1, ...
    device: str  # the expression of the device to allocate on
    launch: list[str]  # the launch lines (indented), which may use the outputs' names
    dtype: str = ""  # the dtype expression every input must have; empty: any
    message: str = "input shapes differ from the traced ones"
    ready: str = "{}.contiguous()"  # how each input is prepared
    ready_args: dict[str, str] = field(default_factory=dict)  # how given inputs are prepared instead
    workspaces: list[str] = field(default_factory=list)  # lines allocating scratch space, before the outputs


NATIVE_HELPER = '''import ctypes
import os
import types

from torch.utils.cpp_extension import load_inline


def _kp_native(name, entries, **build):
    """Builds (or finds built) a library of extern "C" entry points with load_inline, with no torch
    header and no Python binding (one nvcc run), and opens it with ctypes. `entries` maps each entry
    point to its number of int64 arguments (device pointers, sizes, the stream); each returns NULL,
    or an error message that is raised here as a RuntimeError."""
    load_inline(name=name, cpp_sources=[""], is_python_module=False, no_implicit_headers=True, verbose=False,
                **build)
    library = ctypes.CDLL(next(p for p in torch.ops.loaded_libraries if os.path.basename(p) == name + ".so"))

    def entry(function_name, arguments):
        function = getattr(library, function_name)
        function.argtypes, function.restype = [ctypes.c_int64] * arguments, ctypes.c_char_p

        def call(*args):
            error = function(*args)
            if error:
                raise RuntimeError(f"{function_name}: {error.decode()}")
        return call

    return types.SimpleNamespace(**{f: entry(f, n) for f, n in entries.items()})
'''


def native_loader(variable: str, name: str, entries: dict[str, int], build: list[str]) -> list[str]:
    """The lines that build and open a native library as `variable` (see NATIVE_HELPER); `build` holds
    load_inline's other keyword arguments, one source line each."""
    lines = [f"{variable} = _kp_native({name!r}, {entries!r},"]
    lines += [" " * (len(variable) + 14) + arg + ("," if k < len(build) - 1 else ")") for k, arg in enumerate(build)]
    return lines


def output_names(count: int) -> list[str]:
    return [f"out{k}" for k in range(count)]


def python_wrapper(w: Wrapper) -> list[str]:
    """The wrapper's source lines."""
    one = "," if len(w.args) == 1 else ""
    checks = " and ".join(f"{a}.shape == {tuple(s)!r}" for a, s in zip(w.args, w.shapes))
    if w.dtype:
        checks += " and " + " and ".join(f"{a}.dtype == {w.dtype}" for a in w.args)
    lines = [f"def {w.name}({', '.join(w.args)}):", f'    """{w.doc}"""',
             f"    {', '.join(w.args)}{one} = {', '.join(w.ready_args.get(a, w.ready).format(a) for a in w.args)}{one}",
             f'    assert {checks}, "{w.name}: {w.message}"'] + list(w.workspaces)
    outs = output_names(len(w.outputs))
    lines += [f"    {out} = torch.empty({tuple(shape)!r}, device={w.device}, dtype={dtype})"
              for out, (shape, dtype) in zip(outs, w.outputs)]
    return lines + list(w.launch) + [f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}"]
