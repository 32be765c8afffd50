"""The search's plain records. They know nothing of CUDA: a node's `payload` is
opaque (kernelpro stores a candidate's source there) and must be JSON-serializable.

Values: `ratio` is t_reference / t_candidate (or the energy ratio); above 1 is better.
Rewards are in [0, 1] (see `calibration`).
"""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any


class Status(str, enum.Enum):
    PENDING = "pending"  # asked for, not yet told
    OK = "ok"  # evaluated and correct
    FAILED = "failed"  # evaluated and failed (compile error, incorrect, crash, timeout, ...)


class ExpansionKind(str, enum.Enum):
    NEW_STRATEGY = "new_strategy"  # at the root: a different approach
    REFINE = "refine"  # improve a working node
    REPAIR = "repair"  # fix a failed node, told why it failed


@dataclass(frozen=True)
class Proposal:
    """What an expander returns: a new state reached by some moves.

    `key` identifies the state for transpositions (e.g. a hash of the source);
    `signature` describes it for the search memory (e.g. roofline class + op family);
    `prior` is the expander's belief in it (0..1], biased further by the memory.
    """

    payload: Any
    moves: tuple[str, ...]
    key: str
    signature: str = ""
    prior: float = 1.0
    rationale: str = ""


@dataclass(frozen=True)
class Outcome:
    """What an evaluator returns. `ratio` is required when `ok`."""

    ok: bool
    ratio: float | None = None
    failure: str = ""  # the failure kind or reason when not ok


@dataclass(frozen=True)
class Expansion:
    """A request to the expander: grow `node_id` this way. Hints come from the memory."""

    ticket: int
    node_id: int
    kind: ExpansionKind
    payload: Any
    failure: str = ""
    tried: tuple[tuple[str, str], ...] = ()  # (moves, outcome) already tried at this node
    avoid: tuple[str, ...] = ()  # moves that failed at an equivalent node
    promising: tuple[str, ...] = ()  # moves that worked elsewhere, best first
    losing: tuple[str, ...] = ()  # moves that only failed or lost wherever they were tried: offer them last
    # moves of the children being evaluated anywhere in the tree: their outcome is not known yet, so a coder offers
    # other moves first (as virtual loss spreads the nodes a batch expands, this spreads the moves)
    pending: tuple[str, ...] = ()


@dataclass
class Node:
    id: int
    parent: int | None
    depth: int
    moves: tuple[str, ...] = ()
    key: str = ""
    signature: str = ""
    prior: float = 1.0
    payload: Any = None
    status: Status = Status.PENDING
    ratio: float | None = None
    failure: str = ""
    children: list[int] = field(default_factory=list)
    visits: int = 0  # evaluations backed up through this node
    passes: int = 0  # selection passes that found it at its limit with nothing open below
    ok_count: int = 0
    log_sum: float = 0.0  # sum of log ratios of successful evaluations in the subtree
    best_log: float | None = None  # best log ratio in the subtree
    virtual: int = 0  # in-flight expansions through this node
    pending_children: int = 0
    consecutive_failures: int = 0
    stale_expansions: int = 0  # evaluations below it that did not beat it
    exhausted: bool = False  # the expander said it has no moves left
    closed: str = ""  # why selection skips it ("" while open)
    transposition_of: int | None = None
    improved: bool = False  # beat its parent

    @property
    def fail_count(self) -> int:
        return self.visits - self.ok_count

    def to_json(self) -> dict:
        data = asdict(self)
        data["status"] = self.status.value
        data["moves"] = list(self.moves)
        return data

    @classmethod
    def from_json(cls, data: dict) -> "Node":
        data = dict(data)
        data["status"] = Status(data["status"])
        data["moves"] = tuple(data["moves"])
        return cls(**data)


#: Pluggable signatures.
Expander = Callable[[Expansion], "Proposal | None"]
Evaluator = Callable[[Proposal], Outcome]
StopPredicate = Callable[[Any], bool]
PriorHook = Callable[[str, str], float]  # (signature, move) -> multiplicative prior factor
