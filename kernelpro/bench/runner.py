"""The local backend: one search at a time per GPU (pinned with CUDA_VISIBLE_DEVICES), longest problems first.
On CUDA each GPU's next two searches start while the current one runs and wait at the GPU's gate with their workers
booted (kernelpro.devicegate), so a problem's worker start is paid off the GPU's clock.

Each problem is a full `kernelpro search` in a child process, into its own folder under
`DIR/problems/<key>/`; the child dies with the bench (PR_SET_PDEATHSIG on Linux), and a
crash or an error exit is recorded as the problem's failure while the bench goes on.
A problem that was running when the bench was killed resumes its own search (`--resume`),
so none of its evaluations is repeated. On a machine without a GPU there is one CPU worker.

"Longest first" uses what is known before running: the cached eager time of the reference
(a search's cost grows with it, through its timing trials), else the level.
"""

from __future__ import annotations

import json
import logging
import os
import queue
import shutil
import signal
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from collections.abc import Callable

from kernelpro import devicegate
from kernelpro.bench.child import (BenchError, BenchInterrupted, ChildInterrupted,  # noqa: F401
                                    check_interrupted, extends, finished_search, one_line_error, recorded_selection,
                                    resumed_settings, run_child, run_search)
from kernelpro.bench.leaderboard import geomean, write_leaderboards
from kernelpro.bench.store import FINISHED, BenchStore, source_sha256
from kernelpro.bench.suite import Entry, discover, pinned, select
from kernelpro.harness.process import exit_description
from kernelpro.settings import BenchSettings

log = logging.getLogger("kernelpro.bench")


def saved_settings(saved: dict) -> BenchSettings:
    """A bench's settings as its bench.db records them; a bench from before model modes existed ran its
    models in eval mode (one from before its search settings were nested records them flat)."""
    if "searches" in saved:
        return BenchSettings.model_validate(saved)
    return BenchSettings.model_validate({"model_mode": "eval", **saved})


@dataclass
class BenchStatus:
    total: int
    done: int = 0
    failed: int = 0
    workers: dict[str, str] = field(default_factory=dict)  # worker -> problem it runs ("" idle)
    started: dict[str, float] = field(default_factory=dict)
    speedups: list[float] = field(default_factory=list)
    valid: int = 0

    @property
    def geomean(self) -> float | None:
        return geomean(self.speedups)


#: with lookahead, the searches each GPU has booted and waiting at its gate while one runs: two, so that a problem
#: shorter than a search's start-up (7 to 12 s on an H200 machine) does not leave the next one's start-up on the GPU's
#: clock (on an H100, level3/27's reference evaluation began with 10.4 s of it after level3/25's 6 s)
WAITING_SEARCHES = 2


def lanes(slots: list[str], lookahead: bool) -> list[tuple[str, str]]:
    """The bench's threads, as (slot, name): one per slot, or 1 + WAITING_SEARCHES per slot with lookahead, each
    running one search at a time, the others waiting at the slot's gate while one runs."""
    if not lookahead:
        return [(slot, slot) for slot in slots]
    return [(slot, f"{slot}#{lane}") for slot in slots for lane in range(1, 2 + WAITING_SEARCHES)]


def gpu_slots(device: str, gpus: str) -> list[str]:
    """The workers: GPU indices ('0', '1', ...) on CUDA, or one 'cpu'."""
    if device != "cuda":
        return ["cpu"]
    import torch
    count = torch.cuda.device_count()
    if count == 0:
        raise BenchError("--device cuda was asked for, but torch sees no CUDA device")
    if gpus == "all":
        return [str(i) for i in range(count)]
    chosen = [g.strip() for g in gpus.split(",") if g.strip()]
    bad = [g for g in chosen if not g.isdigit() or int(g) >= count]
    if bad or not chosen:
        raise BenchError(f"--gpus {gpus!r}: this machine has GPUs 0-{count - 1}")
    return list(dict.fromkeys(chosen))


def _is_our_search(pid: int, key: str) -> bool:
    """Whether pid is still a kernelpro child working on this problem (not a reused pid)."""
    try:
        command = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return False
    return "kernelpro" in command and key in command


