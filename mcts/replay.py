"""Replays of real searches: landscapes made of what a kernelpro search recorded.

A kernelpro search keeps its tree (`tree.json`): each node's move, parent, verdict and
ratio. A replay turns one tree into a landscape: a state is the set of moves on a
recorded node's path (the offline coder builds a candidate from its set of moves, so
their order does not matter), and its outcome is the recorded one. `ReplayCoder`
proposes only recorded states: a strategy can reach nothing that was not evaluated
for real. When it asks to grow a state that has no recorded child left, the coder
has nothing to give, and the replay counts that request (`unseen`) instead of
inventing an outcome.
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass, field
from pathlib import Path

from kernelpro.mcts.baselines import make_search
from kernelpro.mcts.records import Expansion, ExpansionKind, Outcome, Proposal
from kernelpro.mcts.search import Budget, Search, SearchConfig

State = tuple[str, ...]


def _state(moves) -> State:
    return tuple(sorted(moves))


@dataclass
class Replay:
    name: str
    outcomes: dict[State, tuple[str, float | None]]  # state -> (verdict, ratio; None when it failed)
    order: list[State]  # the states in the order they were evaluated
    evaluations: int = 0
    unseen: int = 0  # requests to grow a state that has no recorded child left
    _children: dict[State, list[State]] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        for state in self.order:
            if state:
                for index in range(len(state)):
                    parent = state[:index] + state[index + 1:]
                    if parent in self.outcomes and state not in self._children.get(parent, []):
                        self._children.setdefault(parent, []).append(state)

    @classmethod
    def from_tree(cls, name: str, tree: dict) -> "Replay":
        """A replay of a search's tree.json (its evaluated nodes: transpositions were never evaluated)."""
        nodes = {node["id"]: node for node in tree["nodes"]}
        outcomes: dict[State, tuple[str, float | None]] = {(): ("reference", 1.0)}
        order: list[State] = []
        for node in sorted(tree["nodes"], key=lambda n: n["id"]):
            if node.get("parent") is None or node.get("transposition_of") is not None or \
                    node.get("status") == "pending":
                continue
            path, current = [], node
            while current is not None and current.get("parent") is not None:
                path.append(current["move"])
                current = nodes.get(current["parent"])
            state = _state(path)
            if state in outcomes:
                continue
            ratio = node.get("ratio") if node.get("status") == "ok" else None
            outcomes[state] = (node.get("verdict") or node.get("status") or "", ratio)
            order.append(state)
        return cls(name, outcomes, order)

    def to_json(self) -> dict:
        return {"name": self.name, "states": [{"moves": list(s), "verdict": self.outcomes[s][0],
                                               "ratio": self.outcomes[s][1]} for s in self.order]}

    @classmethod
    def from_json(cls, data: dict) -> "Replay":
        outcomes: dict[State, tuple[str, float | None]] = {(): ("reference", 1.0)}
        order = []
        for item in data["states"]:
            state = _state(item["moves"])
            outcomes[state] = (item["verdict"], item["ratio"])
            order.append(state)
        return cls(data["name"], outcomes, order)

    @classmethod
    def merged(cls, replays: list["Replay"]) -> "Replay":
        """One problem's searches as one replay (greedy's tree and MCTS's, say): the first replay's states in
        its order, then each later one's states that no earlier one evaluated; a state evaluated twice keeps
        the first outcome, so a strategy replays what was measured, once."""
        outcomes: dict[State, tuple[str, float | None]] = {(): ("reference", 1.0)}
        order: list[State] = []
        for replay in replays:
            for state in replay.order:
                if state not in outcomes:
                    outcomes[state] = replay.outcomes[state]
                    order.append(state)
        return cls(replays[0].name, outcomes, order)

    def key(self, state: State) -> str:
        return ",".join(_state(state))

    def children(self, state: State) -> list[State]:
        """The recorded states one move beyond `state`, in the order they were evaluated."""
        return self._children.get(_state(state), [])

    def ratio(self, state: State) -> float | None:
        return self.outcomes.get(_state(state), ("", None))[1]

    def best_ratio(self) -> float:
        return max(r for _, r in self.outcomes.values() if r is not None)

    def evaluate(self, proposal: Proposal) -> Outcome:
        self.evaluations += 1
        verdict, ratio = self.outcomes[_state(proposal.payload)]
        return Outcome(ok=True, ratio=ratio) if ratio is not None else Outcome(ok=False, failure=verdict)


