"""What the coder is told for each expansion (a `CoderRequest`): the parent's source and state, the moves already
tried there (those written ahead and not yet evaluated among them), the nearest profile's guidance, the knowledge
base's word on the state, and the facts of the device, the problem, a failed parent and the run's best."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from kernelpro import facts
from kernelpro.coder import CoderRequest
from kernelpro.harness.problem import Problem
from kernelpro.knowledge import KnowledgeBase, state_for
from kernelpro.mcts.records import Status
from kernelpro.mcts.search import Search
from kernelpro.settings import SearchSettings


class Briefing:
    """A run's requests to its coder. `profiles` (node id -> profile) is the run's own, read as it grows; `stored`
    reads the run's store (the reference's evaluation, under "baseline")."""

    def __init__(self, settings: SearchSettings, problem: Problem, out: Path, profiles: dict[int, dict],
                 kb: KnowledgeBase | None, stored: Callable):
        self.settings, self.problem, self.out, self.profiles, self.kb = settings, problem, out, profiles, kb
        self.stored = stored
        self._run_facts: dict | None = None  # the device's and the problem's facts, the same for every expansion
        self._failures: dict[int, facts.FailureFacts] = {}  # failed node id -> its verdict record's facts

    def guidance_for(self, search: Search, node_id: int) -> dict:
        """The profile of the node, or of its nearest profiled ancestor."""
        current = node_id
        while current is not None:
            if current in self.profiles and not self.profiles[current].get("error"):
                return self.profiles[current]
            current = search.nodes[current].parent
        return {}

    def root_request(self) -> CoderRequest:
        """The root's request as far as it is known before the reference is evaluated (no facts, no profile)."""
        return CoderRequest(problem_path=str(Path(self.settings.problem).resolve()), problem_source=self.problem.source,
                            parent_source=self.problem.source, parent_state={}, parent_verdict="reference",
                            parent_ms=None, parent_speedup=None, kind="new_strategy", device=self.settings.device,
                            precision=self.settings.precision, policy=self.settings.policy,
                            model_mode=self.settings.model_mode)

    def request(self, search: Search, expansion, written_ahead: tuple[tuple[int, str], ...] = ()) -> CoderRequest:
        """The request for an expansion; `written_ahead`: (node id, move) of the children written and not yet
        proposed to the search, told to the coder as tried where they share the expansion's node."""
        parent = search.nodes[expansion.node_id]
        payload = parent.payload or {}
        source = (self.out / payload["file"]).read_text() if payload.get("file") else self.problem.source
        profile = self.guidance_for(search, parent.id)
        tried = tuple((search.nodes[c].payload.get("move", ""), search.nodes[c].failure or
                       f"{search.nodes[c].ratio or 0:.3f}x") for c in parent.children if search.nodes[c].payload)
        tried += tuple((move, "written ahead, not yet evaluated") for node_id, move in written_ahead
                       if node_id == parent.id)
        return replace(
            self.root_request(), parent_source=source, parent_state=payload.get("state", {}),
            parent_verdict="reference" if parent.parent is None else parent.status.value,
            parent_ms=payload.get("ms"), parent_speedup=parent.ratio, kind=expansion.kind.value,
            failure=expansion.failure, guidance=profile.get("guidance", ""),
            techniques=tuple((t["technique"], t["score"]) for t in profile.get("techniques", [])),
            tried=tried, avoid=expansion.avoid, promising=expansion.promising, losing=expansion.losing,
            pending=expansion.pending + tuple(move for _, move in written_ahead),
            rounding_failures=self.rounding_failures(search),
            **self.knowledge_for(profile), **self.facts_for(search, parent))

    def failure(self, node) -> facts.FailureFacts | None:
        """A failed candidate's verdict record as facts, read once it is there (None before, or for no candidate)."""
        if node.id not in self._failures and node.status is Status.FAILED and (node.payload or {}).get("file"):
            result = facts.read_result(self.out / f"candidates/node_{node.id:04d}.json")
            if result:
                self._failures[node.id] = facts.failure_facts(result)
        return self._failures.get(node.id)

    def rounding_failures(self, search: Search) -> tuple[str, ...]:
        """The moves of the run's candidates that failed on rounding alone (`facts.FailureFacts.rounding_like`)."""
        return tuple(sorted({node.payload.get("move", "") for node in search.nodes
                             if (found := self.failure(node)) is not None and found.rounding_like} - {""}))

    def facts_for(self, search: Search, parent) -> dict:
        """The prompt's facts: the device's and the problem's (from the reference's evaluation and the
        profiler's ceilings), the failed parent's verdict record, the run's best where it is not the parent."""
        if self._run_facts is None:  # the reference's evaluation and profile are done before any expansion
            reference = (self.stored("baseline") or {}).get("result") or {}
            self._run_facts = {"device_facts": facts.device_facts(self.settings.device, reference,
                                                                  self.profiles.get(0, {}).get("ceilings")),
                               "problem_facts": facts.problem_facts(reference)}
        found = dict(self._run_facts)
        if parent.parent is not None and parent.failure and (parent.payload or {}).get("file"):
            found["failure_facts"] = self.failure(parent)
        best = search.best()
        if best.id not in (parent.id, search.root.id) and (best.payload or {}).get("file"):
            found.update(best_source=(self.out / best.payload["file"]).read_text(), best_ms=best.payload.get("ms"),
                         best_speedup=best.payload.get("speedup"))
        return found

    def knowledge_for(self, profile: dict) -> dict:
        """The knowledge base's word on the node's state: a summary for an LLM, factors for the offline coder."""
        if self.kb is None:
            return {}
        state = state_for(self.problem.source, profile)
        stats = self.kb.stats(state, self.settings.objective)
        return {"knowledge": self.kb.summary(state, stats),
                "kb_factors": tuple((s.technique, round(s.factor(self.settings.objective), 4)) for s in stats)}
