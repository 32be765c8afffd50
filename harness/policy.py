"""Static checks on a candidate's source, in the trusted process (it is parsed, never run).

`relaxed` accepts any correct code. `strict` follows KernelBench's leaderboard rules:
no try/except fallbacks, no inheriting from or copying the reference, no PyTorch
compute op doing the work the reference does, and at least one custom kernel
(statically here; on CUDA also at run time, from the profiler's kernel names).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from kernelpro.harness.parsing import parse

#: Calls that move or describe data without computing; always allowed.
NEUTRAL_CALLS = frozenset("""
    view reshape contiguous size dim numel stride shape data_ptr item element_size
    empty empty_like empty_strided zeros zeros_like ones ones_like full full_like
    new_empty new_zeros new_ones new_full to cuda cpu float half bfloat16 double int long bool
    is_contiguous unsqueeze squeeze flatten unflatten expand expand_as permute transpose t
    detach clone copy_ fill_ zero_ device type dtype synchronize current_stream get_device
    is_cuda cdiv next_power_of_2 arange tensor as_strided chunk split narrow select
    Parameter register_buffer register_parameter super isinstance len range min max print int
    list tuple dict zip enumerate getattr setattr hasattr float
""".split())

_KERNEL_PATTERNS = (
    re.compile(r"__global__\s+(?:void|[\w:<>]+)\s+(?:__launch_bounds__\s*\([^)]*\)\s+)?(\w+)\s*\("),
)
_CUTLASS_INCLUDE = re.compile(r"#\s*include\s*[<\"](cute|cutlass)/")


@dataclass(frozen=True)
class StaticFinding:
    verdict: str  # "compile_error" or "rejected"
    reason: str


def _call_name(node: ast.Call) -> str | None:
    function = node.func
    if isinstance(function, ast.Attribute):
        return function.attr
    if isinstance(function, ast.Name):
        return function.id
    return None


def _is_triton_kernel(function: ast.FunctionDef) -> bool:
    for decorator in function.decorator_list:
        target = decorator.func if isinstance(decorator, ast.Call) else decorator
        text = ast.unparse(target)
        if text.endswith(("jit", "autotune", "heuristics")):
            return True
    return False


def declared_kernels(source: str) -> list[str]:
    """Names of the custom kernels a source defines: CUDA `__global__` functions and Triton jit functions."""
    names = [m.group(1) for pattern in _KERNEL_PATTERNS for m in pattern.finditer(source)]
    try:
        tree = parse(source)
    except SyntaxError:
        return sorted(set(names))
    for node in ast.walk(tree):
        if isinstance(node, ast.FunctionDef) and _is_triton_kernel(node):
            names.append(node.name)
        elif isinstance(node, ast.Call) and _call_name(node) == "load_inline":
            names += _load_inline_functions(node)
    return sorted(set(names))


def _load_inline_functions(call: ast.Call) -> list[str]:
    """The names a `load_inline(..., functions=[...])` call exports (its C++/CUDA entry points)."""
    for keyword in call.keywords:
        if keyword.arg == "functions":
            try:
                value = ast.literal_eval(keyword.value)
            except ValueError:
                return []
            return [value] if isinstance(value, str) else [v for v in value if isinstance(v, str)]
    return []


def uses_cutlass(source: str) -> bool:
    return bool(_CUTLASS_INCLUDE.search(source))


def _class(tree: ast.Module, name: str) -> ast.ClassDef | None:
    return next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == name), None)


def _compute_names(scope: ast.AST) -> set[str]:
    """Compute ops a piece of code calls (by last attribute name), `@` as matmul."""
    names = set()
    for node in ast.walk(scope):
        if isinstance(node, ast.Call):
            name = _call_name(node)
            if name and name not in NEUTRAL_CALLS and not name.startswith("_"):
                names.add(name)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.MatMult):
            names.add("matmul")
    return names


def _host_code(tree: ast.Module) -> list[ast.AST]:
    """The candidate's Python that runs on the host: everything but Triton kernels."""
    triton = {id(n) for n in ast.walk(tree) if isinstance(n, ast.FunctionDef) and _is_triton_kernel(n)}
    inside_triton = set()
    for node in ast.walk(tree):
        if id(node) in triton:
            inside_triton.update(id(child) for child in ast.walk(node))
    return [n for n in tree.body if id(n) not in inside_triton]


