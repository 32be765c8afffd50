"""A bench's results in its output folder: one SQLite file, `bench.db`.

A problem's row moves pending -> running -> done (its search's run.json) or failed (the
search crashed or exited with an error; recorded, and the bench goes on). Each change is
one transaction, so after a kill the file says exactly which problems finished; `--resume`
runs the rest (a running one resumes its own search) and never reruns a finished one.
Baselines (eager and torch.compile times of each reference) are cached per problem
source, device and torch version.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

from kernelpro.runstore import DurableStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS problems (
    key TEXT PRIMARY KEY,
    path TEXT NOT NULL,
    level INTEGER,
    number INTEGER,
    name TEXT NOT NULL,
    status TEXT NOT NULL DEFAULT 'pending',
    worker TEXT NOT NULL DEFAULT '',
    started REAL,
    finished REAL,
    seconds REAL,
    result TEXT,
    error TEXT NOT NULL DEFAULT '',
    pid INTEGER
);
CREATE TABLE IF NOT EXISTS baselines (
    source_sha256 TEXT NOT NULL,
    device_name TEXT NOT NULL,
    torch_version TEXT NOT NULL,
    precision TEXT NOT NULL,
    eager_ms REAL NOT NULL,
    compile_ms REAL,
    measured REAL NOT NULL,
    PRIMARY KEY (source_sha256, device_name, torch_version, precision)
);
"""
FINISHED = ("done", "failed")


def source_sha256(path: Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


class BenchStore(DurableStore):
    filename = "bench.db"
    schema = SCHEMA

    def add(self, entries) -> None:
        """Register problems (those already known keep their state)."""
        with self.db:
            self.db.executemany("INSERT OR IGNORE INTO problems (key, path, level, number, name) VALUES (?,?,?,?,?)",
                                [(e.key, str(e.path), e.level, e.number, e.name) for e in entries])

    def start(self, key: str, worker: str) -> None:
        with self.db:
            self.db.execute("UPDATE problems SET status = 'running', worker = ?, started = ? WHERE key = ?",
                            (worker, time.time(), key))

    def set_pid(self, key: str, pid: int) -> None:
        with self.db:
            self.db.execute("UPDATE problems SET pid = ? WHERE key = ?", (pid, key))

    def finish(self, key: str, result: dict | None, error: str = "", since: float | None = None) -> None:
        """A problem's outcome; its seconds run to now from its start, or from `since` where that is later (in a bench
        on CUDA, when its search took the GPU's gate: its start-up and its wait while the problem before used the GPU
        are not its time)."""
        status = "done" if result is not None and not error else "failed"
        now = time.time()
        with self.db:
            self.db.execute("UPDATE problems SET status = ?, finished = ?, "
                            "seconds = MAX(0, ? - MAX(COALESCE(started, ?), ?)), result = ?, error = ? WHERE key = ?",
                            (status, now, now, now, since or 0.0,
                             json.dumps(result) if result is not None else None, error[-4000:], key))

    def reopen(self, keys: list[str]) -> None:
        """Finished problems to run again (a bench extended to a larger budget)."""
        with self.db:
            self.db.executemany("UPDATE problems SET status = 'pending' WHERE key = ?", [(k,) for k in keys])

    def rows(self) -> list[dict]:
        columns = ("key", "path", "level", "number", "name", "status", "worker", "started", "finished", "seconds",
                   "result", "error", "pid")
        rows = []
        for values in self.db.execute(f"SELECT {', '.join(columns)} FROM problems ORDER BY level, number, name"):
            row = dict(zip(columns, values))
            row["result"] = json.loads(row["result"]) if row["result"] else None
            rows.append(row)
        return rows

    # -- baselines -----------------------------------------------------------------------------
    def baseline(self, sha: str, device_name: str, torch_version: str, precision: str) -> dict | None:
        row = self.db.execute("SELECT eager_ms, compile_ms, measured FROM baselines WHERE source_sha256 = ? AND "
                              "device_name = ? AND torch_version = ? AND precision = ?",
                              (sha, device_name, torch_version, precision)).fetchone()
        return {"eager_ms": row[0], "compile_ms": row[1], "measured": row[2]} if row else None

    def any_baseline(self, sha: str, precision: str) -> dict | None:
        """The latest baseline of this source at this precision on any device (for scheduling only)."""
        row = self.db.execute("SELECT eager_ms, compile_ms FROM baselines WHERE source_sha256 = ? AND precision = ? "
                              "ORDER BY measured DESC LIMIT 1", (sha, precision)).fetchone()
        return {"eager_ms": row[0], "compile_ms": row[1]} if row else None

    def put_baseline(self, sha: str, device_name: str, torch_version: str, precision: str, eager_ms: float,
                     compile_ms: float | None) -> None:
        with self.db:
            self.db.execute("INSERT OR REPLACE INTO baselines VALUES (?,?,?,?,?,?,?)",
                            (sha, device_name, torch_version, precision, eager_ms, compile_ms, time.time()))
