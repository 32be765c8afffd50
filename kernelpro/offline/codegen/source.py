"""A complete, readable candidate source: the reference, then `ModelNew(Model)`.

`ModelNew` keeps the reference's `__init__` (same parameters from the same seed),
precomputes folded constants as buffers, and runs the rewritten graph as Python
code that torch.fx generated. The names that code needs are bound in a closure,
so nothing leaks into the module's globals. Module moves add a line to `__init__`
or wrap `forward` (channels_last inputs, CUDA-graph replay).
"""

from __future__ import annotations

import re
import textwrap

import torch
import torch.fx as fx

from kernelpro.offline.ir.ops import GENERATED_MODULE
from kernelpro.offline.rewrite.passes import fold_boundary
from kernelpro.offline.moves import MOVES
from kernelpro.offline.codegen.triton import TANH_HELPER
from kernelpro.offline.codegen.wrapper import NATIVE_HELPER


class CodegenError(Exception):
    """The rewritten graph needs a name we cannot import in a standalone file."""


_KNOWN_GLOBALS = {
    "inf": "from math import inf", "nan": "from math import nan", "device": "from torch import device",
    "NoneType": "NoneType = type(None)", "fx_pytree": "import torch.fx._pytree as fx_pytree",
    "pytree": "import torch.utils._pytree as pytree", "torch": "import torch", "getattr": None,
}


def _imports(src: str, globals_: dict) -> list[str]:
    lines = []
    words = set(re.findall(r"\w+", src))  # the whole words of src, once (a graph's globals run to thousands)
    for name, value in sorted(globals_.items()):
        used = name in words if re.fullmatch(r"\w+", name) else re.search(rf"\b{re.escape(name)}\b", src)
        if not used or getattr(value, "__module__", "") == GENERATED_MODULE:
            continue  # generated kernels' wrappers are defined in the candidate file itself
        if name in _KNOWN_GLOBALS:
            if _KNOWN_GLOBALS[name]:
                lines.append(_KNOWN_GLOBALS[name])
        elif isinstance(value, type(torch)):
            lines.append(f"import {value.__name__} as {name}")
        elif getattr(value, "__module__", None) and "." not in getattr(value, "__qualname__", "."):
            lines.append(f"from {value.__module__} import {value.__qualname__} as {name}")
        else:
            raise CodegenError(f"the rewritten graph uses {name!r}, which a standalone file cannot import")
    return lines


def _functional_name(match: re.Match) -> str:
    """torch._C._nn.gelu -> torch.nn.functional.gelu where they are the same function (readability)."""
    name = match.group(1)
    same = getattr(torch.nn.functional, name, None) is getattr(torch._C._nn, name, object())
    return f"torch.nn.functional.{name}" if same else match.group(0)


def _function(gm: fx.GraphModule, graph: fx.Graph, name: str) -> tuple[list[str], str]:
    code = graph.python_code(root_module="self")
    # fx registers wrapped functions with a module-level call; the function itself is imported below.
    src = "\n".join(line for line in code.src.splitlines()
                    if not line.startswith("torch.fx._symbolic_trace.wrap(")).strip("\n")
    src = re.sub(r"^def forward\(self", f"def {name}(self", src.lstrip(), count=1)
    src = re.sub(r"\btorch\._C\._nn\.(\w+)", _functional_name, src)
    src = src.replace(GENERATED_MODULE + "_", "")  # fx prefixes a function's module to its name
    return _imports(src, code.globals), textwrap.dedent(src)


def extract_folds(gm: fx.GraphModule, nodes: list[fx.Node]) -> tuple[fx.Graph | None, int]:
    """Move the folded nodes into their own graph; the main graph reads `_kp_fold_<i>` buffers instead."""
    boundary = fold_boundary(gm, nodes)
    if not boundary:
        return None, 0
    fold = fx.Graph()
    env: dict[fx.Node, fx.Node] = {}
    needed = set(nodes)
    for node in gm.graph.nodes:
        if node in needed or (node.op == "get_attr" and any(u in needed for u in node.users)):
            env[node] = fold.node_copy(node, lambda n: env[n])
    fold.output(tuple(env[b] for b in boundary))
    values = fx.GraphModule(gm, fold)()
    for index, node in enumerate(boundary):
        name = f"_kp_fold_{index}"
        gm.register_buffer(name, values[index].detach(), persistent=False)
        with gm.graph.inserting_before(node):
            reader = gm.graph.get_attr(name)
            value = reader
            if values[index].dtype == torch.float64:  # computed in float64 on purpose: a harness that casts
                value = gm.graph.call_method("double", (reader,))  # the model's buffers to its precision undoes it
        reader.meta = dict(node.meta)
        value.meta = dict(node.meta)
        node.replace_all_uses_with(value)
    gm.graph.eliminate_dead_code()
    gm.recompile()
    return fold, len(boundary)