def _forbidden_ops(reference_tree: ast.Module) -> tuple[set[str], set[str]]:
    """(functional ops, module classes) the reference computes with."""
    model = _class(reference_tree, "Model")
    if model is None:
        return set(), set()
    # The work is what forward computes; __init__ only creates parameters and modules.
    forward = next((n for n in model.body if isinstance(n, ast.FunctionDef) and n.name == "forward"), None)
    functional = {n for n in _compute_names(forward) if not n[:1].isupper()} if forward else set()
    modules = {n for n in _compute_names(model) if n[:1].isupper()} - {"Model"}
    return functional, modules


def reference_ops(source: str) -> set[str]:
    """The ops (functional names and module classes) a reference's forward computes with; empty if it does not parse."""
    try:
        functional, modules = _forbidden_ops(parse(source))
    except SyntaxError:
        return set()
    return functional | modules


def _module_attributes(tree: ast.Module, classes: set[str]) -> set[str]:
    """Attributes assigned `self.x = nn.Cls(...)` for a reference module class."""
    attributes = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and isinstance(node.value, ast.Call)
                and _call_name(node.value) in classes):
            attributes.update(t.attr for t in node.targets if isinstance(t, ast.Attribute))
    return attributes


def _called_attributes(scope: ast.AST) -> set[str]:
    return {node.func.attr for node in ast.walk(scope)
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
            and isinstance(node.func.value, ast.Name) and node.func.value.id == "self"}


def check_candidate(source: str, reference_source: str, policy: str) -> StaticFinding | None:
    """A finding that ends the evaluation before any code runs, or None."""
    try:
        tree = parse(source)
    except SyntaxError as error:
        return StaticFinding("compile_error", f"syntax error at line {error.lineno}: {error.msg}")
    if policy != "strict":
        return None
    if any(isinstance(node, (ast.Try, getattr(ast, "TryStar", ast.Try))) for node in ast.walk(tree)):
        return StaticFinding("rejected", "strict policy: try/except fallbacks are not allowed")
    model_new = _class(tree, "ModelNew")
    if model_new is not None and any(ast.unparse(base).split(".")[-1] == "Model" for base in model_new.bases):
        return StaticFinding("rejected", "strict policy: ModelNew inherits from the reference Model")
    reference_tree = parse(reference_source)
    reference_model = _class(reference_tree, "Model")
    if model_new is not None and reference_model is not None:
        if [ast.dump(n) for n in model_new.body] == [ast.dump(n) for n in reference_model.body]:
            return StaticFinding("rejected", "strict policy: ModelNew is a copy of the reference")
    functional, module_classes = _forbidden_ops(reference_tree)
    host = _host_code(tree)
    used = set().union(*(_compute_names(node) for node in host)) if host else set()
    # Holding an nn module for its parameters is fine; calling it is not.
    called = set().union(*(_called_attributes(node) for node in host)) if host else set()
    leaked = sorted((functional & used) | (called & _module_attributes(tree, module_classes)))
    if leaked:
        return StaticFinding("rejected", "strict policy: PyTorch ops do the reference's work: "
                                         + ", ".join(leaked))
    if not declared_kernels(source) and not uses_cutlass(source):
        return StaticFinding("rejected", "strict policy: the candidate defines no custom kernel "
                                         "(no __global__ function, load_inline export or Triton jit function)")
    return None


def launched_custom_kernel(kernel_names: list[str], source: str) -> bool:
    """Whether any GPU kernel seen at run time is one the candidate defines."""
    declared = declared_kernels(source)
    cutlass = uses_cutlass(source)
    for name in kernel_names:
        if any(re.search(rf"\b{re.escape(d)}\b", name) for d in declared):
            return True
        if cutlass and ("cutlass" in name or "cute" in name):
            return True
    return False
