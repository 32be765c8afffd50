"""The knowledge base (kernelpro.knowledge): migrations, statistics, priors, sharing, the CLI, the search.

Real SQLite files, the real CLI and the real search loop (on the fake harness of
test_search, so outcomes are known): nothing mocked.
"""

from __future__ import annotations

import json
import math
import sqlite3
from pathlib import Path

import pytest

from kernelpro.cli import main
from kernelpro.driver import SearchRun
from kernelpro.settings import SearchSettings
from kernelpro.knowledge import (MIGRATIONS, KnowledgeBase, KnowledgeError, State, default_path, operator_family,
                                 state_for)
from test_search import DATA, FakeHarness, ScriptedCoder

ROOT = Path(__file__).resolve().parent.parent
GEMM_MEMORY = State("gemm", "memory_bound", ("fuse_epilogue", "vectorize_memory"))


def fill(base: KnowledgeBase) -> None:
    for gain in (0.2, 0.3, 0.25):  # fuse_epilogue keeps working on memory-bound GEMMs
        base.record(GEMM_MEMORY, ["fuse_epilogue"], ok=True, log_gain=gain, problem="p", device="d", coder="c")
    for _ in range(4):  # cuda_graphs keeps failing there
        base.record(GEMM_MEMORY, ["cuda_graphs"], ok=False, log_gain=None, failure="runtime_error", problem="p")
    base.record(State("conv", "compute_bound"), ["fuse_epilogue"], ok=False, log_gain=None, failure="incorrect")


def test_a_base_of_an_older_schema_is_migrated_in_order_keeping_its_rows(tmp_path):
    path = tmp_path / "kb.sqlite"
    db = sqlite3.connect(path)  # a base written by a kernelpro that had only the first migration
    db.executescript(MIGRATIONS[0])
    db.execute("INSERT INTO observations (id, at, problem, family, roofline, technique, ok, log_gain, device, coder)"
               " VALUES ('old', 1.0, 'p', 'gemm', 'memory_bound', 'fuse_epilogue', 1, 0.5, 'd', 'c')")
    db.execute("PRAGMA user_version = 1")
    db.commit()
    db.close()
    with KnowledgeBase(path) as base:
        assert base.version == len(MIGRATIONS) == 3
        assert [r["id"] for r in base.rows()] == ["old"] and base.rows()[0]["findings"] == ""
        assert base.rows()[0]["objective"] == "time" and base.rows()[0]["log_energy_gain"] is None
        assert base.stats(GEMM_MEMORY)[0].technique == "fuse_epilogue"
    db = sqlite3.connect(path)
    db.execute(f"PRAGMA user_version = {len(MIGRATIONS) + 1}")  # from a newer kernelpro
    db.commit()
    db.close()
    with pytest.raises(KnowledgeError, match="newer"):
        KnowledgeBase(path)
    (tmp_path / "junk.sqlite").write_bytes(b"not a database at all" * 100)
    with pytest.raises(KnowledgeError, match="not a kernelpro knowledge base"):
        KnowledgeBase(tmp_path / "junk.sqlite")


def test_statistics_priors_and_similarity(tmp_path):
    with KnowledgeBase(tmp_path / "kb.sqlite") as base:
        fill(base)
        stats = {s.technique: s for s in base.stats(GEMM_MEMORY)}
        epilogue = stats["fuse_epilogue"]
        # the conv failure (other family, other class) does not count here
        assert (epilogue.attempts, epilogue.successes) == (3, 3)
        assert epilogue.mean_gain == pytest.approx(0.25) and epilogue.spread_gain == pytest.approx(
            math.sqrt((0.2 ** 2 + 0.3 ** 2 + 0.25 ** 2) / 3 - 0.25 ** 2))
        assert epilogue.factor() > 1.5 and stats["cuda_graphs"].factor() < 0.5
        hook = base.prior_hook("gemm")
        assert hook("memory_bound", "fuse_epilogue") > 1.5 and hook("memory_bound", "cuda_graphs") < 0.5
        assert hook("memory_bound", "never_seen") == 1.0
        # the conv state sees its own failure at full weight and nothing of the memory-bound GEMMs
        conv = {s.technique: s for s in base.stats(State("conv", "compute_bound"))}
        assert conv["fuse_epilogue"].attempts == pytest.approx(1.0) and "cuda_graphs" not in conv
        # a compute-bound GEMM: the memory-bound GEMMs at 1/2, the compute-bound conv at 1/4
        same_family = {s.technique: s for s in base.stats(State("gemm", "compute_bound"))}
        assert same_family["fuse_epilogue"].attempts == pytest.approx(3 * 0.5 + 0.25)
        assert same_family["fuse_epilogue"].successes == pytest.approx(1.5)
        summary = base.summary(GEMM_MEMORY)
        assert "fuse_epilogue: worked 3 of 3" in summary and "cuda_graphs: kept failing" in summary
        assert base.summary(State("attention", "")) == ""


