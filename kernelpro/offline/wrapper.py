"""The Python function every generated kernel is called through, for all four backends.

A wrapper makes its inputs ready (contiguous; aligned for TMA), checks them against the
traced shapes (and the dtype where the kernel assumes one), allocates any workspaces and
the outputs, launches, and returns the output or a tuple of them. Only the launch lines
differ between the Triton, CUDA, Triton-GEMM and CUTLASS backends.
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
    workspaces: list[str] = field(default_factory=list)  # lines allocating scratch space, before the outputs


def output_names(count: int) -> list[str]:
    return [f"out{k}" for k in range(count)]


def python_wrapper(w: Wrapper) -> list[str]:
    """The wrapper's source lines."""
    one = "," if len(w.args) == 1 else ""
    checks = " and ".join(f"{a}.shape == {tuple(s)!r}" for a, s in zip(w.args, w.shapes))
    if w.dtype:
        checks += " and " + " and ".join(f"{a}.dtype == {w.dtype}" for a in w.args)
    lines = [f"def {w.name}({', '.join(w.args)}):", f'    """{w.doc}"""',
             f"    {', '.join(w.args)}{one} = {', '.join(w.ready.format(a) for a in w.args)}{one}",
             f'    assert {checks}, "{w.name}: {w.message}"'] + list(w.workspaces)
    outs = output_names(len(w.outputs))
    lines += [f"    {out} = torch.empty({tuple(shape)!r}, device={w.device}, dtype={dtype})"
              for out, (shape, dtype) in zip(outs, w.outputs)]
    return lines + list(w.launch) + [f"    return {outs[0] if len(outs) == 1 else '(' + ', '.join(outs) + ')'}"]
