"""A search run's state in its output folder: one SQLite file, `state.db`.

Each evaluation is committed in one transaction together with the search tree, so
after a kill -9 the folder holds every finished evaluation and the tree that
knows of them, and nothing else: `--resume` continues from there and never
evaluates a candidate twice. Candidate sources live beside it in `candidates/`.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
import threading
import time
from pathlib import Path

from kernelpro.errors import KernelproError

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    node_id INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    verdict TEXT NOT NULL,
    ratio REAL,
    move TEXT NOT NULL,
    techniques TEXT NOT NULL,
    rationale TEXT NOT NULL,
    source_file TEXT NOT NULL,
    result TEXT NOT NULL,
    finished_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS profiles (node_id INTEGER PRIMARY KEY, document TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS search (id INTEGER PRIMARY KEY CHECK (id = 1), state TEXT NOT NULL);
"""


class _Rows(list):
    """A statement's rows, read in full while the connection's lock was held, with its cursor's counts."""

    rowcount, lastrowid = -1, None

    def fetchone(self):
        return self[0] if self else None

    def fetchall(self) -> list:
        return list(self)


class SerializedConnection:
    """A SQLite connection that threads share: each statement, and each transaction (`with`), holds one lock, and a
    statement's rows are read before it is let go. Python's connection is not safe to use from two threads at once:
    a bench's two lanes of one GPU starting problems together failed with "bad parameter or other API misuse"."""

    def __init__(self, connection: sqlite3.Connection):
        self._connection, self._lock = connection, threading.RLock()

    @classmethod
    def open(cls, database: str | Path, uri: bool = False) -> "SerializedConnection":
        """A connection to `database` for any thread, in autocommit mode (transactions are explicit: `BEGIN` or
        `with`), waiting up to 30 s for another process's lock."""
        return cls(sqlite3.connect(database, uri=uri, check_same_thread=False, isolation_level=None, timeout=30))

    def execute(self, sql: str, parameters=()) -> _Rows:
        with self._lock:
            cursor = self._connection.execute(sql, parameters)
            rows = _Rows(cursor.fetchall())
            rows.rowcount, rows.lastrowid = cursor.rowcount, cursor.lastrowid
            return rows

    def executemany(self, sql: str, rows) -> _Rows:
        with self._lock:
            cursor = self._connection.executemany(sql, rows)
            done = _Rows()
            done.rowcount = cursor.rowcount
            return done

    def executescript(self, script: str) -> None:
        with self._lock:
            self._connection.executescript(script)

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def __enter__(self) -> "SerializedConnection":
        self._lock.acquire()
        try:
            self._connection.__enter__()
        except BaseException:
            self._lock.release()
            raise
        return self

    def __exit__(self, *exc) -> bool:
        try:
            return bool(self._connection.__exit__(*exc))
        finally:
            self._lock.release()


class DurableStore:
    """One SQLite file in a folder (WAL, fsync on commit) with a JSON key-value `meta` table:
    what the run's store and the bench's store (kernelpro.bench.store) are built on."""

    filename = "state.db"
    schema = SCHEMA  # must create `meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)`

    def __init__(self, folder: Path):
        self.folder = Path(folder)
        self.folder.mkdir(parents=True, exist_ok=True)
        self.path = self.folder / self.filename
        self.db = SerializedConnection.open(self.path)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(self.schema)
        self._held = None  # the open file whose lock holds the folder (hold)

    def close(self) -> None:
        self.release()
        self.db.close()

    def hold(self) -> bool:
        """Take the folder for this process (an exclusive lock on the SQLite file, which SQLite's own
        byte-range locks do not touch): False when another process holds it. The lock ends with the
        process, however it ends."""
        import fcntl
        if self._held is not None:
            return True
        handle = open(self.path, "rb")
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            handle.close()
            return False
        self._held = handle
        return True

    def release(self) -> None:
        held, self._held = self._held, None
        if held is not None:
            held.close()

    def get(self, key: str, default=None):
        row = self.db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return json.loads(row[0]) if row else default

    def put(self, key: str, value) -> None:
        self.db.execute("INSERT OR REPLACE INTO meta (key, value) VALUES (?, ?)", (key, json.dumps(value)))


