"""`kernelpro search`: the loop that wires the harness, the tree search, the tools and a coder.

1. Evaluate and profile the reference (the baseline time, energy and guidance).
2. MCTS (or a baseline strategy) asks for expansions; the coder proposes a child
   from the parent's source, guidance and the moves already tried there; the
   harness evaluates every child, up to `parallel` at a time; meanwhile the coder
   writes the next `ahead` children and the build pool builds them.
3. The objective's ratio (time, energy at matched speed, or EDP) is told back as a
   calibrated log reward.
4. A child that becomes the best is profiled; its guidance goes to the coder for
   the children below it.
5. The search prunes dead ends and keeps its memory. It stops at the budget, the
   time limit, or when the best is within 5% of the roofline floor (eager itself
   included, before any evaluation, where the objective is time).

Every evaluation is committed with the tree to `state.db` (see `runstore`), so a
killed run resumes with nothing lost or repeated. `outputs` writes the results.
"""

from __future__ import annotations

import logging
import hashlib
import json
import math
import shlex
import shutil
import time
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

from kernelpro.coder import Coder, CoderFailed, CoderProposal
from kernelpro.coders import make_coder
from kernelpro.energy import objectives
from kernelpro.errors import KernelproError
from kernelpro.briefing import Briefing
from kernelpro.devicegate import gate_named, wait_for_device
from kernelpro.harness import EvalOptions
from kernelpro.harness.evaluate import Evaluator
from kernelpro.harness.problem import reference_candidate
from kernelpro.harness.variants import VARIANTS
from kernelpro.harness.records import SEED_BASE, EvalResult, stored_result
from kernelpro.knowledge import KnowledgeBase, failure_kind, operator_family, state_for
from kernelpro.mcts import Outcome, Proposal, SearchConfig, make_search, restore_search
from kernelpro.mcts.options import configured
from kernelpro.mcts.search import Search
from kernelpro.runstore import RunStore
from kernelpro.tools.ceilings import DeviceCache
from kernelpro.search_settings import SearchInputError, moves_refused, never_started, resumed, validate
from kernelpro.settings import SearchSettings
from kernelpro import stopping

log = logging.getLogger("kernelpro.search")

INTERRUPTED = "interrupted"  # why a run stopped on Ctrl-C
PROFILE_GAIN = 1.10  # profile a new best only when it beats the last profiled one by this much
#: how far under the best speedup so far a candidate near the tolerance is still checked on more inputs: the two were
#: timed in different evaluations, and the closing re-measurement of a best moves by a few percent
RECHECK_MARGIN = 0.05


@dataclass
class Written:
    """A child the coder wrote for an expansion, not yet proposed to the search (written ahead of the evaluations
    in flight, or about to be proposed)."""

    expansion: object
    proposal: CoderProposal

    @property
    def move(self) -> str:
        return self.proposal.move or "+".join(self.proposal.techniques)


class SearchInterrupted(KernelproError):
    """Ctrl-C (SIGINT): the evaluations in flight were stopped, what was finished is kept and written
    out; `document` is the partial run.json (None when the reference was never timed)."""

    exit_code = 130
    label = "interrupted"

    def __init__(self, message: str, document: dict | None = None):
        super().__init__(message)
        self.document = document


@dataclass
class Status:
    """What the live display shows; the driver updates it and calls `on_change`."""

    budget: int
    evaluations: int = 0
    in_flight: list[str] = field(default_factory=list)
    best_ratio: float = 1.0
    best_move: str = "reference"
    verdicts: dict[str, int] = field(default_factory=dict)
    phase: str = "starting"
    started: float = field(default_factory=time.monotonic)
    coder_failures: int = 0
    coder_failures_in_row: int = 0
    last_coder_failure: str = ""


def source_key(source: str) -> str:
    return hashlib.sha256(source.encode()).hexdigest()


