"""The leaderboards of `kernelpro bench` and `kernelpro bench compare`, from bench documents made here: energy saved
and whether it is beyond the spread, problems where no candidate was evaluated, the closing re-measurement's energy,
the card that timed each row, energy at matched speed; and each level's GPU-minutes and time split (the closing
re-measurement counted, native builds as build time, overlapping candidates said to add up to more)."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest

from kernelpro.bench.compare import compare
from kernelpro.bench.leaderboard import schema


def _energy_result(speedup: float, reference_j: float, best_j: float, difference: str, spread: float = 0.02) -> dict:
    window = lambda j: {"j_per_call": j, "j_per_call_above_idle": j / 2, "power_w": 300.0, "calls": 100,  # noqa: E731
                        "window_s": 1.0}
    return {"speedup": speedup, "best_ms": 1.0 / speedup, "baseline_ms": 1.0, "evaluations": 4,
            "verdicts": {"correct": 4}, "energy_j": best_j, "baseline_energy_j": reference_j,
            "energy": {"method": "nvml_energy_counter", "idle_power_w": 70.0, "reference": window(reference_j),
                       "candidate": window(best_j), "windows": 3, "reference_spread": spread,
                       "candidate_spread": spread, "difference": difference}}


def one_level_document(summary: dict, rows: list[dict], *, budget: int, objective: str, device: str,
                       card: str) -> dict:
    """A leaderboard document of one level, as leaderboard.build makes it, from rows made by problem_row."""
    return {"created": "now", "settings": {"suite": "s", "coder": "offline", "strategy": "mcts", "budget": budget,
                                           "objective": objective, "precision": "fp32", "policy": "relaxed",
                                           "device": device},
            "devices": [card], "levels": [summary], "overall": dict(summary, level="all"), "problems": rows}


def test_leaderboards_report_energy_saved_and_whether_it_is_beyond_the_spread(tmp_path):
    from kernelpro.bench.leaderboard import level_summary, markdown, problem_row
    rows = [problem_row({"key": f"level1/{i}_P", "level": 1, "number": i, "name": "P", "status": "done",
                         "result": result, "error": "", "seconds": 1.0})
            for i, result in enumerate([_energy_result(1.2, 2.0, 1.6, "lower"),
                                        dict(_energy_result(1.0, 2.0, 1.98, "none"), baseline_compile_ms=0.5,
                                             baseline_compile_correct=False)], 1)]
    assert rows[0]["energy_saving"] == pytest.approx(1.25) and rows[0]["energy_difference"] == "lower"
    assert rows[0]["energy_windows"] == 3 and rows[0]["energy_spread"] == pytest.approx(0.04)
    summary = level_summary(1, rows)
    assert summary["geomean_energy_saving"] == pytest.approx((1.25 * 2.0 / 1.98) ** 0.5)
    document = one_level_document(summary, rows, budget=4, objective="energy", device="cuda", card="H100")
    text = markdown(document)
    assert "| `level1/1_P` | 2 | 1.6 | 300.0 | 300.0 | 1.250x | yes, lower | 3 |" in text
    assert "no difference" in text and "Geomean energy saved" in text
    assert summary["compile_incorrect"] == 1 and "| 0.5000 † |" in text  # torch.compile's output failed there
    assert "failed the tolerance against eager on 1 problem" in text
    jsonschema.validate(json.loads(json.dumps(dict(document, format="kernelpro-leaderboard"))), schema())


def test_a_problem_where_no_candidate_was_evaluated_is_shown_apart_in_the_geomean():
    """A done search with no evaluation (no move applied) is 1.000x by default: its row says why, and the
    level gives the geomean with and without such rows."""
    from kernelpro.bench.leaderboard import level_summary, markdown, problem_row
    searched = {"evaluations": 2, "speedup": 4.0, "verdicts": {"correct": 2}, "stopped": "budget"}
    idle = {"evaluations": 0, "speedup": 1.0, "verdicts": {}, "stopped": "no moves left: none applies here"}
    rows = [problem_row({"key": f"level1/{i}_P", "level": 1, "number": i, "name": "P", "status": "done",
                         "result": result, "error": "", "seconds": 1.0}) for i, result in enumerate([searched, idle], 1)]
    assert rows[0]["searched"] and rows[0]["why_not_searched"] is None
    assert not rows[1]["searched"] and rows[1]["why_not_searched"] == "no moves left: none applies here"
    summary = level_summary(1, rows)
    assert summary["unsearched"] == 1 and summary["geomean_vs_eager"] == pytest.approx(2.0)
    assert summary["geomean_vs_eager_searched"] == pytest.approx(4.0)
    document = one_level_document(summary, rows, budget=2, objective="time", device="cpu", card="cpu")
    text = markdown(document)
    assert "geomean vs eager 2.000x with them, 4.000x without" in text
    assert "- `level1/2_P`: no moves left: none applies here" in text
    jsonschema.validate(json.loads(json.dumps(dict(document, format="kernelpro-leaderboard"))), schema())


def test_energy_columns_come_from_the_closing_re_measurement_where_it_took_energy():
    """A time search measures energy only in its best's re-measurement: the row's J/call and saving are that
    measurement's, like its times; an energy search's row prefers it over the best's evaluation in the search."""
    from kernelpro.bench.leaderboard import problem_row
    final_energy = _energy_result(1.4, 3.0, 2.0, "lower", spread=0.01)["energy"]
    time_result = {"speedup": 1.5, "best_ms": 0.7, "baseline_ms": 1.0, "evaluations": 4, "verdicts": {"correct": 4},
                   "energy_j": None, "baseline_energy_j": None, "energy": None,
                   "final": {"speedup": 1.4, "best_ms": 0.7, "eager_ms": 0.98, "energy": final_energy}}
    row = problem_row({"key": "level1/1_P", "level": 1, "number": 1, "name": "P", "status": "done", "error": "",
                       "seconds": 1.0, "result": time_result})
    assert (row["energy_j"], row["baseline_energy_j"], row["energy_from"]) == (2.0, 3.0, "final")
    assert row["energy_saving"] == pytest.approx(1.5) and row["energy_spread"] == pytest.approx(0.02)
    searched = dict(_energy_result(1.2, 2.0, 1.6, "lower"), final={"speedup": 1.2, "best_ms": 0.8, "eager_ms": 1.0,
                                                                   "energy": final_energy})
    row = problem_row({"key": "level1/2_P", "level": 1, "number": 2, "name": "P", "status": "done", "error": "",
                       "seconds": 1.0, "result": searched})
    assert row["energy_saving"] == pytest.approx(1.5) and row["energy_from"] == "final"
    old = problem_row({"key": "level1/3_P", "level": 1, "number": 3, "name": "P", "status": "done", "error": "",
                       "seconds": 1.0, "result": _energy_result(1.2, 2.0, 1.6, "lower")})
    assert old["energy_saving"] == pytest.approx(1.25) and old["energy_from"] == "search"
    nothing = problem_row({"key": "level1/4_P", "level": 1, "number": 4, "name": "P", "status": "done", "error": "",
                           "seconds": 1.0, "result": dict(time_result, final={"speedup": 1.4, "best_ms": 0.7})})
    assert nothing["energy_saving"] is None and nothing["energy_from"] is None


