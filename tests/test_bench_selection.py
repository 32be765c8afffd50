"""A bench resumed from another folder (or machine): its selection given as a file (`--problems @FILE`) is recorded
as the keys the file names, the same file by another path is the same selection, and the suite folder is the one
the resuming command names."""

from __future__ import annotations

import json
import shutil
import sqlite3
from pathlib import Path

import pytest

from kernelpro.bench import Bench, BenchError, BenchSettings
from kernelpro.bench.suite import SuiteError, pinned

ROOT = Path(__file__).resolve().parents[1]
SUITE = ROOT / "tests" / "data" / "bench_suite"
FAST = dict(budget=2, profile=False, device="cpu", use_kb=False)
KEYS = ["level1/2_ScaledSum", "level2/1_LinearScale"]


def _recorded(out: Path) -> dict:
    row = sqlite3.connect(out / "bench.db").execute("SELECT value FROM meta WHERE key = 'settings'").fetchone()
    return json.loads(row[0])


def test_a_file_of_keys_is_pinned_to_its_keys(tmp_path):
    listed = tmp_path / "keys.txt"
    listed.write_text("# two problems\nlevel2/1_LinearScale\nlevel1/2_ScaledSum  # a comment\n")
    assert pinned(f"@{listed}") == "level1/2_ScaledSum,level2/1_LinearScale"
    assert pinned("1-2") == "1-2" and pinned("level1/2_ScaledSum") == "level1/2_ScaledSum" and pinned("") == ""
    (tmp_path / "empty.txt").write_text("# nothing\n")
    assert pinned(f"@{tmp_path / 'empty.txt'}") == f"@{tmp_path / 'empty.txt'}"  # select refuses it
    with pytest.raises(SuiteError, match="cannot read"):
        pinned(f"@{tmp_path / 'missing.txt'}")


def test_a_bench_started_from_a_relative_file_resumes_from_another_folder(tmp_path, monkeypatch):
    """The bench records the file's keys; resumed elsewhere it reads no file, takes the same file by its absolute
    path as the same selection, and refuses a file that selects other problems, naming --problems."""
    started, elsewhere = tmp_path / "started", tmp_path / "elsewhere"
    started.mkdir(), elsewhere.mkdir()
    (started / "keys.txt").write_text("\n".join(KEYS) + "\n")
    out = tmp_path / "bench"
    monkeypatch.chdir(started)
    Bench(BenchSettings(suite=str(SUITE), out=str(out), problems="@keys.txt", **FAST))  # recorded, nothing run
    assert _recorded(out)["problems"] == ",".join(KEYS)

    monkeypatch.chdir(elsewhere)  # no keys.txt here
    resumed = Bench(BenchSettings(suite=str(SUITE), out=str(out), **FAST), resume=True, given=frozenset())
    assert [entry.key for entry in resumed.entries] == KEYS
    again = Bench(BenchSettings(suite=str(SUITE), out=str(out), problems=f"@{started / 'keys.txt'}", **FAST),
                  resume=True, given=frozenset({"problems"}))
    assert [entry.key for entry in again.entries] == KEYS
    (elsewhere / "other.txt").write_text("level1/1_DoubleNegation\n")
    with pytest.raises(BenchError, match=r"--problems '@other.txt' \(the bench has "):
        Bench(BenchSettings(suite=str(SUITE), out=str(out), problems="@other.txt", **FAST), resume=True,
              given=frozenset({"problems"}))
    shutil.copytree(SUITE, elsewhere / "partial")  # without one of the recorded keys: named as missing
    (elsewhere / "partial" / "level2" / "1_LinearScale.py").unlink()
    with pytest.raises(BenchError, match=r"lacks 1 of the bench's problems \(level2/1_LinearScale\)"):
        Bench(BenchSettings(suite="partial", out=str(out), **FAST), resume=True, given=frozenset())


def test_a_bench_that_recorded_the_file_path_resumes_with_the_keys_it_recorded(tmp_path, monkeypatch):
    """A bench recorded before selections were pinned holds '@FILE', a path from where it started: resumed where
    that file is not, it goes on with the problems it registered."""
    out = tmp_path / "bench"
    monkeypatch.chdir(tmp_path)
    Path("keys.txt").write_text("\n".join(KEYS) + "\n")
    Bench(BenchSettings(suite=str(SUITE), out=str(out), problems="@keys.txt", **FAST))
    db = sqlite3.connect(out / "bench.db")
    with db:
        db.execute("UPDATE meta SET value = ? WHERE key = 'settings'",
                   (json.dumps(_recorded(out) | {"problems": "@keys.txt"}),))
    Path("keys.txt").unlink()
    resumed = Bench(BenchSettings(suite=str(SUITE), out=str(out), **FAST), resume=True, given=frozenset())
    assert [entry.key for entry in resumed.entries] == KEYS
    assert _recorded(out)["problems"] == ",".join(KEYS)


def test_the_suite_is_the_one_the_resuming_command_names(tmp_path, monkeypatch):
    """A suite given by a relative path is found again by the path the resuming command gives; a suite that lacks
    some of the bench's problems is refused, naming them, before anything is recorded."""
    started, elsewhere = tmp_path / "started", tmp_path / "elsewhere"
    started.mkdir(), elsewhere.mkdir()
    shutil.copytree(SUITE, started / "suite")
    out = tmp_path / "bench"
    monkeypatch.chdir(started)
    Bench(BenchSettings(suite="suite", out=str(out), levels="1", **FAST))
    monkeypatch.chdir(elsewhere)  # "suite" names nothing here
    resumed = Bench(BenchSettings(suite=str(started / "suite"), out=str(out), **FAST), resume=True,
                    given=frozenset())
    assert [entry.key for entry in resumed.entries] == ["level1/1_DoubleNegation", "level1/2_ScaledSum"]
    assert _recorded(out)["suite"] == str(started / "suite")
    shutil.copytree(SUITE, elsewhere / "partial")
    (elsewhere / "partial" / "level1" / "2_ScaledSum.py").unlink()
    with pytest.raises(BenchError, match=r"partial lacks 1 of the bench's problems \(level1/2_ScaledSum\)"):
        Bench(BenchSettings(suite="partial", out=str(out), **FAST), resume=True, given=frozenset())
    assert _recorded(out)["suite"] == str(started / "suite")
