"""Packs a bench folder (or a KB ablation's) into a .tgz that a resumed run can go on from, while it runs.

    python3 scripts/bench_snapshot.py BENCH_DIR OUT.tgz [--kb KB_FILE] [--results-only]

`--results-only` packs what the bench measured and none of the problems' code, so that a KernelBench
bench's state can be committed (KernelBench's problems must not be) and resumed later on a
fresh machine: bench.db, with every problem not finished set back to pending; each finished problem's
run.json, tree.json (failure texts, which may quote code, left out) and launch_configs.jsonl; the
leaderboards. Left out: problem copies, candidates, best.py, reports, state.db (candidate sources) and
logs. A bench resumed from it runs only the problems it had not finished, each from the start;
re-measuring or extending its finished searches needs their full state, which it does not hold.

Each SQLite file (*.db and *.sqlite: bench.db, every problem's state.db, knowledge bases) is
copied with SQLite's online backup (kernelpro.runstore.copy_database), so the copy is a
committed state even when a search writes to it at that moment; WAL and shared-memory files
are left out. Other files are copied as they are.
The knowledge base, when given, goes in as `_knowledge.db` (scripts/gpu_check.sh puts it
back). OUT.tgz is replaced in one rename, so a reader never sees half an archive.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from kernelpro.runstore import copy_database


RESULT_FILES = ("run.json", "tree.json", "launch_configs.jsonl")


def _results_only(bench: Path, path: Path) -> bool:
    """Whether a results-only snapshot keeps this file: bench.db, the leaderboards, and the result files of
    a finished problem's folder (problems/<level>/<name>/)."""
    relative = path.relative_to(bench)
    if len(relative.parts) == 1:
        return path.name == "bench.db" or path.name.startswith("leaderboard")
    return relative.parts[0] == "problems" and len(relative.parts) == 4 and path.name in RESULT_FILES


def _finished_only(database: Path) -> set[str]:
    """Sets the copy's unfinished problems back to pending; the keys of the finished ones."""
    import sqlite3
    db = sqlite3.connect(database)
    try:
        with db:
            db.execute("UPDATE problems SET status = 'pending', worker = '', pid = NULL, started = NULL "
                       "WHERE status NOT IN ('done', 'failed')")
        finished = {key for (key,) in db.execute("SELECT key FROM problems WHERE status IN ('done', 'failed')")}
        db.execute("PRAGMA journal_mode=DELETE")  # one file again: no -wal beside it in the archive
        return finished
    finally:
        db.close()


def _scrubbed_tree(text: str) -> str:
    tree = json.loads(text)
    for node in tree.get("nodes", []):
        if node.get("failure"):
            node["failure"] = "(left out of a results-only snapshot)"
    return json.dumps(tree)


def snapshot(bench: Path, out: Path, kb: Path | None = None, results_only: bool = False) -> int:
    """Writes out; returns how many files it holds."""
    count = 0
    with tempfile.TemporaryDirectory() as staging:
        root = Path(staging) / "bench"
        finished: set[str] | None = None
        if results_only and (bench / "bench.db").exists():
            copy_database(bench / "bench.db", root / "bench.db")
            finished = _finished_only(root / "bench.db")
            count += 1
        for path in sorted(bench.rglob("*")):
            if not path.is_file() or path.name.endswith(("-wal", "-shm", "-journal")) or path.name == "_knowledge.db":
                continue
            if results_only:
                relative = path.relative_to(bench)
                if path.name == "bench.db" or not _results_only(bench, path) or (
                        relative.parts[0] == "problems" and "/".join(relative.parts[1:3]) not in (finished or set())):
                    continue
                target = root / relative
                target.parent.mkdir(parents=True, exist_ok=True)
                text = path.read_text()
                target.write_text(_scrubbed_tree(text) if path.name == "tree.json" else text)
                count += 1
                continue
            target = root / path.relative_to(bench)
            if path.suffix in (".db", ".sqlite"):
                copy_database(path, target)
            else:
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(path, target)
            count += 1
        if kb is not None and kb.exists():
            copy_database(kb, root / "_knowledge.db")
            count += 1
        partial = out.with_name(out.name + ".partial")
        with tarfile.open(partial, "w:gz") as tar:
            for path in sorted(root.rglob("*")):
                tar.add(path, arcname=str(Path(".") / path.relative_to(root)), recursive=False)
        os.replace(partial, out)
    return count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("bench", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--kb", type=Path, default=None)
    parser.add_argument("--results-only", action="store_true",
                        help="what the bench measured, none of the problems' code (see above)")
    args = parser.parse_args()
    if not args.bench.is_dir():
        raise SystemExit(f"{args.bench} is not a folder")
    if args.results_only and args.kb is not None:
        raise SystemExit("--results-only leaves the knowledge base out (its entries name the problems' moves only, "
                         "but it travels with the full snapshot): give one of --kb and --results-only")
    count = snapshot(args.bench, args.out, args.kb, args.results_only)
    print(f"{args.out}: {count} files, {args.out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
