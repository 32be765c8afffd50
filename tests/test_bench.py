"""`kernelpro bench` on CPU: a tiny suite of our own problems, searched by real child processes, or, where the
bench's bookkeeping is what a test checks, by the real search command in this process over a fake evaluator.

- suite discovery and selection (levels, problem ranges, clear errors);
- a bench over the suite plus a problem that crashes: every leaderboard file, the JSON
  against its published schema, the crash recorded while the bench went on;
- kill -9 of the whole bench mid-run, then --resume: finished problems are not rerun,
  the interrupted one resumes its own search, everything finishes;
- --baselines-only, with the cache answering the second time;
- `kernelpro bench compare` with its paired test.
"""

from __future__ import annotations

import contextlib
import io
import itertools
import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import jsonschema
import pytest

from kernelpro.bench import Bench, BenchError, BenchSettings
from kernelpro.bench.compare import compare
from kernelpro.bench.leaderboard import schema
from kernelpro.bench.suite import SuiteError, discover, parse_numbers, select
from conftest import built_once, default_sigint, in_process
from kernelpro.cli import main
from kernelpro.harness.records import TimingStats
from test_search import FakeHarness

ROOT = Path(__file__).resolve().parent.parent
SUITE = ROOT / "tests" / "data" / "bench_suite"
FAST = dict(budget=2, profile=False, device="cpu", use_kb=False)


class DriftingHarness(FakeHarness):
    """FakeHarness whose candidate timings are never twice the same, as a real clock's: each evaluation of this
    process takes 0.01% longer than the one before."""

    calls = itertools.count()

    def evaluate(self, problem, source, options):
        result = super().evaluate(problem, source, options)
        if result.candidate is None:
            return result
        ms = result.candidate.median_ms * (1 + 1e-4 * next(self.calls))
        timing = TimingStats(median_ms=ms, iqr_ms=0.0, cv=0.0, mean_ms=ms, min_ms=ms, max_ms=ms, trials=10,
                             host_median_ms=ms)
        return result.model_copy(update={"candidate": timing, "speedup": result.reference.median_ms / ms})


def search_in_this_process(args: list[str], env: dict, log: Path, on_pid=lambda pid: None) -> tuple[int, str]:
    """Stands in for `bench.child.run_child`: the child's `kernelpro search ARGS` through main() in this process,
    its stderr in `log`, with DriftingHarness as the evaluator (see `fake_children`)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("w") as stderr, contextlib.redirect_stderr(stderr), contextlib.redirect_stdout(io.StringIO()):
        try:
            main(args)
        except SystemExit as done:
            code = done.code
    return code, log.read_text(errors="replace")[-3000:]


@contextlib.contextmanager
def fake_children():
    """A bench's searches run by the real search command in this process over a fake evaluator (a second or less
    each, against about ten for a child process that imports torch and boots its sandboxed workers): for the tests
    of the bench's bookkeeping. The crash test, and the runs that kill -9 and Ctrl-C interrupt, keep real children."""
    import kernelpro.bench.child
    import kernelpro.driver
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(kernelpro.bench.child, "run_child", search_in_this_process)
        patch.setattr(kernelpro.driver, "Evaluator", lambda *args, **kwargs: DriftingHarness())
        yield


@pytest.fixture
def in_process_searches():
    with fake_children():
        yield


def test_suite_discovery_and_selection(tmp_path):
    entries = discover(SUITE)
    assert [e.key for e in entries] == ["level1/1_DoubleNegation", "level1/2_ScaledSum", "level2/1_LinearScale"]
    assert [(e.level, e.number, e.name) for e in entries][0] == (1, 1, "DoubleNegation")
    assert [e.key for e in select(entries, levels="2")] == ["level2/1_LinearScale"]
    assert [e.key for e in select(entries, problems="2-5")] == ["level1/2_ScaledSum"]
    assert [e.key for e in select(entries, problems="level2/1_LinearScale, level1/1_DoubleNegation")] == [
        "level1/1_DoubleNegation", "level2/1_LinearScale"]
    listed = tmp_path / "keys.txt"
    listed.write_text("# a subset\nlevel1/2_ScaledSum  # one\n\n")
    assert [e.key for e in select(entries, problems=f"@{listed}")] == ["level1/2_ScaledSum"]
    with pytest.raises(SuiteError, match="level1/9_Nope is not in the suite"):
        select(entries, problems="level1/9_Nope")
    with pytest.raises(SuiteError, match="cannot read"):
        select(entries, problems=f"@{tmp_path / 'missing.txt'}")
    assert parse_numbers("1-3,7, 9") == {1, 2, 3, 7, 9}
    for bad in ("3-1", "x", "1-"):
        with pytest.raises(SuiteError):
            parse_numbers(bad)
    with pytest.raises(SuiteError, match="names no problem"):
        select(entries, levels="3")
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(SUITE / "level1" / "1_DoubleNegation.py", flat / "negation.py")
    assert [(e.key, e.level, e.number) for e in discover(flat)] == [("negation", None, None)]
    (tmp_path / "empty").mkdir()
    with pytest.raises(SuiteError, match="holds no problem"):
        discover(tmp_path / "empty")
    with pytest.raises(SuiteError, match="holds no problem"):  # a refused bench leaves no folder behind
        Bench(BenchSettings(suite=str(tmp_path / "empty"), out=str(tmp_path / "refused"), **FAST))
    assert not (tmp_path / "refused").exists()
    with pytest.raises(SuiteError, match="not a folder"):
        discover(tmp_path / "missing")