class Bench:
    def __init__(self, settings: BenchSettings, *, resume: bool = False, extend_budget: int | None = None,
                 rerun: list[str] | None = None, remeasure: list[str] | None = None,
                 on_change: Callable[[BenchStatus], None] = lambda status: None, given: frozenset[str] | None = None):
        """`resume` finishes the bench in settings.out with its saved settings; `extend_budget` (with
        resume) raises its budget: each search that spent the old one goes on from its own state, and
        the leaderboards of the old budget are kept as leaderboard_budget<N>.*. `rerun` (with resume)
        names problems (keys such as level1/7_Name) to run again from scratch, e.g. after something
        else used their GPU while they were timed. `remeasure` (with resume) names finished problems, or
        `all` of them, whose best is timed again against eager and torch.compile, with no new evaluations:
        for leaderboards from a bench whose searches recorded no re-measurement, or a quieter machine. `given`
        (with resume): the settings the command line set, refused where they differ from the bench's
        (`resumed_settings`)."""
        out = Path(settings.out)
        if extend_budget is not None and not resume:
            raise BenchError("a larger budget extends a finished bench: give it with --resume")
        if rerun and not resume:
            raise BenchError("--rerun runs problems of an existing bench again: give it with --resume")
        if remeasure and not resume:
            raise BenchError("--remeasure-problems times the results of an existing bench again: give it with --resume")
        if not resume and out.exists() and any(out.iterdir()):
            raise BenchError(f"{out} is not empty; pass --resume to finish the bench there, --force to start "
                             "over there, or choose another --out")
        if resume and not (out / "bench.db").exists():
            raise BenchError(f"--resume: {out} holds no bench (no bench.db)")
        # a new bench's folder is made only once nothing refuses it: a refused bench leaves nothing behind
        self.store = BenchStore(out) if resume else None
        self.out = out
        registered = {row["key"] for row in self.store.rows()} if resume else set()
        suite = discover(Path(settings.suite))  # this command's folder, a resumed bench's too (resumed_settings)
        if resume:
            saved = self.store.get("settings")
            if saved:
                recorded, given = recorded_selection(saved_settings(saved), settings, given, registered, suite)
                # the safety choice is this command's, never the saved one's
                settings = resumed_settings(recorded, settings, given)
        else:
            settings = settings.model_copy(update={"problems": pinned(settings.problems)})
        missing = sorted(registered - {entry.key for entry in suite})
        if missing:
            raise BenchError(f"--resume: {settings.suite} lacks {len(missing)} of the bench's problems "
                             f"({', '.join(missing[:3])}{', ...' if len(missing) > 3 else ''}); give the suite "
                             "folder the bench ran")
        self.entries = select(suite, settings.levels, settings.problems)
        if extend_budget is not None and extend_budget != settings.searches.budget:
            settings = self._extend(settings, extend_budget)
        self.settings = settings
        if settings.backend not in ("local", "ray"):
            raise BenchError(f"--backend {settings.backend!r}: local or ray")
        if settings.backend == "ray" and settings.baselines_only:
            raise BenchError("--baselines-only runs on the local backend")
        if self.store is None:
            self.store = BenchStore(out)
        self.store.put("settings", settings.model_dump())
        self.store.add(self.entries)
        self.interrupted = False
        self._children: dict[str, int] = {}  # key -> pid of the search (or baseline eval) running
        self.slots = gpu_slots(settings.searches.device, settings.gpus) if settings.backend == "local" else []
        self.on_change = on_change
        rows = {r["key"]: r for r in self.store.rows()}
        for row in rows.values():  # a search left running by a bench killed alone: stop it before resuming it
            if row["status"] == "running" and row["pid"] and _is_our_search(row["pid"], row["key"]):
                try:
                    os.kill(row["pid"], signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
        self.forgotten_observations = 0
        if rerun:  # after the stop above: no search left running writes into a folder it drops
            self.forgotten_observations = self._rerun(rerun, rows)
            rows = {r["key"]: r for r in self.store.rows()}
        if remeasure:
            self.remeasure = self._remeasure(remeasure, rows)
            self.store.put("remeasure", sorted(self.remeasure))
            rows = {r["key"]: r for r in self.store.rows()}
        else:  # a re-measurement cut off by a kill goes on where it stopped
            self.remeasure = {k for k in self.store.get("remeasure") or [] if k in rows and rows[k]["status"] != "done"}
        self.status = BenchStatus(total=len(self.entries))
        for entry in self.entries:
            self._count(rows[entry.key])
        self._lock = threading.Lock()

    def _extend(self, settings: BenchSettings, budget: int) -> BenchSettings:
        if budget < settings.searches.budget:
            raise BenchError(f"--budget {budget} is below this bench's budget {settings.searches.budget}; a bench "
                             "only extends (use another --out for a smaller one)")
        if settings.baselines_only:
            raise BenchError("a --baselines-only bench has no searches to extend")
        for path in sorted(self.out.glob("leaderboard.*")):
            path.replace(path.with_name(f"leaderboard_budget{settings.searches.budget}{path.suffix}"))
        self.store.reopen([r["key"] for r in self.store.rows()
                           if r["status"] == "done" and extends(r["result"], budget)])
        return settings.updated(budget=budget)

    def _rerun(self, keys: list[str], rows: dict[str, dict]) -> int:
        """Forget what these problems measured: result, search folder, log, and the knowledge-base
        observations their searches recorded (so no later search learns from a disturbed run); how
        many observations that was."""
        entries = {e.key: e for e in self.entries}  # each is in rows: add() registered it
        unknown = [k for k in keys if k not in entries]
        if unknown:
            raise BenchError(f"--rerun {', '.join(unknown)}: not a problem of this bench; its problems are "
                             + ", ".join(sorted(entries)))
        keys = list(dict.fromkeys(keys))
        forgotten = 0
        for key in keys:
            row = rows[key]
            shutil.rmtree(self.out / "problems" / key, ignore_errors=True)
            (self.out / "logs" / f"{key}.log").unlink(missing_ok=True)
            if self.settings.searches.use_kb and row["started"]:
                from kernelpro.knowledge import KnowledgeBase
                name = entries[key].name  # the name a search records its observations under
                with KnowledgeBase(self.settings.searches.kb or None) as base:
                    forgotten += base.forget(name, row["started"], row["finished"] or time.time())
        self.store.reopen(keys)
        return forgotten

    def _remeasure(self, keys: list[str], rows: dict[str, dict]) -> set[str]:
        if self.settings.baselines_only:
            raise BenchError("a --baselines-only bench has no searches to re-measure")
        searched = sorted(k for k in rows if finished_search(self.out / "problems" / k))
        # `all` is every search the bench counts as done; a key may also name one whose re-measurement
        # a kill cut off (its row reads pending again)
        keys = [k for k in searched if rows[k]["status"] == "done"] if keys == ["all"] else list(dict.fromkeys(keys))
        missing = [k for k in keys if k not in searched]
        if missing:
            raise BenchError(f"--remeasure-problems {', '.join(missing)}: not a finished search of this bench; those are "
                             + (", ".join(searched) or "none"))
        self.store.reopen(keys)
        return set(keys)

    def _count(self, row: dict) -> None:
        if row["status"] == "done":
            self.status.done += 1
            result = row["result"] or {}
            if result.get("speedup"):
                self.status.speedups.append(result["speedup"])
            if (result.get("verdicts") or {}).get("correct"):
                self.status.valid += 1
        elif row["status"] == "failed":
            self.status.failed += 1

    def estimate(self, entry: Entry) -> float:
        known = self.store.any_baseline(source_sha256(entry.path), self.settings.searches.precision)
        return known["eager_ms"] * 1e3 if known else float(entry.level or 1)

    @staticmethod
    def report(folder: Path) -> dict:
        """`kernelpro bench report DIR`: the leaderboards of a bench as it stands (running, killed, or restored
        from a snapshot), written into DIR with no search started: unfinished rows keep their status."""
        out = Path(folder)
        if not (out / "bench.db").exists():
            raise BenchError(f"{out} holds no bench (no bench.db)")
        store = BenchStore(out)
        saved = store.get("settings")
        if not saved:
            raise BenchError(f"{out}: its bench.db records no settings (a bench stopped before it started)")
        return write_leaderboards(out, store, saved_settings(saved))

    def pending(self) -> list[Entry]:
        finished = {r["key"] for r in self.store.rows() if r["status"] in FINISHED}
        todo = [e for e in self.entries if e.key not in finished]
        return sorted(todo, key=lambda e: -self.estimate(e))

    def run(self) -> dict:
        if self.settings.backend == "ray":
            from kernelpro.bench.ray_backend import run_on_ray
            run_on_ray(self, self.pending())
            return write_leaderboards(self.out, self.store, self.settings)
        work: queue.Queue = queue.Queue()
        for entry in self.pending():
            work.put(entry)
        threads = [threading.Thread(target=self._worker, args=(slot, work, name), daemon=True)
                   for slot, name in lanes(self.slots, self.lookahead)]
        for thread in threads:
            thread.start()
        try:
            for thread in threads:
                while thread.is_alive():
                    thread.join(0.5)
        except KeyboardInterrupt:
            self._interrupt(work, threads)
        return write_leaderboards(self.out, self.store, self.settings)

    def _interrupt(self, work: queue.Queue, threads: list[threading.Thread]) -> None:
        """Ctrl-C: no new problem starts; the searches running get SIGINT (from the terminal they already
        have it) and write their partial results; their rows stay unfinished, so --resume goes on with
        them from their own state."""
        self.interrupted = True
        while not work.empty():
            work.get_nowait()
        time.sleep(2)  # a search that got the terminal's SIGINT is writing its results
        for pid in list(self._children.values()):
            try:
                os.kill(pid, signal.SIGINT)
            except (ProcessLookupError, PermissionError):
                pass
        for thread in threads:
            thread.join(120)
        write_leaderboards(self.out, self.store, self.settings)
        raise BenchInterrupted(f"the leaderboards so far are in {self.out}; go on with: kernelpro bench "
                               f"{self.settings.suite} --out {self.out} --resume")

    @property
    def lookahead(self) -> bool:
        """Whether each GPU's next search starts while the current one runs, and waits at the GPU's gate with its
        workers booted (kernelpro.devicegate): searches on CUDA. On the CPU a booting search would take the cores the
        running one times on; baseline evaluations boot no fork server."""
        return self.settings.searches.device == "cuda" and not self.settings.baselines_only

    def _worker(self, slot: str, work: queue.Queue, name: str) -> None:
        """One lane (`name`, from `lanes`) of a slot: takes problems from `work` until none is left."""
        while True:
            try:
                entry = work.get_nowait()
            except queue.Empty:
                with self._lock:
                    self.status.workers[name] = ""
                    self.on_change(self.status)
                return
            with self._lock:
                self.status.workers[name] = entry.key
                self.status.started[name] = time.monotonic()
                self.on_change(self.status)
            try:
                self.store.start(entry.key, slot)
                if self.settings.baselines_only:
                    result, error = self.baseline(entry, slot)
                else:
                    result, error = self.search(entry, slot)
            except ChildInterrupted:
                return  # Ctrl-C reached the child first: the bench is stopping, the problem stays unfinished
            except Exception as failure:  # the bench's own fault: the problem is recorded as failed, never lost
                log.exception("bench lane %s failed on %s", name, entry.key)
                result, error = None, f"the bench failed running it: {type(failure).__name__}: {failure}"
            self.record(entry, result, error)

    def record(self, entry: Entry, result: dict | None, error: str) -> None:
        """A problem's outcome, from a local worker or a Ray task: into the database, the baseline cache, the display."""
        if self.interrupted:
            return  # stopped by Ctrl-C: it stays unfinished, and a resume goes on with it
        if result is not None and not self.settings.baselines_only:
            result = self._with_baseline(entry, result)
        self.store.finish(entry.key, result, error, since=(result or {}).get("device_since"))
        with self._lock:
            self._count({"status": "done" if result is not None and not error else "failed", "result": result})
            self.on_change(self.status)

    def _env(self, slot: str) -> dict:
        env = dict(os.environ)
        if slot != "cpu":
            env["CUDA_VISIBLE_DEVICES"] = slot
            gates = self.out / "gates"
            gates.mkdir(parents=True, exist_ok=True)
            env[devicegate.ENV] = str(gates / f"gpu{slot}.lock")
        return env

    def _child(self, key: str, args: list[str], slot: str, log: Path) -> tuple[int, str]:
        # the pid is kept so that a resumed bench can stop a search that outlived a bench killed alone
        try:
            return run_child(args, self._env(slot), log, lambda pid: self._started(key, pid))
        finally:
            self._children.pop(key, None)

    def _started(self, key: str, pid: int) -> None:
        self.store.set_pid(key, pid)
        self._children[key] = pid

    def search(self, entry: Entry, slot: str) -> tuple[dict | None, str]:
        try:
            return run_search(entry, self.settings, self.out, self._env(slot),
                              lambda pid: self._started(entry.key, pid), remeasure=entry.key in self.remeasure)
        finally:
            self._children.pop(entry.key, None)

    def _with_baseline(self, entry: Entry, result: dict) -> dict:
        if result.get("baseline_ms") and result.get("device_name"):
            self.store.put_baseline(source_sha256(entry.path), result["device_name"], result.get("torch_version") or "",
                                    self.settings.searches.precision, result["baseline_ms"],
                                    result.get("baseline_compile_ms"))
        return result

    def baseline(self, entry: Entry, slot: str) -> tuple[dict | None, str]:
        """Eager and torch.compile of the reference (cached per source, device and torch version)."""
        import torch
        from kernelpro.harness.problem import reference_candidate
        from kernelpro.harness.problem import load_problem
        s = self.settings.searches
        device_name = torch.cuda.get_device_name(int(slot)) if slot != "cpu" else "cpu"
        sha = source_sha256(entry.path)
        cached = self.store.baseline(sha, device_name, torch.__version__, s.precision)
        if cached:
            return {"baseline_ms": cached["eager_ms"], "baseline_compile_ms": cached["compile_ms"],
                    "device_name": device_name, "torch_version": torch.__version__, "cached": True}, ""
        folder = self.out / "problems" / entry.key
        folder.mkdir(parents=True, exist_ok=True)
        reference = folder / "reference_candidate.py"
        reference.write_text(reference_candidate(load_problem(entry.path)))
        report = folder / "baseline.json"
        code, tail = self._child(entry.key, ["eval", str(entry.path), str(reference), "--baseline", "compile", "--device",
                                  s.device, "--precision", s.precision, "--model-mode", s.model_mode,
                                  "--json-file", str(report)] + (["--kernelbench-timing"] if s.device == "cuda" else []),
                                 slot, self.out / "logs" / f"{entry.key}.log")
        check_interrupted(code)
        if not report.exists():
            return None, f"the baseline failed ({exit_description(code)}): " + one_line_error(tail)
        result = json.loads(report.read_text())
        if result.get("verdict") != "correct":
            return None, f"the reference failed in the harness: {result.get('verdict')}: {result.get('reason')}"
        eager = result["reference"]["median_ms"]
        compiled = (result.get("reference_compile") or {}).get("median_ms")
        self.store.put_baseline(sha, result.get("device_name") or device_name, result.get("torch_version") or "",
                                s.precision, eager, compiled)
        kernelbench = result.get("kernelbench") or {}
        return {"baseline_ms": eager, "baseline_compile_ms": compiled, "device_name": result.get("device_name"),
                "baseline_compile_correct": result.get("compile_correct"),
                "torch_version": result.get("torch_version"), "model_mode": result.get("model_mode"),
                "kernelbench_eager_ms": kernelbench.get("reference_mean_ms"), "memory": result.get("memory"),
                "cached": False}, ""