class SearchRun:
    def __init__(self, settings: SearchSettings, *, resume: bool = False, coder: Coder | None = None,
                 energy_meter=None, on_change: Callable[[Status], None] = lambda status: None,
                 evaluator: Evaluator | None = None, remeasure_only: bool = False,
                 given: frozenset[str] | None = None):
        """`remeasure_only` (with resume) evaluates nothing new: a finished run times its best once more
        and rewrites its results, keeping its budget and why it stopped. `given` (with resume): the
        settings the user set on the command line (see `search_settings.resumed`)."""
        self.problem = validate(settings, resume)
        self.out = Path(settings.out)
        # A new run's folder is made only once nothing refuses it (below): a refused run leaves nothing behind.
        self.created = not resume and not self.out.exists()
        self.store = RunStore(self.out) if resume else None
        self.finished_as: dict | None = None
        self.device_wait_s = 0.0  # this segment's wait at a bench's device gate (kernelpro.devicegate)
        self.device_since: float | None = None  # when it took the gate (epoch seconds); None without one
        if remeasure_only:
            if not resume or not (self.out / "run.json").exists():
                raise SearchInputError(f"--remeasure: {self.out} holds no finished run (no run.json); it "
                                       "re-times the best of one, with --resume")
            self.finished_as = json.loads((self.out / "run.json").read_text())
        if resume:
            known = self.store.get("problem_sha256")
            if known and known != source_key(self.problem.source):
                raise SearchInputError(f"--resume: {self.out} is a run of another problem "
                                       f"({self.store.get('settings', {}).get('problem')}); give that problem, or "
                                       "another --out folder for this one")
            saved = self.store.get("settings")
            if saved is None and self.finished_as is None:
                # stopped (Ctrl-C, a kill) after its state file was made and before it recorded its settings,
                # the first thing a run records: nothing was done, so it starts afresh with these settings
                resume = False
            else:
                # A run from before model modes existed ran its models in eval mode.
                saved = {"model_mode": "eval", **(saved or {})}
                # The run's identity stays; only how long it may go on can change.
                settings = resumed(saved, settings, given)
                if self.finished_as is not None:
                    settings = settings.model_copy(update={"budget": self.finished_as.get("budget") or settings.budget})
        self.settings = settings
        options: dict = {}
        refused = moves_refused(settings.coder) if settings.moves else ""
        if refused:
            raise KernelproError(refused)
        if settings.coder == "offline":
            options = {"launch_ranking": settings.launch_ranking, "moves": settings.moves}
        elif settings.coder == "anthropic":
            options = {key: value for key, value in (("model", settings.model), ("planner_model", settings.planner_model))
                       if value}
        self.coder = coder or make_coder(settings.coder, seed=42, **options)
        if objectives.needs_energy(settings.objective) and energy_meter is None:
            from kernelpro.energy import open_meter
            energy_meter = open_meter(settings.device)
        self.meter = energy_meter
        if self.store is None:
            self.store = RunStore(self.out)
        self.status = Status(budget=settings.budget)
        self.on_change = on_change
        self._evaluator = evaluator
        (self.out / "candidates").mkdir(exist_ok=True)
        self.profiles: dict[int, dict] = self.store.profiles()
        self._fastest_ms: float | None = None
        self.resumed = resume
        self.kb = KnowledgeBase(settings.kb or None) if settings.use_kb else None
        self.briefing = Briefing(settings, self.problem, self.out, self.profiles, self.kb, self.store.get)
        self.kb_recorded = 0

    # -- options ---------------------------------------------------------------------------
    def options(self, baselines: tuple[str, ...] = ("eager",), kernelbench: bool = False) -> EvalOptions:
        s = self.settings
        return EvalOptions(device=s.device, policy=s.policy, precision=s.precision, baselines=baselines,
                           timing_budget_s=s.timing_budget_s, measure_energy=self.meter is not None,
                           seed=SEED_BASE + s.seed, model_mode=s.model_mode, kernelbench_timing=kernelbench)

    def candidate_options(self) -> EvalOptions:
        """A candidate's options in the search, under the time objective: with adaptive timing, it stops being
        timed once it cannot reach the best speedup found so far (the reference's 1.0 before any); and only one
        within RECHECK_MARGIN of that speedup or above is checked on more inputs where its outputs came near the
        tolerance (the best is the result; the closing re-measurement checks it whatever its speedup)."""
        options = self.options()
        baseline = self.store.get("baseline")
        if self.settings.objective == "time" and baseline:
            best_speedup = baseline["eager_ms"] / self.fastest_ms(baseline)
            options = options.model_copy(update={"recheck_from_speedup": best_speedup * (1 - RECHECK_MARGIN)})
            if self.settings.adaptive_timing:
                options = options.model_copy(update={"stop_below_speedup": best_speedup})
        return options

    def _show_best(self, search: Search) -> None:
        best = search.best()
        self._changed(evaluations=search.evaluations, best_ratio=best.ratio or 1.0,
                      best_move=" + ".join((best.payload or {}).get("state", {}).get("applied", [])) or
                      (best.payload or {}).get("move", "reference"))

    def _changed(self, **fields) -> None:
        for name, value in fields.items():
            setattr(self.status, name, value)
        self.on_change(self.status)

    # -- the baseline -------------------------------------------------------------------------
    def baseline(self, evaluator: Evaluator) -> dict:
        saved = self.store.get("baseline")
        if saved:
            return saved
        self._changed(phase="evaluating the reference")
        baselines = ("eager", "compile") if self.settings.compile_baseline else ("eager",)
        # with the reference's launch profile (is it launch-bound?), its sensitivity (does a one-ulp change of its
        # inputs alone leave the tolerance?) and its variants (does TF32 or channels-last alone leave it?), measured
        # even with --no-profile
        result = evaluator.evaluate(self.problem, reference_candidate(self.problem), self.options(baselines).model_copy(
            update={"policy": "relaxed", "launch_profile": True, "sensitivity": True, "variants": VARIANTS}))
        if not result.ok:
            raise SearchInputError(f"the reference itself failed in the harness: {result.verdict.value}: "
                                   f"{result.reason}")
        baseline = {"result": result.model_dump(mode="json"), "eager_ms": result.reference.median_ms,
                    "compile_ms": result.reference_compile.median_ms if result.reference_compile else None,
                    "compile_correct": result.compile_correct,
                    "energy_j": result.energy.reference.j_per_call if result.energy else None,
                    "device_name": result.device_name, "torch_version": result.torch_version}
        self.store.put("baseline", baseline)
        return baseline

    def profile_node(self, node_id: int, candidate: Path | None) -> None:
        if not self.settings.profile or node_id in self.profiles:
            return
        from kernelpro.profiling import run_profile
        self._changed(phase=f"profiling {'the reference' if candidate is None else candidate.name}")
        began = time.monotonic()
        try:
            document = run_profile(Path(self.settings.problem), candidate=candidate, device=self.settings.device,
                                   precision=self.settings.precision, objective=self.settings.objective,
                                   time_limit_s=600.0, model_mode=self.settings.model_mode)
        except KernelproError as error:
            document = {"error": str(error), "guidance": "", "techniques": [], "classification": "",
                        "kernels": []}
        self.profiles[node_id] = document
        self.store.put_profile(node_id, document)
        self.store.put("profile_s", self.store.get("profile_s", 0.0) + time.monotonic() - began)

    # -- the loop ---------------------------------------------------------------------------------
    def new_search(self) -> Search:
        saved = self.store.search_state()
        hook = self.kb.prior_hook(operator_family(self.problem.source), self.settings.objective) \
            if self.kb is not None else None
        if saved:  # a resumed run's budget may be larger than the one it saved
            return restore_search(saved, prior_hook=hook, budget=self.settings.budget)
        config = configured(SearchConfig(strategy=self.settings.strategy, seed=self.settings.seed,
                                         budget=self.settings.budget), self.settings.search)
        return make_search({"state": {}, "file": None, "move": "reference", "techniques": []}, config,
                           root_key=source_key(reference_candidate(self.problem)), prior_hook=hook)

    def hold(self) -> None:
        """Take the run folder for this process until the run ends: two processes on one folder would each count
        and write the other's work."""
        if not self.store.hold():
            raise SearchInputError(f"{self.out} is in use by another kernelpro search; wait for it to end, or give "
                                   "another --out folder")

    def run(self) -> dict:
        self.hold()
        try:
            return self._run()
        finally:
            self.store.release()

    def _run(self) -> dict:
        from kernelpro import outputs
        s = self.settings
        if not self.resumed:
            self.store.put("settings", s.model_dump())
            self.store.put("problem_sha256", source_key(self.problem.source))
            self.store.put("started", time.time())
        began = time.monotonic()
        wall_before = self.store.get("wall_s", 0.0)
        self._clock = (began, wall_before)  # for _store_wall
        self._coder_s = self.store.get("coder_s", 0.0)  # time spent waiting on the coder, all segments
        own = self._evaluator is None
        # On CUDA a worker boots (torch import, CUDA context: ~5-12 s on the H100 machine) while others
        # run, so one more than run at once is kept booting; on CPU a booting spare would take a core.
        spares = s.parallel + 1 if s.device == "cuda" else min(s.parallel, 2)
        evaluator = self._evaluator or Evaluator(s.device, spares=spares, energy_meter=self.meter,
                                                 ceilings=DeviceCache() if s.device == "cuda" else None)
        try:
            if callable(getattr(self.coder, "start", None)) and self.finished_as is None:
                # e.g. the offline coder's graph worker boots while the reference is evaluated, and on CUDA (where
                # it takes no core from the reference's timing) begins on the root's answer
                self.coder.start(self.briefing.root_request() if s.device == "cuda" else None)
            # A bench's next search on this GPU waits here, its workers booting, while the one before it finishes
            # (kernelpro.devicegate); its time on the device starts once it goes on.
            gated = gate_named()
            if gated:
                self._changed(phase="waiting for the GPU (another problem of the bench is using it)")
            self.device_wait_s = wait_for_device()
            self.device_since = time.time() if gated else None
            began = time.monotonic()
            self._clock = (began, wall_before)
            try:
                baseline = self.baseline(evaluator)
            except Exception:
                self._forget_if_never_started()
                raise
            self.profile_node(0, None)
            search = self.new_search()
            if search.root.signature == "" and self.profiles.get(0, {}).get("classification"):
                search.root.signature = self.profiles[0]["classification"]
            for row in self.store.evaluations():
                self.status.verdicts[row["verdict"]] = self.status.verdicts.get(row["verdict"], 0) + 1
            self._show_best(search)  # a resumed run shows the best it had found, not the reference's 1.000x
            if self.finished_as is not None:
                stopped = self.finished_as.get("stopped") or "budget"
            else:
                stopped = self.loop(search, evaluator, baseline, began, wall_before)
            self._changed(phase="writing the results")
            self._store_wall()
            if stopped == INTERRUPTED:  # no final re-measure: the user wants it to stop
                document = outputs.write_all(self, search, baseline, stopped, None)
                raise SearchInterrupted(f"after {search.evaluations} evaluations; what they found is in {self.out} "
                                        f"(best.py, run.json, report.md); go on with: {self.resume_command()}",
                                        document)
            chosen = outputs.evaluations_and_best(self, search, baseline)
            final = self.final_check(search, evaluator, chosen[1]["node_id"]) if chosen[1] else None
            return outputs.write_all(self, search, baseline, stopped, final, chosen)
        except KeyboardInterrupt:
            self._store_wall()
            raise SearchInterrupted(f"outside the search loop, before the results were written; the evaluations done "
                                    f"so far are kept in {self.out / 'state.db'}; go on with: {self.resume_command()}") \
                from None
        finally:
            if own:
                evaluator.close()
            if self.kb is not None:
                self.kb.close()
            if callable(getattr(self.coder, "close", None)):
                self.coder.close()  # e.g. the offline coder's graph worker

    def _forget_if_never_started(self) -> None:
        """A run that failed before its reference was measured, in a folder it made itself: the folder goes
        (it held nothing of value), so the failed command leaves nothing half-written behind."""
        if self.created:
            self.store.close()
            if never_started(self.out):
                shutil.rmtree(self.out, ignore_errors=True)

    def resume_command(self) -> str:
        return f"kernelpro search {shlex.quote(self.settings.problem)} --out {shlex.quote(str(self.out))} --resume"

    def _store_wall(self) -> None:
        """The run's wall time over all its segments (this one and those before a resume)."""
        began, wall_before = self._clock
        self.store.put("wall_s", wall_before + time.monotonic() - began)

    def loop(self, search: Search, evaluator: Evaluator, baseline: dict, began: float, wall_before: float) -> str:
        s = self.settings
        limit_s = s.time_limit_min * 60 - wall_before if s.time_limit_min else None
        pending: dict[Future, tuple] = {}
        with ThreadPoolExecutor(max_workers=s.parallel, thread_name_prefix="kernelpro-eval") as pool:
            try:
                return self._loop(search, evaluator, baseline, began, limit_s, pool, pending)
            except KeyboardInterrupt:
                # The evaluations in flight end at once as their workers die; their results are dropped
                # (not recorded), so a resume evaluates those candidates again.
                pending.clear()
                evaluator.close()  # kills every worker, those in use included
                pool.shutdown(wait=True, cancel_futures=True)
                return INTERRUPTED

    def _loop(self, search: Search, evaluator: Evaluator, baseline: dict, began: float, limit_s: float | None,
              pool: ThreadPoolExecutor, pending: dict) -> str:
        s = self.settings
        idle = 0
        ready: list[Written] = []  # written and building ahead: evaluated first, in the order written
        while True:
            why = self.stop_reason(search, began, limit_s, baseline)
            if why:  # what was written ahead is not evaluated: its expansions are given back
                for written in ready:
                    search.abandon(written.expansion)
                ready.clear()
            else:
                while ready and len(pending) < s.parallel:
                    self.submit(search, ready.pop(0), evaluator, pool, pending)
                room = min(s.parallel - len(pending), s.budget - search.evaluations - len(pending) - len(ready))
                for expansion in (search.ask(room) if room > 0 else []):
                    written = self.write(search, expansion, ready)
                    if written is not None:
                        self.submit(search, written, evaluator, pool, pending)
                ahead = min(s.ahead - len(ready), s.budget - search.evaluations - len(pending) - len(ready))
                for expansion in (search.ask(ahead) if pending and ahead > 0 else []):
                    written = self.write(search, expansion, ready)
                    if written is not None:  # its build starts now, beside the evaluations in flight
                        evaluator.prebuild(written.proposal.source, self.options(), self.problem)
                        ready.append(written)
            if not pending:  # (what is written ahead waits only while something is in flight)
                if why:
                    return why
                idle += 1
                if search.root.closed or idle > 200:
                    why_none = getattr(self.coder, "why_no_moves", lambda: "")() if not search.evaluations else ""
                    return f"no moves left: {why_none}" if why_none else "no moves left"
                continue
            idle = 0
            self._changed(phase="evaluating")
            done, _ = wait(list(pending), return_when=FIRST_COMPLETED)
            for future in done:
                self.tell(search, pending.pop(future), future.result(), baseline)

    def stop_reason(self, search: Search, began: float, limit_s: float | None, baseline: dict) -> str:
        usage = getattr(self.coder, "usage", None)
        best = search.best()
        return stopping.stop_reason(stopping.Spent(
            evaluations=search.evaluations, budget=self.settings.budget, objective=self.settings.objective,
            began=began, limit_s=limit_s, cost_usd=usage.cost_usd if usage is not None else None,
            max_cost_usd=self.settings.max_cost_usd,
            tokens=usage.input_tokens + usage.output_tokens if usage is not None else None,
            max_tokens=self.settings.max_tokens, coder_failures_in_row=self.status.coder_failures_in_row,
            last_coder_failure=self.status.last_coder_failure, best=(best.payload or {}) if best.id else None,
            baseline=baseline))

    def write(self, search: Search, expansion, ready: list[Written]) -> Written | None:
        """The coder's child for an expansion, not yet proposed to the search; None where it wrote none (the node
        is then exhausted, or, where the coder failed, left open). `ready`: the children written ahead and not yet
        proposed, which the coder is told of as tried where they share the expansion's node."""
        self._changed(phase="asking the coder")
        asked = time.monotonic()
        try:
            proposal: CoderProposal | None = self.coder.propose(self.briefing.request(
                search, expansion, tuple((written.expansion.node_id, written.move) for written in ready)))
        except CoderFailed as error:  # this expansion yields nothing; the node stays open, the search goes on
            self.status.coder_failures += 1
            self.status.coder_failures_in_row += 1
            self.status.last_coder_failure = str(error)
            search.abandon(expansion)
            return None
        finally:
            self._coder_s += time.monotonic() - asked
            self.store.put("coder_s", self._coder_s)
        self.status.coder_failures_in_row = 0
        if proposal is None:
            search.propose(expansion, None)
            return None
        return Written(expansion, proposal)

    def submit(self, search: Search, written: Written, evaluator: Evaluator, pool, pending: dict) -> None:
        """Propose a written child to the search and, unless it refuses it or knows its outcome already, evaluate it."""
        expansion, proposal = written.expansion, written.proposal
        key = source_key(proposal.source)
        mcts_proposal = Proposal(payload=None, moves=tuple(proposal.techniques) + ((proposal.move,) if proposal.move
                                                                                  else ()),
                                 key=key, signature=search.nodes[expansion.node_id].signature,
                                 prior=proposal.prior, rationale=proposal.rationale)
        node_count = len(search.nodes)
        evaluate = search.propose(expansion, mcts_proposal)
        if len(search.nodes) == node_count:
            return  # refused (a move that failed at an equivalent node)
        child = search.nodes[-1]
        name = f"candidates/node_{child.id:04d}.py"
        child.payload = {"state": proposal.state, "file": name, "move": written.move,
                         "techniques": list(proposal.techniques), "rationale": proposal.rationale}
        if not evaluate:  # a transposition: the known outcome was told without evaluating
            child.payload["file"] = search.nodes[child.transposition_of].payload.get("file")
            return
        (self.out / name).write_text(proposal.source)
        log.info("node %d: %s from node %d (%s): %s", child.id, child.payload["move"], expansion.node_id,
                 expansion.kind.value, name)
        evaluator.prebuild(proposal.source, self.options(), self.problem)  # builds start in the CPU pool now
        self.status.in_flight.append(child.payload["move"])
        self._changed()
        future = pool.submit(evaluator.evaluate, self.problem, proposal.source, self.candidate_options())
        pending[future] = (expansion, child.id, proposal, key)


    def fastest_ms(self, baseline: dict) -> float:
        """The fastest correct time so far on the baseline's scale: read from the store once, then kept."""
        if self._fastest_ms is None:
            self._fastest_ms = min([baseline["eager_ms"]] + [
                objectives.normalized(stored_result(row["result"]), baseline).candidate_ms
                for row in self.store.evaluations()
                if row["verdict"] == "correct"])
        return self._fastest_ms

    def tell(self, search: Search, item: tuple, result: EvalResult, baseline: dict) -> None:
        expansion, node_id, proposal, key = item
        child = search.nodes[node_id]
        if result.ok:
            measured = objectives.normalized(result, baseline)
            fastest = self._fastest_ms = min(self.fastest_ms(baseline), measured.candidate_ms)
            try:
                ratio = objectives.ratio(self.settings.objective, measured, fastest, self.settings.epsilon)
                outcome = Outcome(ok=True, ratio=ratio)
            except ValueError as error:  # energy asked for but not measured
                ratio, outcome = None, Outcome(ok=False, failure=f"energy: {error}")
            child.payload.update(ms=result.candidate.median_ms, speedup=result.speedup,
                                 floor_ms=result.floor.floor_ms if result.floor else None,
                                 energy_j=measured.candidate_j,
                                 energy_gain=measured.reference_j / measured.candidate_j
                                 if measured.candidate_j and measured.reference_j else None)
        else:
            ratio, outcome = None, Outcome(ok=False, failure=f"{result.verdict.value}: {result.reason}")
        child.payload["verdict"] = result.verdict.value
        before = search.best_id
        search.tell(expansion, outcome)
        (self.out / f"candidates/node_{node_id:04d}.json").write_text(result.model_dump_json(indent=1))
        self.store.record({"node_id": node_id, "sha256": key, "verdict": result.verdict.value, "ratio": ratio,
                           "move": child.payload["move"], "techniques": list(proposal.techniques),
                           "rationale": proposal.rationale, "source_file": child.payload["file"],
                           "result": result.model_dump(mode="json")}, search.to_json())
        self._store_wall()  # with every evaluation: a killed run's time counts too
        self.learn(search, child, proposal, outcome, result)  # after the run's commit: a kill loses, never doubles
        status = self.status
        status.verdicts[result.verdict.value] = status.verdicts.get(result.verdict.value, 0) + 1
        if child.payload["move"] in status.in_flight:
            status.in_flight.remove(child.payload["move"])
        self._show_best(search)
        best = search.best()
        profiled = [search.nodes[n].ratio or 1.0 for n in self.profiles if n < len(search.nodes)] or [1.0]
        if search.best_id != before and (best.ratio or 1.0) >= PROFILE_GAIN * max(profiled):
            self.profile_node(search.best_id, self.out / child.payload["file"])
            search.nodes[search.best_id].signature = self.profiles.get(search.best_id, {}).get(
                "classification") or search.nodes[search.best_id].signature
            self.store.save_search(search.to_json())

    def learn(self, search: Search, child, proposal: CoderProposal, outcome: Outcome, result: EvalResult) -> None:
        """Record the outcome in the knowledge base: the parent's state, the techniques, the gain over it."""
        if self.kb is None or not proposal.techniques:
            return
        parent = search.nodes[child.parent]
        state = state_for(self.problem.source, self.briefing.guidance_for(search, parent.id))
        self.kb_recorded += self.kb.record(
            state, proposal.techniques, ok=outcome.ok, log_gain=_log_gain(child, parent, "speedup"),
            failure=failure_kind(outcome.failure), problem=self.problem.name, move=proposal.move,
            device=result.device_name or self.settings.device, coder=self.settings.coder,
            log_energy_gain=_log_gain(child, parent, "energy_gain"), objective=self.settings.objective)


    def final_check(self, search: Search, evaluator: Evaluator, node_id: int) -> EvalResult:
        """The best candidate (node `node_id`: the one best.py holds) once more, against eager (and torch.compile
        with the compile baseline), not counted in the budget: the results report this measurement, free of the
        selection's winner's curse."""
        baselines = ("eager", "compile") if self.settings.compile_baseline else ("eager",)
        self._changed(phase="re-measuring the best" + (" against torch.compile" if len(baselines) == 2 else ""))
        source = (self.out / search.nodes[node_id].payload["file"]).read_text()
        # on CUDA also by KernelBench's own method, for comparison with published numbers
        options = self.options(baselines, kernelbench=self.settings.device == "cuda")
        # Under --objective time with --final-energy the J/call is a side reading (one window of each model, about 4 s
        # on Hopper); where energy decides, the closing re-measurement keeps every window, whose spread judges.
        update = {"measure_energy": self.final_meter(evaluator)}
        if self.settings.objective == "time":
            update["energy_windows"] = 1
        return evaluator.evaluate(self.problem, source, options.model_copy(update=update))

    def final_meter(self, evaluator: Evaluator) -> bool:
        """Whether the closing re-measurement takes the best's and the reference's energy too: where NVML reads
        the GPU, under --objective energy or edp, and under time with --final-energy, so a time search's best has a
        J/call to set against an energy search's (`kernelpro bench compare`). About 5 s of windows and idle
        power on Hopper, outside the budget: a third of a level-2 problem's closing re-measurement."""
        self.store.put("final_energy_note", None)  # a note from an earlier segment no longer holds
        if self.settings.objective == "time" and not self.settings.final_energy:
            return False
        if getattr(evaluator, "energy_meter", None) is not None:
            return True
        if self.settings.device != "cuda":
            return False
        from kernelpro.energy import EnergyUnavailable, open_meter
        try:
            evaluator.energy_meter = open_meter(self.settings.device)
        except EnergyUnavailable as error:
            self.store.put("final_energy_note", f"energy not measured: {error}")
            return False
        return True


def _log_gain(child, parent, key: str) -> float | None:
    """The log of the child's gain over the parent in `key` (each against the reference timed beside it: the
    speedup, or the reference's joules per call over the candidate's), the root's being 1; None where either is
    unknown."""
    mine = (child.payload or {}).get(key)
    theirs = 1.0 if parent.parent is None else (parent.payload or {}).get(key)
    return math.log(mine / theirs) if mine and theirs else None
