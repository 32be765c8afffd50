"""`ast.parse` under one lock per process.

CPython 3.11's AST constructor keeps its recursion depth in state that threads share, so two threads parsing at
once can fail with `SystemError: AST constructor recursion depth mismatch` (python/cpython#106905). Evaluations in
flight together (`--parallel`) check their candidates in threads while the coder parses in another: every parse in
kernelpro goes through `parse`.
"""

from __future__ import annotations

import ast
import threading

_LOCK = threading.Lock()


def parse(source: str, filename: str = "<unknown>", mode: str = "exec") -> ast.AST:
    with _LOCK:
        return ast.parse(source, filename=filename, mode=mode)
