"""Baseline strategies for ablations, with the same ask/propose/tell interface.

They share the tree, memory, transpositions and budgets with MCTS and differ only in
which node they expand next:

- greedy: always refine the best node so far;
- best_first: the best node that still has room (at most `fixed_children` children);
- beam: `beam_width` nodes per generation, each expanded `fixed_children` times;
- random: a uniformly random working node (seeded).
"""

from __future__ import annotations

from kernelpro.mcts.records import Node, Status
from kernelpro.mcts.search import Search, SearchConfig, by_ratio as _by_ratio, \
    open_working_nodes as _open_working_nodes


class GreedySearch(Search):
    def _choose_expansion(self) -> Node | None:
        return self._greedy_choice()


class BestFirstSearch(Search):
    def _choose_expansion(self) -> Node | None:
        for node in _by_ratio(_open_working_nodes(self)):
            if len(node.children) + node.pending_children < self.config.fixed_children:
                return node
        return None


class BeamSearch(Search):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.beam: list[int] = [0]
        self.queue: list[int] = [0] * self.config.fixed_children
        self.generation: list[int] = []

    def _choose_expansion(self) -> Node | None:
        if not self.queue:
            if any(n.status is Status.PENDING for n in self.nodes) or \
                    any(self.nodes[i].pending_children for i in self.beam):
                return None  # wait for the generation to finish
            survivors = _by_ratio([self.nodes[i] for i in self.generation
                                   if self.nodes[i].status is Status.OK])[: self.config.beam_width]
            if survivors:
                self.beam = [n.id for n in survivors]
            self.generation = []
            self.queue = [i for i in self.beam if not self.nodes[i].exhausted
                          for _ in range(self.config.fixed_children)]
            if not self.queue:
                return None
        return self.nodes[self.queue.pop(0)]

    def propose(self, request, proposal) -> bool:
        before = len(self.nodes)
        evaluate = super().propose(request, proposal)
        if len(self.nodes) > before:
            self.generation.append(self.nodes[-1].id)
        return evaluate

    def _strategy_state(self) -> dict:
        return {"beam": self.beam, "queue": self.queue, "generation": self.generation}

    def _load_strategy_state(self, state: dict) -> None:
        self.beam = state.get("beam", [0])
        self.queue = state.get("queue", [])
        self.generation = [i for i in state.get("generation", []) if i < len(self.nodes)]


class RandomSearch(Search):
    def _choose_expansion(self) -> Node | None:
        nodes = _open_working_nodes(self)
        return self.rng.choice(nodes) if nodes else None


STRATEGIES: dict[str, type[Search]] = {
    "mcts": Search, "greedy": GreedySearch, "best_first": BestFirstSearch,
    "beam": BeamSearch, "random": RandomSearch,
}


def make_search(payload=None, config=None, **kwargs) -> Search:
    """The search for `config.strategy` (default MCTS)."""
    config = config or SearchConfig()
    return STRATEGIES[config.strategy](payload, config, **kwargs)


def restore_search(data: dict, prior_hook=None, budget: int | None = None) -> Search:
    """A search saved with Search.to_json, as an instance of its strategy's class; `budget`, where given,
    replaces the saved one."""
    return STRATEGIES[data["config"].get("strategy", "mcts")].from_json(data, prior_hook=prior_hook, budget=budget)
