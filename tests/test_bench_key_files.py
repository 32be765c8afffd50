"""Every key file under benchmarks/ (the --problems @FILE lists that docs and scripts name) lists problems that exist
in the suite it is for: ours (launch_rank_suite*) or ../shared/kernelbench (the others, skipped where it is absent),
so a renamed problem or a typo fails here rather than on the GPU machine."""

from __future__ import annotations

from pathlib import Path

import pytest

from kernelpro.bench.suite import discover, select

ROOT = Path(__file__).resolve().parents[1]
KERNELBENCH = ROOT.parent / "shared" / "kernelbench"
FILES = sorted((ROOT / "benchmarks").glob("*.txt"))


@pytest.mark.parametrize("path", FILES, ids=[p.name for p in FILES])
def test_a_key_file_lists_problems_of_its_suite(path):
    ours = path.name.startswith("launch_rank_suite")
    suite = ROOT / "benchmarks" / "suite" if ours else KERNELBENCH
    if not suite.is_dir():
        pytest.skip("../shared/kernelbench is absent")
    keys = [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.startswith("#")]
    chosen = select(discover(suite), problems=f"@{path}")
    assert keys and sorted(entry.key for entry in chosen) == sorted(set(keys))
