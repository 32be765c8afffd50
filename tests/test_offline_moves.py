"""`--moves`: a search (or every search of a bench) limited to some of the offline coder's moves, e.g.
`triton_gemm,tune` to compare launch rankings on a kernel's generation and tuning alone (issue 35)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kernelpro.offline import OfflineCoder, OfflineCoderError, allowed_moves
from conftest import in_process
from test_offline import request

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "tests" / "data" / "search"


def test_allowed_moves_are_named_moves_and_tune():
    assert allowed_moves("") is None and allowed_moves(" , ") is None
    assert allowed_moves("triton_gemm, tune") == {"triton_gemm", "tune"}
    with pytest.raises(OfflineCoderError, match="no offline move named bogus") as raised:
        allowed_moves("triton_gemm,bogus")
    assert "tune (the tune:<kernel> moves)" in str(raised.value) and "triton_gemm" in str(raised.value)


def test_the_offline_coder_proposes_only_the_moves_allowed():
    problem = DATA / "redundant.py"
    everyone = OfflineCoder()
    try:
        free = everyone.propose(request(problem))
        options = [o["move"] for o in everyone.options(request(problem))["options"]]
    finally:
        everyone.close()
    assert len(options) >= 2 and free.move in options
    other = next(move for move in options if move != free.move)
    limited = OfflineCoder(moves=other)
    try:
        first = limited.propose(request(problem))
        assert first.move == other
        # once it is tried, nothing else is offered at the root, whatever else applies there
        assert limited.propose(request(problem, tried=((other, "1.1x"),))) is None
        assert limited.why_no_moves() == ""  # it offered a move
    finally:
        limited.close()
    nothing = OfflineCoder(moves="tune")  # no generated kernel at the root: no tune: move applies
    try:
        assert nothing.propose(request(problem)) is None
        assert nothing.why_no_moves() == "none of the moves allowed (--moves tune) applies here"
    finally:
        nothing.close()


def test_moves_reach_each_search_of_a_bench_and_are_refused_for_the_llm_coder(tmp_path):
    from typer.testing import CliRunner
    from kernelpro.bench.runner import Bench
    from kernelpro.cli import app
    from kernelpro.settings import BenchSettings
    suite = ROOT / "tests" / "data" / "bench_suite"
    bench = Bench(BenchSettings(suite=str(suite), out=str(tmp_path / "b"), budget=1, moves="triton_gemm,tune"))
    assert bench.settings.search_for("p.py", "p").moves == "triton_gemm,tune"
    plain = Bench(BenchSettings(suite=str(suite), out=str(tmp_path / "c"), budget=1))
    assert plain.settings.search_for("p.py", "p").moves == ""
    runner = CliRunner()
    refused = runner.invoke(app, ["bench", str(suite), "--coder", "anthropic", "--moves", "tune", "--out",
                                  str(tmp_path / "d")])
    assert refused.exit_code == 2 and "--moves" in refused.output
    unknown = runner.invoke(app, ["bench", str(suite), "--coder", "offline", "--moves", "bogus", "--out",
                                  str(tmp_path / "e")])
    assert unknown.exit_code != 0 and "no offline move named bogus" in str(unknown.exception)
    assert not (tmp_path / "d").exists() and not (tmp_path / "e").exists()


def test_a_search_limited_to_some_moves_records_them_and_uses_no_other(tmp_path, monkeypatch, capsys):
    # `kernelpro search` through main() in this process (its candidates run in the sandbox's workers as always)
    problem = DATA / "redundant.py"
    allowed = ["transposed_matmuls", "simplify_all"]
    out = tmp_path / "run"
    done = in_process(capsys, "search", problem, "--device", "cpu", "--coder", "offline", "--budget", "4", "--no-kb",
                      "--no-profile", "--moves", ",".join(allowed), "--out", out, "--json")
    assert done.returncode == 0, done.stderr[-2000:]
    run = json.loads((out / "run.json").read_text())
    assert run["moves"] == ",".join(allowed)
    tree = json.loads((out / "tree.json").read_text())["nodes"]
    tried = {node["move"] for node in tree if node["move"] != "reference"}
    assert tried and tried <= set(allowed), tried
    monkeypatch.setenv("ANTHROPIC_API_KEY", "x")
    llm = in_process(capsys, "search", problem, "--device", "cpu", "--coder", "anthropic", "--moves", "tune", "--out",
                     tmp_path / "llm")
    assert llm.returncode != 0 and "--moves limits the offline coder's moves" in llm.stderr
