"""A closing re-measurement that does not end correct is recorded with its reason (run.json, the
leaderboard row and its notes), and `kernelpro bench compare` flags pairs that mix re-measured and
search-timed rows and reports each search's evaluations to 95% of its own best (its tree's history)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kernelpro.bench.compare import compare, evaluations_to, markdown as compare_markdown
from kernelpro.bench.leaderboard import level_summary, markdown, problem_row, schema
from kernelpro.driver import SearchRun
from kernelpro.settings import SearchSettings
from kernelpro.harness.records import EvalResult, Phase, Verdict
from test_search import DATA, FakeHarness


class FinalFails(FakeHarness):
    """The fake harness, whose `fail_at`-th evaluation (the closing re-measurement) runs out of time."""

    def __init__(self, fail_at: int):
        super().__init__()
        self.fail_at = fail_at

    def evaluate(self, problem, source, options) -> EvalResult:
        result = super().evaluate(problem, source, options)
        if len(self.sources) == self.fail_at:
            return EvalResult(verdict=Verdict.TIMEOUT, phase=Phase.TIMING, reason="timing ran past 60 s",
                              tolerance=1e-4, device="cpu", precision="fp32", policy="relaxed")
        return result


def test_a_failed_re_measurement_is_recorded_with_its_reason(tmp_path):
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=3, profile=False)
    harness = FinalFails(fail_at=5)  # the baseline, three evaluations, then the re-measurement
    document = SearchRun(settings, evaluator=harness).run()
    assert len(harness.sources) == 5 and document["final"] is None
    assert document["final_failure"] == {"verdict": "timeout", "phase": "timing", "reason": "timing ran past 60 s"}
    assert json.loads((tmp_path / "run" / "run.json").read_text())["final_failure"]["verdict"] == "timeout"
    fine = SearchRun(SearchSettings(problem=settings.problem, out=str(tmp_path / "fine"), budget=3, profile=False),
                     evaluator=FakeHarness()).run()
    assert fine["final"] is not None and fine["final_failure"] is None  # the test can tell the two apart

    row = problem_row({"key": "level1/1_P", "level": 1, "number": 1, "name": "P", "status": "done", "error": "",
                       "seconds": 1.0, "result": {k: document[k] for k in ("speedup", "best_ms", "baseline_ms",
                                                                           "evaluations", "verdicts", "final",
                                                                           "final_failure")}})
    assert row["measured"] == "search" and row["final_failure"] == "timeout (timing): timing ran past 60 s"
    summary = level_summary(1, [row])
    board = {"created": "now", "settings": {"suite": "s", "coder": "offline", "strategy": "mcts", "budget": 3,
                                            "objective": "time", "precision": "fp32", "policy": "relaxed",
                                            "device": "cpu"},
             "devices": ["fake"], "levels": [summary], "overall": dict(summary, level="all"), "problems": [row]}
    text = markdown(board)
    assert "Re-measurements that did not end correct" in text and "timing ran past 60 s" in text
    jsonschema.validate(json.loads(json.dumps(dict(board, format="kernelpro-leaderboard"))), schema())


def _bench(folder: Path, rows: list[tuple[str, float, str, list]], minutes: dict | None = None) -> Path:
    """A bench folder: its leaderboard rows (key, speedup, how measured; GPU-minutes by key) and each problem's tree
    history."""
    problems = []
    for key, speedup, measured, history in rows:
        problems.append({"key": key, "speedup": speedup, "status": "done", "evaluations": len(history),
                         "measured": measured, "gpu_minutes": (minutes or {}).get(key, 0.0)})
        tree = folder / "problems" / key / "tree.json"
        tree.parent.mkdir(parents=True)
        tree.write_text(json.dumps({"search": {"history": history}}))
    (folder / "leaderboard.json").write_text(json.dumps({"problems": problems}))
    return folder


def test_compare_reports_evaluations_to_95_percent_and_flags_mixed_measurements(tmp_path):
    greedy = _bench(tmp_path / "greedy", [("level2/1_A", 2.0, "final", [[1, 1.9], [2, 2.0], [3, 2.0]]),
                                          ("level2/2_B", 8.0, "search", [[1, 7.0], [2, 8.1]])])
    mcts = _bench(tmp_path / "mcts", [("level2/1_A", 2.0, "final", [[1, 1.0], [2, 1.5], [3, 2.0]]),
                                      ("level2/2_B", 7.0, "final", [[1, 7.0], [2, 7.0], [3, 7.0], [4, 8.2]])])
    assert evaluations_to(greedy, "level2/1_A") == 1 and evaluations_to(mcts, "level2/1_A") == 3
    assert evaluations_to(greedy, "level2/9_None") is None
    result = compare(greedy, mcts)
    pairs = {p["key"]: p for p in result["paired"]}
    assert (pairs["level2/2_B"]["to95_a"], pairs["level2/2_B"]["to95_b"]) == (2, 4)
    assert result["mean_to95_a"] == pytest.approx(1.5) and result["mean_to95_b"] == pytest.approx(3.5)
    assert result["mixed_measurements"] == ["level2/2_B"]
    text = compare_markdown(result)
    assert "| 8.000x (search) | 7.000x |" in text and "A 1.50, B 3.50" in text and "mix the two" in text


def test_compare_counts_evaluations_to_the_better_best_and_takes_a_bench_in_parts(tmp_path, capsys):
    from kernelpro.bench.runner import BenchError
    from kernelpro.cli import main
    # part 1: both find the same; part 2: A settles at 1.03x, B finds 9.5x at its 4th evaluation
    greedy1 = _bench(tmp_path / "g1", [("level2/1_A", 2.0, "final", [[1, 2.0], [2, 2.0]])])
    greedy2 = _bench(tmp_path / "g2", [("level2/2_B", 1.03, "final", [[1, 1.02], [2, 1.03], [3, 1.03], [4, 1.03]])])
    mcts1 = _bench(tmp_path / "m1", [("level2/1_A", 2.0, "final", [[1, 1.5], [2, 2.0]])])
    mcts2 = _bench(tmp_path / "m2", [("level2/2_B", 9.5, "final", [[1, 1.02], [2, 1.02], [3, 1.03], [4, 9.5]])])
    result = compare([greedy1, greedy2], [mcts1, mcts2])
    pairs = {p["key"]: p for p in result["paired"]}
    assert result["n"] == 2 and result["a"] == f"{greedy1},{greedy2}"
    # to its own best A is faster on B's problem (1 against 4), but it never reached 95% of 9.5x
    assert (pairs["level2/2_B"]["to95_a"], pairs["level2/2_B"]["to95_b"]) == (1, 4)
    assert (pairs["level2/2_B"]["to95_better_a"], pairs["level2/2_B"]["to95_better_b"]) == (None, 4)
    assert (pairs["level2/1_A"]["to95_better_a"], pairs["level2/1_A"]["to95_better_b"]) == (1, 2)
    assert (result["better_reached_a"], result["better_reached_b"]) == (1, 2)
    # a search that never reached it counts as its evaluations + 1: A (1 + 5) / 2, B (2 + 4) / 2
    assert result["mean_to95_better_a"] == pytest.approx(3.0) and result["mean_to95_better_b"] == pytest.approx(3.0)
    text = compare_markdown(result)
    assert "| 1 | 4 | never | 4 |" in text and "A reached it on 1 of 2, B on 2" in text
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "compare", f"{greedy1},{greedy2}", f"{mcts1},{mcts2}", "--json"])
    assert exit_.value.code == 0 and json.loads(capsys.readouterr().out)["n"] == 2
    with pytest.raises(BenchError, match="level2/1_A is in both"):
        compare([greedy1, greedy1], mcts1)
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "compare", ",", str(mcts1)])
    assert exit_.value.code == 2 and "names no bench folder" in capsys.readouterr().err


def test_a_setting_an_older_part_lacks_reads_as_empty_not_as_a_difference(tmp_path):
    """A bench from before a setting existed (no 'search' key) and one that left it empty searched alike;
    a part that did set it shows as a mixed side."""
    parts = {}
    for name, key, settings in (("old", "level2/1_A", {"strategy": "greedy"}),
                                ("new", "level2/2_B", {"strategy": "greedy", "search": ""}),
                                ("set", "level2/2_B", {"strategy": "greedy", "search": "follow_gain=2"}),
                                ("m1", "level2/1_A", {"strategy": "mcts", "search": ""}),
                                ("m2", "level2/2_B", {"strategy": "mcts", "search": ""})):
        folder = _bench(tmp_path / name, [(key, 2.0, "final", [[1, 2.0]])])
        document = json.loads((folder / "leaderboard.json").read_text())
        (folder / "leaderboard.json").write_text(json.dumps(dict(document, settings=settings)))
        parts[name] = folder
    same = compare([parts["old"], parts["new"]], [parts["m1"], parts["m2"]])
    assert same["settings_differ"] == {"strategy": ["greedy", "mcts"]}
    mixed = compare([parts["old"], parts["set"]], [parts["m1"], parts["m2"]])
    assert mixed["settings_differ"]["search"] == ["- + follow_gain=2", "-"]


def test_compare_sets_the_gpu_time_of_both_sides_side_by_side(tmp_path):
    """Issue 80's measure: each side's GPU-minutes over the paired problems, B's over A's, and the median of the
    problems' evaluations per GPU-minute by level."""
    history = [[1, 1.0], [2, 1.5], [3, 2.0], [4, 2.0]]
    keys = ("level1/1_A", "level2/2_B", "level2/3_C", "level2/4_D")
    before = _bench(tmp_path / "before", [(key, 2.0, "final", history) for key in keys],
                    {"level1/1_A": 2.0, "level2/2_B": 1.0, "level2/3_C": 0.5, "level2/4_D": 0.8})
    after = _bench(tmp_path / "after", [(key, 2.0, "final", history) for key in keys],
                   {"level1/1_A": 0.5, "level2/2_B": 0.25, "level2/3_C": 0.2, "level2/4_D": 0.4})
    time = compare(before, after)["gpu_time"]
    assert (time["problems"], time["gpu_minutes_a"], time["gpu_minutes_b"]) == (4, 4.3, 1.35)
    assert time["b_over_a"] == pytest.approx(1.35 / 4.3)
    # level 2's rates: A 4, 8, 5 (median 5); B 16, 20, 10 (median 16)
    assert time["median_per_gpu_minute"] == {"level1": {"a": 2.0, "b": 8.0}, "level2": {"a": 5.0, "b": 16.0}}
    text = compare_markdown(compare(before, after))
    assert "A 4.3 min, B 1.4 min (B/A 0.314)" in text and "level2 A 5.00, B 16.00" in text
    untimed = _bench(tmp_path / "untimed", [(key, 2.0, "final", history) for key in keys])
    assert compare(before, untimed)["gpu_time"] is None and "GPU time" not in compare_markdown(compare(before, untimed))

