"""Synthetic landscapes: deterministic fake coders and evaluators for tests and ablations.

A state is a tuple of moves. A landscape gives each state a ratio (or a failure),
optionally with seeded log-normal noise; `LandscapeCoder` proposes one untried move
at a time in a per-state order fixed by the seed. No randomness escapes the seeds,
and hashing is stable across processes (crc32, not Python's salted `hash`).
"""

from __future__ import annotations

import math
import random
import zlib
from dataclasses import dataclass, field

from kernelpro.mcts.records import Expansion, ExpansionKind, Outcome, Proposal


def _stable(*parts: object) -> int:
    return zlib.crc32("|".join(map(str, parts)).encode())


@dataclass
class Landscape:
    name: str
    moves: tuple[str, ...]
    max_depth: int
    optimum: float
    commutative: bool = False  # transposition-heavy: move order does not matter
    noise_sigma: float = 0.0  # log-normal noise on observed ratios
    evaluations: int = 0

    def true_ratio(self, state: tuple[str, ...]) -> float | None:
        """The noiseless ratio, or None for a failure."""
        raise NotImplementedError

    def reached_optimum(self, ratio: float) -> bool:
        """Whether a best of `ratio` reached the optimum (failure_prone's repairs can go past it)."""
        return ratio >= self.optimum - 1e-9

    def failure_kind(self, state: tuple[str, ...]) -> str:
        return "compile_error"

    def signature(self, state: tuple[str, ...]) -> str:
        return f"depth{len(state)}"

    def key(self, state: tuple[str, ...]) -> str:
        return ",".join(sorted(state) if self.commutative else state)

    def evaluate(self, proposal: Proposal) -> Outcome:
        state = tuple(proposal.payload)
        self.evaluations += 1
        ratio = self.true_ratio(state)
        if ratio is None:
            return Outcome(ok=False, failure=self.failure_kind(state))
        if self.noise_sigma:
            rng = random.Random(_stable(self.name, self.key(state), self.evaluations))
            ratio *= math.exp(rng.gauss(0.0, self.noise_sigma))
        return Outcome(ok=True, ratio=ratio)


class Deceptive(Landscape):
    """Greedy's trap: 'a' gains at once but tops out at 1.35x; 'b' loses first, then
    'b','b','b' reaches the optimum 4x."""

    def __init__(self, **kwargs):
        super().__init__(name="deceptive", moves=("a", "b", "c", "d"), max_depth=4, optimum=4.0, **kwargs)

    def true_ratio(self, state):
        if state[0] == "a":
            return min(1.35, 1.2 + 0.05 * state.count("a"))
        if state[0] == "b":
            if state[:3] == ("b", "b", "b"):
                return 4.0
            return 0.9 if state == ("b",) else (0.95 if state == ("b", "b") else 0.85)
        return 1.0 if state[0] == "c" else 0.8


class Noisy(Landscape):
    """Each right move (the hidden sequence) multiplies the ratio by 1.3, a wrong one by
    0.9; observations carry 10% log-normal noise. Optimum 1.3^4."""

    target = ("p", "q", "r", "s")

    def __init__(self, noise_sigma: float = 0.1, **kwargs):
        super().__init__(name="noisy", moves=("p", "q", "r", "s", "t"), max_depth=4, optimum=1.3 ** 4,
                         noise_sigma=noise_sigma, **kwargs)

    def true_ratio(self, state):
        right = 0
        for move, wanted in zip(state, self.target):
            if move != wanted:
                break
            right += 1
        return 1.3 ** right * 0.9 ** (len(state) - right)


class FailureProne(Landscape):
    """'x' (say, tensor cores) fails to compile until the next move is 'fix', which then
    triples the ratio; 'bad' always fails (incorrect); 'y' and 'z' give small gains. The optimum
    is x once, fixed, with y and z (3.63x); a search that repairs twice (x, fix, x, fix: 9x) or
    repairs at the depth limit (a repair is one move past it) goes beyond it, and counts as
    having reached it."""

    def __init__(self, **kwargs):
        super().__init__(name="failure_prone", moves=("x", "bad", "y", "z"), max_depth=4,
                         optimum=3.0 * 1.1 * 1.1, **kwargs)

    def true_ratio(self, state):
        ratio = 1.0
        for index, move in enumerate(state):
            if move == "bad":
                return None
            if move == "x":
                if index + 1 >= len(state) or state[index + 1] != "fix":
                    return None
                ratio *= 3.0
            elif move in ("y", "z"):
                ratio *= 1.1
        return ratio

    def failure_kind(self, state):
        return "incorrect" if "bad" in state else "compile_error"

    def signature(self, state):
        return "any"  # every node is equivalent for the memory


class Transpositions(Landscape):
    """Commutative moves: the same set of moves in any order is the same state. The
    optimum needs the set {u, v, w}."""

    def __init__(self, **kwargs):
        super().__init__(name="transpositions", moves=("u", "v", "w", "k"), max_depth=3, optimum=2.5,
                         commutative=True, **kwargs)

    def true_ratio(self, state):
        chosen = set(state)
        if len(chosen) < len(state):
            return 0.9
        return {frozenset("uvw"): 2.5}.get(frozenset(chosen), 1.0 + 0.1 * len(chosen & {"u", "v"}))


LANDSCAPES = {"deceptive": Deceptive, "noisy": Noisy, "failure_prone": FailureProne,
              "transpositions": Transpositions}


@dataclass
class LandscapeCoder:
    """A fake coder: one untried move at a time, in a seeded per-state order.

    With `honour_hints=False` it ignores the memory's `avoid` list, to show that the
    search itself refuses to re-evaluate a move that failed at an equivalent node.
    """

    landscape: Landscape
    seed: int = 0
    honour_hints: bool = True
    calls: int = field(default=0)

    def order(self, state: tuple[str, ...]) -> list[str]:
        moves = list(self.landscape.moves)
        random.Random(_stable(self.seed, self.landscape.key(state))).shuffle(moves)
        return moves

    def __call__(self, request: Expansion) -> Proposal | None:
        self.calls += 1
        state = tuple(request.payload or ())
        if request.kind is ExpansionKind.REPAIR and isinstance(self.landscape, FailureProne):
            fixed = state + ("fix",)
            return self._proposal(fixed, ("fix",))
        if len(state) >= self.landscape.max_depth:
            return None
        tried = {label for label, _ in request.tried}
        avoid = set(request.avoid) if self.honour_hints else set()
        for move in self.order(state):
            if move not in tried and move not in avoid:
                return self._proposal(state + (move,), (move,))
        return None

    def _proposal(self, state: tuple[str, ...], moves: tuple[str, ...]) -> Proposal:
        return Proposal(payload=list(state), moves=moves, key=self.landscape.key(state),
                        signature=self.landscape.signature(state), prior=1.0)


class Rugged(Landscape):
    """A large random landscape (12 moves, depth 10, ratios from a stable hash) for
    measuring the search's own overhead on big trees."""

    def __init__(self, **kwargs):
        super().__init__(name="rugged", moves=tuple("abcdefghijkl"), max_depth=10, optimum=float("nan"), **kwargs)

    def true_ratio(self, state):
        return 0.5 + 1.5 * (_stable("rugged", *state) % 10_000) / 10_000
