"""The persistent knowledge base: which techniques worked in which states, across runs and problems.

After every evaluation the search records one observation per technique it applied:
the state it was applied in (the operator family of the problem, the roofline class
of the parent's dominant kernel, the parent's top suggested techniques), the outcome
(log-speedup over the parent, or the failure kind), the device and the coder. Per
(state, technique) the base keeps attempts, successes, and the mean and spread of the
gain (an SQL view over the observations, so they never disagree).

The search reads it through the MCTS prior hook: a technique that worked in similar
states gets a higher prior, one that kept failing a lower one (similar: the same family
and roofline class weigh 1, the same family alone 1/2, the same class alone 1/4). The
LLM coder gets a short summary of what worked in similar states.

One SQLite file, `$KERNELPRO_HOME/kb.sqlite` (else the user data folder), or `--kb PATH`.
The schema changes through ordered migrations (`PRAGMA user_version` counts those
applied). Export and import are JSON, so a team can share a base.
"""

from __future__ import annotations

import math
import os
import re
import sqlite3
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from kernelpro.errors import KernelproError
from kernelpro.harness.policy import reference_ops
from kernelpro.mcts.memory import prior_factor
from kernelpro.runstore import SerializedConnection
from kernelpro.tools.records import ROOFLINE_CLASSES

FORMAT = "kernelpro-kb"
#: Ordered schema migrations; a base at version N has the first N applied. Append, never edit.
MIGRATIONS = (
    """CREATE TABLE observations (
        id TEXT PRIMARY KEY,
        at REAL NOT NULL,
        problem TEXT NOT NULL,
        family TEXT NOT NULL,
        roofline TEXT NOT NULL,
        technique TEXT NOT NULL,
        ok INTEGER NOT NULL,
        failure TEXT NOT NULL DEFAULT '',
        log_gain REAL,
        device TEXT NOT NULL,
        coder TEXT NOT NULL
    );
    CREATE INDEX observations_state ON observations (family, roofline, technique);""",
    # 2: the parent's top suggested techniques and the coder's own move name, kept with the observation
    """ALTER TABLE observations ADD COLUMN findings TEXT NOT NULL DEFAULT '';
    ALTER TABLE observations ADD COLUMN move TEXT NOT NULL DEFAULT '';
    CREATE VIEW technique_stats AS
        SELECT family, roofline, technique, COUNT(*) AS attempts, SUM(ok) AS successes,
               SUM(CASE WHEN ok THEN log_gain ELSE 0 END) AS gain_sum,
               SUM(CASE WHEN ok THEN log_gain * log_gain ELSE 0 END) AS gain_sq
        FROM observations GROUP BY family, roofline, technique;""",
    # 3: the energy effect beside the time gain (log of the parent's over the child's joules per call, each
    # against the reference measured beside it), and the objective of the run that observed it; log_gain is
    # the time gain whatever the objective from now on (before, an energy run's objective ratio)
    """ALTER TABLE observations ADD COLUMN log_energy_gain REAL;
    ALTER TABLE observations ADD COLUMN objective TEXT NOT NULL DEFAULT 'time';
    DROP VIEW technique_stats;
    CREATE VIEW technique_stats AS
        SELECT family, roofline, technique, COUNT(*) AS attempts, SUM(ok) AS successes,
               SUM(CASE WHEN ok THEN log_gain ELSE 0 END) AS gain_sum,
               SUM(CASE WHEN ok THEN log_gain * log_gain ELSE 0 END) AS gain_sq,
               SUM(CASE WHEN ok AND log_energy_gain IS NOT NULL THEN 1 ELSE 0 END) AS energy_count,
               SUM(CASE WHEN ok AND log_energy_gain IS NOT NULL THEN log_energy_gain ELSE 0 END) AS energy_sum,
               SUM(CASE WHEN ok AND log_energy_gain IS NOT NULL THEN log_energy_gain * log_energy_gain ELSE 0 END)
                   AS energy_sq
        FROM observations GROUP BY family, roofline, technique;""",
)
SIMILARITY = {"same_state": 1.0, "same_family": 0.5, "same_roofline": 0.25}
_FAMILIES = (  # (family, ops that make it), first match wins
    ("attention", {"scaled_dot_product_attention", "MultiheadAttention"}),
    ("conv", {"conv1d", "conv2d", "conv3d", "conv_transpose2d", "Conv1d", "Conv2d", "Conv3d", "ConvTranspose2d"}),
    ("gemm", {"matmul", "mm", "bmm", "linear", "einsum", "addmm", "baddbmm", "Linear", "Bilinear"}),
    ("norm", {"layer_norm", "group_norm", "batch_norm", "instance_norm", "rms_norm", "normalize", "LayerNorm",
              "GroupNorm", "BatchNorm1d", "BatchNorm2d", "InstanceNorm2d", "RMSNorm"}),
    ("reduction", {"sum", "mean", "amax", "amin", "max", "min", "softmax", "log_softmax", "logsumexp", "var", "std",
                   "argmax", "argmin", "prod", "cumsum", "norm", "Softmax", "LogSoftmax"}),
)


