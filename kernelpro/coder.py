"""The coder protocol: what the search asks a coder for, and what a coder answers.

A coder gets a `CoderRequest` (the problem, the parent candidate with its verdict
and timings, the kind of expansion, the profiler's guidance and suggested
techniques, and the moves already tried at that node) and returns a
`CoderProposal` (a complete candidate source, move labels from the technique
vocabulary, a one-line rationale), or None when it has no moves left there.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import Protocol

from kernelpro.errors import KernelproError
from kernelpro.facts import DeviceFacts, FailureFacts, ProblemFacts

class CoderUnavailable(KernelproError):
    """The asked-for coder cannot run here."""


class CoderFailed(KernelproError):
    """One expansion produced no candidate (API errors after retries, max_tokens, a refusal); the search goes on."""


@dataclass(frozen=True)
class CoderRequest:
    problem_path: str
    problem_source: str
    parent_source: str
    parent_state: dict  # the coder's own state for the parent (e.g. the offline coder's applied moves)
    parent_verdict: str  # "reference" for the root
    parent_ms: float | None
    parent_speedup: float | None
    kind: str  # new_strategy | refine | repair
    failure: str = ""  # why the parent failed (repair)
    guidance: str = ""
    techniques: tuple[tuple[str, float], ...] = ()  # (technique, score), best first
    tried: tuple[tuple[str, str], ...] = ()  # (move, outcome) already tried at this node
    avoid: tuple[str, ...] = ()  # moves that failed at an equivalent node
    promising: tuple[str, ...] = ()  # moves that worked elsewhere in this run
    losing: tuple[str, ...] = ()  # moves that only failed or lost (a clearly slower child) wherever tried in this run
    pending: tuple[str, ...] = ()  # moves of children being evaluated elsewhere in the tree (outcome not yet known)
    # moves whose candidates failed in this run on rounding alone (facts.FailureFacts.rounding_like)
    rounding_failures: tuple[str, ...] = ()
    device: str = "cpu"
    precision: str = "fp32"
    policy: str = "relaxed"
    model_mode: str = "train"  # train (KernelBench's semantics) or eval
    knowledge: str = ""  # what the knowledge base says worked in similar states (a few lines)
    kb_factors: tuple[tuple[str, float], ...] = ()  # (technique, prior factor) from the knowledge base
    device_facts: DeviceFacts | None = None  # measured ceilings and what the device reports
    problem_facts: ProblemFacts | None = None  # shapes and dtypes as evaluated, work, roofline floor
    failure_facts: FailureFacts | None = None  # the failed parent's verdict record, structured (repair)
    best_source: str = ""  # the run's best candidate so far, where it is not the parent
    best_ms: float | None = None
    best_speedup: float | None = None


@dataclass(frozen=True)
class CoderProposal:
    source: str
    techniques: tuple[str, ...]  # from the design's vocabulary
    rationale: str  # one line
    move: str = ""  # the coder's own name for the move (for the memory and the report)
    state: dict = field(default_factory=dict)  # stored with the node, given back as parent_state
    prior: float = 1.0  # the coder's belief in this move, in (0, 1]


class Coder(Protocol):
    """What the search asks for candidates. A coder may also have `start(root)` (called once before the
    reference is evaluated, to boot whatever it needs meanwhile; `root` is the root's request without what that
    evaluation measures, to begin on, or None), `ruled_out()` (the moves it never offered because it predicted that
    they fail or lose: move -> why, kept in run.json) and `close()` (called at the end)."""

    name: str

    def propose(self, request: CoderRequest) -> CoderProposal | None: ...


def default_coder() -> str:
    return "anthropic" if os.environ.get("ANTHROPIC_API_KEY") else "offline"