def own_outputs(gm: fx.GraphModule) -> None:
    """An output that a rewrite reduced to an input itself (`-(-x)` to `x`) becomes a copy of it: the reference
    returned a tensor of its own, and a harness rejects an output that is a view of an input."""
    output = next(node for node in gm.graph.nodes if node.op == "output")
    inputs = [arg for arg in torch.utils._pytree.tree_leaves(output.args[0])
              if isinstance(arg, fx.Node) and arg.op == "placeholder"]
    for node in dict.fromkeys(inputs):
        with gm.graph.inserting_before(output):
            copy = gm.graph.call_method("clone", (node,))
        copy.meta = dict(node.meta)
        output.args = (torch.utils._pytree.tree_map(lambda a, n=node, c=copy: c if a is n else a, output.args[0]),)
    if inputs:
        gm.recompile()


_CUDA_GRAPH_CAPTURE = '''

def _kp_capture(body, args, pool=None, warm=True):
    """A CUDA graph of body(*args) and its output. `warm`: three calls first, on copies of the inputs and outside
    the capture (lazy initialization, autotuning). `pool`: another graph's memory to share; their replays never
    overlap."""
    if warm:
        copies = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream), torch.no_grad():
            for _ in range(3):
                body(*copies)
        torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.no_grad(), torch.cuda.graph(graph, pool=pool):
        out = body(*args)
    return graph, out
'''

_CUDA_GRAPH = '''
    def _kp_replay(self, args):
        """Replay a CUDA graph of the whole forward, a fresh output each call. The first call of a shape captures
        one on copies of its inputs, into which later calls copy theirs. A call whose inputs lie where the call
        before it had them (a timing loop refilling one set of buffers) gets a graph captured on them, which
        reads them in place: no copies in. A graph reads its inputs' memory when it is replayed, whatever tensor
        lies there now; two such graphs at most, sharing the first graph's memory."""
        key = tuple((tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor) else a
                    for a in args)
        where = tuple(a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args)
        if getattr(self, "_kp_graph_key", None) != key:
            self._kp_static = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
            self._kp_graph, self._kp_out = _kp_capture(self._kp_body, self._kp_static)
            self._kp_graph_key, self._kp_direct, self._kp_last = key, {}, None
        if where == self._kp_last and where not in self._kp_direct and len(self._kp_direct) < 2:
            self._kp_direct[where] = _kp_capture(self._kp_body, args, self._kp_graph.pool(), warm=False)
        self._kp_last = where
        graph, out = self._kp_direct.get(where, (None, None))
        if graph is None:
            for static, value in zip(self._kp_static, args):
                if isinstance(static, torch.Tensor):
                    static.copy_(value)
            graph, out = self._kp_graph, self._kp_out
        graph.replay()
        return torch.utils._pytree.tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out)

    def _kp_drop_graphs(self):
        self._kp_graph_key, self._kp_graph, self._kp_out, self._kp_static, self._kp_direct = None, None, None, [], {}

    def _apply(self, fn, *args, **kwargs):
        """A graph reads the memory it was captured on, parameters included, and moving or casting the model
        (`.to`, `.cuda`, `.float`) may put them elsewhere: an RNN flattens its weights into a new buffer on every
        `.to`, and frees the old one. The graphs are dropped; the next call captures new ones."""
        self._kp_drop_graphs()
        return super()._apply(fn, *args, **kwargs)

    def train(self, mode=True):
        """Training and eval mode run different kernels (a batch norm's statistics): the graphs are dropped."""
        self._kp_drop_graphs()
        return super().train(mode)
'''


#: the most elements of a lifted constant written into a candidate as a literal
LIFTED_CONSTANT_ELEMENTS = 4096


def lifted_constants(gm: fx.GraphModule) -> list[str]:
    """`__init__` lines that give ModelNew the tensors torch.fx lifted out of forward (`torch.tensor(0.5)` built in
    forward is traced into a `_tensor_constant0` attribute of the graph module, which Model does not have): each a
    non-persistent buffer (so it moves with the model), written as a literal of its traced value, dtype and shape.
    A constant without data (traced on the meta device) or too large to write out is a CodegenError: the move does
    not build, rather than failing in the candidate."""
    lines = []
    targets = sorted({node.target for node in gm.graph.nodes if node.op == "get_attr"
                      and str(node.target).startswith("_tensor_constant")})
    for target in targets:
        value = getattr(gm, target)
        if not isinstance(value, torch.Tensor) or value.is_meta or value.numel() > LIFTED_CONSTANT_ELEMENTS:
            raise CodegenError(f"the lifted constant {target} cannot be written out "
                               f"({'no data' if getattr(value, 'is_meta', True) else f'{value.numel()} elements'})")
        literal = value.detach().cpu().reshape(-1).tolist()
        lines.append(f"        self.register_buffer({target!r}, torch.tensor({literal!r}, dtype={value.dtype})"
                     f".reshape({tuple(value.shape)!r}), persistent=False)  # lifted by torch.fx from forward")
    return lines


def _flag_tuple(flags: list[str]) -> str:
    return "(" + ", ".join(f"torch.backends.{flag}" for flag in flags) + ",)"