class RunStore(DurableStore):

    # -- evaluations ------------------------------------------------------------------------
    def record(self, evaluation: dict, search_state: dict) -> None:
        """One evaluation and the tree after telling it, atomically."""
        with self.db:
            self.db.execute("BEGIN IMMEDIATE")
            self.db.execute(
                "INSERT INTO evaluations (node_id, sha256, verdict, ratio, move, techniques, rationale, source_file,"
                " result, finished_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (evaluation["node_id"], evaluation["sha256"], evaluation["verdict"], evaluation.get("ratio"),
                 evaluation["move"], json.dumps(evaluation["techniques"]), evaluation["rationale"],
                 evaluation["source_file"], json.dumps(evaluation["result"]), time.time()))
            self.db.execute("INSERT OR REPLACE INTO search (id, state) VALUES (1, ?)", (json.dumps(search_state),))

    def save_search(self, search_state: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO search (id, state) VALUES (1, ?)", (json.dumps(search_state),))

    def search_state(self) -> dict | None:
        row = self.db.execute("SELECT state FROM search WHERE id = 1").fetchone()
        return json.loads(row[0]) if row else None

    def evaluations(self) -> list[dict]:
        rows = self.db.execute("SELECT seq, node_id, sha256, verdict, ratio, move, techniques, rationale, "
                               "source_file, result, finished_at FROM evaluations ORDER BY seq").fetchall()
        return [{"seq": r[0], "node_id": r[1], "sha256": r[2], "verdict": r[3], "ratio": r[4], "move": r[5],
                 "techniques": json.loads(r[6]), "rationale": r[7], "source_file": r[8],
                 "result": json.loads(r[9]), "finished_at": r[10]} for r in rows]

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]

    # -- profiles ----------------------------------------------------------------------------
    def put_profile(self, node_id: int, document: dict) -> None:
        self.db.execute("INSERT OR REPLACE INTO profiles (node_id, document) VALUES (?, ?)",
                        (node_id, json.dumps(document)))

    def profiles(self) -> dict[int, dict]:
        return {r[0]: json.loads(r[1]) for r in self.db.execute("SELECT node_id, document FROM profiles")}


def write_atomic(path: Path, text: str) -> None:
    """Write a file so a reader (or a kill) never sees half of it."""
    path = Path(path)
    temporary = path.with_name(path.name + ".tmp")
    temporary.write_text(text)
    temporary.replace(path)


def copy_database(source: Path, target: Path) -> None:
    """A committed copy of a SQLite file, also one in WAL mode that another process is writing (a
    plain file copy could miss the pages still in its log): SQLite's online backup, read-only."""
    Path(target).parent.mkdir(parents=True, exist_ok=True)
    src = sqlite3.connect(f"file:{source}?mode=ro", uri=True, timeout=30)
    dst = sqlite3.connect(target)
    try:
        src.backup(dst)
    finally:
        dst.close()
        src.close()


def clear_output_folder(out: Path, markers: tuple[str, ...], what: str) -> bool:
    """--force: remove `out` so a run starts over there. Only a folder that holds one of `markers`
    (what a kernelpro run writes first) or nothing at all is removed: a mistyped --out never takes a
    folder of other files with it. Returns whether something was removed; raises KernelproError else."""
    out = Path(out)
    if not out.exists():
        return False
    if not out.is_dir():
        raise KernelproError(f"--force: {out} is a file, not a {what} folder; not removing it")
    if any(out.iterdir()) and not any((out / marker).exists() for marker in markers):
        raise KernelproError(f"--force: {out} does not hold a {what} (no {' or '.join(markers)}); not removing it")
    shutil.rmtree(out)
    return True