def test_leaderboard_says_which_card_timed_each_row_when_a_bench_ran_on_two_kinds():
    """A bench resumed on another machine (H100, then H200): each row is timed on one card, and says which."""
    from kernelpro.bench.leaderboard import level_summary, markdown, problem_row

    def document(cards):
        rows = [problem_row({"key": f"level1/{i}_P", "level": 1, "number": i, "name": "P", "status": "done",
                             "result": dict(_energy_result(1.5, 2.0, 1.5, "lower"), device_name=card),
                             "error": "", "seconds": 1.0}) for i, card in enumerate(cards, 1)]
        summary = level_summary(1, rows)
        return {"created": "now", "settings": {"suite": "s", "coder": "offline", "strategy": "mcts", "budget": 4,
                                               "objective": "time", "precision": "fp32", "policy": "relaxed",
                                               "device": "cuda"},
                "devices": sorted(set(cards)), "levels": [summary], "overall": dict(summary, level="all"),
                "problems": rows}

    mixed = markdown(document(["NVIDIA H100 80GB HBM3", "NVIDIA H200"]))
    assert "| problem | GPU | eager ms |" in mixed
    assert "| `level1/1_P` | NVIDIA H100 80GB HBM3 |" in mixed and "| `level1/2_P` | NVIDIA H200 |" in mixed
    one = markdown(document(["NVIDIA H200", "NVIDIA H200"]))
    assert "| problem | eager ms |" in one and "| GPU |" not in one
    # searched on an H100, re-measured on an H200 after a resume: the row's times are the re-measurement's
    resumed = problem_row({"key": "level1/3_P", "level": 1, "number": 3, "name": "P", "status": "done", "error": "",
                           "seconds": 1.0, "result": dict(_energy_result(1.5, 2.0, 1.5, "lower"),
                                                          device_name="NVIDIA H100 80GB HBM3",
                                                          final={"speedup": 1.4, "best_ms": 1.0, "eager_ms": 1.4,
                                                                 "device_name": "NVIDIA H200"})})
    assert resumed["device_name"] == "NVIDIA H200" and resumed["speedup"] == 1.4