@dataclass
class ReplayCoder:
    """Proposes the recorded children of a state, one at a time, in their recorded order (moves that lost
    wherever they were tried, `Expansion.losing`, after the others), and no repair, as the offline coder that
    recorded the searches.

    With `order_seed`, each state's children come in a seeded random order instead (the same order every time
    that state is grown, another for another seed): the recorded order is the order the recording search's
    coder offered them in, which the recording strategy followed, so a replay merged from greedy's tree first
    offers greedy its own path. Seeded orders measure the strategies over coders that rank the same moves
    differently."""

    replay: Replay
    order_seed: int | None = None
    _orders: dict[State, list[State]] = field(default_factory=dict, repr=False)  # the seeded order, per state

    def _ranked(self, state: State) -> list[State]:
        children = self.replay.children(state)
        if self.order_seed is None:
            return children
        if state not in self._orders:  # a state is grown many times; its order is drawn once
            # random.Random seeded by a string is stable across processes (it hashes with SHA-512)
            self._orders[state] = sorted(
                children, key=lambda child: random.Random(f"{self.order_seed}:{self.replay.key(child)}").random())
        return self._orders[state]

    def __call__(self, request: Expansion) -> Proposal | None:
        if request.kind is ExpansionKind.REPAIR:
            # The recorded searches' coder (the offline coder) repairs nothing: a recorded state one move beyond a
            # failed one is another move on top of the failure, reached from the other side, not its repair
            return None
        state = _state(request.payload or ())
        tried = {label for label, _ in request.tried}
        open_children = []
        for child in self._ranked(state):
            rest = list(child)
            for done in state:
                rest.remove(done)
            move = rest[0]
            if move not in tried and move not in request.avoid:
                open_children.append((move in request.losing, move, child))
        if open_children:  # in the coder's order, moves that lost everywhere so far last (as the offline coder does)
            _, move, child = min(open_children, key=lambda item: item[0])
            return Proposal(payload=list(child), moves=(move,), key=self.replay.key(child), prior=1.0)
        self.replay.unseen += 1
        return None


def replay_search(replay: Replay, config: SearchConfig, evaluations: int, order_seed: int | None = None) -> Search:
    """A search of `config` run on `replay` for `evaluations`, its coder a ReplayCoder (with `order_seed`)."""
    search = make_search([], config, root_key=replay.key(()))
    search.run(ReplayCoder(replay, order_seed=order_seed), replay.evaluate, Budget(evaluations=evaluations))
    return search


def load_replays(path: Path) -> list[Replay]:
    """Replays from a bench folder (every problems/**/tree.json) or from a JSON file of them."""
    path = Path(path)
    if path.is_dir():
        trees = sorted(path.glob("problems/**/tree.json")) or sorted(path.glob("**/tree.json"))
        return [Replay.from_tree(str(tree.parent.relative_to(path / "problems")) if (path / "problems").is_dir()
                                 else tree.parent.name, json.loads(tree.read_text())) for tree in trees]
    return [Replay.from_json(item) for item in json.loads(path.read_text())["replays"]]


def merge_benches(folders: list[Path]) -> list[Replay]:
    """Per problem, the merged replay of the benches' trees (in the order the folders are given); a problem
    keeps the folders that hold it, so benches run in parts (part 1, part 2 of each) merge as well."""
    by_name: dict[str, list[Replay]] = {}
    for folder in folders:
        for replay in load_replays(folder):
            by_name.setdefault(replay.name, []).append(replay)
    return [Replay.merged(group) for _, group in sorted(by_name.items())]
