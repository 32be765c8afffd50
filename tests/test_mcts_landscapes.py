"""benchmarks/mcts_landscapes.py on the shipped replays: the paired comparison of MCTS with greedy, best ratio and
evaluations to 95% of each one's own best, per budget."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

from conftest import load_module

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "benchmarks" / "mcts_landscapes.py"
REPLAY = "benchmarks/replays/kb_level2_strategies_b12_h200_eight_2026-11-29.json"


def test_replays_all_stands_for_every_shipped_replay(monkeypatch):
    monkeypatch.chdir(ROOT)
    script = load_module(SCRIPT)
    shipped = sorted(f"benchmarks/replays/{path.name}" for path in (ROOT / "benchmarks" / "replays").glob("*.json"))
    assert len(shipped) >= 10 and REPLAY in shipped
    assert script.replay_paths(["all"]) == shipped
    assert script.replay_paths([REPLAY, "all"]) == [REPLAY] + shipped
    assert script.replay_paths(["some/bench"]) == ["some/bench"]


def test_the_evaluations_to_95_are_paired_by_problem(tmp_path):
    out = tmp_path / "replays.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--seeds", "3", "--no-synthetic", "--replays", REPLAY,
                          "--replay-order", "seeded", "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    saved = json.loads(out.read_text())
    (replay,) = saved["replays"]
    rows = {(row["strategy"], row["budget"]): row for row in replay["rows"]}
    # one replay pooled is that replay's own comparison
    assert [cell["budget"] for cell in saved["replay_pooled"]] == [4, 8, 12, 16, 20]
    for pooled, cell in zip(saved["replay_pooled"], [c for c in replay["against_greedy"] if c["strategy"] == "mcts"]):
        assert (pooled["budget"], pooled["problems"]) == (cell["budget"], 8)
        assert math.isclose(pooled["ratio"], cell["ratio"]) and math.isclose(pooled["to95_diff"], cell["to95_diff"],
                                                                             abs_tol=1e-12)
    for row in replay["rows"]:  # no strategy reaches past the best state the replay recorded
        assert row["room_left"] >= 1 - 1e-12
    # greedy is deterministic, so a larger budget extends the same path and never leaves more room
    left = [rows["greedy", budget]["room_left"] for budget in (4, 8, 12, 16, 20)]
    assert left == sorted(left, reverse=True) and left[0] > 1.1
    cells = [cell for cell in replay["against_greedy"] if cell["strategy"] == "mcts"]
    assert [cell["budget"] for cell in cells] == [4, 8, 12, 16, 20]
    for cell in cells:
        mcts, greedy = rows["mcts", cell["budget"]], rows["greedy", cell["budget"]]
        assert len(mcts["to95_by_problem"]) == 8
        # every problem ran the same seeds, so the paired mean is the difference of the overall means
        assert math.isclose(cell["to95_diff"], mcts["mean_evaluations_to_95"] - greedy["mean_evaluations_to_95"],
                            abs_tol=1e-9)
        assert cell["to95_low"] <= cell["to95_diff"] <= cell["to95_high"]
        assert cell["behind"] == (cell["to95_diff"] > 1e-9)
        assert not cell["later"] or cell["behind"]
    # at 4 evaluations MCTS is greedy by construction (its head), so their counts agree exactly
    assert cells[0]["to95_diff"] == 0 and cells[0]["to95_low"] == cells[0]["to95_high"] == 0
    assert "MCTS behind greedy in evaluations to 95%:" in run.stdout
    for cell in cells:  # the better of two bests is at least one's own, so it is reached no sooner
        assert cell["to95_better_mcts"] >= cell["to95_mcts"] - 1e-9
        assert cell["to95_better_greedy"] >= cell["to95_greedy"] - 1e-9
        assert cell["to95_better_low"] <= cell["to95_better_diff"] <= cell["to95_better_high"]
        assert cell["behind_better"] == (cell["to95_better_diff"] > 1e-9)
    assert cells[0]["to95_better_diff"] == 0
    assert all(not key.startswith("_") for row in replay["rows"] for key in row)  # the runs stay out of the JSON


def test_a_search_that_found_more_is_not_late_against_the_pairs_better_best(tmp_path):
    """The H200 replay recorded before the coder mend: on level2/30 MCTS finds the 1.42x GEMM at its 4th evaluation
    and greedy never does, so against its own (larger) best MCTS is later than greedy at 12 evaluations, and against
    the better of the two bests it is earlier."""
    out = tmp_path / "replays.json"
    run = subprocess.run([sys.executable, str(SCRIPT), "--seeds", "2", "--no-synthetic", "--replays",
                          "benchmarks/replays/kb_level2_strategies_b12_h200_2026-11-29.json", "--json", str(out)],
                         capture_output=True, text=True, timeout=600, cwd=ROOT)
    assert run.returncode == 0, run.stderr[-2000:]
    (replay,) = json.loads(out.read_text())["replays"]
    cell = next(c for c in replay["against_greedy"] if c["strategy"] == "mcts" and c["budget"] == 12)
    assert cell["ratio"] > 1.0 and cell["behind"] and not cell["behind_better"]
    assert cell["to95_better_greedy"] > cell["to95_greedy"]  # greedy's own best fell short of MCTS's
    assert "of the pair's better best: 0 of 5 budgets" in run.stdout


def test_the_summary_counts_mcts_cells_over_replays():
    script = load_module(SCRIPT)
    cell = dict(strategy="mcts", ratio=1.0, worse=False, behind=False, later=False, behind_better=False)
    replays = [{"against_greedy": [cell, dict(cell, ratio=1.02, behind=True), dict(cell, strategy="greedy", ratio=0.5),
                                   dict(cell, strategy="mcts_hp4", worse=True)]},
               {"against_greedy": [dict(cell, ratio=0.99, worse=True, behind=True, later=True, behind_better=True)]}]
    assert script.replay_summary(replays) == {"replays": 2, "cells": 3, "worse": 1, "below": 1, "above": 1,
                                              "behind": 2, "later": 1, "behind_better": 1}


def test_base_settings_reach_the_synthetic_landscapes(monkeypatch):
    """--base applies to the synthetic landscapes too: MCTS with a greedy tail over its whole budget finds what
    greedy finds on every landscape, where by default it does not."""
    script = load_module(SCRIPT)
    monkeypatch.setattr(script, "BUDGETS", (30,))
    monkeypatch.setattr(script, "STRATEGIES", ("mcts", "greedy"))

    def differing(base):
        rows = script.quality(4, 0, base)
        by = {(row["landscape"], row["strategy"]): row["best_ratios"] for row in rows}
        return [name for name, _ in by if by[name, "mcts"] != by[name, "greedy"]]

    assert differing(None)
    assert differing({"greedy_tail_min": 1000}) == []


def test_the_pooled_comparison_pairs_every_replays_problems():
    """All the replays together: one pair per problem of every replay, per budget, for each MCTS strategy."""
    script = load_module(SCRIPT)

    def row(strategy, budget, logs, steps):
        return {"strategy": strategy, "budget": budget, "log_best_by_problem": dict(enumerate(logs)),
                "to95_by_problem": dict(enumerate(steps))}

    replays = [{"rows": [row("mcts", 12, [0.1, 0.0], [3.0, 2.0]), row("greedy", 12, [0.0, 0.0], [2.0, 2.0]),
                         row("mcts_no_tail", 12, [0.0, 0.0], [9.0, 9.0])]},
               {"rows": [row("mcts", 12, [0.0, -0.02], [1.0, 4.0]), row("greedy", 12, [0.0, 0.0], [2.0, 4.0]),
                         row("mcts_root1", 12, [0.0, 0.0], [2.0, 4.0])]}]
    pooled = {cell["strategy"]: cell for cell in script.replay_pooled(replays)}
    assert set(pooled) == {"mcts", "mcts_root1"}  # the variant without a tail is not compared; a variant on one
    cell = pooled["mcts"]                          # replay is compared where it ran
    assert cell["problems"] == 4 and pooled["mcts_root1"]["problems"] == 2
    assert math.isclose(cell["ratio"], math.exp((0.1 - 0.02) / 4))
    assert cell["to95_diff"] == 0.0 and cell["to95_low"] < 0 < cell["to95_high"]
    assert cell["at_least"] and cell["no_later"] and cell["low"] < 1 < cell["high"]
    replays[1]["rows"][0]["to95_by_problem"][0] = 2.5  # now half an evaluation later there, not one earlier
    cell = next(c for c in script.replay_pooled(replays) if c["strategy"] == "mcts")
    assert math.isclose(cell["to95_diff"], 1.5 / 4) and not cell["no_later"]
    replays[0]["rows"][0]["log_best_by_problem"][0] = 0.0  # now below greedy at the point estimate
    cell = next(c for c in script.replay_pooled(replays) if c["strategy"] == "mcts")
    assert not cell["at_least"] and cell["ratio"] < 1