def test_compare_reports_energy_at_matched_speed(tmp_path):
    """A time bench against an energy bench: B's best 3% slower but 20% less energy counts, one 25% slower
    does not, and a saving inside the windows' spread is not counted as beyond it."""
    from kernelpro.bench.compare import markdown as compare_markdown
    from kernelpro.bench.leaderboard import problem_row

    def board(folder: Path, results: list[dict]) -> Path:
        folder.mkdir()
        rows = [problem_row({"key": f"level1/{i}_P", "level": 1, "number": i, "name": "P", "status": "done",
                             "result": r, "error": "", "seconds": 1.0}) for i, r in enumerate(results, 1)]
        (folder / "leaderboard.json").write_text(json.dumps({"problems": rows}))
        return folder
    time_bench = board(tmp_path / "time", [_energy_result(1.50, 2.0, 1.6, "lower"), _energy_result(2.0, 2.0, 1.0, "lower"),
                                           _energy_result(1.10, 2.0, 1.9, "none")])
    energy_bench = board(tmp_path / "energy", [_energy_result(1.46, 2.0, 1.28, "lower"),
                                               _energy_result(1.5, 2.0, 0.8, "lower"),
                                               _energy_result(1.10, 2.0, 1.89, "none", spread=0.03)])
    result = compare(time_bench, energy_bench)
    pairs = {p["key"]: p for p in result["energy"]}
    assert pairs["level1/1_P"]["matched_speed"] and pairs["level1/1_P"]["energy_b_over_a"] == pytest.approx(1.25)
    assert not pairs["level1/2_P"]["matched_speed"]
    assert pairs["level1/3_P"]["matched_speed"] and pairs["level1/3_P"]["beyond_spread"] is False
    summary = result["energy_at_matched_speed"]
    assert summary["matched"] == 2 and summary["not_matched"] == ["level1/2_P"] and summary["saving_beyond_spread"] == 1
    assert summary["geomean_energy_b_over_a"] == pytest.approx((1.25 * 1.9 / 1.89) ** 0.5)
    assert "Energy at matched speed" in compare_markdown(result)


def test_a_problems_gpu_minutes_count_its_closing_re_measurement():
    """What a user pays for a problem on the GPU: its search over every segment (the reference's evaluation
    included) and the re-measurement of its best after it; the bench's own clock where the search recorded none."""
    from kernelpro.bench.leaderboard import problem_row
    base = {"key": "level2/1_P", "level": 2, "number": 1, "name": "P", "status": "done", "error": "", "seconds": 99.0}
    searched = {"evaluations": 8, "verdicts": {"correct": 8}, "wall_s": 48.0, "time_split_s": {"final": 12.0}}
    assert problem_row(dict(base, result=searched))["gpu_minutes"] == 1.0
    assert problem_row(dict(base, result=dict(searched, time_split_s={})))["gpu_minutes"] == 0.8
    assert problem_row(dict(base, result={"evaluations": 0, "verdicts": {}}))["gpu_minutes"] == 1.65


def test_native_builds_count_as_build_time_not_as_the_workers():
    """An evaluation waits for its candidate's native build before its phases begin; the leaderboard's `build`
    column holds that wait, and `worker` only what is left outside any phase (level2/57 on an H100 showed 21 s of
    nvcc builds as `worker`)."""
    from kernelpro.bench.leaderboard import time_columns
    split = {"reference": 2.0, "profile": 0.0, "coder": 0.5, "evaluations": 40.0, "builds": 21.0,
             "phases": {"queue": 1.0, "static": 1.0, "reference": 2.0, "load": 1.5, "correctness": 2.0,
                        "timing": 2.5},
             "harness": 30.0, "final": 7.0, "other": 0.0}
    columns = time_columns(split, 60.0)
    assert columns["build"] == 22.5 and columns["worker"] == 9.0
    assert sum(columns.values()) == pytest.approx(60.0)
    # a build's seconds beyond the time left outside the phases (it began before the evaluation waited) cap there
    assert time_columns(dict(split, builds=40.0), 60.0)["worker"] == 0.0