def bench_in_own_home(settings: BenchSettings, folder: Path) -> dict:
    """A module fixture's bench, run with a KERNELPRO_HOME of its own (the autouse one is per test)."""
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("KERNELPRO_HOME", str(folder / "home"))
        return Bench(settings).run()


@pytest.fixture(scope="module")
def finished_bench(tmp_path_factory):
    """A finished bench of the suite's level 1 and a problem whose forward always fails, built once per run."""
    def build(folder: Path) -> dict:
        suite = folder / "suite"
        shutil.copytree(SUITE / "level1", suite / "level1")
        (suite / "level1" / "3_Broken.py").write_text(
            "import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
            "        raise RuntimeError('this forward always fails')\n\n\n"
            "def get_inputs():\n    return [torch.randn(4)]\n\n\ndef get_init_inputs():\n    return []\n")
        out = folder / "run"
        return {"out": str(out), "document": bench_in_own_home(BenchSettings(suite=str(suite), out=str(out), **FAST),
                                                               folder)}
    built = built_once(tmp_path_factory, "finished_bench", build)
    return Path(built["out"]), built["document"]


@pytest.fixture(scope="module")
def level1_bench(tmp_path_factory):
    """A finished bench of the suite's level 1 (two problems, budget 2; searched over a fake evaluator), built once
    per run; tests work on copies."""
    def build(folder: Path) -> str:
        with fake_children():
            bench_in_own_home(BenchSettings(suite=str(SUITE), out=str(folder / "bench"), levels="1", **FAST), folder)
        return str(folder / "bench")
    return Path(built_once(tmp_path_factory, "level1_bench", build))


def test_a_bench_writes_every_leaderboard_and_records_a_crash(finished_bench):
    out, document = finished_bench
    jsonschema.validate(json.loads((out / "leaderboard.json").read_text()), schema())
    rows = {r["key"]: r for r in document["problems"]}
    assert rows["level1/3_Broken"]["status"] == "failed" and "this forward always fails" in rows["level1/3_Broken"]["error"]
    done = [r for r in rows.values() if r["status"] == "done"]
    assert len(done) == 2 and all(r["valid"] and r["evaluations"] >= 1 for r in done)
    for r in done:  # the winner's techniques, none where the reference stayed best (CPU timing under load)
        best_node = json.loads((out / "problems" / r["key"] / "run.json").read_text())["best_node"]
        assert bool(r["techniques"]) == bool(best_node)
    for r in done:  # eager and best come from the same evaluation: their ratio is the speedup
        assert r["eager_ms"] / r["best_ms"] == pytest.approx(r["speedup"], rel=1e-6)
    # every printed row and geomean agrees with those timings, to its last digit, in leaderboard.md and .html
    import html
    import math
    import re
    page = re.sub(r"(\s*\|\s*)+", " | ", html.unescape(re.sub(r"<[^>]+>", " | ",
                                                               (out / "leaderboard.html").read_text())))
    geomean = math.exp(sum(math.log(r["speedup"]) for r in done) / len(done))
    assert document["levels"][0]["geomean_vs_eager"] == pytest.approx(geomean, rel=1e-9)
    for text in ((out / "leaderboard.md").read_text(), page):
        for r in done:
            printed = re.search(rf"`?{re.escape(r['key'])}`? \| ([\d.]+) \| [^|]+ \| ([\d.]+) \| ([\d.]+)x", text)
            assert printed, (r["key"], text[:3000])
            eager, best, ratio = (float(v) for v in printed.groups())
            assert (f"{eager:.4f}", f"{best:.4f}", f"{ratio:.3f}") == \
                (f"{r['eager_ms']:.4f}", f"{r['best_ms']:.4f}", f"{r['speedup']:.3f}")
            assert ratio == pytest.approx(eager / best, abs=0.0015 + 1e-4 * ratio / best)
        assert re.search(rf"\| 1 \| 3 \| 3 \| 67% \|[^\n]* {geomean:.3f}x \|", text)
    seconds = dict(sqlite3.connect(out / "bench.db").execute("SELECT key, seconds FROM problems"))
    for r in done:  # where each problem's time went: the parts and the rest make up its time in the bench
        times = r["time_s"]
        assert times["reference"] > 0 and times["coder"] > 0 and times["timing"] > 0 and times["correctness"] > 0
        assert sum(times.values()) == pytest.approx(max(seconds[r["key"]], sum(times.values()) - times["rest"]),
                                                    abs=0.05)
    level_times = document["levels"][0]["time_s"]
    assert level_times["timing"] == pytest.approx(sum(r["time_s"]["timing"] for r in done), abs=0.02)
    level = document["levels"][0]
    assert level["problems"] == 3 and level["valid"] == 2 and level["valid_rate"] == pytest.approx(2 / 3)
    assert level["fast_p"]["0"] == pytest.approx(2 / 3)  # the crash counts as not fast
    assert level["fast_p"]["1"] == pytest.approx(sum(r["speedup"] > 1 for r in done) / 3)
    # issue 80's measure per level: the median of the problems' evaluations per minute of device time
    rates = sorted(r["evaluations"] / r["gpu_minutes"] for r in done)
    assert level["evaluations"] == sum(r["evaluations"] for r in done) and len(rates) == 2
    assert level["per_gpu_minute_median"] == pytest.approx((rates[0] + rates[1]) / 2)
    markdown = (out / "leaderboard.md").read_text()
    assert f"| {level['per_gpu_minute_median']:.1f} |" in markdown and "evaluations per CPU-minute" in markdown
    assert "| `level1/1_DoubleNegation` |" in markdown and "Failed problems:" in markdown
    assert "| level | problems | finished | valid |" in markdown and "| 1 | 3 | 3 | 67% |" in markdown
    assert "CPU-min" in markdown and "GPU-min" not in markdown  # a CPU bench spends CPU minutes
    assert "Where the time went (CPU-min" in markdown and "| 1 | " in markdown.split("Where the time went")[1]
    page = (out / "leaderboard.html").read_text()
    assert page.count("<svg") >= 2 and "fast_p per level" in page and "<script" not in page
    for r in done:  # each problem's search in its own folder
        assert (out / "problems" / r["key"] / "run.json").exists() and (out / "problems" / r["key"] / "best.py").exists()
    with pytest.raises(BenchError, match="not empty"):
        Bench(BenchSettings(suite=str(SUITE), out=str(out), **FAST))


