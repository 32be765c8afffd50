"""The launch-configuration dataset: one SQLite file, a row per (kernel instance, configuration) measured.

An instance is one kernel on one device: its family (`triton_row`, `triton_gemm`, ...), the generator's
record of it (features), and the device. Each row adds one configuration of it (its launch keys, the
analytic score and rank it had), the measured time, where it came from (`sweep`: `kernelpro launch
collect`; `search`: a search's launch_configs.jsonl), and static and dynamic features where recorded.
A row is committed as it is measured, so a killed collection resumes where it stopped.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from kernelpro.runstore import DurableStore

SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS measured (
    instance TEXT NOT NULL,
    family TEXT NOT NULL,
    device TEXT NOT NULL,
    features TEXT NOT NULL,
    config TEXT NOT NULL,
    score REAL NOT NULL,
    rank INTEGER NOT NULL,
    time_ms REAL NOT NULL,
    source TEXT NOT NULL,
    static TEXT NOT NULL DEFAULT '{}',
    dynamic TEXT NOT NULL DEFAULT '{}',
    sms INTEGER NOT NULL,
    PRIMARY KEY (instance, config)
);
"""


def canonical(config: dict) -> str:
    """A configuration as a stable string (its launch keys; the analytic score left out)."""
    return json.dumps({k: v for k, v in sorted(config.items()) if k != "score"}, sort_keys=True)


def instance_id(family: str, device: str, features: dict) -> str:
    return hashlib.sha256(json.dumps([family, device, features], sort_keys=True).encode()).hexdigest()[:20]


@dataclass
class Instance:
    """One kernel on one device with every configuration measured for it."""
    instance: str
    family: str
    device: str
    sms: int
    features: dict
    configs: list[dict] = field(default_factory=list)  # each with "score"
    ranks: list[int] = field(default_factory=list)
    times: list[float] = field(default_factory=list)
    static: list[dict] = field(default_factory=list)
    dynamic: dict = field(default_factory=dict)  # the kernel's, one profile shared by its rows (launch.dynamic)

    @property
    def best(self) -> int:
        return min(range(len(self.times)), key=self.times.__getitem__)


class LaunchStore(DurableStore):
    filename = "launch.db"
    schema = SCHEMA

    def __init__(self, path: Path):
        path = Path(path)
        if path.suffix == ".db":  # a file named as the user wants it
            self.filename = path.name
            path = path.parent
        super().__init__(path)

    def add(self, family: str, device: str, sms: int, features: dict, config: dict, rank: int, time_ms: float,
            source: str, static: dict | None = None, dynamic: dict | None = None) -> bool:
        """Records one measurement; False when that configuration of that instance was already there."""
        instance = instance_id(family, device, features)
        with self.db:
            cursor = self.db.execute(
                "INSERT OR IGNORE INTO measured VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (instance, family, device, json.dumps(features, sort_keys=True), canonical(config),
                 float(config.get("score", 0.0)), rank, time_ms, source, json.dumps(static or {}),
                 json.dumps(dynamic or {}), sms))
        return cursor.rowcount == 1

    def has(self, family: str, device: str, features: dict, config: dict) -> bool:
        instance = instance_id(family, device, features)
        row = self.db.execute("SELECT 1 FROM measured WHERE instance = ? AND config = ?",
                              (instance, canonical(config))).fetchone()
        return row is not None

    def instances(self, family: str | None = None, device: str | None = None, least: int = 2) -> list[Instance]:
        """Every instance with at least `least` configurations measured, its configurations in rank order."""
        query, args = ("SELECT instance, family, device, sms, features, config, score, rank, time_ms, static, "
                       "dynamic FROM measured"), []
        where = [(f"{name} = ?", value) for name, value in (("family", family), ("device", device)) if value]
        if where:
            query += " WHERE " + " AND ".join(w for w, _ in where)
            args = [v for _, v in where]
        found: dict[str, Instance] = {}
        for key, fam, dev, sms, features, config, score, rank, time_ms, static, dynamic in self.db.execute(
                query + " ORDER BY instance, rank", args):
            item = found.setdefault(key, Instance(key, fam, dev, sms, json.loads(features)))
            item.configs.append(dict(json.loads(config), score=score))
            item.ranks.append(rank)
            item.times.append(time_ms)
            item.static.append(json.loads(static))
            item.dynamic = item.dynamic or json.loads(dynamic)
        return [i for i in found.values() if len(i.times) >= least]

    def dynamic_of(self, family: str, device: str, features: dict) -> dict:
        """The instance's dynamic features where one of its rows has them, else {}."""
        row = self.db.execute("SELECT dynamic FROM measured WHERE instance = ? AND dynamic != '{}' LIMIT 1",
                              (instance_id(family, device, features),)).fetchone()
        return json.loads(row[0]) if row else {}

    def set_dynamic(self, family: str, device: str, features: dict, dynamic: dict) -> int:
        """Gives every row of the instance its dynamic features (a profile added after its sweep); rows changed."""
        with self.db:
            cursor = self.db.execute("UPDATE measured SET dynamic = ? WHERE instance = ?",
                                     (json.dumps(dynamic, sort_keys=True), instance_id(family, device, features)))
        return cursor.rowcount

    def timing_protocol(self) -> str | None:
        """How this dataset's sweeps were timed (`kernelpro.launch.timing.PROTOCOL`); "sequential-v1" for
        sweeps collected before the protocol was recorded (one candidate after another); None when empty."""
        stored = self.get("timing_protocol")
        if stored is None and self.db.execute("SELECT 1 FROM measured WHERE source = 'sweep' LIMIT 1").fetchone():
            return "sequential-v1"
        return stored

    def instance_ids(self) -> list[str]:
        return [row[0] for row in self.db.execute("SELECT DISTINCT instance FROM measured ORDER BY instance")]

    def drop(self, instances: list[str]) -> int:
        """Removes every row of the instances named (each a full id or a prefix of one); the rows removed. A name
        that matches no instance, or several, is an error, and then nothing is removed."""
        known = self.instance_ids()
        chosen = []
        for name in instances:
            matches = [key for key in known if key.startswith(name)]
            if len(matches) != 1:
                raise ValueError(f"instance {name!r} matches {len(matches)} instances of {self.path}, not one")
            chosen.append(matches[0])
        with self.db:
            return sum(self.db.execute("DELETE FROM measured WHERE instance = ?", (key,)).rowcount for key in chosen)

    def join(self, other: "LaunchStore") -> tuple[int, int]:
        """Adds another dataset's rows: every instance this one lacks, whole (an instance both hold keeps this
        one's rows, so one kernel's times never mix two collections). Both must be timed with one protocol
        (an empty store takes the other's). (rows added, instances skipped because both held them)."""
        mine, theirs = self.timing_protocol(), other.timing_protocol()
        if mine and theirs and mine != theirs:
            raise ValueError(f"{other.path} was timed with {theirs!r}, {self.path} with {mine!r}: their times do "
                             "not compare")
        held = set(self.instance_ids())
        columns = ("instance, family, device, features, config, score, rank, time_ms, source, static, dynamic, "
                   "sms")  # by name, in case a file's columns lie in another order
        rows = other.db.execute(f"SELECT {columns} FROM measured").fetchall()
        skipped = {row[0] for row in rows if row[0] in held}
        with self.db:
            added = sum(self.db.execute(f"INSERT OR IGNORE INTO measured ({columns}) VALUES ({', '.join('?' * 12)})",
                                        row).rowcount for row in rows if row[0] not in held)
        if theirs and not mine:
            self.put("timing_protocol", theirs)
        return added, len(skipped)

    def summary(self) -> dict:
        rows = self.db.execute("SELECT family, device, source, COUNT(*), COUNT(DISTINCT instance) FROM measured "
                               "GROUP BY family, device, source ORDER BY family, device, source").fetchall()
        return {"path": str(self.path), "groups": [{"family": f, "device": d, "source": s, "rows": n, "instances": i}
                                                   for f, d, s, n, i in rows]}