def test_export_import_reset_round_trip(tmp_path):
    with KnowledgeBase(tmp_path / "a.sqlite") as a, KnowledgeBase(tmp_path / "b.sqlite") as b:
        fill(a)
        document = json.loads(json.dumps(a.export()))
        assert b.import_(document) == a.count() == 8
        assert b.import_(document) == 0  # the same observations are not added twice
        assert [s.technique for s in b.stats(GEMM_MEMORY)] == [s.technique for s in a.stats(GEMM_MEMORY)]
        with pytest.raises(KnowledgeError, match="not a kernelpro knowledge-base export"):
            b.import_({"observations": []})
        broken = dict(document, observations=[{"id": "x"}])
        with pytest.raises(KnowledgeError, match="lacks"):
            b.import_(broken)
        assert b.reset() == 8 and b.count() == 0


def test_operator_family_and_state_from_a_profile():
    assert operator_family((ROOT / "examples" / "attention_block.py").read_text()) == "attention"
    assert operator_family((ROOT / "examples" / "linear_gelu.py").read_text()) == "gemm"
    assert operator_family((ROOT / "examples" / "conv_block.py").read_text()) == "conv"
    assert operator_family((ROOT / "examples" / "fusion" / "layernorm_gelu.py").read_text()) == "norm"
    assert operator_family((ROOT / "examples" / "fusion" / "softmax_rows.py").read_text()) == "reduction"
    assert operator_family((ROOT / "examples" / "fusion" / "elementwise_chain.py").read_text()) == "pointwise"
    profile = {"classification": "memory_bound", "techniques": [{"technique": "fuse_elementwise", "score": 1.0},
                                                                 {"technique": "vectorize_memory", "score": 0.5},
                                                                 {"technique": "cuda_graphs", "score": 0.1}]}
    source = (ROOT / "examples" / "gelu_bias_scale.py").read_text()
    assert state_for(source, profile) == State("pointwise", "memory_bound", ("fuse_elementwise", "vectorize_memory"))
    assert state_for(source, {}) == State("pointwise", "", ())


def test_the_cli_shows_exports_imports_and_resets(tmp_path, capsys, kernelpro_home, monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)  # as a user's pipe: pytest-xdist's workers set it
    with KnowledgeBase() as base:  # the default base, under KERNELPRO_HOME
        fill(base)
    assert default_path() == kernelpro_home / "kb.sqlite"
    with pytest.raises(SystemExit) as exit_:
        main(["kb", "show", "--family", "gemm", "--roofline", "memory_bound", "--json"])
    assert exit_.value.code == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["observations"] == 8 and shown["techniques"][0]["technique"] == "fuse_epilogue"
    assert shown["techniques"][-1]["factor"] < 0.5 and "kept failing" in shown["summary"]
    assert shown["objective"] == "time" and shown["techniques"][0]["energy_successes"] == 0
    for argv in (["kb", "show"], ["kb", "show", "--objective", "energy"]):  # the table, with its energy column
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
        table = capsys.readouterr().out
        assert "energy per call" in table and f"prior factor ({argv[-1] if len(argv) > 2 else 'time'})" in table
    with pytest.raises(SystemExit) as exit_:
        main(["kb", "show", "--objective", "joules"])
    assert exit_.value.code == 2 and "'time', 'energy', 'edp'" in capsys.readouterr().err
    exported = tmp_path / "team.json"
    for argv in (["kb", "export", "-o", str(exported)], ["kb", "import", str(exported), "--kb", str(tmp_path / "b")]):
        with pytest.raises(SystemExit) as exit_:
            main(argv)
        assert exit_.value.code == 0
    assert "added 8 observations" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["kb", "reset", "--kb", str(tmp_path / "b"), "--yes"])
    assert exit_.value.code == 0 and "forgot 8" in capsys.readouterr().out
    with pytest.raises(SystemExit) as exit_:
        main(["kb", "show", "--roofline", "memory_bound"])
    assert exit_.value.code == 2  # a class without a family is a usage error
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(SystemExit) as exit_:
        main(["kb", "import", str(tmp_path / "bad.json")])
    assert exit_.value.code == 2 and "is not JSON" in capsys.readouterr().err
    for command in ("show", "export"):  # read-only commands never create a base
        with pytest.raises(SystemExit) as exit_:
            main(["kb", command, "--kb", str(tmp_path / "none" / "kb.sqlite")])
        assert exit_.value.code == 2 and "no knowledge base at" in capsys.readouterr().err
        assert not (tmp_path / "none").exists()