def resumed_in_process(args: list[str], capsys) -> dict:
    """`kernelpro bench ... --resume --json` through main() in this process, its searches too (`fake_children`: the
    bench's bookkeeping is what the resume checks; the interrupted run before it had real children): the bench's
    JSON document."""
    with fake_children():
        done = in_process(capsys, *args[3:], "--resume", "--json")  # without `python -m kernelpro`
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_kill_minus_9_then_resume_reruns_nothing_finished(tmp_path, capsys):
    out = tmp_path / "bench"
    args = [sys.executable, "-m", "kernelpro", "bench", str(SUITE), "--level", "1", "--budget", "2", "--no-profile",
            "--device", "cpu", "--no-kb", "--out", str(out), "--json"]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    database = out / "bench.db"
    deadline = time.monotonic() + 600
    finished: list = []
    while time.monotonic() < deadline and process.poll() is None:
        if database.exists():
            try:
                finished = sqlite3.connect(database).execute(
                    "SELECT key, started, finished FROM problems WHERE status = 'done'").fetchall()
            except sqlite3.OperationalError:
                finished = []
            if finished:
                break
        time.sleep(0.5)
    assert process.poll() is None, process.stderr.read()[-2000:]
    os.killpg(process.pid, signal.SIGKILL)  # the bench and every search it runs
    process.wait()
    assert len(finished) >= 1
    with pytest.raises(SystemExit) as exit_:
        main(["bench", str(SUITE), "--out", str(out), "--device", "cpu"])  # without --resume: refused
    assert exit_.value.code == 2
    document = resumed_in_process([a for a in args if a != "--json"], capsys)
    assert [r["status"] for r in document["problems"]] == ["done"] * 2
    after = dict((key, (started, end)) for key, started, end in sqlite3.connect(database).execute(
        "SELECT key, started, finished FROM problems"))
    for key, started, end in finished:  # the finished problems kept their record: not run again
        assert after[key] == (started, end)


def test_baselines_only_uses_its_cache_the_second_time(tmp_path):
    settings = BenchSettings(suite=str(SUITE), out=str(tmp_path / "a"), levels="1", problems="1",
                             baselines_only=True, **FAST)
    (row,) = Bench(settings).run()["problems"]
    assert row["status"] == "done" and row["eager_ms"] > 0 and not row["valid"]  # no search: nothing to validate
    database = tmp_path / "a" / "bench.db"

    def stored() -> dict:
        return json.loads(sqlite3.connect(database).execute("SELECT result FROM problems").fetchone()[0])
    assert stored()["cached"] is False
    with sqlite3.connect(database) as db:  # as if the problem had not run: the resumed bench runs it again
        db.execute("UPDATE problems SET status = 'pending'")
    (again,) = Bench(settings, resume=True).run()["problems"]
    assert stored()["cached"] is True and again["eager_ms"] == pytest.approx(row["eager_ms"])


def test_compare_pairs_problems_and_tests_the_difference(finished_bench, tmp_path, capsys):
    out, document = finished_bench
    other = tmp_path / "other"
    other.mkdir()
    changed = json.loads((out / "leaderboard.json").read_text())
    for row in changed["problems"]:
        if row["speedup"]:
            row["speedup"] *= 1.5
    changed["problems"].append(dict(changed["problems"][0], key="level9/1_Extra"))
    changed["settings"].update(strategy="greedy", search="follow_gain=2")  # how B searched, as its bench records it
    (other / "leaderboard.json").write_text(json.dumps(changed))
    result = compare(out, other)
    assert result["n"] == 2 and result["b_better"] == 2 and result["geomean_b_over_a"] == pytest.approx(1.5)
    assert result["only_b"] == ["level9/1_Extra"] and result["p_value"] is not None
    assert result["settings_differ"] == {"strategy": ["mcts", "greedy"], "search": ["-", "follow_gain=2"]}
    assert compare(out, out)["settings_differ"] == {}
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "compare", str(out), str(other)])
    text = capsys.readouterr().out
    assert exit_.value.code == 0 and "wilcoxon" in text
    assert "Settings that differ (A / B): strategy mcts / greedy; search - / follow_gain=2" in text
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "compare", str(out)])
    assert exit_.value.code == 2
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "compare", str(out), str(tmp_path)])
    assert exit_.value.code == 2 and "no leaderboard.json" in capsys.readouterr().err


