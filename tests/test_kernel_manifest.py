"""The offline coder's candidates are byte-identical to the golden manifest (tests/data/kernel_manifest.json, written
by `python scripts/kernel_manifest.py write` before a refactor): every move, on both ranking devices. Three problems
that between them reach the generators run here; the whole manifest (the suite and the 30-problem KernelBench
subset, minutes of tracing for the level-3 networks) under `-m slow` and with `scripts/kernel_manifest.py check`."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
spec = importlib.util.spec_from_file_location("kernel_manifest", ROOT / "scripts" / "kernel_manifest.py")
manifest = importlib.util.module_from_spec(spec)
spec.loader.exec_module(manifest)

WRITTEN = json.loads(manifest.MANIFEST.read_text())
EXPECTED = WRITTEN["problems"]
#: rows and pointwise chains (Triton and CUDA C++), a GEMM with its epilogue (Triton and CuTe), a convolution with a
#: batch norm (Triton): every generator but the scans' builds on one of them (no problem of the manifest has a scan)
QUICK = ("suite/level2/5_GroupNormSilu", "suite/level2/9_GemmBiasGelu", "suite/level2/8_ConvBnRelu")


def check(key: str) -> None:
    import torch
    if torch.__version__ != WRITTEN["torch"]:
        pytest.skip(f"the manifest was written with torch {WRITTEN['torch']}; torch.fx's output differs across versions")
    path = manifest.problems(manifest.KERNELBENCH)[key]
    assert manifest.differences({key: EXPECTED[key]}, {key: manifest.fingerprint(path)}) == []


@pytest.mark.parametrize("key", QUICK)
def test_every_move_builds_the_candidate_of_the_manifest(key):
    check(key)


@pytest.mark.slow
@pytest.mark.parametrize("key", sorted(set(EXPECTED) - set(QUICK)))
def test_the_whole_manifest(key):
    check(key)


def test_the_manifest_covers_every_move_and_problem_and_a_change_is_named():
    keys = set(manifest.problems(manifest.KERNELBENCH))
    assert set(EXPECTED) == keys and len(keys) == 56
    from kernelpro.offline.moves import MOVES
    builds = {f"{move} {device}" for move in MOVES for device in manifest.DEVICES}
    assert all(set(prints) == builds for prints in EXPECTED.values())
    changed = {QUICK[0]: dict(EXPECTED[QUICK[0]], **{"fuse_reductions analytic": "0" * 16})}
    assert manifest.differences({QUICK[0]: EXPECTED[QUICK[0]]}, changed) == [
        f"{QUICK[0]}: fuse_reductions analytic: {EXPECTED[QUICK[0]]['fuse_reductions analytic']} -> {'0' * 16}"]
    assert manifest.differences(EXPECTED, changed)[0].endswith(": not built")  # a problem left out is named too