def render(problem_source: str, moves: list[str], gm: fx.GraphModule | None, fold_nodes: list[fx.Node],
           kernels: list[str] = (), notes: dict[str, str] | None = None) -> str:
    """The candidate for `moves` (canonical order); `gm` is the rewritten graph, or None for no graph moves.

    `kernels` are generated kernels (Triton, or CUDA C++ with its load_inline) with their wrappers;
    the graph calls the wrappers. `notes`: a line more under a move (what simplify_all made).
    """
    notes = notes or {}
    header = ["# " + "-" * 78, "# kernelpro offline coder: ModelNew is Model with these moves:"]
    for m in moves:
        header += [f"#   - {m} ({MOVES[m].technique}): {MOVES[m].summary}"]
        header += [f"#     {notes[m]}"] if m in notes else []
    header += [] if moves else ["#   (none)"]
    header += ["# " + "-" * 78]
    if any("@triton.jit" in kernel for kernel in kernels):
        header += ["import triton", "import triton.language as tl", "", ""]
        header += [TANH_HELPER] if any("_kp_tanh(" in k for k in kernels) else []
    if any("_kp_native(" in kernel for kernel in kernels):
        header += ["", NATIVE_HELPER.rstrip(), ""]
    for kernel in kernels:
        header += ["", kernel]
    maker, body_attr = [], "    def _kp_body(self, *args):\n        return super().forward(*args)\n"
    init = ["        super().__init__(*args, **kwargs)"]
    if gm is not None:
        fold_graph, count = extract_folds(gm, fold_nodes) if fold_nodes else (None, 0)
        own_outputs(gm)
        init += lifted_constants(gm)
        imports, forward = _function(gm, gm.graph, "_kp_body")
        functions = [forward]
        if fold_graph is not None:
            fold_imports, fold_src = _function(gm, fold_graph, "_kp_fold_values")
            imports += fold_imports
            functions.insert(0, fold_src)
            names = tuple(f"_kp_fold_{i}" for i in range(count))
            init += ["        with torch.no_grad():  # folded constants: computed once from the parameters",
                     f"            for name, value in zip({names!r}, self._kp_fold_values()):",
                     "                self.register_buffer(name, value.detach().clone(), persistent=False)"]
        returns = ", ".join(re.match(r"def (\w+)", f).group(1) for f in functions)
        maker = ["", "", "def _kp_graph_functions():",
                 '    """The rewritten forward (and folded-constant) code that torch.fx generated."""']
        maker += ["    " + line for line in dict.fromkeys(imports)]
        for function in functions:
            maker += [""] + ["    " + line if line else "" for line in function.splitlines()]
        maker += ["", f"    return {returns}"]
        body_attr = f"    {returns} = _kp_graph_functions()\n"
    # Library settings hold for this model's forward only, and are put back after it: set in __init__
    # they stayed on for everything else in the process (KernelBench's evaluator timed and checked its
    # reference with the candidate's TF32 matmuls).
    flags = (["cudnn.benchmark"] if "cudnn_benchmark" in moves else []) + (
        ["cuda.matmul.allow_tf32", "cudnn.allow_tf32"] if "tf32_matmul" in moves else [])
    # channels_last for 4-D tensors, channels_last_3d for 5-D ones (Conv3d's weights and inputs):
    # Module.to(memory_format=torch.channels_last) raises on a 5-D weight.
    if "channels_last" in moves:
        init += ["        for tensor in [*self.parameters(), *self.buffers()]:",
                 "            if tensor.dim() in (4, 5):",
                 "                tensor.data = tensor.data.contiguous(memory_format=_kp_channels_last(tensor))"]
    forward = ["    def forward(self, *args):"]
    if "channels_last" in moves:
        forward.append("        args = tuple(a.contiguous(memory_format=_kp_channels_last(a)) "
                       "if isinstance(a, torch.Tensor) and a.dim() in (4, 5) else a for a in args)")
    call = "self._kp_replay(args)" if "cuda_graphs" in moves else "self._kp_body(*args)"
    if flags:
        forward += [f"        saved = {_flag_tuple(flags)}", "        try:",
                    "            " + " = ".join(f"torch.backends.{flag}" for flag in flags) + " = True",
                    f"            return {call}", "        finally:",
                    f"            {_flag_tuple(flags)} = saved"]
    else:
        forward.append(f"        return {call}")
    layout = ["", "", "def _kp_channels_last(tensor):",
              "    return torch.channels_last if tensor.dim() == 4 else torch.channels_last_3d"] \
        if "channels_last" in moves else []
    capture = _CUDA_GRAPH_CAPTURE.rstrip().split("\n") if "cuda_graphs" in moves else []
    lines = [problem_source.rstrip(), "", ""] + header + ["import torch"] + layout + capture + maker + [
        "", "", "class ModelNew(Model):", "    def __init__(self, *args, **kwargs):"] + init + [""]
    text = "\n".join(lines) + "\n" + body_attr + "\n" + "\n".join(forward) + "\n"
    if "cuda_graphs" in moves:
        text += _CUDA_GRAPH
    return text