def test_report_writes_the_leaderboards_of_a_bench_as_it_stands(finished_bench, tmp_path, capsys):
    """A snapshot of a running bench (one problem still running) has no leaderboard yet: report writes it."""
    out, document = finished_bench
    copy = tmp_path / "snapshot"
    shutil.copytree(out, copy)
    for name in ("leaderboard.json", "leaderboard.md", "leaderboard.html"):
        (copy / name).unlink()
    running = document["problems"][0]["key"]
    with sqlite3.connect(copy / "bench.db") as db:
        db.execute("UPDATE problems SET status = 'running', result = NULL WHERE key = ?", (running,))
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "report", str(copy), "--json"])
    assert exit_.value.code == 0
    printed = json.loads(capsys.readouterr().out)
    written = json.loads((copy / "leaderboard.json").read_text())
    assert printed["problems"] == written["problems"] and (copy / "leaderboard.md").exists()
    rows = {r["key"]: r for r in written["problems"]}
    assert rows[running]["status"] == "running" and written["overall"]["finished"] == len(rows) - 1
    before = {r["key"]: r["status"] for r in document["problems"]}
    assert all(r["status"] == before[key] for key, r in rows.items() if key != running)
    with pytest.raises(SystemExit) as exit_:
        main(["bench", "report", str(tmp_path)])
    assert exit_.value.code != 0 and "no bench.db" in capsys.readouterr().err


def test_resume_with_a_larger_budget_extends_every_search(tmp_path, monkeypatch, in_process_searches):
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    out = tmp_path / "bench"
    settings = BenchSettings(suite=str(SUITE), out=str(out), levels="1", problems="1", **dict(FAST, budget=1))
    (first,) = Bench(settings).run()["problems"]
    assert first["evaluations"] == 1
    state = out / "problems" / first["key"] / "state.db"
    seq_one = sqlite3.connect(state).execute("SELECT result FROM evaluations WHERE seq = 1").fetchone()
    with pytest.raises(BenchError, match="with --resume"):
        Bench(settings, extend_budget=2)
    with pytest.raises(BenchError, match="only extends"):
        Bench(settings, resume=True, extend_budget=0)
    document = Bench(settings, resume=True, extend_budget=3).run()
    (row,) = document["problems"]
    assert row["status"] == "done" and row["evaluations"] == 3 and document["settings"]["budget"] == 3
    # the same search went on: its first evaluation is the one the budget-1 bench made
    assert sqlite3.connect(state).execute("SELECT result FROM evaluations WHERE seq = 1").fetchone() == seq_one
    kept = json.loads((out / "leaderboard_budget1.json").read_text())
    assert kept["settings"]["budget"] == 1 and kept["problems"][0]["evaluations"] == 1
    jsonschema.validate(json.loads((out / "leaderboard.json").read_text()), schema())
    assert (out / "leaderboard_budget1.md").exists() and (out / "leaderboard_budget1.html").exists()


def test_rerun_forgets_a_problem_and_runs_it_again_from_scratch(tmp_path, monkeypatch, capsys, in_process_searches):
    monkeypatch.setenv("KERNELPRO_HOME", str(tmp_path / "home"))
    from kernelpro.knowledge import KnowledgeBase
    out = tmp_path / "bench"
    settings = BenchSettings(suite=str(SUITE), out=str(out), levels="1", **dict(FAST, use_kb=True))
    Bench(settings).run()

    def observations() -> dict:
        with KnowledgeBase() as base:
            return {p: n for p, n in base.db.execute("SELECT problem, COUNT(*) FROM observations GROUP BY problem")}

    def finished() -> dict:
        return dict(sqlite3.connect(out / "bench.db").execute("SELECT key, finished FROM problems"))

    before, first = observations(), finished()
    assert before.get("DoubleNegation") and before.get("ScaledSum")
    with pytest.raises(BenchError, match="with --resume"):
        Bench(settings, rerun=["level1/1_DoubleNegation"])
    with pytest.raises(BenchError, match="not a problem of this bench.*level1/2_ScaledSum"):
        Bench(settings, resume=True, rerun=["level1/9_Missing"])
    with pytest.raises(SystemExit) as exit_:  # the same refusal through the CLI
        main(["bench", str(SUITE), "--out", str(out), "--resume", "--rerun", "level1/9_Missing", "--json"])
    assert exit_.value.code == 2 and "level1/9_Missing: not a problem of this bench" in capsys.readouterr().err
    bench = Bench(settings, resume=True, rerun=["level1/1_DoubleNegation"])
    assert bench.forgotten_observations == before["DoubleNegation"]
    assert observations() == {"ScaledSum": before["ScaledSum"]}
    assert not (out / "problems" / "level1" / "1_DoubleNegation").exists()
    assert [e.key for e in bench.pending()] == ["level1/1_DoubleNegation"]
    document = bench.run()
    assert [r["status"] for r in document["problems"]] == ["done", "done"]
    again = finished()
    assert again["level1/2_ScaledSum"] == first["level1/2_ScaledSum"]
    assert again["level1/1_DoubleNegation"] > first["level1/1_DoubleNegation"]
    assert observations()["DoubleNegation"] > 0
    assert (out / "problems" / "level1" / "1_DoubleNegation" / "run.json").exists()


