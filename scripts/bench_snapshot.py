"""Packs a bench folder (or a KB ablation's) into a .tgz that a resumed run can go on from, while it runs.

    python3 scripts/bench_snapshot.py BENCH_DIR OUT.tgz [--kb KB_FILE]

Each SQLite file (*.db and *.sqlite: bench.db, every problem's state.db, knowledge bases) is
copied with SQLite's online backup (kernelpro.runstore.copy_database), so the copy is a
committed state even when a search writes to it at that moment; WAL and shared-memory files
are left out. Other files are copied as they are.
The knowledge base, when given, goes in as `_knowledge.db` (scripts/gpu_check.sh puts it
back). OUT.tgz is replaced in one rename, so a reader never sees half an archive.
"""

from __future__ import annotations

import argparse
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

from kernelpro.runstore import copy_database


def snapshot(bench: Path, out: Path, kb: Path | None = None) -> int:
    """Writes out; returns how many files it holds."""
    count = 0
    with tempfile.TemporaryDirectory() as staging:
        root = Path(staging) / "bench"
        for path in sorted(bench.rglob("*")):
            if not path.is_file() or path.name.endswith(("-wal", "-shm", "-journal")) or path.name == "_knowledge.db":
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
    args = parser.parse_args()
    if not args.bench.is_dir():
        raise SystemExit(f"{args.bench} is not a folder")
    count = snapshot(args.bench, args.out, args.kb)
    print(f"{args.out}: {count} files, {args.out.stat().st_size / 1e6:.2f} MB")


if __name__ == "__main__":
    main()