def test_the_time_split_says_when_overlapping_candidates_add_up_to_more_than_the_time_spent():
    """With two candidates in flight, each level's phases add up to more than its GPU-minutes (a level-2 bench on an
    H100: 6.4 against 4.1); the leaderboard says so beside the table, and says nothing where they match."""
    from kernelpro.bench.leaderboard import TIME_COLUMNS, time_lines
    split = dict.fromkeys(TIME_COLUMNS, 0.0) | {"correctness": 240.0, "timing": 144.0}
    level = {"level": 2, "time_s": split, "gpu_minutes": 4.1}
    document = {"settings": {"device": "cuda"}, "levels": [level], "overall": dict(level, level="all")}
    text = "\n".join(time_lines(document))
    assert "| 2 | 6.4 |" in text and "level 2, 6.4 against 4.1; all levels, 6.4 against 4.1." in text
    level["gpu_minutes"] = document["overall"]["gpu_minutes"] = 6.4
    assert "overlap" not in "\n".join(time_lines(document))


def test_a_best_near_the_tolerance_is_named_with_the_share_it_took():
    """A best the harness checked on more inputs for being near the tolerance (flag marginal_rechecked, kept in
    run.json as best_rechecked) is listed under the table with the largest share its outputs took."""
    from kernelpro.bench.leaderboard import level_summary, markdown, problem_row
    near = dict(_energy_result(1.9, 2.0, 1.0, "none"), best_tolerance_used=0.84, best_rechecked=True)
    roomy = dict(_energy_result(1.2, 2.0, 1.0, "none"), best_tolerance_used=0.02, best_rechecked=False)
    rows = [problem_row({"key": f"level3/{i}_P", "level": 3, "number": i, "name": "P", "status": "done",
                         "result": result, "error": "", "seconds": 1.0}) for i, result in enumerate([near, roomy], 1)]
    assert (rows[0]["tolerance_used"], rows[0]["rechecked"]) == (0.84, True) and not rows[1]["rechecked"]
    document = one_level_document(level_summary(3, rows), rows, budget=8, objective="time", device="cuda",
                                  card="H100")
    text = markdown(document)
    line = next(line for line in text.splitlines() if line.startswith("Bests near the tolerance"))
    assert "`level3/1_P` (84%)" in line and "`level3/2_P`" not in line
    jsonschema.validate(json.loads(json.dumps(dict(document, format="kernelpro-leaderboard"))), schema())


def test_a_problem_whose_best_is_the_reference_counts_against_torch_compile_and_by_kernelbenchs_method():
    """Where no candidate beat eager there is no re-measurement: the row's ratio to torch.compile is eager's, as
    its search's baseline timed both, and the level's geomean counts it rather than only the problems a candidate
    won."""
    from kernelpro.bench.leaderboard import level_summary, problem_row
    won = {"evaluations": 4, "speedup": 3.0, "verdicts": {"correct": 4}, "best_ms": 1.0, "baseline_ms": 3.0,
           "final": {"speedup": 3.0, "speedup_vs_compile": 2.0, "best_ms": 1.0, "eager_ms": 3.0, "compile_ms": 2.0}}
    kept = {"evaluations": 4, "speedup": 1.0, "verdicts": {"correct": 4}, "best_ms": 4.0, "baseline_ms": 4.0,
            "baseline_compile_ms": 2.0}
    rows = [problem_row({"key": f"level1/{i}_P", "level": 1, "number": i, "name": "P", "status": "done",
                         "result": result, "error": "", "seconds": 1.0}) for i, result in enumerate([won, kept], 1)]
    assert rows[1]["speedup_vs_compile"] == pytest.approx(0.5)
    assert level_summary(1, rows)["geomean_vs_compile"] == pytest.approx(1.0)
    # and by KernelBench's method the reference is timed against itself
    won["final"]["kernelbench"], won["kernelbench_speedup"], won["best_moves"] = {"speedup": 4.0}, 4.0, ["fuse"]
    rows = [problem_row({"key": f"level1/{i}_P", "level": 1, "number": i, "name": "P", "status": "done",
                         "result": result, "error": "", "seconds": 1.0}) for i, result in enumerate([won, kept], 1)]
    assert rows[1]["kernelbench_speedup"] == 1.0
    assert level_summary(1, rows)["geomean_kernelbench_method"] == pytest.approx(2.0)
