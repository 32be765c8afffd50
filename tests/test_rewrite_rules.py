"""The rewrite engine: every graph move is a table of named rules on one matcher (kernelpro.offline.rewrite.rules)."""

from __future__ import annotations

import torch
import torch.fx as fx

from conftest import traced
from kernelpro.offline.compiler import PASSES
from kernelpro.offline.rewrite.passes import simplify_double_ops
from kernelpro.offline.rewrite.rules import Move, Pattern, Rule


def test_every_graph_move_is_a_table_of_named_rules():
    assert PASSES and all(isinstance(move, Move) and move.name == name for name, move in PASSES.items())
    rules = [rule for move in PASSES.values() for rule in move.rules]
    assert len(rules) >= len(PASSES) and all(" -> " in rule.name for rule in rules)
    assert len({rule.name for rule in rules}) == len(rules)


def test_a_rule_rewrites_only_the_nodes_its_pattern_and_condition_take():
    x = torch.randn(3, 4)
    graph = traced(lambda t: torch.neg(torch.neg(t)) + torch.neg(t), x)
    assert simplify_double_ops(graph) == 1  # -(-x) went; the single -x stays
    assert [n.target for n in graph.graph.nodes if n.op == "call_function"].count(torch.neg) == 1
    assert torch.equal(graph(x), x - x)
    assert simplify_double_ops(graph) == 0


def test_adding_a_rewrite_is_one_rule():
    """abs(abs(x)) -> abs(x), exact for every input: a rule, and the move that holds it counts its rewrites."""
    def inner_abs(gm, node, state) -> bool:
        inner = node.args[0]
        if not (isinstance(inner, fx.Node) and inner.op == "call_function" and inner.target is torch.abs):
            return False
        node.replace_all_uses_with(inner)
        return True

    move = Move("simplify_abs", (Rule("abs(abs(x)) -> abs(x)", Pattern((torch.abs,)), inner_abs),))
    x = torch.randn(5)
    graph = traced(lambda t: torch.abs(torch.abs(t)) * 2, x)
    assert move(graph) == 1
    assert sum(n.target is torch.abs for n in graph.graph.nodes) == 1 and torch.equal(graph(x), x.abs() * 2)


def test_a_move_whose_preparation_finds_nothing_leaves_the_graph_as_it_was():
    graph = traced(lambda t: torch.relu(t) + 0, torch.randn(2))
    code = graph.code
    seen = []
    move = Move("never", (Rule("x -> x", Pattern(), lambda gm, node, state: seen.append(node) or True),),
                prepare=lambda gm: None)
    assert move(graph) == 0 and not seen and graph.code == code