class KnowledgeError(KernelproError):
    """A knowledge base that cannot be read, or an export that is not one."""


def default_path() -> Path:
    if os.environ.get("KERNELPRO_HOME"):
        return Path(os.environ["KERNELPRO_HOME"]) / "kb.sqlite"
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "kernelpro" / "kb.sqlite"


def operator_family(problem_source: str) -> str:
    """attention, conv, gemm, norm, reduction or pointwise: what the reference's forward computes with."""
    ops = reference_ops(problem_source)
    if ops & {"softmax", "Softmax"} and ops & {"matmul", "bmm", "einsum"}:
        return "attention"  # written out: softmax(q @ k^T) @ v
    for family, members in _FAMILIES:
        if ops & members:
            return family
    return "pointwise"


@dataclass(frozen=True)
class State:
    family: str
    roofline: str  # the roofline class of the dominant kernel, or "" when not profiled
    findings: tuple[str, ...] = ()  # the top suggested techniques


@dataclass(frozen=True)
class TechniqueStats:
    technique: str
    attempts: float  # weighted by similarity
    successes: float
    mean_gain: float  # log of the time gain over the parent
    spread_gain: float
    energy_successes: float = 0.0  # the successes whose energy was measured
    mean_energy_gain: float = 0.0  # log of the parent's joules per call over the child's
    spread_energy_gain: float = 0.0

    def gain(self, objective: str = "time") -> float:
        """The mean log gain in the objective: time; energy (the time gain where no energy was measured);
        energy-delay product (time and energy gains added)."""
        if objective == "time" or not self.energy_successes:
            return self.mean_gain
        return self.mean_energy_gain + (self.mean_gain if objective == "edp" else 0.0)

    def factor(self, objective: str = "time") -> float:
        """The same factor the search's own memory gives a move (kernelpro.mcts.memory.prior_factor), for the
        gain in the search's objective."""
        return prior_factor(self.attempts, self.successes, self.gain(objective))


