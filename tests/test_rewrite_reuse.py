"""A build that starts from a graph its compiler already rewrote (`compiler.rewrite`, `Compiler.rewritten`) writes
the same candidate as one that rewrites the trace from the start."""

from __future__ import annotations

import itertools
import textwrap

from kernelpro.offline import compiler
from kernelpro.offline.compiler import PASSES, Compiler

#: a forward where five rewriting moves apply, each alone and with the others
PROBLEM = textwrap.dedent("""
    import torch
    import torch.nn as nn
    import torch.nn.functional as F


    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.conv = nn.Conv2d(4, 8, 3)
            self.fc = nn.Linear(8, 16)

        def forward(self, x):
            y = self.conv(x) * 2.0 * 0.5
            y = F.max_pool2d(torch.relu(y), 2)
            y = -(-(y + 0.0))
            z = self.fc(y.mean(dim=(2, 3))) * 3.0
            return z * 1.0


    def get_inputs():
        return [torch.randn(2, 4, 10, 10)]


    def get_init_inputs():
        return []
""")


def test_children_built_on_a_kept_rewrite_match_those_built_from_the_trace(tmp_path, monkeypatch):
    monkeypatch.setattr(compiler, "REWRITTEN_KEPT", 8)  # so that runs are dropped and made again on the way
    path = tmp_path / "many_rewrites.py"
    path.write_text(PROBLEM)
    warm, cold = Compiler(path, 42), Compiler(path, 42)
    singles = [move for move in [*PASSES, "simplify_all"] if warm.build([move])[1].get(move)]  # a search's root
    assert len(singles) >= 5, singles
    assert len(warm.rewritten) == len(singles)  # a move that rewrote nothing leaves no graph of its own
    for first, second in itertools.combinations(singles, 2):  # its children's children, then with a fusion
        for moves in ([first, second], [first, second, "fuse_pointwise"]):
            cold.rewritten.clear()  # rewrites the trace from the start
            assert warm.build(moves) == cold.build(moves), moves
    assert len(warm.rewritten) == 8  # the latest runs only