def test_the_ray_backend_sends_each_problem_as_a_task_and_records_a_dead_one(tmp_path, monkeypatch,
                                                                            in_process_searches):
    """Through a fake Ray (tests/fake_ray.py): one task per problem, each asking for one CPU; a finished task's
    result and files reach the bench's database and folder, and a task whose worker died is a failed problem with
    its cause, while the bench goes on."""
    from fake_ray import FakeRay
    fake = FakeRay(dies=("level1/2_ScaledSum",))
    monkeypatch.setitem(sys.modules, "ray", fake)
    out = tmp_path / "ray"
    settings = BenchSettings(suite=str(SUITE), out=str(out), levels="1", backend="ray", **dict(FAST, budget=1))
    document = Bench(settings).run()
    rows = {r["key"]: r for r in document["problems"]}
    assert rows["level1/1_DoubleNegation"]["status"] == "done" and rows["level1/1_DoubleNegation"]["evaluations"] == 1
    assert rows["level1/2_ScaledSum"]["status"] == "failed"
    assert "the Ray task failed: TaskDied" in rows["level1/2_ScaledSum"]["error"]
    assert fake.calls == ["init None", "shutdown"] and fake.resources == [{"max_retries": 0, "num_cpus": 1}]
    workers = sqlite3.connect(out / "bench.db").execute("SELECT DISTINCT worker FROM problems").fetchall()
    assert workers == [("ray",)]
    assert (out / "problems" / "level1" / "1_DoubleNegation" / "run.json").exists()
    jsonschema.validate(json.loads((out / "leaderboard.json").read_text()), schema())


@pytest.mark.slow
def test_the_ray_backend_runs_each_problem_as_a_task(tmp_path):
    """The real Ray (a local instance; minutes to start on two cores)."""
    pytest.importorskip("ray")
    out = tmp_path / "ray"
    settings = BenchSettings(suite=str(SUITE), out=str(out), levels="1", backend="ray", **FAST)
    document = Bench(settings).run()  # a local Ray instance on this machine's CPUs
    assert [r["status"] for r in document["problems"]] == ["done", "done"]
    assert all(r["valid"] and r["speedup"] for r in document["problems"])
    workers = sqlite3.connect(out / "bench.db").execute("SELECT DISTINCT worker FROM problems").fetchall()
    assert workers == [("ray",)]
    for row in document["problems"]:
        assert (out / "problems" / row["key"] / "run.json").exists()
    jsonschema.validate(json.loads((out / "leaderboard.json").read_text()), schema())
    with pytest.raises(BenchError, match="local backend"):
        Bench(BenchSettings(suite=str(SUITE), out=str(tmp_path / "x"), backend="ray", baselines_only=True, **FAST))


def test_kb_ablation_builds_a_base_on_one_half_and_resumes_without_rerunning(tmp_path, in_process_searches):
    """Three CPU benches (budget 2, over a fake evaluator): half A fills a knowledge base, half B runs from an empty
    one and from a copy of A's; run again, it finishes nothing twice."""
    from kernelpro.bench import ablation
    suite = tmp_path / "suite"
    shutil.copytree(SUITE / "level1", suite / "level1")  # two problems: one per half
    out = tmp_path / "ablation"
    document = ablation.run_ablation(suite, out, budget=2, device="cpu", profile=False)
    assert document["half_a"] == ["level1/1_DoubleNegation"] and document["half_b"] == ["level1/2_ScaledSum"]
    row = document["rows"][0]
    for arm in ablation.ARMS:
        assert 1 <= row[arm]["to_95"] <= row[arm]["evaluations"] <= 2 and row[arm]["final_best"] > 0
        assert document["summary"][arm]["problems"] == 1
    assert document["paired_test"]["n"] in (0, 1)
    to_95 = document["paired_test_to_95"]  # one pair: counted, too few for a test
    assert to_95["n"] == 1 and to_95["kb_fewer"] + to_95["empty_fewer"] <= 1 and to_95["p_value"] is None
    assert ablation.report_folder(out)["rows"] == document["rows"]  # --report-only: the same, running nothing
    # B's knowledge-base arm started from what A learned: A's problem is in its copy, not in the empty arm's base
    problems = lambda path: {p for (p,) in sqlite3.connect(path).execute("SELECT DISTINCT problem FROM observations")}
    assert problems(out / "kb_from_a.sqlite") and problems(out / "kb_from_a.sqlite") <= problems(out / "kb_for_b.sqlite")
    assert not problems(out / "kb_from_a.sqlite") & problems(out / "empty.sqlite")
    assert "| `level1/2_ScaledSum` |" in ablation.markdown(document)
    started = {name: sqlite3.connect(out / name / "bench.db").execute("SELECT key, started FROM problems").fetchall()
               for name in ("bench_a", "bench_b_empty_kb", "bench_b_kb_from_a")}
    again = ablation.run_ablation(suite, out, budget=2, device="cpu", profile=False)
    assert again["rows"] == document["rows"]
    for name, rows in started.items():
        assert sqlite3.connect(out / name / "bench.db").execute("SELECT key, started FROM problems").fetchall() == rows


