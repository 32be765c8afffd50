"""The offline coder (graph level): candidates are the reference plus a set of moves.

It needs no API key. The graph work (importing the problem, tracing, rewriting)
runs in a child process (`kernelpro.offline.worker`), once per distinct set of
applied moves, and the answers are cached. Among the moves that apply at a node
and were not tried there, it proposes the one the guidance scores highest, adjusted by
the memory's promising moves and by what the knowledge base learned in similar states
(then a fixed order). It cannot repair a failed candidate: a failed move is dropped, and
the search tries a sibling instead.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from kernelpro.coder import CoderProposal, CoderRequest
from kernelpro.errors import KernelproError
from kernelpro.harness.process import scrubbed_environment
from kernelpro.offline.moves import MOVES, ORDER, TUNE_PREFIX, canonical

BASE_PRIOR = 0.3
KB_WEIGHT = 0.25  # how much the knowledge base's factor (log) moves a move's score
WORKER_LIMIT_S = 600.0


class OfflineCoderError(KernelproError):
    """The graph worker failed on the problem itself."""


class OfflineCoder:
    name = "offline"

    def __init__(self, seed: int = 42, time_limit_s: float = WORKER_LIMIT_S):
        self.seed = seed
        self.time_limit_s = time_limit_s
        self._cache: dict[tuple, dict] = {}
        self.worker_calls = 0

    def options(self, request: CoderRequest) -> dict:
        """The worker's answer for the parent's applied moves (cached)."""
        applied = tuple(canonical(request.parent_state.get("applied", [])))
        tune = dict(request.parent_state.get("tune", {}))
        key = (request.problem_path, applied, tuple(sorted(tune.items())), request.device, request.precision,
               request.policy)
        if key not in self._cache:
            self._cache[key] = self._run_worker({
                "problem_path": request.problem_path, "applied": list(applied), "tune": tune,
                "device": request.device, "precision": request.precision, "policy": request.policy,
                "seed": self.seed})
        return self._cache[key]

    def _run_worker(self, spec: dict) -> dict:
        self.worker_calls += 1
        with tempfile.TemporaryDirectory(prefix="kernelpro-offline-") as folder:
            spec_path, out_path = Path(folder) / "spec.json", Path(folder) / "out.json"
            spec_path.write_text(json.dumps(spec))
            try:
                done = subprocess.run([sys.executable, "-m", "kernelpro.offline.worker", str(spec_path),
                                       str(out_path)], cwd=folder, capture_output=True, text=True,
                                      timeout=self.time_limit_s, env=scrubbed_environment({"HOME": folder, "PYTHONPATH": os.pathsep.join(sys.path)}))
            except subprocess.TimeoutExpired:
                raise OfflineCoderError(f"the offline coder's graph worker ran past {self.time_limit_s:g} s")
            if not out_path.exists():
                tail = "\n".join(done.stderr.strip().splitlines()[-5:])
                raise OfflineCoderError(f"the offline coder's graph worker failed (exit {done.returncode}): {tail}")
            result = json.loads(out_path.read_text())
        if "error" in result:
            raise OfflineCoderError(f"the offline coder could not load the problem: {result['error']}")
        return result

    def propose(self, request: CoderRequest) -> CoderProposal | None:
        if request.kind == "repair":
            return None  # graph moves are exact rewrites: a failed one is not worth patching
        answer = self.options(request)
        tried = {move for move, _ in request.tried}
        avoid = set(request.avoid)
        scores = dict(request.techniques)
        learned = dict(request.kb_factors)  # from earlier runs: > 1 worked in similar states, < 1 kept failing
        promising = {part for entry in request.promising for part in entry.split("+")}
        choices = [o for o in answer["options"] if o["move"] not in tried and o["move"] not in avoid]
        if not choices:
            return None

        def score(option: dict) -> tuple:
            bonus = 0.2 if option["move"] in promising else 0.0
            bonus += KB_WEIGHT * math.log(learned.get(option["technique"], 1.0))
            order = ORDER.index(option["move"]) if option["move"] in ORDER else len(ORDER)  # tuning moves last
            return (-(scores.get(option["technique"], 0.0) + bonus), order, option["move"])

        best = min(choices, key=score)
        applied = list(request.parent_state.get("applied", []))
        if not best["move"].startswith(TUNE_PREFIX):
            applied = canonical(applied + [best["move"]])
        prior = min(1.0, BASE_PRIOR + scores.get(best["technique"], 0.0))
        state = {"applied": applied}
        if best.get("tune"):
            state["tune"] = best["tune"]
        if best.get("kernels"):
            state["kernels"] = [{k: kernel[k] for k in ("name", "kind", "rank", "config", "features")}
                                for kernel in best["kernels"]]
        return CoderProposal(source=best["source"], techniques=(best["technique"],), rationale=best["rationale"],
                             move=best["move"], state=state, prior=prior)


__all__ = ["OfflineCoder", "OfflineCoderError", "MOVES"]
