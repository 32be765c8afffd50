"""Parsing in threads (`harness.parsing.parse`): evaluations in flight together (`--parallel`) check their candidates'
source in threads. CPython 3.11's `ast.parse` keeps its recursion depth in state the threads share, and fails with
`SystemError: AST constructor recursion depth mismatch` when another thread parses while a collection that runs
Python code (a `__del__`) switches threads mid-parse (python/cpython#106905)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

STRESS = '''
import ast, gc, sys, threading, time
from pathlib import Path
from kernelpro.harness.parsing import parse
function = parse if sys.argv[1] == "locked" else ast.parse
source = Path(sys.argv[2]).read_text()
sys.setswitchinterval(1e-6)
gc.set_threshold(50, 2, 2)


class Sleeper:  # a cycle only the collector frees, whose finalizer lets another thread run
    def __init__(self):
        self.me = self

    def __del__(self):
        time.sleep(0)


errors = []


def work():
    for _ in range(100):
        for _ in range(20):
            Sleeper()
        try:
            function(source)
        except SystemError as error:
            errors.append(str(error))
            return


threads = [threading.Thread(target=work) for _ in range(4)]
[t.start() for t in threads]
[t.join() for t in threads]
print(len(errors))
'''


def stress(how: str) -> int:
    source = Path(__file__).resolve().parents[1] / "harness" / "worker.py"
    done = subprocess.run([sys.executable, "-c", STRESS, how, str(source)], capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return int(done.stdout.split()[-1])


def test_parsing_in_threads_never_fails():
    assert stress("locked") == 0
    if stress("unlocked") == 0:
        pytest.skip("this interpreter's ast.parse shows no race under the same load")