NOT_A_DATASET = "not a dataset (a launch .db, a .tgz holding launch.db, or a folder holding one)"


def _is_collection(path: Path) -> bool:
    return path.is_dir() and (path / LaunchStore.filename).is_file()


def _is_dataset(path: Path) -> bool:
    """A collection's folder, or a file open_dataset reads (a .db, or a .tgz/.gz holding one)."""
    return _is_collection(path) or (path.is_file() and path.suffix in (".db", ".tgz", ".gz"))


def dataset_path(text: str) -> Path:
    """`text` as a dataset's path, for a script's command line (argparse's `type`): a one-line error, not a
    traceback, where nothing there can be a dataset."""
    import argparse
    path = Path(text)
    if _is_dataset(path):
        return path
    raise argparse.ArgumentTypeError(f"{path}: {'no such file' if not path.exists() else NOT_A_DATASET}")


def open_dataset(path: Path, folder: Path) -> LaunchStore:
    """A dataset: a launch .db, a folder holding launch.db, or a .tgz holding one (gpu_check.sh's launch_state.tgz, the
    committed datasets), unpacked into a fresh folder under `folder`. ValueError for anything else."""
    import tarfile
    import tempfile
    path = Path(path)
    if _is_collection(path):
        return LaunchStore(path)
    if not _is_dataset(path):
        raise ValueError(f"{path}: {NOT_A_DATASET}")
    if path.suffix in (".tgz", ".gz"):
        unpacked = Path(tempfile.mkdtemp(dir=folder))
        try:
            with tarfile.open(path) as archive:
                archive.extract("launch.db", unpacked, filter="data")
        except (KeyError, tarfile.TarError) as error:
            raise ValueError(f"{path}: no launch.db in it ({error})") from error
        path = unpacked / "launch.db"
    return LaunchStore(path)


def import_jsonl(store: LaunchStore, path: Path, sms: int) -> tuple[int, int]:
    """A search's launch_configs.jsonl into the store: the candidates with exactly one generated kernel, whose
    measured time is that kernel's configuration's (with the rest of the forward). (rows added, lines skipped)."""
    from kernelpro.launch.features import family
    added = skipped = 0
    for line in Path(path).read_text().splitlines():
        entry = json.loads(line) if line.strip() else {}
        kernels = entry.get("kernels") or []
        if entry.get("verdict") != "correct" or len(kernels) != 1 or not entry.get("median_ms"):
            skipped += 1
            continue
        kernel = kernels[0]
        config = dict(kernel["config"])
        added += store.add(family(kernel["features"], kernel.get("backend", "")), entry.get("device_name") or "unknown",
                           sms, kernel["features"], config, int(kernel.get("rank", 0)), float(entry["median_ms"]),
                           "search")
    return added, skipped