class KnowledgeBase:
    def __init__(self, path: Path | str | None = None, read_only: bool = False):
        """`read_only` (the commands that only read it) opens an existing base without writing
        anything, and says so in one line where there is none."""
        self.path = Path(path) if path else default_path()
        if read_only and not self.path.is_file():
            raise KnowledgeError(f"no knowledge base at {self.path} (a search makes one; --kb names another)")
        if not read_only:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            if read_only:
                self.db = SerializedConnection.open(f"{self.path.resolve().as_uri()}?mode=ro", uri=True)
                if self.version != len(MIGRATIONS):
                    raise KnowledgeError(f"{self.path} has schema version {self.version}, not this kernelpro's "
                                         f"{len(MIGRATIONS)}: a search with it brings it up to date")
                return
            # one connection for whichever thread uses the base, one statement at a time (runstore.SerializedConnection)
            self.db = SerializedConnection.open(self.path)
            self.db.execute("PRAGMA journal_mode=WAL")
            self.migrate()
        except sqlite3.DatabaseError as error:
            raise KnowledgeError(f"{self.path} is not a kernelpro knowledge base: {error}") from None

    def close(self) -> None:
        self.db.close()

    def __enter__(self) -> "KnowledgeBase":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    @property
    def version(self) -> int:
        return self.db.execute("PRAGMA user_version").fetchone()[0]

    def migrate(self) -> int:
        """Apply the migrations this base lacks, each in its own transaction; the version reached."""
        version = self.version
        if version > len(MIGRATIONS):
            raise KnowledgeError(f"{self.path} has schema version {version}, newer than this kernelpro's "
                                 f"{len(MIGRATIONS)}: upgrade kernelpro")
        for number in range(version, len(MIGRATIONS)):
            self.db.execute("BEGIN IMMEDIATE")
            try:
                for statement in MIGRATIONS[number].split(";"):
                    if statement.strip():
                        self.db.execute(statement)
                self.db.execute(f"PRAGMA user_version = {number + 1}")
                self.db.execute("COMMIT")
            except BaseException:
                self.db.execute("ROLLBACK")
                raise
        return self.version

    # -- writing -------------------------------------------------------------------------------
    def record(self, state: State, techniques: tuple[str, ...] | list[str], *, ok: bool, log_gain: float | None,
               failure: str = "", problem: str = "", move: str = "", device: str = "", coder: str = "",
               log_energy_gain: float | None = None, objective: str = "time") -> int:
        """One observation per technique applied (one transaction); how many were written. `log_gain`: the
        time gain over the parent; `log_energy_gain`: the energy one, where both were measured."""
        rows = [(uuid.uuid4().hex, time.time(), problem, state.family, state.roofline, technique, int(ok),
                 failure[:200], log_gain if ok else None, device, coder, ",".join(state.findings), move,
                 log_energy_gain if ok else None, objective)
                for technique in dict.fromkeys(techniques)]
        with self.db:
            self.db.executemany(_INSERT, rows)
        return len(rows)

    def reset(self) -> int:
        """Forget every observation; how many there were."""
        with self.db:
            return self.db.execute("DELETE FROM observations").rowcount

    def forget(self, problem: str, start: float, end: float) -> int:
        """Forget the observations of one problem recorded between start and end (epoch seconds)."""
        with self.db:
            return self.db.execute("DELETE FROM observations WHERE problem = ? AND at BETWEEN ? AND ?",
                                   (problem, start, end)).rowcount

    # -- reading -------------------------------------------------------------------------------
    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM observations").fetchone()[0]

    def stats(self, state: State | None = None, objective: str = "time") -> list[TechniqueStats]:
        """Per technique, over the states similar to `state` (weighted), or over everything; best first for
        the objective."""
        totals: dict[str, list[float]] = {}
        for family, roofline, technique, *values in self.db.execute(
                "SELECT family, roofline, technique, attempts, successes, gain_sum, gain_sq, energy_count, "
                "energy_sum, energy_sq FROM technique_stats"):
            weight = 1.0 if state is None else self._similarity(state, family, roofline)
            if weight:
                total = totals.setdefault(technique, [0.0] * 7)
                for index, value in enumerate(values):
                    total[index] += weight * (value or 0.0)
        result = []
        for technique, (attempts, successes, gain_sum, gain_sq, energy_count, energy_sum, energy_sq) in totals.items():
            mean, spread = _moments(gain_sum, gain_sq, successes)
            energy_mean, energy_spread = _moments(energy_sum, energy_sq, energy_count)
            result.append(TechniqueStats(technique, attempts, successes, mean, spread, energy_count, energy_mean,
                                         energy_spread))
        return sorted(result, key=lambda s: (-s.factor(objective), -s.attempts, s.technique))

    @staticmethod
    def _similarity(state: State, family: str, roofline: str) -> float:
        same_family, same_roofline = family == state.family, bool(state.roofline) and roofline == state.roofline
        if same_family and (same_roofline or not state.roofline):
            return SIMILARITY["same_state"]
        if same_family:
            return SIMILARITY["same_family"]
        return SIMILARITY["same_roofline"] if same_roofline else 0.0

    def prior_hook(self, family: str, objective: str = "time"):
        """The MCTS prior hook for a problem of this family: (node signature = roofline class, technique or
        move) -> multiplicative factor from the similar states' statistics for the search's objective (1 where
        the base knows nothing)."""
        cache: dict[str, dict[str, float]] = {}

        def hook(signature: str, name: str) -> float:
            roofline = signature if signature in ROOFLINE_CLASSES else ""
            if roofline not in cache:  # read once per class and run: the base changes slowly
                cache[roofline] = {s.technique: s.factor(objective)
                                   for s in self.stats(State(family, roofline), objective)}
            return cache[roofline].get(name, 1.0)
        return hook

    def summary(self, state: State, stats: list[TechniqueStats] | None = None, limit: int = 5) -> str:
        """A few lines for the LLM coder: what worked and what kept failing in similar states
        (`stats`: `self.stats(state)` when the caller has it already)."""
        stats = [s for s in (self.stats(state) if stats is None else stats) if s.attempts >= 1]
        if not stats:
            return ""
        worked = [s for s in stats if s.successes and (s.mean_gain > 0 or s.mean_energy_gain > 0)][:limit]
        failed = [s for s in stats if s.attempts >= 2 and s.successes / s.attempts < 0.25][:limit]
        where = f"{state.family} problems" + (f", {state.roofline.replace('_', '-')} kernels" if state.roofline else "")
        lines = [f"From earlier runs on similar states ({where}):"]
        lines += [f"- {s.technique}: worked {s.successes:g} of {s.attempts:g} times, mean gain "
                  f"{math.exp(s.mean_gain):.2f}x (spread {s.spread_gain:.2f} in log)" + (
                      f", energy per call {math.exp(-s.mean_energy_gain):.2f}x the parent's (over "
                      f"{s.energy_successes:g} measured)" if s.energy_successes else "") for s in worked]
        lines += [f"- {s.technique}: kept failing ({s.successes:g} of {s.attempts:g} worked)" for s in failed]
        return "\n".join(lines) if len(lines) > 1 else ""

    def rows(self) -> list[dict]:
        columns = ("id", "at", "problem", "family", "roofline", "findings", "technique", "move", "ok", "failure",
                   "log_gain", "device", "coder", "log_energy_gain", "objective")
        return [dict(zip(columns, row)) | {"ok": bool(row[8])} for row in self.db.execute(
            f"SELECT {', '.join(columns)} FROM observations ORDER BY at, id")]

    # -- sharing -------------------------------------------------------------------------------
    def export(self) -> dict:
        return {"format": FORMAT, "schema_version": self.version, "exported_at": time.time(),
                "observations": self.rows()}

    def import_(self, document: dict) -> int:
        """Add an export's observations (those already here, by id, are skipped); how many were added."""
        if not isinstance(document, dict) or document.get("format") != FORMAT:
            raise KnowledgeError(f"not a kernelpro knowledge-base export (format {FORMAT!r} expected)")
        required = {"id", "at", "family", "roofline", "technique", "ok"}
        rows = []
        for item in document.get("observations", []):
            if not isinstance(item, dict) or required - set(item):
                raise KnowledgeError(f"an observation lacks {sorted(required - set(item or {}))}")
            rows.append((str(item["id"]), float(item["at"]), str(item.get("problem", "")), str(item["family"]),
                         str(item["roofline"]), str(item["technique"]), int(bool(item["ok"])),
                         str(item.get("failure", "")), item.get("log_gain"), str(item.get("device", "")),
                         str(item.get("coder", "")), str(item.get("findings", "")), str(item.get("move", "")),
                         item.get("log_energy_gain"), str(item.get("objective") or "time")))
        before = self.count()
        with self.db:
            self.db.executemany(_INSERT.replace("INSERT", "INSERT OR IGNORE", 1), rows)
        return self.count() - before


