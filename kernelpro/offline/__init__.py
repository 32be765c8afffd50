"""The offline coder (graph level): candidates are the reference plus a set of moves.

It needs no API key. The graph work (importing the problem, tracing, rewriting) runs in a child process
(`kernelpro.offline.worker --serve`, one per search, which loads and traces the problem once), asked once per
distinct set of applied moves; the answers are cached. Among the moves that apply at a node and were not tried there,
it proposes the one the guidance scores highest, adjusted by the memory's promising moves and by what the knowledge
base learned in similar states (then a fixed order); where the reference's launch profile says it is launch-bound, a
CUDA graph comes first. Where one ulp of noise on every value moves more than 1% of the reference's output outside the
tolerance (`ProblemFacts.rounding_sensitive`), it offers the bit-exact moves only (`moves.BIT_EXACT`), and the setting
moves under which eager itself was measured within the tolerance everywhere (the reference's variants). It cannot
repair a failed candidate: a failed move is dropped, and the search tries a sibling instead.
"""

from __future__ import annotations

import collections
import json
import math
import os
import selectors
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

from kernelpro.coder import CoderProposal, CoderRequest
from kernelpro.errors import KernelproError
from kernelpro.harness.process import scrubbed_environment
from kernelpro.offline import predictions
from kernelpro.offline.moves import MOVES, PREFERENCE, SIMPLIFY, TUNE_PREFIX, canonical, single_moves

BASE_PRIOR = 0.3
KB_WEIGHT = 0.25  # how much the knowledge base's factor (log) moves a move's score
#: added to the CUDA graph's score where the reference is launch-bound: more than any guidance score (at most 1)
LAUNCH_BOUND_BONUS = 1.5
#: added to a setting move's score where eager itself ran faster under that setting (ProblemFacts.gains_under), within
#: the tolerance: the reference's evaluation measured the move's gain before any candidate was written
MEASURED_GAIN_BONUS = 1.5
WORKER_LIMIT_S = 600.0


class OfflineCoderError(KernelproError):
    """The graph worker failed on the problem itself."""