def test_kb_ablation_shares_gpus_half_and_half():
    from kernelpro.bench.ablation import side_by_side
    assert side_by_side(["cpu"]) is None and side_by_side(["0"]) is None
    assert side_by_side(["0", "1"]) == ("0", "1") and side_by_side(["0", "1", "2", "3", "4"]) == ("0,1", "2,3,4")


def test_snapshot_of_a_live_bench_folder_holds_its_committed_rows(tmp_path):
    """scripts/bench_snapshot.py on a folder whose databases are open in WAL mode, with rows still
    only in the log: the archive's copies hold them, and no -wal file goes in."""
    import importlib.util
    import tarfile
    spec = importlib.util.spec_from_file_location("bench_snapshot", ROOT / "scripts" / "bench_snapshot.py")
    snapshot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snapshot)
    bench = tmp_path / "bench"
    (bench / "problems" / "p").mkdir(parents=True)
    (bench / "problems" / "p" / "best.py").write_text("x = 1\n")
    writers = []
    for path in (bench / "bench.db", bench / "problems" / "p" / "state.db", tmp_path / "kb.sqlite"):
        db = sqlite3.connect(path)
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("PRAGMA wal_autocheckpoint=0")  # the rows stay in the -wal file
        db.execute("CREATE TABLE t (v TEXT)")
        with db:
            db.execute("INSERT INTO t VALUES (?)", (path.name,))
        writers.append(db)  # kept open, as a running bench keeps them
    assert (bench / "bench.db-wal").exists()
    out = tmp_path / "state.tgz"
    assert snapshot.snapshot(bench, out, tmp_path / "kb.sqlite") == 4
    restored = tmp_path / "restored"
    with tarfile.open(out) as tar:
        names = tar.getnames()
        tar.extractall(restored, filter="data")
    assert not any(n.endswith(("-wal", "-shm")) for n in names)
    for path, value in ((restored / "bench.db", "bench.db"), (restored / "problems" / "p" / "state.db", "state.db"),
                        (restored / "_knowledge.db", "kb.sqlite")):
        assert sqlite3.connect(path).execute("SELECT v FROM t").fetchall() == [(value,)]
    assert (restored / "problems" / "p" / "best.py").read_text() == "x = 1\n"
    for db in writers:
        db.close()


def test_remeasure_times_each_best_again_and_the_leaderboard_reports_that_one_measurement(level1_bench, tmp_path,
                                                                                           capsys, in_process_searches):
    out = tmp_path / "bench"
    shutil.copytree(level1_bench, out)
    settings = BenchSettings(suite=str(SUITE), out=str(out), levels="1", **FAST)

    def runs() -> dict:
        return {key: json.loads((out / "problems" / key / "run.json").read_text())
                for key in ("level1/1_DoubleNegation", "level1/2_ScaledSum")}

    def evaluations(key: str) -> int:
        return sqlite3.connect(out / "problems" / key / "state.db").execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]

    first = runs()
    with pytest.raises(BenchError, match="with --resume"):
        Bench(settings, remeasure=["all"])
    with pytest.raises(BenchError, match="level1/9_Missing: not a finished search of this bench"):
        Bench(settings, resume=True, remeasure=["level1/9_Missing"])
    with pytest.raises(SystemExit) as exit_:
        main(["bench", str(SUITE), "--out", str(out), "--resume", "--remeasure-problems", "level1/9_Missing", "--json"])
    assert exit_.value.code == 2 and "not a finished search" in capsys.readouterr().err
    counts = {key: evaluations(key) for key in first}
    bench = Bench(settings, resume=True, remeasure=["all"])
    assert sorted(e.key for e in bench.pending()) == sorted(first)
    bench = Bench(settings, resume=True)  # as after a kill: a plain --resume goes on re-measuring them
    assert bench.remeasure == set(first)
    document = bench.run()
    jsonschema.validate(document, schema())
    again = runs()
    for row in document["problems"]:
        key, before, after = row["key"], first[row["key"]], again[row["key"]]
        assert evaluations(key) == counts[key] and after["evaluations"] == before["evaluations"]
        if after.get("rejected_best"):  # on a loaded CPU the new timing found the best no faster than eager
            assert after["rejected_best"]["node"] == before["best_node"] and after["best_node"] == 0
            continue
        assert after["best_node"] == before["best_node"] and after["speedup"] == before["speedup"]
        if after["best_node"]:  # the best was timed again: a new measurement, and the row shows it whole
            assert after["final"] and after["final"] != before["final"]
            assert row["measured"] == "final" and row["search_speedup"] == after["speedup"]
            assert row["best_ms_measured"] == [before["final"]["best_ms"], after["final"]["best_ms"]]
            assert (row["eager_ms"], row["best_ms"], row["speedup"]) == (
                after["final"]["eager_ms"], after["final"]["best_ms"], after["final"]["speedup"])
            assert row["speedup"] == pytest.approx(row["eager_ms"] / row["best_ms"])
        else:
            assert after["final"] is None and row["measured"] == "search"


