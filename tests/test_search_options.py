"""`--search NAME=VALUE,...`: the tree search's settings on a real run (kernelpro.mcts.options), from the text to
the search that runs, the records that keep them, a resume, and a bench's searches."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import in_process

from kernelpro.bench import Bench, BenchSettings
from kernelpro.bench.child import write_search_settings
from kernelpro.cli import main
from kernelpro.driver import SearchRun
from kernelpro.mcts import SearchConfig
from kernelpro.mcts.options import SettingsError, configured, describe, parse_settings
from kernelpro.search_settings import SearchInputError
from kernelpro.settings import SearchSettings
from test_search import DATA, FakeHarness, ScriptedCoder

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "data" / "bench_suite"


def test_each_value_takes_its_fields_type():
    settings = parse_settings(" head_until_gain=off, follow_gain=2 ,greedy_head=3,greedy_tail_floor=none,"
                              "selection=UCT")
    assert settings == {"head_until_gain": False, "follow_gain": 2.0, "greedy_head": 3, "greedy_tail_floor": None,
                        "selection": "uct"}
    assert type(settings["greedy_head"]) is int and type(settings["follow_gain"]) is float
    assert parse_settings("") == {} and parse_settings("prune=1")["prune"] is True
    config = configured(SearchConfig(strategy="greedy", seed=7), "head_gain=1.1,greedy_tail_floor=4")
    assert (config.strategy, config.seed, config.head_gain, config.greedy_tail_floor) == ("greedy", 7, 1.1, 4)
    assert describe("head_until_gain=0,follow_gain=2.50") == "head_until_gain=off, follow_gain=2.5"


@pytest.mark.parametrize("text, message", [
    ("head_until_gian=0", "'head_until_gian' is no search setting; the settings are: "),
    ("strategy=greedy", "set it with --strategy"),
    ("seed=3", "set it with --seed"),
    ("follow_gain", "write NAME=VALUE, e.g. follow_gain=3.0"),
    ("follow_gain=", "write NAME=VALUE"),
    ("head_until_gain=maybe", "on or off"),
    ("greedy_head=1.5", "a whole number"),
    ("greedy_tail_floor=x", "a whole number or none"),
    ("exploration=-1", "0 or more"),
    ("exploration=nan", "0 or more"),
    ("selection=best", "one of puct, uct"),
    ("greedy_head=1,greedy_head=2", "given twice"),
])
def test_bad_settings_say_what_is_wrong(text, message):
    with pytest.raises(SettingsError) as error:
        parse_settings(text)
    assert message in str(error.value)


def test_the_settings_reach_the_search_and_its_records_and_a_resume_keeps_them(tmp_path):
    """A failed first candidate gets a repair request by default (tests/test_search.py); with repair_children=0
    the same run asks for none, its tree and run.json record the settings, and a resume keeps them."""
    problem = DATA / "redundant.py"
    source = problem.read_text() + "\nModelNew = Model\n"
    runs = {}
    for label, search in (("default", ""), ("no_repairs", "repair_children=0,head_until_gain=off")):
        coder = ScriptedCoder(source)
        settings = SearchSettings(problem=str(problem), out=str(tmp_path / label), budget=20, profile=False,
                                  use_kb=False, search=search)
        document = SearchRun(settings, evaluator=FakeHarness(), coder=coder).run()
        runs[label] = (document, [r.kind for r in coder.requests])
    assert "repair" in runs["default"][1] and "repair" not in runs["no_repairs"][1]
    document = runs["no_repairs"][0]
    assert document["search"] == "repair_children=0,head_until_gain=off" and runs["default"][0]["search"] == ""
    config = json.loads((tmp_path / "no_repairs" / "tree.json").read_text())["search"]["config"]
    assert config["repair_children"] == 0 and config["head_until_gain"] is False
    assert "strategy: mcts (repair_children=0, head_until_gain=off)" in (tmp_path / "no_repairs" / "best.py").read_text()
    # a resume with other (or no) settings continues the recorded run with its own
    again = SearchSettings(problem=str(problem), out=str(tmp_path / "no_repairs"), budget=22, profile=False,
                           use_kb=False)
    coder = ScriptedCoder(source)
    resumed = SearchRun(again, resume=True, evaluator=FakeHarness(), coder=coder)
    assert resumed.settings.search == "repair_children=0,head_until_gain=off"
    resumed.run()
    config = json.loads((tmp_path / "no_repairs" / "tree.json").read_text())["search"]["config"]
    assert config["repair_children"] == 0 and "repair" not in [r.kind for r in coder.requests]


def test_bad_settings_stop_a_search_before_any_work(tmp_path, capsys):
    with pytest.raises(SearchInputError, match="--search: 'widen' is no search setting"):
        SearchRun(SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), search="widen=2"))
    assert not (tmp_path / "run").exists()
    with pytest.raises(SystemExit) as exit_info:
        main(["search", str(DATA / "redundant.py"), "--out", str(tmp_path / "cli"), "--search", "greedy_head=two"])
    assert exit_info.value.code == 2 and "a whole number" in capsys.readouterr().err
    assert not (tmp_path / "cli").exists()


def test_a_bench_passes_the_settings_to_each_search_and_refuses_bad_ones(tmp_path, capsys):
    out = tmp_path / "bench"
    fast = dict(budget=2, profile=False, device="cpu", use_kb=False)
    bench = Bench(BenchSettings(suite=str(SUITE), out=str(out), search="follow_gain=2", **fast))
    written = write_search_settings(bench.entries[0], bench.settings, out / "p", out)
    assert SearchSettings.model_validate_json(written.read_text()).search == "follow_gain=2"
    again = Bench(BenchSettings(suite=str(SUITE), out=str(out), **fast), resume=True)  # a resume keeps them
    assert again.settings.searches.search == "follow_gain=2"
    plain = BenchSettings(suite=str(SUITE), out=str(tmp_path / "o"), **fast)
    assert plain.search_for("p.py", "p").search == ""
    with pytest.raises(SystemExit) as exit_info:
        main(["bench", str(SUITE), "--out", str(tmp_path / "bad"), "--device", "cpu", "--search", "seed=1"])
    assert exit_info.value.code == 2 and "set it with --seed" in capsys.readouterr().err
    assert not (tmp_path / "bad").exists()


def test_mcts_own_settings_change_nothing_under_another_strategy():
    """What docs/search.md says of --search under --strategy greedy, beam, best_first or random, on real trees (the
    suite's replay): with MCTS's head, tail, selection and widening settings changed, each baseline evaluates the
    same states in the same order; the same change does move MCTS."""
    from kernelpro.mcts.replay import Replay, load_replays, replay_search
    recorded = [r.to_json() for r in load_replays(ROOT / "benchmarks" / "replays" / "suite_h100_b24_2026-11-23.json")]
    changed = ("greedy_head=0,head_gain=0,head_until_gain=off,greedy_tail=0,greedy_tail_min=0,follow_gain=0,"
               "selection=uct,widening=fixed,exploration=3")

    def histories(strategy: str, text: str) -> list:
        runs = []
        for data in recorded[:8]:
            config = configured(SearchConfig(strategy=strategy, seed=1), text)
            runs.append(replay_search(Replay.from_json(data), config, 16, order_seed=1).history)
        return runs
    for strategy in ("greedy", "beam", "best_first", "random"):
        assert histories(strategy, "") == histories(strategy, changed), strategy
    assert histories("mcts", "") != histories("mcts", changed)


def test_parallel_left_out_is_two_on_cuda_and_one_on_the_cpu(capsys, monkeypatch):
    from kernelpro.settings import default_parallel
    assert default_parallel("cuda") == 2 and default_parallel("cpu") == 1
    monkeypatch.setenv("COLUMNS", "240")
    for command in ("search", "bench"):  # and the help says so (rich took a "[default: ...]" for markup once)
        assert "(default: 2 on CUDA, 1 on the CPU)" in in_process(capsys, command, "--help").stdout


def test_the_search_stops_at_the_roofline_floor_eager_included():
    """A best candidate within 5% of its floor stops the search; so does eager itself before any candidate, where the
    objective is time (no candidate can gain more than 5% there: KernelBench's LeakyReLU at 1.015x its floor on an
    H100 spent 8 evaluations and 7.2 GPU-minutes on nothing). Not where the floor is unknown (the CPU), nor for
    energy, which a candidate at eager's speed may still save."""
    from kernelpro.stopping import at_floor
    baseline = {"eager_ms": 4.365, "result": {"floor": {"floor_ms": 4.301}}}
    assert "eager itself, at 1.015x" in at_floor(None, baseline, "time")
    assert at_floor(None, baseline, "energy") == ""
    assert at_floor(None, {"eager_ms": 4.365, "result": {"floor": None}}, "time") == ""
    assert at_floor(None, {**baseline, "eager_ms": 4.8}, "time") == ""  # 1.116x: room left
    assert at_floor({"ms": 4.4, "floor_ms": 4.301}, baseline, "energy") == "within 5% of the roofline floor"
    assert at_floor({"ms": 5.0, "floor_ms": 4.301}, baseline, "time") == ""


def test_the_stop_rules_answer_in_order_and_only_at_their_limits():
    """Each limit stops the search exactly when reached, the first rule of the table that answers names why, and a
    search with no limit reached goes on."""
    import time
    from kernelpro.stopping import Spent, stop_reason
    going = Spent(evaluations=3, budget=8, objective="time", began=time.monotonic(), limit_s=60.0, cost_usd=0.4,
                  max_cost_usd=0.5, tokens=900, max_tokens=1000, coder_failures_in_row=3, last_coder_failure="HTTP 529")
    assert stop_reason(going) == ""
    assert stop_reason(Spent(**{**going.__dict__, "evaluations": 8})) == "budget"
    assert stop_reason(Spent(**{**going.__dict__, "cost_usd": 0.5})) == "cost budget ($0.50 of $0.50)"
    assert stop_reason(Spent(**{**going.__dict__, "tokens": 1000})) == "token budget (1000 of 1000)"
    assert stop_reason(Spent(**{**going.__dict__, "coder_failures_in_row": 4})) == \
        "the coder failed 4 times in a row (HTTP 529)"
    assert stop_reason(Spent(**{**going.__dict__, "began": time.monotonic() - 61})) == "time limit"
    assert stop_reason(Spent(**{**going.__dict__, "max_cost_usd": None, "max_tokens": None, "limit_s": None,
                                "coder_failures_in_row": 0, "best": {"ms": 1.0, "floor_ms": 0.98}})) \
        == "within 5% of the roofline floor"
    both = Spent(**{**going.__dict__, "evaluations": 8, "cost_usd": 0.6})
    assert stop_reason(both) == "budget"  # the first rule that answers
