"""Triton float32 expressions of the generator written as CUDA C, by their syntax tree: `tl.where` becomes `?:`,
`tl.exp` `expf`, a division `kp_div` (the CUDA backends' prelude defines it), infinities and NaN their C names.
The CUDA (`cuda`) and CUTLASS (`cute_gemm`) backends write their epilogues with it."""

from __future__ import annotations

import ast
import math

from kernelpro.harness.parsing import parse

_FUNCTIONS = {"exp": "expf", "log": "logf", "log2": "log2f", "exp2": "exp2f", "erf": "erff", "sqrt": "sqrtf",
              "rsqrt": "rsqrtf", "abs": "fabsf", "maximum": "fmaxf", "minimum": "fminf", "sin": "sinf",
              "cos": "cosf", "floor": "floorf", "ceil": "ceilf", "sigmoid": "kp_sigmoid", "_kp_tanh": "tanhf"}
_BINARY = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}  # and ast.Div: kp_div
_COMPARE = {ast.Gt: ">", ast.Lt: "<", ast.GtE: ">=", ast.LtE: "<=", ast.Eq: "==", ast.NotEq: "!="}
_SPECIAL = {"inf": "INFINITY", "-inf": "(-INFINITY)", "nan": "NAN"}


class Untranslatable(Exception):
    """A Triton expression with no CUDA counterpart here."""


def _c(node: ast.AST) -> str:
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        value = float(node.value)
        return _SPECIAL["nan"] if math.isnan(value) else _SPECIAL["inf" if value > 0 else "-inf"] \
            if math.isinf(value) else f"{value!r}f"
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div):
        return f"kp_div({_c(node.left)}, {_c(node.right)})"
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        return f"({_c(node.left)} {_BINARY[type(node.op)]} {_c(node.right)})"
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return f"(-{_c(node.operand)})"
    if isinstance(node, ast.Compare) and len(node.ops) == 1 and type(node.ops[0]) in _COMPARE:
        return f"({_c(node.left)} {_COMPARE[type(node.ops[0])]} {_c(node.comparators[0])})"
    if isinstance(node, ast.Call):
        func = node.func
        if isinstance(func, ast.Attribute) and func.attr == "to" and len(node.args) == 1:
            return f"((float){_c(func.value)})"  # .to(tl.float32) of a comparison
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "float" and isinstance(node.args[0], ast.Constant):
            return _SPECIAL[str(node.args[0].value).lower()]
        if name == "where" and len(node.args) == 3:
            cond, a, b = (_c(arg) for arg in node.args)
            return f"({cond} ? {a} : {b})"
        if name in _FUNCTIONS:
            return f"{_FUNCTIONS[name]}({', '.join(_c(arg) for arg in node.args)})"
    raise Untranslatable(ast.unparse(node))


def c_expr(expr: str) -> str:
    """A Triton float32 expression of the generator as CUDA C (`tl.where` -> `?:`, `tl.exp` -> `expf`, ...)."""
    return _c(parse(expr, mode="eval").body)