def test_signed_rank_tests_paired_differences_and_needs_two_that_differ():
    from kernelpro.bench.compare import signed_rank
    assert signed_rank([0.0, 0.5, 0.0]) == {"statistic": None, "p_value": None}
    all_one_way = signed_rank([4, 1, 5, 9, 4, 3, 2, 6])
    assert all_one_way["statistic"] == 0 and all_one_way["p_value"] < 0.01
    assert signed_rank([1, -1, 2, -2, 3, -3])["p_value"] > 0.9


def test_a_bench_with_failed_problems_exits_3_naming_each(finished_bench, capsys):
    import typer
    from rich.console import Console
    from kernelpro.cli.bench import FAILED_PROBLEMS_EXIT, _exit_for_failures
    _, document = finished_bench
    with pytest.raises(typer.Exit) as exit_:
        _exit_for_failures(document, Console(stderr=True))
    assert exit_.value.exit_code == FAILED_PROBLEMS_EXIT == 3
    assert "failed: level1/3_Broken: " in capsys.readouterr().err
    _exit_for_failures({"problems": [r for r in document["problems"] if r["status"] != "failed"]}, Console())


def test_ctrl_c_stops_the_bench_with_exit_130_and_resume_finishes_it(tmp_path, capsys):
    """SIGINT to the bench's process group (a terminal's Ctrl-C): exit 130 and the resume command; no
    problem is recorded as failed; --resume then finishes every problem."""
    out = tmp_path / "bench"
    args = [sys.executable, "-m", "kernelpro", "bench", str(SUITE), "--level", "1", "--problems", "1", "--budget", "2",
            "--no-profile", "--device", "cpu", "--no-kb", "--out", str(out)]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                               start_new_session=True, preexec_fn=default_sigint)
    database = out / "bench.db"
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and process.poll() is None:  # until a search is under way
        time.sleep(0.5)
        if list(out.glob("problems/*/*/state.db")):
            break
    assert process.poll() is None, process.stderr.read()[-2000:]
    os.killpg(process.pid, signal.SIGINT)
    _, err = process.communicate(timeout=300)
    assert process.returncode == 130, err[-2000:]
    assert "interrupted:" in err and "--resume" in err, err[-2000:]
    statuses = [row[0] for row in sqlite3.connect(database).execute("SELECT status FROM problems")]
    assert "failed" not in statuses and set(statuses) != {"done"}, statuses
    assert (out / "leaderboard.json").exists()
    assert [r["status"] for r in resumed_in_process(args, capsys)["problems"]] == ["done"]


def search_settings_file(entry, settings, folder: Path, out: Path):
    """What a bench's child reads: the settings file the bench writes for one problem's search."""
    from kernelpro.bench.child import write_search_settings
    from kernelpro.settings import SearchSettings
    return SearchSettings.model_validate_json(write_search_settings(entry, settings, folder, out).read_text())


def test_unsafe_no_sandbox_reaches_each_search_and_is_never_saved(tmp_path):
    """--unsafe-no-sandbox reaches every search's settings file; a resumed bench uses this command's choice, not
    the one saved with the bench."""
    out = tmp_path / "bench"
    bench = Bench(BenchSettings(suite=str(SUITE), out=str(out), coder="anthropic", unsafe_no_sandbox=True, **FAST))
    entry = bench.entries[0]
    written = search_settings_file(entry, bench.settings, out / "p", out)
    assert written.unsafe_no_sandbox and written.problem == str(entry.path.resolve())
    assert written.out == str((out / "p").resolve())
    again = Bench(BenchSettings(suite=str(SUITE), out=str(out), **FAST), resume=True)
    assert again.settings.searches.coder == "anthropic" and not again.settings.searches.unsafe_no_sandbox
    assert not search_settings_file(entry, again.settings, out / "p", out).unsafe_no_sandbox


def test_no_compile_baseline_reaches_each_search_and_a_resumed_bench_keeps_it(tmp_path):
    """--no-compile-baseline (a cheaper bench: no torch.compile timing) reaches every search's settings and is saved
    with the bench, so a resumed bench times the same baselines; by default a search on CUDA times it."""
    out = tmp_path / "bench"
    bench = Bench(BenchSettings(suite=str(SUITE), out=str(out), compile_baseline=False, **FAST))
    entry = bench.entries[0]
    assert not search_settings_file(entry, bench.settings, out / "p", out).compile_baseline
    again = Bench(BenchSettings(suite=str(SUITE), out=str(out), **FAST), resume=True)
    assert not search_settings_file(entry, again.settings, out / "p", out).compile_baseline
    default = BenchSettings(suite=str(SUITE), out=str(tmp_path / "other"), **FAST)
    assert not search_settings_file(entry, default, out / "p", out).compile_baseline  # FAST's device is the CPU
    assert search_settings_file(entry, default.updated(device="cuda"), out / "p", out).compile_baseline