class _IdleWorker:
    """The graph worker that a finished search handed back, for the next search of the same process (a program's
    or a test suite's several searches): that one starts answering at once instead of importing torch again
    (about 3 s of CPU). A worker loads each problem by its path and checks the file's size and mtime, so it
    serves any search. One is kept; it exits with this process (its stdin closes)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._kept: tuple[subprocess.Popen, tempfile.TemporaryDirectory] | None = None

    def take(self) -> tuple[subprocess.Popen, tempfile.TemporaryDirectory] | None:
        with self._lock:
            kept, self._kept = self._kept, None
        if kept is not None and kept[0].poll() is not None:  # it died meanwhile
            _stop(*kept)
            return None
        return kept

    def give(self, worker: subprocess.Popen, folder: tempfile.TemporaryDirectory) -> None:
        with self._lock:
            old, self._kept = self._kept, (worker, folder)
        if old is not None:
            _stop(*old)


def _stop(worker: subprocess.Popen, folder: tempfile.TemporaryDirectory | None) -> None:
    if worker.poll() is None:
        worker.kill()
    worker.wait()
    for stream in (worker.stdin, worker.stdout):
        try:
            stream.close()
        except OSError:
            pass
    if folder is not None:
        folder.cleanup()


IDLE_WORKER = _IdleWorker()


class WorkerDied(OfflineCoderError):
    """The graph worker ended before it answered."""


class OfflineCoder:
    name = "offline"

    def __init__(self, seed: int = 42, time_limit_s: float = WORKER_LIMIT_S, launch_ranking: str = "auto",
                 moves: str = ""):
        self.seed = seed
        self.allowed = allowed_moves(moves)  # None: every move; else only these (and "tune": the tune: moves)
        self.launch_ranking = launch_ranking  # auto: a learned launch model where one exists; analytic: never
        self.time_limit_s = time_limit_s
        self._cache: dict[tuple, dict] = {}
        self.worker_calls = 0  # answers asked of the graph worker
        self.worker_starts = 0  # workers started (or taken idle) for them: one per search unless one failed
        self._worker: subprocess.Popen | None = None
        self._folder: tempfile.TemporaryDirectory | None = None
        self._asking = False
        self._pending: tuple | None = None  # the key of an answer asked ahead (start's root) and not yet read
        self._root_skipped: dict[str, str] = {}  # the root answer's moves that do not apply, and why
        self._ruled_out: dict[str, str] = {}  # moves that applied somewhere but were predicted to fail or lose, and why
        self._offered_once = False
        # (problem, tune: move) -> the launch configurations it proposed (kernel and configuration as JSON)
        self._tuned: dict[tuple[str, str], set[str]] = {}
        # (problem, tune: move) -> the generator variants it switched a kernel to (`_switch`: the lagged row kernel)
        self._switches: dict[tuple[str, str], set[str]] = {}

    def why_no_moves(self) -> str:
        """Why the coder offered no move at all (its root answer's reasons, most common first), or ''
        when it offered one or was never asked."""
        if self._offered_once or not self._root_skipped:
            return ""
        if self.allowed is not None:
            why = "; ".join(f"{move}: {self._root_skipped[move]}" for move in sorted(self.allowed)
                            if move in self._root_skipped)
            return (f"none of the moves allowed (--moves {','.join(sorted(self.allowed))}) applies here"
                    + (f" ({why})" if why else ""))
        reasons = collections.Counter(why.split(";")[0].split(" (")[0] for why in self._root_skipped.values())
        listed = "; ".join(f"{reason} ({count})" for reason, count in reasons.most_common(3))
        more = f"; {len(reasons) - 3} other reason{'s' if len(reasons) > 4 else ''}" if len(reasons) > 3 else ""
        return f"none of the offline coder's {len(self._root_skipped)} moves applies here: {listed}{more}"

    def ruled_out(self) -> dict[str, str]:
        """The moves that applied at a node but were never offered there because the reference's measurements (or this
        run's rounding failures) predicted that they fail or lose: move -> the first reason given, in MOVES' order."""
        return {move: self._ruled_out[move] for move in MOVES if move in self._ruled_out}

    def _spec(self, request: CoderRequest) -> tuple[tuple, dict]:
        """The cache key and the worker's question for the parent's applied moves."""
        applied = tuple(canonical(request.parent_state.get("applied", [])))
        tune = dict(request.parent_state.get("tune", {}))
        key = (request.problem_path, applied, tuple(sorted(tune.items())), request.device, request.precision,
               request.policy, request.model_mode, self.launch_ranking)
        return key, {"problem_path": request.problem_path, "applied": list(applied), "tune": tune,
                     "device": request.device, "precision": request.precision, "policy": request.policy,
                     "model_mode": request.model_mode, "seed": self.seed, "launch_ranking": self.launch_ranking}

    def options(self, request: CoderRequest) -> dict:
        """The worker's answer for the parent's applied moves (cached; the root's asked ahead by `start`)."""
        key, spec = self._spec(request)
        if self._pending is not None:  # the answer asked ahead is read first: the worker answers in order
            pending, self._pending = self._pending, None
            try:
                self._cache[pending] = self._receive()
            except WorkerDied:
                pass  # asked again below of a fresh worker, where it is the answer needed
        if key not in self._cache:
            self._send(spec)
            self._cache[key] = self._receive()
        return self._cache[key]

    def start(self, root: CoderRequest | None = None) -> None:
        """Boot the graph worker now (the search calls this before it evaluates the reference, so that
        the worker's `import torch` overlaps that evaluation instead of following it). With the search's `root`
        request, the worker also starts on the root's answer (every move on the reference), which needs nothing the
        reference's evaluation measures: the first proposal then reads it instead of waiting for it."""
        if self._worker is None or self._worker.poll() is not None:
            if self._worker is not None:
                self._kill()
            self.worker_starts += 1
            self._worker, self._folder = IDLE_WORKER.take() or self._start_worker()
        if root is not None and self._pending is None:
            key, spec = self._spec(root)
            if key not in self._cache:
                self._send(spec)
                self._pending = key

    @staticmethod
    def _start_worker() -> tuple[subprocess.Popen, tempfile.TemporaryDirectory]:
        """The serving graph worker, in a scratch folder and a scrubbed environment (no API keys)."""
        scratch = tempfile.TemporaryDirectory(prefix="kernelpro-offline-")
        folder = scratch.name
        with open(Path(folder) / "stderr.log", "w") as stderr:  # the child keeps its own copy
            return subprocess.Popen(
                [sys.executable, "-m", "kernelpro.offline.worker", "--serve"], cwd=folder, text=True,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
                env=scrubbed_environment({"HOME": folder, "PYTHONPATH": os.pathsep.join(sys.path)})), scratch

    def _stderr_tail(self) -> str:
        log = Path(self._folder.name) / "stderr.log" if self._folder else None
        return "\n".join(log.read_text(errors="replace").strip().splitlines()[-5:]) if log and log.exists() else ""

    def _send(self, spec: dict) -> None:
        self.worker_calls += 1
        self.start()
        worker = self._worker
        self._asking = True  # until its answer is read: a worker with an answer unread is not handed back
        try:
            worker.stdin.write(json.dumps(spec) + "\n")
            worker.stdin.flush()
        except (BrokenPipeError, OSError):
            pass  # it died: reported when its answer is read

    def _receive(self) -> dict:
        worker = self._worker
        with selectors.DefaultSelector() as selector:
            selector.register(worker.stdout, selectors.EVENT_READ)
            ready = selector.select(timeout=self.time_limit_s)
        line = worker.stdout.readline() if ready else None
        if line is None or not line.endswith("\n"):  # no answer in time, or the worker died (mid-answer)
            tail = self._stderr_tail()
            self._kill()
            if line is None:
                raise OfflineCoderError(f"the offline coder's graph worker ran past {self.time_limit_s:g} s")
            raise WorkerDied(f"the offline coder's graph worker failed: {tail}")
        self._asking = False
        result = json.loads(line)
        if "error" in result:
            raise OfflineCoderError(f"the offline coder could not load the problem: {result['error']}")
        return result

    def close(self) -> None:
        """Hand the graph worker back (`IDLE_WORKER`) for this process's next search; one that died is
        stopped (a worker also stops by itself when this process ends: its stdin closes)."""
        if self._worker is not None and self._worker.poll() is None and self._folder is not None and not self._asking:
            IDLE_WORKER.give(self._worker, self._folder)
            self._worker = self._folder = None
        self._kill()

    def _kill(self) -> None:
        self._asking = False
        self._pending = None
        if self._worker is not None:
            _stop(self._worker, self._folder)
        elif self._folder is not None:
            self._folder.cleanup()
        self._worker = self._folder = None

    def _allows(self, move: str) -> bool:
        if self.allowed is None:
            return True
        return ("tune" if move.startswith(TUNE_PREFIX) else move) in self.allowed

    def propose(self, request: CoderRequest) -> CoderProposal | None:
        if request.kind == "repair":
            return None  # graph moves are exact rewrites: a failed one is not worth patching
        answer = self.options(request)
        tried = {move for move, _ in request.tried}
        avoid = set(request.avoid)
        scores = dict(request.techniques)
        if request.problem_facts is not None and request.problem_facts.launch_bound:
            # the reference's launch profile (measured even without the profiler): a CUDA graph first
            graphs = MOVES["cuda_graphs"].technique
            scores[graphs] = scores.get(graphs, 0.0) + LAUNCH_BOUND_BONUS
        learned = dict(request.kb_factors)  # from earlier runs: > 1 worked in similar states, < 1 kept failing
        promising, lost = single_moves(request.promising), single_moves(request.losing)
        losing = {part for part in lost if not part.startswith(TUNE_PREFIX)}
        # a tune: move that lost wherever it was tried, proposing a configuration it proposed before: the same
        # kernel at the same launch configuration, which can only lose again (it is dropped, not offered last)
        losing_tunes = lost - losing
        # a reference whose output leaves the tolerance under one ulp of noise on every value: bit-exact moves only
        exact_only = request.problem_facts is not None and request.problem_facts.rounding_sensitive
        exact = predictions.exact_moves(request.problem_facts)  # what may pass where it is rounding-sensitive
        # move -> why the reference's own measurements predict that it fails or loses (predictions.RULES), less the
        # options whose own kernels at this node overturn a prediction read from eager alone (OVERTURNED_BY)
        failing = predictions.skipped(request.problem_facts, request.precision,
                                      {o["move"]: o.get("kernels", []) for o in answer["options"]})
        # and, near the tolerance, the moves that sum in another order once one of them failed on rounding here
        failing |= predictions.after_rounding_failures(request.problem_facts, request.rounding_failures)
        gaining = predictions.gaining_settings(request.problem_facts)  # setting moves under which eager ran faster
        # a generator variant that a tune: move switched a kernel to, where that move lost wherever it was tried: no
        # other kernel is switched to it in this run; while such a move is in flight, the others wait for its verdict
        # (level3/25_ShuffleNetUnit on an H100: its two batch-norm kernels' switches to the lagged row kernel were
        # written one behind the other, and each ran the candidate at 0.58x)
        pending = single_moves(request.pending)
        switched = {key[1]: variants for key, variants in self._switches.items() if key[0] == request.problem_path}
        lost_variants = {v for move in losing_tunes for v in switched.get(move, ())}
        pending_variants = {v for move in pending for v in switched.get(move, ())}
        switches = {o["move"]: _switch(answer, o) for o in answer["options"]}  # option -> the variant it switches to
        # option -> why a prediction keeps it from being offered (a rule's reason wins over rounding sensitivity's)
        predicted = {o["move"]: failing.get(o["move"]) or predictions.SENSITIVE_SKIP for o in answer["options"]
                     if o["move"] in failing or (exact_only and o["move"] not in exact)}
        for move, why in predicted.items():
            self._ruled_out.setdefault(move, why)
        choices = [o for o in answer["options"] if o["move"] not in tried and o["move"] not in avoid
                   and self._allows(o["move"]) and not (o["move"] in losing_tunes and self._tuned_before(request, o))
                   and o["move"] not in predicted and switches[o["move"]] not in lost_variants]
        if not request.parent_state.get("applied"):
            self._root_skipped = dict(answer.get("skipped", {}))
            if self.allowed is not None:  # the moves that apply but are not allowed are skipped too
                self._root_skipped |= {o["move"]: "not allowed (--moves)" for o in answer["options"]
                                       if not self._allows(o["move"])}
            self._root_skipped |= predicted
        if not choices:
            return None
        # simplify_all offered here and not lost: the single rewrites it sweeps make a subset of its candidate, and
        # come after every other move (level3/11_VGG16 on an H100: simplify_identities at 1.002x beside it)
        subsumed = set(SIMPLIFY) if any(o["move"] == "simplify_all" for o in answer["options"]) \
            and "simplify_all" not in losing else set()
        # a move being evaluated elsewhere (in flight, or written ahead) waits for its outcome behind the others: with
        # two in flight and one ahead, level2/100's triton_conv was chosen under fuse_pointwise while it was still
        # being timed at the root, and lost both times (0.56x, H100)
        waiting = predictions.reordering_waits(request.problem_facts, pending)  # until a pending one's verdict
        flat = predictions.flat_settings(request.problem_facts)  # settings under which eager ran as fast as it is

        def score(option: dict) -> tuple:
            bonus = 0.2 if option["move"] in promising else 0.0
            # the larger measured gain first where several settings gain
            bonus += MEASURED_GAIN_BONUS + 0.1 * math.log(gaining[option["move"]]) if option["move"] in gaining else 0.0
            bonus += KB_WEIGHT * math.log(learned.get(option["technique"], 1.0))
            order = PREFERENCE.index(option["move"]) if option["move"] in PREFERENCE else len(PREFERENCE)  # tuning last
            # a move that failed or lost wherever it was tried in this run comes after every other
            # (a tune: move is the next configuration each time, so its record says nothing of the next)
            gain = scores.get(option["technique"], 0.0) + bonus
            move = option["move"]
            later = move in pending or move in waiting or switches[move] in pending_variants
            return move in losing, move in subsumed, move in flat, later, -gain, order, move

        best = min(choices, key=score)
        self._offered_once = True
        if best["move"].startswith(TUNE_PREFIX):
            self._tuned.setdefault((request.problem_path, best["move"]), set()).add(_tuned_kernel(best))
            if switches[best["move"]] is not None:
                self._switches.setdefault((request.problem_path, best["move"]), set()).add(switches[best["move"]])
        applied = list(request.parent_state.get("applied", []))
        if not best["move"].startswith(TUNE_PREFIX):
            applied = canonical(applied + [best["move"]])
        prior = min(1.0, BASE_PRIOR + scores.get(best["technique"], 0.0))
        state = {"applied": applied}
        if best.get("tune"):
            state["tune"] = best["tune"]
        if best.get("kernels"):
            state["kernels"] = [{k: kernel[k] for k in ("name", "kind", "backend", "rank", "ranking", "config",
                                                          "features") if k in kernel} for kernel in best["kernels"]]
        return CoderProposal(source=best["source"], techniques=(best["technique"],), rationale=best["rationale"],
                             move=best["move"], state=state, prior=prior)

    def _tuned_before(self, request: CoderRequest, option: dict) -> bool:
        return _tuned_kernel(option) in self._tuned.get((request.problem_path, option["move"]), set())


def _tuned_entry(kernels: list[dict], move: str) -> dict:
    """The entry of `kernels` (an answer's or an option's) for the kernel a tune: move names; {} where none is."""
    name = move[len(TUNE_PREFIX):]
    return next((k for k in kernels if k["name"] == name), {})


def _switch(answer: dict, option: dict) -> str | None:
    """The generator variant (a row kernel's "looped", "lagged", ...) that a tune: option moves its kernel to, where
    it is not the kernel's variant at the node the answer is for; None for other options and other steps."""
    if not option["move"].startswith(TUNE_PREFIX):
        return None
    new, old = (_tuned_entry(found.get("kernels", []), option["move"]).get("config", {}).get("variant")
                for found in (option, answer))
    return new if new is not None and new != old else None


def _tuned_kernel(option: dict) -> str:
    """A tune: option's kernel as it would run: its configuration and features (shapes, layout), as JSON."""
    kernel = _tuned_entry(option.get("kernels", []), option["move"])
    return json.dumps([option["move"][len(TUNE_PREFIX):], kernel.get("config"), kernel.get("features")],
                      sort_keys=True)


def allowed_moves(moves: str) -> set[str] | None:
    """`--moves`: a comma-separated list of the offline coder's moves ("tune" for its tune: moves, which walk a
    generated kernel's launch configurations), as a set; None for "" (every move). KernelproError names any
    unknown one."""
    chosen = {name.strip() for name in moves.split(",") if name.strip()}
    if not chosen:
        return None
    unknown = sorted(chosen - set(MOVES) - {"tune"})
    if unknown:
        raise OfflineCoderError(f"--moves: no offline move named {', '.join(unknown)}; the moves are "
                                f"{', '.join(sorted(MOVES))}, and tune (the tune:<kernel> moves)")
    return chosen


__all__ = ["OfflineCoder", "OfflineCoderError", "MOVES", "allowed_moves"]
