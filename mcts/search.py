"""The tree search: ask for expansions, let a coder propose, evaluate, tell.

    search = Search(root_payload, SearchConfig(seed=0))
    while not search.done(budget):
        for request in search.ask(n):             # up to n expansions, diverse by virtual loss
            proposal = expander(request)            # a coder; None = no moves left here
            if search.propose(request, proposal):   # False: transposition or refused repeat
                search.tell(request, evaluator(proposal))

`Search.run(expander, evaluator, budget)` is that loop. The root is the reference
(ratio 1). Strategies differ only in `_choose_expansion`: MCTS here, the baselines
in `baselines.py`. Nodes are never removed: a closed node stays for the report.
"""

from __future__ import annotations

import dataclasses
import math
import random
import time
from dataclasses import asdict, dataclass, replace
from typing import Any

from kernelpro.mcts.calibration import LogRewardCalibration
from kernelpro.mcts.memory import SearchMemory
from kernelpro.mcts.policies import SELECTION, WIDENING
from kernelpro.mcts.records import (Evaluator, Expander, Expansion, ExpansionKind, Node, Outcome,
                                    PriorHook, Proposal, Status, StopPredicate)

_IMPROVEMENT = 1e-9


@dataclass(frozen=True)
class SearchConfig:
    """Knobs of the search. Every field serializes; functions are named by registry key."""

    strategy: str = "mcts"  # mcts | greedy | beam | best_first | random
    selection: str = "puct"  # a key of policies.SELECTION
    widening: str = "progressive"  # a key of policies.WIDENING
    exploration: float = 1.0
    widen_c: float = 1.0  # progressive widening: at most ceil(C * N^alpha) children
    widen_alpha: float = 0.5
    widen_c_root: float = 2.0  # the root widens more, for diverse strategies
    widen_improved_factor: float = 1.5  # a node that beat its parent widens more
    fixed_children: int = 3  # widen_fixed, best-first and beam branching
    repair_children: int = 1  # a failed node gets at most this many (repair) children
    fail_streak: int = 4  # close a node after k consecutive failures in its subtree
    stale_limit: int = 6  # close a node after m of its expansions in a row brought no improvement below it
    prune: bool = True
    use_memory: bool = True
    beam_width: int = 3
    # MCTS spends the last max(greedy_tail x budget, greedy_tail_floor) evaluations of its budget
    # (Search.horizon) refining its best node, as greedy does, and a budget of greedy_tail_min or fewer all of
    # them: at small budgets exploration cannot pay back (benchmarks/mcts_landscapes.py); greedy_tail and
    # greedy_tail_min 0 turn it off. The floor None is greedy_tail_min (the tail as it was before the floor existed)
    greedy_tail: float = 0.3
    greedy_tail_min: int = 8
    greedy_tail_floor: int | None = None
    # The first greedy_head evaluations also follow greedy's rule (the best open node), before any
    # exploration: 0 turns it off
    greedy_head: int = 2
    # When above 0, the greedy head goes on past greedy_head for as long as every evaluation so far raised the
    # best ratio by at least this factor (1.05: 5%): greedy while it keeps gaining, exploration once it stalls
    head_gain: float = 1.05
    # With head_gain, how many evaluations in a row may leave the best below that factor before the head ends
    # (0: the first such evaluation ends it), as long as no evaluation has failed (failures are where exploring
    # and repairing pay). 3 by measurement (benchmarks/mcts_landscapes.py): it mends the
    # noisy landscape at budget 15 and keeps failure_prone's gain at 30
    head_patience: int = 3
    # With head_gain, the head also lasts while no evaluation has yet beaten the reference by head_gain and
    # none has failed: until something gains, the selection rule has nothing to tell the root's moves apart,
    # and refining the best node tries the moves in combination (where interactions are), as greedy does. On by
    # measurement (benchmarks/mcts_landscapes.py): it closes the level-2
    # replay's cell at 16 and leaves every synthetic cell within the interval
    head_until_gain: bool = True
    # With head_gain, a failure ends the head only until the search gains again: when the evaluation right after
    # the last failure raised the best by head_gain, the head first offers the failed node to the coder for repair
    # (no evaluation where the coder repairs nothing), then goes on by the patient rule (head_patience), counted
    # from the failure. On by measurement (benchmarks/mcts_landscapes.py): it saves the
    # suite's replays the exploring evaluations greedy does not spend, and repairs sooner where a repair pays
    # (failure_prone)
    head_regain: bool = True
    # When above 0, a correct child below this fraction of its parent's ratio counts in the memory as a
    # move that did not work (like a failure): the coder is told to avoid it at equivalent nodes, and a
    # repeat is refused. Off by default, by measurement (benchmarks/mcts_landscapes.py): at 0.9 it saved
    # no replay any evaluations it could show, cost greedy 2% at budgets 16-20 on the suite's replays,
    # and lost the noisy landscape's optimum, where a move that loses at one depth wins at the next.
    clear_loss: float = 0.0
    # A correct child below this fraction of its parent's ratio is a loss: a move that only failed or lost
    # wherever it was tried in this run is offered last (Expansion.losing); 0 turns it off
    losing_below: float = 0.9
    # When above 0, a node that may widen first descends into its best correct child if that child's ratio is
    # at least this many times the node's own (the root's is 1): a decisive gain is refined before siblings
    # are tried; 0 turns it off. 3 by measurement (benchmarks/mcts_landscapes.py)
    follow_gain: float = 3.0
    seed: int = 0
    # the evaluations the caller means to spend (kernelpro search --budget; run() takes its Budget's): MCTS's greedy
    # tail (greedy_tail) is counted back from it. None: no tail
    budget: int | None = None


