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
    (replay,) = json.loads(out.read_text())["replays"]
    rows = {(row["strategy"], row["budget"]): row for row in replay["rows"]}
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
