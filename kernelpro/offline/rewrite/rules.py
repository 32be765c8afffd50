"""The one engine every graph move runs on: a move is a table of rules, each a pattern and a rewrite.

A `Rule` names what it rewrites (`"x * 1 -> x"`), says which nodes it looks at (`Pattern`: calls of these
functions, methods or module types) and rewrites a matching node where the condition that makes the rewrite
exact holds, saying whether it did. A `Move` applies its rules to each node of the graph in order, the first rule
that rewrites a node taking it, then drops what no longer has a user; it returns how many rewrites it made.
A move whose rules need a view of the whole graph first (which nodes are known constants) computes it in
`prepare`, and makes no rewrite where that finds nothing.

Adding an exact rewrite is one rule in the table of its move and one test (docs/offline-coder.md shows one).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch.fx as fx


@dataclass(frozen=True)
class Pattern:
    """The nodes a rule looks at: calls of `functions`, method calls named in `methods`, calls of modules of the
    `modules` types. `Pattern()` matches every node (a rule that reads the graph around it to decide)."""
    functions: tuple = ()
    methods: frozenset[str] = frozenset()
    modules: tuple[type, ...] = ()

    def matches(self, gm: fx.GraphModule, node: fx.Node) -> bool:
        if not (self.functions or self.methods or self.modules):
            return True
        if node.op == "call_function":
            return node.target in self.functions
        if node.op == "call_method":
            return node.target in self.methods
        return node.op == "call_module" and bool(self.modules) and isinstance(gm.get_submodule(node.target),
                                                                               self.modules)


#: a rule's rewrite: (graph, the matched node, the move's prepared state) -> whether it rewrote
Rewrite = Callable[[fx.GraphModule, fx.Node, object], bool]


@dataclass(frozen=True)
class Rule:
    name: str  # what it rewrites, as a formula: "x * 1 -> x"
    pattern: Pattern
    rewrite: Rewrite


@dataclass(frozen=True)
class Move:
    """A graph move: its rules, tried in order on each node. `prepare(gm)` gives the state the rules read, or
    None where the move has nothing to rewrite (the graph is then left as it is)."""
    name: str
    rules: tuple[Rule, ...]
    prepare: Callable[[fx.GraphModule], object] | None = None

    def __call__(self, gm: fx.GraphModule) -> int:
        state = self.prepare(gm) if self.prepare is not None else None
        if self.prepare is not None and state is None:
            return 0
        count = 0
        for node in list(gm.graph.nodes):
            for rule in self.rules:
                if rule.pattern.matches(gm, node) and rule.rewrite(gm, node, state):
                    count += 1
                    break
        # where no rule rewrote, only dead code the trace left (a tuple's unused item) is dropped: the graph's code
        # is made again only where something changed (DenseNet121's simplify_all spent half its time remaking it)
        if count or gm.graph.eliminate_dead_code():
            finish_graph(gm)
        return count


def finish_graph(gm: fx.GraphModule) -> None:
    """What every move ends with: nodes left without users dropped, the graph checked and its code made again."""
    gm.graph.eliminate_dead_code()
    gm.graph.lint()
    gm.recompile()