def test_a_search_records_every_evaluation_and_the_next_one_reads_it(tmp_path):
    kb = tmp_path / "kb.sqlite"
    harness = FakeHarness()
    first = SearchRun(SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "one"), budget=6,
                                     profile=False, kb=str(kb)), evaluator=harness).run()
    assert first["knowledge_base"] == {"path": str(kb), "recorded": 6}
    with KnowledgeBase(kb) as base:
        rows = base.rows()
        # each a whole number of the fake's 10% steps over its parent (simplify_all makes several)
        steps = [r["log_gain"] / math.log(1 / 0.9) for r in rows]
        assert len(rows) == 6 and all(r["ok"] for r in rows)
        assert all(round(s) >= 1 and s == pytest.approx(round(s)) for s in steps)
        assert {r["coder"] for r in rows} == {"offline"} and all(r["move"] for r in rows)
    # a coder that is told what the base knows: the summary for an LLM, the factors for the offline coder
    coder = ScriptedCoder((DATA / "redundant.py").read_text())
    SearchRun(SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "two"), budget=3,
                             profile=False, kb=str(kb)), evaluator=FakeHarness(), coder=coder).run()
    request = coder.requests[0]
    assert "From earlier runs on similar states" in request.knowledge
    assert request.kb_factors and all(factor > 1 for _, factor in request.kb_factors)
    with KnowledgeBase(kb) as base:  # the scripted coder's failures and successes were recorded too
        assert any(not r["ok"] and r["failure"] == "compile_error" for r in base.rows())
    # --no-kb: nothing read, nothing written
    coder = ScriptedCoder((DATA / "redundant.py").read_text())
    third = SearchRun(SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "three"), budget=2,
                                     profile=False, kb=str(kb), use_kb=False), evaluator=FakeHarness(),
                      coder=coder).run()
    assert third["knowledge_base"] is None and coder.requests[0].knowledge == ""


def test_the_energy_effect_is_kept_beside_the_time_gain_and_ranks_for_an_energy_search(tmp_path):
    """Per roofline class the base keeps each technique's energy effect (log of the parent's joules per call
    over the child's) beside its time gain: a time search ranks by the time gain, an energy search by the
    energy effect where one was measured (the time gain where none was), an EDP search by both."""
    with KnowledgeBase(tmp_path / "kb.sqlite") as base:
        for _ in range(3):  # faster, same energy
            base.record(GEMM_MEMORY, ["tune_launch_config"], ok=True, log_gain=0.3, log_energy_gain=0.0,
                        objective="energy")
            # as fast, a fifth less energy (fewer SMs saturating the bandwidth)
            base.record(GEMM_MEMORY, ["persistent_kernel"], ok=True, log_gain=0.0, log_energy_gain=math.log(1.25),
                        objective="energy")
            base.record(GEMM_MEMORY, ["fuse_epilogue"], ok=True, log_gain=0.1)  # a time run: no energy measured
        by_time = {s.technique: s for s in base.stats(GEMM_MEMORY)}
        assert by_time["persistent_kernel"].energy_successes == 3
        assert by_time["persistent_kernel"].mean_energy_gain == pytest.approx(math.log(1.25))
        assert by_time["fuse_epilogue"].energy_successes == 0
        assert [s.technique for s in base.stats(GEMM_MEMORY)][0] == "tune_launch_config"
        assert [s.technique for s in base.stats(GEMM_MEMORY, "energy")][0] == "persistent_kernel"
        assert by_time["fuse_epilogue"].gain("energy") == by_time["fuse_epilogue"].gain("time") == pytest.approx(0.1)
        assert by_time["tune_launch_config"].gain("edp") == pytest.approx(0.3)
        hook_time, hook_energy = base.prior_hook("gemm"), base.prior_hook("gemm", "energy")
        assert hook_time("memory_bound", "tune_launch_config") > hook_time("memory_bound", "persistent_kernel")
        assert hook_energy("memory_bound", "persistent_kernel") > hook_energy("memory_bound", "tune_launch_config")
        assert "energy per call 0.80x the parent's (over 3 measured)" in base.summary(GEMM_MEMORY)
        document = base.export()
    with KnowledgeBase(tmp_path / "copy.sqlite") as copy:
        assert copy.import_(document) == 9
        rows = {r["technique"]: r for r in copy.rows()}
        assert rows["persistent_kernel"]["log_energy_gain"] == pytest.approx(math.log(1.25))
        assert rows["persistent_kernel"]["objective"] == "energy" and rows["fuse_epilogue"]["objective"] == "time"


def test_an_energy_search_records_the_energy_effect_of_its_moves(tmp_path):
    """Through the real CPU harness with a fake meter: every correct evaluation's observation carries the time
    gain and the energy effect over its parent, and the run's objective."""
    from test_energy import FakeMeter
    kb = tmp_path / "kb.sqlite"
    SearchRun(SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=2,
                             objective="energy", profile=False, kb=str(kb)), energy_meter=FakeMeter()).run()
    with KnowledgeBase(kb) as base:
        rows = [r for r in base.rows() if r["ok"]]
    assert rows and all(r["objective"] == "energy" for r in rows)
    assert all(r["log_energy_gain"] is not None and r["log_gain"] is not None for r in rows)
