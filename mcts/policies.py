"""Injectable stages: selection rules and widening rules, by family prefix.

A selection rule picks the child to descend into; a widening rule says how many
children a node may have. Both are registered by name so a serialized search can
name them; register your own with `SELECTION[name] = fn` / `WIDENING[name] = fn`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING

from kernelpro.mcts.records import Node, Status

if TYPE_CHECKING:
    from kernelpro.mcts.search import SearchConfig

#: (parent, selectable children, value of a node in [0, 1], config) -> chosen child
SelectFn = Callable[[Node, list[Node], Callable[[Node], float], "SearchConfig"], Node]
#: (node, config) -> the most children it may have now
WidenFn = Callable[[Node, "SearchConfig"], int]


def _effective(node: Node, value: Callable[[Node], float]) -> tuple[float, int]:
    """Value and visits with virtual loss: in-flight expansions count as reward 0."""
    visits = node.visits + node.virtual
    if visits == 0:
        return 0.5, 0
    return value(node) * node.visits / visits, visits


def select_uct(parent: Node, children: list[Node], value: Callable[[Node], float], config) -> Node:
    """UCT: Q + c * sqrt(ln N_parent / N_child). Ties go to the older child."""
    parent_visits = max(1, parent.visits + parent.virtual)

    def score(child: Node) -> float:
        q, n = _effective(child, value)
        return q + config.exploration * math.sqrt(math.log(parent_visits + 1) / max(n, 1))

    return max(children, key=lambda c: (score(c), -c.id))


def select_puct(parent: Node, children: list[Node], value: Callable[[Node], float], config) -> Node:
    """PUCT: Q + c * P * sqrt(N_parent) / (1 + N_child), with P the normalized priors."""
    parent_visits = max(1, parent.visits + parent.virtual)
    total_prior = sum(c.prior for c in children) or 1.0

    def score(child: Node) -> float:
        q, n = _effective(child, value)
        return q + config.exploration * (child.prior / total_prior) * math.sqrt(parent_visits) / (1 + n)

    return max(children, key=lambda c: (score(c), -c.id))


def widen_progressive(node: Node, config) -> int:
    """ceil(C * N^alpha) children, with C depending on the kind of node (asymmetric).

    N is the node's visit count: evaluations backed up through it, plus selection
    passes that reached it at its limit with no open child to descend into."""
    if node.status is Status.FAILED:
        return config.repair_children
    constant = config.widen_c
    if node.parent is None:
        constant = config.widen_c_root
    elif node.improved:
        constant *= config.widen_improved_factor
    visits = node.visits + node.passes
    return max(1, math.ceil(constant * max(1, visits) ** config.widen_alpha))


def widen_fixed(node: Node, config) -> int:
    """A fixed number of children (repair nodes still get `repair_children`)."""
    if node.status is Status.FAILED:
        return config.repair_children
    return config.fixed_children


SELECTION: dict[str, SelectFn] = {"uct": select_uct, "puct": select_puct}
WIDENING: dict[str, WidenFn] = {"progressive": widen_progressive, "fixed": widen_fixed}