def test_a_results_only_snapshot_holds_no_problem_code_and_the_bench_resumes_from_it(level1_bench, tmp_path,
                                                                                     in_process_searches):
    """scripts/bench_snapshot.py --results-only: what a KernelBench bench measured, without KernelBench's
    code, so it can be committed; restored on a fresh folder, the bench runs only what it had not finished."""
    import importlib.util
    import tarfile
    spec = importlib.util.spec_from_file_location("bench_snapshot", ROOT / "scripts" / "bench_snapshot.py")
    snapshot = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(snapshot)
    out = tmp_path / "bench"
    shutil.copytree(level1_bench, out)
    finished, cut = "level1/1_DoubleNegation", "level1/2_ScaledSum"
    with sqlite3.connect(out / "bench.db") as db:  # the second one as a kill leaves it: running
        db.execute("UPDATE problems SET status = 'running' WHERE key = ?", (cut,))
        before = dict(db.execute("SELECT key, started FROM problems").fetchall())
    tree = json.loads((out / "problems" / finished / "tree.json").read_text())
    tree["nodes"][-1]["failure"] = "Traceback: x = self.secret_line(x)"
    (out / "problems" / finished / "tree.json").write_text(json.dumps(tree))
    archive = tmp_path / "results.tgz"
    snapshot.snapshot(out, archive, results_only=True)
    restored = tmp_path / "restored"
    with tarfile.open(archive) as tar:
        names = tar.getnames()
        tar.extractall(restored, filter="data")
    sources = [p.read_text() for p in sorted(SUITE.glob("level1/*.py"))]
    for path in restored.rglob("*"):
        if path.is_file() and path.suffix != ".db":
            text = path.read_text()
            assert not any(source.strip() in text for source in sources), path
            assert "class Model" not in text and "secret_line" not in text, path
    assert not any(n.endswith((".py", "state.db", ".log")) for n in names)
    assert (restored / "problems" / finished / "run.json").exists() and not (restored / "problems" / cut).exists()
    assert sqlite3.connect(restored / "bench.db").execute(
        "SELECT status FROM problems WHERE key = ?", (cut,)).fetchone() == ("pending",)
    Bench(BenchSettings(suite=str(SUITE), out=str(restored), levels="1", **FAST), resume=True).run()
    after = dict(sqlite3.connect(restored / "bench.db").execute("SELECT key, started FROM problems").fetchall())
    assert after[finished] == before[finished] and after[cut] != before[cut]
    board = json.loads((restored / "leaderboard.json").read_text())
    assert {row["key"] for row in board["problems"]} == {finished, cut}


def test_resume_goes_on_with_the_benchs_own_settings_and_names_a_conflicting_flag(tmp_path, capsys):
    """--resume takes every setting the bench recorded; one given again with another value is refused by its
    option, where the bench runs (--gpus) is this command's, and nothing starts before the refusal."""
    out = tmp_path / "bench"
    Bench(BenchSettings(suite=str(SUITE), out=str(out), levels="1", seed=3, **FAST))  # recorded, nothing run
    with pytest.raises(BenchError, match=r"--level '2' \(the bench has '1'\); --seed 4 \(the bench has 3\)"):
        Bench(BenchSettings(suite=str(SUITE), out=str(out), levels="2", seed=4, **FAST), resume=True,
              given=frozenset({"seed", "levels"}))
    same = Bench(BenchSettings(suite=str(SUITE), out=str(out), seed=3, gpus="1", **FAST), resume=True,
                 given=frozenset({"seed", "gpus"}))
    assert same.settings.levels == "1" and same.settings.searches.seed == 3 and same.settings.gpus == "1"
    with pytest.raises(SystemExit) as exit_:
        main(["bench", str(SUITE), "--out", str(out), "--resume", "--no-adaptive-timing", "--budget", "3"])
    assert exit_.value.code == 2
    assert "--adaptive-timing off (the bench has on)" in capsys.readouterr().err
    assert sqlite3.connect(out / "bench.db").execute("SELECT COUNT(*) FROM problems WHERE status != 'pending'"
                                                     ).fetchone()[0] == 0


class _BrokenLaneBench(Bench):
    """A bench whose own code fails on one problem (as a store error once did): the lane records it, goes on."""

    def baseline(self, entry, slot):
        if entry.number == 1:
            raise RuntimeError("injected")
        return super().baseline(entry, slot)


def test_a_fault_of_the_bench_itself_is_recorded_as_the_problem_s_failure(tmp_path):
    settings = BenchSettings(suite=str(SUITE), out=str(tmp_path / "a"), levels="1", problems="1",
                             baselines_only=True, **FAST)
    (row,) = _BrokenLaneBench(settings).run()["problems"]
    assert row["status"] == "failed" and "injected" in json.dumps(row)
    with sqlite3.connect(tmp_path / "a" / "bench.db") as db:
        assert db.execute("SELECT status, error FROM problems").fetchall() == [
            ("failed", "the bench failed running it: RuntimeError: injected")]
