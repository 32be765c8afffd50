"""Per-run search memory: (state signature, move) -> outcome statistics.

It tells the expander which moves failed at an equivalent node (and the search
refuses to evaluate them again), biases priors toward moves that worked elsewhere
in the tree, and has a hook through which a persistent knowledge base seeds priors
across runs. Transpositions (identical states, by key) live here too.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from kernelpro.mcts.records import PriorHook


def prior_factor(attempts: float, successes: float, mean_gain: float) -> float:
    """Beta(1,1) posterior success rate relative to 1/2, times exp(mean gain), in [0.25, 4]: the factor a
    move's record (in this run, or in the knowledge base across runs) multiplies its prior by."""
    rate = (successes + 1) / (attempts + 2)
    return min(4.0, max(0.25, 2 * rate * math.exp(max(-1.0, min(1.0, mean_gain)))))


@dataclass
class MoveStats:
    attempts: int = 0
    successes: int = 0
    gain_sum: float = 0.0  # sum of log(ratio child / ratio parent) over successes
    wins: int | None = 0  # correct and not clearly slower than the parent (None: a state from before it was kept)

    @property
    def mean_gain(self) -> float:
        return self.gain_sum / self.successes if self.successes else 0.0

    def factor(self) -> float:
        return prior_factor(self.attempts, self.successes, self.mean_gain)


@dataclass
class SearchMemory:
    table: dict[str, dict[str, MoveStats]] = field(default_factory=dict)  # signature -> move -> stats
    global_moves: dict[str, MoveStats] = field(default_factory=dict)
    keys: dict[str, int] = field(default_factory=dict)  # state key -> first node id with it
    prior_hook: PriorHook | None = None

    def record(self, signature: str, moves: tuple[str, ...], ok: bool, gain: float | None, won: bool | None = None) -> None:
        """`won`: correct and not clearly slower than the parent (by default: `ok`)."""
        won = ok if won is None else won
        for move in moves:
            for stats in (self.table.setdefault(signature, {}).setdefault(move, MoveStats()),
                          self.global_moves.setdefault(move, MoveStats())):
                stats.attempts += 1
                if ok:
                    stats.successes += 1
                    stats.gain_sum += gain or 0.0
                if stats.wins is not None:
                    stats.wins += 1 if won else 0

    def failed_here(self, signature: str, moves: tuple[str, ...]) -> bool:
        """True when every one of these moves has been tried at this signature and never worked (failed, or
        left its child clearly slower than its parent: `SearchConfig.clear_loss`)."""
        here = self.table.get(signature, {})
        return bool(moves) and all(m in here and here[m].successes == 0 for m in moves)

    def avoid(self, signature: str) -> tuple[str, ...]:
        here = self.table.get(signature, {})
        return tuple(sorted(m for m, s in here.items() if s.successes == 0))

    def losing(self) -> tuple[str, ...]:
        """Moves that, everywhere they were tried in this run, failed or left their child clearly slower
        than its parent (`SearchConfig.losing_below`). A coder offers them last, not never: what loses at
        one node may still win at another, but repeats of such moves were wasted evaluations in our
        benches (benchmarks/mcts_landscapes.py)."""
        return tuple(sorted(m for m, s in self.global_moves.items() if s.attempts and s.wins == 0))

    def promising(self, limit: int = 5) -> tuple[str, ...]:
        ranked = sorted(((s.factor(), m) for m, s in self.global_moves.items() if s.successes),
                        key=lambda item: (-item[0], item[1]))
        return tuple(m for _, m in ranked[:limit])

    def prior(self, signature: str, moves: tuple[str, ...], base: float) -> float:
        prior = base
        for move in moves:
            prior *= self.global_moves.get(move, MoveStats()).factor()
            if signature in self.table and move in self.table[signature]:
                prior *= self.table[signature][move].factor()
            if self.prior_hook is not None:
                prior *= self.prior_hook(signature, move)
        return prior

    def to_json(self) -> dict:
        def stats_json(stats: MoveStats) -> list:
            return [stats.attempts, stats.successes, stats.gain_sum, stats.wins]
        return {
            "table": {sig: {m: stats_json(s) for m, s in moves.items()} for sig, moves in self.table.items()},
            "global_moves": {m: stats_json(s) for m, s in self.global_moves.items()},
            "keys": dict(self.keys),
        }

    @classmethod
    def from_json(cls, data: dict, prior_hook: PriorHook | None = None) -> "SearchMemory":
        return cls(
            table={sig: {m: _stats(s) for m, s in moves.items()} for sig, moves in data["table"].items()},
            global_moves={m: _stats(s) for m, s in data["global_moves"].items()},
            keys=dict(data["keys"]), prior_hook=prior_hook,
        )


def _stats(saved: list) -> MoveStats:
    """A move's statistics from to_json; a state from before wins were kept has three numbers: wins unknown."""
    return MoveStats(*saved) if len(saved) > 3 else MoveStats(*saved, wins=None)