def open_working_nodes(search: "Search") -> list[Node]:
    """The evaluated, correct nodes that may still get children."""
    return [n for n in search.nodes if n.status is Status.OK and not n.exhausted and not n.closed]


def by_ratio(nodes: list[Node]) -> list[Node]:
    """Best ratio first; ties to the older node."""
    return sorted(nodes, key=lambda n: (-(n.ratio or 0.0), n.id))


@dataclass(frozen=True)
class Budget:
    """When to stop: evaluations, wall-clock seconds, or a predicate on the search."""

    evaluations: int | None = None
    wall_time_s: float | None = None
    stop: StopPredicate | None = None


class Search:
    """MCTS with progressive widening, asymmetric branching, log-reward calibration,
    dead-end pruning, search memory and ask/tell batching."""

    def __init__(self, root_payload: Any = None, config: SearchConfig | None = None, *,
                 root_key: str = "root", root_signature: str = "", prior_hook: PriorHook | None = None):
        self.config = config or SearchConfig()
        root = Node(id=0, parent=None, depth=0, key=root_key, signature=root_signature,
                    payload=root_payload, status=Status.OK, ratio=1.0)
        self.nodes: list[Node] = [root]
        self.memory = SearchMemory(prior_hook=prior_hook)
        self.memory.keys[root_key] = 0
        self.calibration = LogRewardCalibration()
        self.rng = random.Random(self.config.seed)
        self.evaluations = 0
        self.iterations = 0
        self.refused = 0  # proposals not evaluated because they repeated a failed move
        self.best_id = 0
        self.history: list[tuple[int, float]] = []  # (evaluations, best ratio so far)
        self.last_failure_at = 0  # the evaluations count at the last evaluation that failed (0: none)
        self.last_failure_id: int | None = None  # and its node
        self._next_ticket = 0
        self._in_flight: dict[int, dict] = {}  # ticket -> {"target", "child"}
        self._started = time.monotonic()
        self._select = SELECTION[self.config.selection]
        self._widen = WIDENING[self.config.widening]

    # -- queries ------------------------------------------------------------------
    @property
    def root(self) -> Node:
        return self.nodes[0]

    def best(self) -> Node:
        return self.nodes[self.best_id]

    def value(self, node: Node) -> float:
        """Q in [0, 1]: the calibrated mean reward of the node's subtree."""
        return self.calibration.value(node.ok_count, node.fail_count, node.log_sum)

    def children_limit(self, node: Node) -> int:
        return self._widen(node, self.config)

    def done(self, budget: Budget) -> bool:
        if self.root.closed:
            return True
        if budget.evaluations is not None and self.evaluations >= budget.evaluations:
            return True
        if budget.wall_time_s is not None and time.monotonic() - self._started >= budget.wall_time_s:
            return True
        return bool(budget.stop and budget.stop(self))

    # -- ask ------------------------------------------------------------------------
    def ask(self, n: int = 1) -> list[Expansion]:
        """Up to n expansions to run concurrently (fewer when the tree offers fewer)."""
        requests = []
        for _ in range(n):
            target = self._choose_expansion()
            if target is None:
                break
            requests.append(self._issue(target))
        return requests

    def _issue(self, node: Node) -> Expansion:
        ticket = self._next_ticket
        self._next_ticket += 1
        for ancestor in self._path(node):
            ancestor.virtual += 1
        node.pending_children += 1
        self._in_flight[ticket] = {"target": node.id, "child": None}
        if node.status is Status.FAILED:
            kind = ExpansionKind.REPAIR
        elif node.parent is None:
            kind = ExpansionKind.NEW_STRATEGY
        else:
            kind = ExpansionKind.REFINE
        tried = tuple(("+".join(self.nodes[c].moves), self._outcome_label(self.nodes[c])) for c in node.children)
        pending = tuple(sorted({move for other in self.nodes if other.status is Status.PENDING
                                and other.parent is not None for move in other.moves}))
        use_memory = self.config.use_memory
        return Expansion(ticket=ticket, node_id=node.id, kind=kind, payload=node.payload, failure=node.failure,
                         tried=tried, avoid=self.memory.avoid(node.signature) if use_memory else (),
                         promising=self.memory.promising() if use_memory else (),
                         losing=self.memory.losing() if use_memory and self.config.losing_below > 0 else (),
                         pending=pending)

    @staticmethod
    def _outcome_label(node: Node) -> str:
        if node.status is Status.OK:
            return f"{node.ratio:.3f}x"
        return node.status.value if node.status is Status.PENDING else f"failed: {node.failure}"

    def _selectable(self, node: Node, blocked: set[int]) -> bool:
        return node.status is not Status.PENDING and not node.closed and node.id not in blocked

    def _can_widen(self, node: Node) -> bool:
        if node.exhausted or node.closed or node.status is Status.PENDING:
            return False
        return len(node.children) + node.pending_children < self.children_limit(node)

    def _limit_can_grow(self, node: Node) -> bool:
        """Whether more visits would ever let this node widen (not for repairs or fixed limits)."""
        much_later = dataclasses.replace(node, passes=node.passes + 10**9)
        return self.children_limit(much_later) > len(node.children) + node.pending_children

    def in_greedy_tail(self) -> bool:
        """Whether what is left of the horizon (less the evaluations in flight) is the greedy tail."""
        if self.horizon is None:
            return False
        left = self.horizon - self.evaluations - len(self._in_flight)
        if self.horizon <= self.config.greedy_tail_min:
            return left <= self.horizon
        floor = self.config.greedy_tail_min if self.config.greedy_tail_floor is None else self.config.greedy_tail_floor
        return left <= max(self.config.greedy_tail * self.horizon, floor)

    def in_greedy_head(self) -> bool:
        """Whether the next expansion is in the greedy head: among the first greedy_head evaluations (counting
        those in flight), or, with head_gain, while every evaluation so far raised the best by that factor (with
        head_patience misses), or, with head_until_gain, while nothing has gained that factor and nothing failed; a
        failure ends it, or with head_regain, only until the evaluation after it gains."""
        if self.evaluations + len(self._in_flight) < self.config.greedy_head:
            return True
        if self.config.head_gain <= 0 or not self.history:
            return False
        flat = self.config.head_until_gain and self.history[-1][1] < self.config.head_gain  # the reference's is 1
        if not (flat or self._head_patient(self.config.head_patience)):
            return False
        # A failure ends the flat head and the patience: failures are where exploring (and repairing) pays. The
        # tree is scanned for one only when it decides (a scan at every request would cost more than the rest).
        if not any(n.status is Status.FAILED for n in self.nodes):
            return True
        if self.config.head_regain:
            return self._regained()
        return self._head_patient(0)

    def _regained(self) -> bool:
        """head_regain: whether the evaluation right after the last failure raised the best by head_gain, and the
        patient rule holds from the failure on."""
        at = self.last_failure_at  # history[k] is evaluation k + 1's
        since = [best for _, best in self.history[at:]]
        previous = self.history[at - 1][1] if at else 1.0  # the best when the last failure came (the reference's is 1)
        return bool(since) and since[0] >= previous * self.config.head_gain and \
            self._head_patient(self.config.head_patience, since, previous)

    def _failure_to_offer(self) -> Node | None:
        """head_regain: the last failed node, while it may still get a repair, once the search regained after it
        (the head offers it to the coder before it refines the gain: free where the coder repairs nothing)."""
        if not self.config.head_regain or self.last_failure_id is None:
            return None
        node = self.nodes[self.last_failure_id]
        if node.status is not Status.FAILED or not self._can_widen(node) or not self._regained():
            return None
        return node

    def _head_patient(self, patience: int, bests: list[float] | None = None, previous: float = 1.0) -> bool:
        """Whether no more than `patience` evaluations in a row have left the best below head_gain x the best
        before them (a gain resets the count), anywhere in the history (or in `bests`, those after `previous`)."""
        misses = 0  # `previous` starts at the reference's ratio
        for best in ((best for _, best in self.history) if bests is None else bests):
            if best < previous * self.config.head_gain:
                misses += 1
                if misses > patience:
                    return False
            else:
                previous, misses = best, 0
        return True

    def _greedy_choice(self) -> Node | None:
        """The best working node that may still have children (greedy's rule), if any."""
        ranked = by_ratio(open_working_nodes(self))
        return ranked[0] if ranked else None

    def _decisive_child(self, node: Node, blocked: set[int]) -> Node | None:
        """The best correct child that beat `node` by `follow_gain` or more, if that is on (else None)."""
        if self.config.follow_gain <= 0:
            return None
        floor = self.config.follow_gain * (node.ratio or 1.0)  # the root's ratio is 1.0
        winners = [self.nodes[c] for c in node.children if self.nodes[c].status is Status.OK
                   and self._selectable(self.nodes[c], blocked) and (self.nodes[c].ratio or 0.0) >= floor]
        return by_ratio(winners)[0] if winners else None

    def _choose_expansion(self) -> Node | None:
        """MCTS: descend by the selection rule until a node may widen; in the greedy tail, the best node; in the
        head, the best node, after offering the last failure for repair once the search regained (head_regain)."""
        tail = self.in_greedy_tail()
        if tail or self.in_greedy_head():
            node = (None if tail else self._failure_to_offer()) or self._greedy_choice()
            if node is not None:
                return node
        blocked: set[int] = set()
        while not self.root.closed and self.root.id not in blocked:
            node = self.root
            while True:
                decisive = self._decisive_child(node, blocked)
                if decisive is not None:
                    node = decisive
                    continue
                if self._can_widen(node):
                    return node
                children = [self.nodes[c] for c in node.children if self._selectable(self.nodes[c], blocked)]
                if children:
                    node = self._select(node, children, self.value, self.config)
                    continue
                if node.pending_children or any(self.nodes[c].status is Status.PENDING for c in node.children):
                    blocked.add(node.id)  # busy below: look elsewhere this time
                    break
                if node.exhausted:
                    self._close(node, "no moves left")
                    break
                # At its widening limit with nothing open below: this selection pass counts
                # as a visit, so the limit grows until the node may widen.
                if not self._limit_can_grow(node):
                    self._close(node, "every child closed")
                    break
                node.passes += 1
                if self._can_widen(node):
                    return node
                break
        return None

    # -- propose ----------------------------------------------------------------------
    def propose(self, request: Expansion, proposal: Proposal | None) -> bool:
        """Record the expander's answer. True: evaluate `proposal`, then `tell`."""
        self.iterations += 1
        target = self.nodes[request.node_id]
        target.pending_children -= 1
        if proposal is None:
            target.exhausted = True
            return self._drop(request)
        if self.config.use_memory and target.status is Status.OK and \
                self.memory.failed_here(target.signature, proposal.moves):
            self.refused += 1
            target.stale_expansions += 1
            return self._drop(request)
        prior = self.memory.prior(target.signature, proposal.moves, proposal.prior) \
            if self.config.use_memory else proposal.prior
        child = Node(id=len(self.nodes), parent=target.id, depth=target.depth + 1, moves=tuple(proposal.moves),
                     key=proposal.key, signature=proposal.signature or target.signature, prior=prior,
                     payload=proposal.payload)
        self.nodes.append(child)
        target.children.append(child.id)
        self._in_flight[request.ticket]["child"] = child.id
        original = self.memory.keys.get(proposal.key)
        if original is not None:  # a transposition: never evaluated twice
            child.transposition_of = original
            known = self.nodes[original]
            outcome = Outcome(ok=known.status is Status.OK, ratio=known.ratio, failure=known.failure)
            self._finish(request, outcome, evaluated=False)
            return False
        self.memory.keys[proposal.key] = child.id
        return True

    def abandon(self, request: Expansion) -> None:
        """The expander failed to answer (an API error, say): forget the request, leave the node open."""
        self.iterations += 1
        self.nodes[request.node_id].pending_children -= 1
        self._drop(request)

    def _drop(self, request: Expansion) -> bool:
        for ancestor in self._path(self.nodes[request.node_id]):
            ancestor.virtual -= 1
        del self._in_flight[request.ticket]
        return False

    # -- tell ---------------------------------------------------------------------------
    def tell(self, request: Expansion, outcome: Outcome) -> Node:
        """Back up an evaluation. Returns the evaluated node."""
        if outcome.ok and (outcome.ratio is None or outcome.ratio <= 0):
            raise ValueError("a successful outcome needs a positive ratio")
        return self._finish(request, outcome, evaluated=True)

    def _finish(self, request: Expansion, outcome: Outcome, evaluated: bool) -> Node:
        child = self.nodes[self._in_flight.pop(request.ticket)["child"]]
        parent = self.nodes[child.parent]
        for ancestor in self._path(parent):
            ancestor.virtual -= 1
        child.status = Status.OK if outcome.ok else Status.FAILED
        child.ratio = outcome.ratio if outcome.ok else None
        child.failure = "" if outcome.ok else (outcome.failure or "failed")
        log_value = math.log(outcome.ratio) if outcome.ok else None
        child.improved = bool(outcome.ok and parent.status is Status.OK and outcome.ratio > parent.ratio)
        if evaluated:
            self.evaluations += 1
            if log_value is not None:
                self.calibration.observe(log_value)
            gain = log_value - math.log(parent.ratio) if outcome.ok and parent.ratio else None

            def held(floor: float) -> bool:  # correct, and not below `floor` x its parent's ratio (0: any)
                return outcome.ok and (gain is None or floor <= 0 or gain >= math.log(floor))
            self.memory.record(parent.signature, child.moves, held(self.config.clear_loss), gain,
                               held(self.config.losing_below))
        self._backup(child, log_value)
        if outcome.ok and outcome.ratio > self.best().ratio + _IMPROVEMENT:
            self.best_id = child.id
        if evaluated:
            self.history.append((self.evaluations, self.best().ratio))
            if not outcome.ok:
                self.last_failure_at, self.last_failure_id = self.evaluations, child.id
        return child

    def _backup(self, child: Node, log_value: float | None) -> None:
        ok = log_value is not None
        for node in self._path(child):
            node.visits += 1
            if ok:
                node.ok_count += 1
                node.log_sum += log_value
                node.best_log = log_value if node.best_log is None else max(node.best_log, log_value)
            node.consecutive_failures = 0 if ok else node.consecutive_failures + 1
            if node.ratio is not None and ok and log_value > math.log(node.ratio) + _IMPROVEMENT:
                node.stale_expansions = 0  # something below it improved on it
            elif node.id == child.parent:
                node.stale_expansions += 1  # one of its own expansions did not
            self._prune(node)

    def _prune(self, node: Node) -> None:
        if not self.config.prune or node.parent is None or node.closed:
            return
        if node.consecutive_failures >= self.config.fail_streak:
            self._close(node, f"{node.consecutive_failures} consecutive failures")
        elif node.stale_expansions >= self.config.stale_limit:
            self._close(node, f"{node.stale_expansions} expansions without improvement")

    def _close(self, node: Node, reason: str) -> None:
        node.closed = reason

    @property
    def horizon(self) -> int | None:
        """The evaluations the search means to spend (its config's budget), for the greedy tail."""
        return self.config.budget

    def _path(self, node: Node) -> list[Node]:
        """The node and its ancestors, up to the root."""
        path = [node]
        while path[-1].parent is not None:
            path.append(self.nodes[path[-1].parent])
        return path

    # -- the loop -----------------------------------------------------------------------
    def run(self, expander: Expander, evaluator: Evaluator, budget: Budget, batch: int = 1) -> Node:
        """Sequential ask/propose/tell until the budget is spent. Returns the best node."""
        if budget.evaluations is not None:
            self.config = replace(self.config, budget=budget.evaluations)
        idle = 0
        while not self.done(budget) and idle < 1000:
            room = batch if budget.evaluations is None else min(batch, budget.evaluations - self.evaluations)
            requests = self.ask(max(1, room))
            if not requests:
                break
            before = self.evaluations
            for request in requests:
                proposal = expander(request)
                if self.propose(request, proposal):
                    self.tell(request, evaluator(proposal))
            idle = idle + 1 if self.evaluations == before else 0
        return self.best()

    # -- serialization -------------------------------------------------------------------
    def to_json(self) -> dict:
        """The whole search state. In-flight expansions are not saved: they are asked again."""
        state = self.rng.getstate()
        return {
            "format": "kernelpro.mcts/1",
            "config": asdict(self.config),
            "nodes": [node.to_json() for node in self.nodes],
            "memory": self.memory.to_json(),
            "calibration": self.calibration.to_json(),
            "rng": [state[0], list(state[1]), state[2]],
            "counters": {"evaluations": self.evaluations, "iterations": self.iterations,
                         "refused": self.refused, "best_id": self.best_id, "next_ticket": self._next_ticket,
                         "last_failure_at": self.last_failure_at, "last_failure_id": self.last_failure_id},
            "history": [list(item) for item in self.history],
            "strategy_state": self._strategy_state(),
        }

    @classmethod
    def from_json(cls, data: dict, prior_hook: PriorHook | None = None, budget: int | None = None) -> "Search":
        """A saved search, as an instance of this class (kernelpro.mcts.restore_search picks the
        class of the saved strategy); `budget`, where given, replaces the saved one (a resumed run's may be larger)."""
        config = SearchConfig(**data["config"])
        if budget is not None:
            config = replace(config, budget=budget)
        search = cls.__new__(cls)
        Search.__init__(search, None, config, prior_hook=prior_hook)
        search.nodes = [Node.from_json(node) for node in data["nodes"]]
        search.memory = SearchMemory.from_json(data["memory"], prior_hook)
        search.calibration = LogRewardCalibration.from_json(data["calibration"])
        version, internal, gauss = data["rng"]
        search.rng.setstate((version, tuple(internal), gauss))
        counters = data["counters"]
        search.evaluations, search.iterations = counters["evaluations"], counters["iterations"]
        search.refused, search.best_id = counters["refused"], counters["best_id"]
        search._next_ticket = counters["next_ticket"]
        search.last_failure_at = counters.get("last_failure_at", 0)
        search.last_failure_id = counters.get("last_failure_id")
        search.history = [tuple(item) for item in data["history"]]
        search._drop_in_flight()
        search._load_strategy_state(data.get("strategy_state") or {})
        return search

    def _drop_in_flight(self) -> None:
        pending = {node.id for node in self.nodes if node.status is Status.PENDING}
        # A dropped expansion's state was never evaluated: proposing it again is not a transposition.
        self.memory.keys = {key: node_id for key, node_id in self.memory.keys.items() if node_id not in pending}
        for node in self.nodes:
            node.virtual = 0
            node.pending_children = 0
            node.children = [c for c in node.children if self.nodes[c].status is not Status.PENDING]

    def _strategy_state(self) -> dict:
        return {}

    def _load_strategy_state(self, state: dict) -> None:
        pass

    # -- rendering ----------------------------------------------------------------------
    def render(self, max_nodes: int = 200) -> str:
        """A plain-text tree for reports."""
        lines: list[str] = []

        def label(node: Node) -> str:
            moves = "+".join(node.moves) or "reference"
            if node.status is Status.OK:
                state = f"{node.ratio:.3f}x"
            else:
                state = node.status.value + (f" ({node.failure})" if node.failure else "")
            extras = [f"N={node.visits}", f"Q={self.value(node):.2f}"]
            if node.id == self.best_id:
                extras.append("best")
            if node.transposition_of is not None:
                extras.append(f"= #{node.transposition_of}")
            if node.closed:
                extras.append(f"closed: {node.closed}")
            return f"#{node.id} [{moves}] {state} " + " ".join(extras)

        def walk(node: Node, prefix: str, last: bool, top: bool) -> None:
            if len(lines) >= max_nodes:
                return
            lines.append(label(node) if top else f"{prefix}{'└─ ' if last else '├─ '}{label(node)}")
            child_prefix = "" if top else prefix + ("   " if last else "│  ")
            for index, child in enumerate(node.children):
                walk(self.nodes[child], child_prefix, index == len(node.children) - 1, False)

        walk(self.root, "", True, True)
        if len(self.nodes) > max_nodes:
            lines.append(f"... {len(self.nodes) - max_nodes} more nodes")
        return "\n".join(lines)