_INSERT = ("INSERT INTO observations (id, at, problem, family, roofline, technique, ok, failure, log_gain, device, "
           "coder, findings, move, log_energy_gain, objective) VALUES (?,?,?,?,?,?,?,?,?,?,?,?,?,?,?)")


def _moments(total: float, squares: float, count: float) -> tuple[float, float]:
    """Mean and spread of `count` (weighted) values from their sum and sum of squares; (0, 0) without any."""
    if not count:
        return 0.0, 0.0
    mean = total / count
    return mean, math.sqrt(max(0.0, squares / count - mean * mean))


def state_for(problem_source: str, profile: dict) -> State:
    """The state of a node: the problem's family, and from its (or its nearest ancestor's) profile the
    roofline class and the top two suggested techniques."""
    roofline = profile.get("classification", "") if profile else ""
    roofline = roofline if roofline in ROOFLINE_CLASSES else ""
    findings = tuple(t["technique"] for t in (profile or {}).get("techniques", [])[:2])
    return State(operator_family(problem_source), roofline, findings)


def failure_kind(reason: str) -> str:
    """`compile_error: ...` -> `compile_error`."""
    match = re.match(r"\s*(\w+)", reason or "")
    return match.group(1) if match else ""


__all__ = ["KnowledgeBase", "KnowledgeError", "State", "TechniqueStats", "default_path", "operator_family",
           "state_for", "failure_kind"]
