"""`kernelpro search`: input errors, the coder protocol on a fake harness, an end-to-end CPU search over
two shipped examples, kill -9 and resume, a standalone best.py, and the report in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import built_once, default_sigint, in_process
from kernelpro.bench.child import summarize_run
from kernelpro.cli import main
from kernelpro.coder import CoderProposal, default_coder
from kernelpro.driver import SearchRun
from kernelpro.settings import SearchSettings
from kernelpro.harness.records import EvalResult, Phase, TimingStats, Verdict
from kernelpro.tools.records import TECHNIQUES

ROOT = Path(__file__).parent.parent
EXAMPLES = ROOT / "examples"
DATA = Path(__file__).parent / "data" / "search"


def cli(argv: list[str], capsys) -> tuple[int, str]:
    done = in_process(capsys, *argv)
    return done.returncode, done.stdout + done.stderr


@pytest.mark.parametrize("extra, message", [
    (["--budget", "0"], "'--budget': Input should be greater than or equal to 1"),  # as on bench
    (["--parallel", "0"], "'--parallel': Input should be greater than or equal to 1"),
    (["--resume"], "holds no run to resume"),
    (["--device", "cuda"], "CUDA"),
    (["--objective", "energy"], "energy is measured with NVML"),  # then what to do: test_energy.py
    (["--coder", "anthropic"], "needs ANTHROPIC_API_KEY"),
])
def test_bad_input_gets_a_clear_error(tmp_path, capsys, monkeypatch, extra, message):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    if "--device" in extra:
        import torch
        if torch.cuda.is_available():
            pytest.skip("this machine has a GPU")
    code, text = cli(["search", str(DATA / "redundant.py"), "--out", str(tmp_path / "run"), *extra], capsys)
    assert code == 2 and message in text, text
    assert not (tmp_path / "run").exists()  # a refused run leaves nothing behind
    assert "coder:" not in text  # the error comes alone, before any banner


def test_bad_problem_and_busy_folder(tmp_path, capsys):
    code, text = cli(["search", str(tmp_path / "nowhere.py"), "--out", str(tmp_path / "n")], capsys)
    assert code == 2 and "nowhere.py: no such file" in text and not (tmp_path / "n").exists()
    broken = tmp_path / "broken.py"
    broken.write_text("import torch\nclass Model:\n    pass\n")
    code, text = cli(["search", str(broken), "--out", str(tmp_path / "a")], capsys)
    assert code == 2 and "get_inputs" in text
    busy = tmp_path / "busy"
    busy.mkdir()
    (busy / "notes.txt").write_text("mine")
    code, text = cli(["search", str(DATA / "redundant.py"), "--out", str(busy)], capsys)
    assert code == 2 and "not empty" in text and (busy / "notes.txt").read_text() == "mine"


def test_a_run_that_failed_before_its_reference_does_not_block_the_same_command(tmp_path, capsys):
    problem = tmp_path / "flaky.py"
    good = (DATA / "redundant.py").read_text()
    problem.write_text(good.replace("def get_inputs():", "def get_inputs():\n    raise RuntimeError('no data yet')"
                                    "\n\n\ndef _unused():", 1))
    args = ["search", str(problem), "--out", str(tmp_path / "run"), "--budget", "1", "--no-profile", "--device",
            "cpu", "--no-kb", "--json"]
    code, text = cli(args, capsys)
    assert code == 2 and "no data yet" in text
    assert not (tmp_path / "run").exists()  # it made the folder and measured nothing: the folder is gone
    problem.write_text(good)
    code, text = cli(args, capsys)
    assert code == 0, text
    assert json.loads((tmp_path / "run" / "run.json").read_text())["evaluations"] == 1


def test_default_coder_follows_the_api_key(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    assert default_coder() == "offline"
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    assert default_coder() == "anthropic"


# -- the coder protocol on a fake harness -----------------------------------------------------------
def fake_moves(source: str) -> int:
    """The moves a candidate's header lists, counting what simplify_all made as that many moves."""
    made = re.findall(r"^#     made: (.*)$", source, flags=re.M)
    return len(re.findall(r"^#   - \w+ \(", source, flags=re.M)) - len(made) + sum(len(m.split(", ")) for m in made)


class FakeHarness:
    """Judges by the candidate's header: each listed move saves 10% of 1 ms (each rewrite kind that
    simplify_all made counts as a move); 'BROKEN' fails to compile."""

    def __init__(self):
        self.sources: list[str] = []

    def prebuild(self, source, options=None, problem=None):
        return None

    def close(self):
        pass

    def evaluate(self, problem, source, options) -> EvalResult:
        self.sources.append(source)
        base = dict(tolerance=1e-4, device="cpu", precision="fp32", policy="relaxed", device_name="fake",
                    torch_version="fake")
        if "BROKEN" in source:
            return EvalResult(verdict=Verdict.COMPILE_ERROR, phase=Phase.LOAD, reason="SyntaxError: BROKEN", **base)
        ms = 1.0 * 0.9 ** fake_moves(source)

        def stats(value):
            return TimingStats(median_ms=value, iqr_ms=0.0, cv=0.0, mean_ms=value, min_ms=value, max_ms=value,
                               trials=10, host_median_ms=value)
        return EvalResult(verdict=Verdict.CORRECT, phase=Phase.DONE, reason="correct", speedup=1.0 / ms,
                          candidate=stats(ms), reference=stats(1.0), **base)


def test_offline_coder_through_the_loop_on_a_fake_harness(tmp_path):
    harness = FakeHarness()
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=6,
                              profile=False)
    document = SearchRun(settings, evaluator=harness).run()
    assert document["evaluations"] == 6 and document["verdicts"] == {"correct": 6}
    out = tmp_path / "run"
    assert document["speedup"] == pytest.approx(1 / 0.9 ** fake_moves((out / "best.py").read_text()))
    assert document["speedup"] > 1 / 0.9 ** 2  # more than any single rewrite
    # every ratio the report prints is the quotient of the two timings it names, to the printed digit
    report = (out / "report.md").read_text()
    best = re.search(r"\| best \| ([\d.]+) ms, ([\d.]+)x vs eager \(([\d.]+) ms, timed in the same", report)
    assert best and float(best[2]) == pytest.approx(float(best[3]) / float(best[1]), abs=0.0015)
    assert float(best[2]) == pytest.approx(document["best_reference_ms"] / document["best_ms"], abs=0.0015)
    again = re.search(r"\| re-measured after the search \| ([\d.]+) ms, ([\d.]+)x vs eager \(([\d.]+) ms\)", report)
    assert again and float(again[2]) == pytest.approx(float(again[3]) / float(again[1]), abs=0.0015)
    # the best is timed once more after the search, and run.json keeps that measurement whole
    assert document["final"] == {"eager_ms": 1.0, "compile_ms": None, "best_ms": pytest.approx(document["best_ms"]),
                                 "speedup": pytest.approx(document["speedup"]), "speedup_vs_compile": None,
                                 "compile_correct": None, "compile_mismatch": "",  # torch.compile was not timed
                                 "kernelbench": None,  # KernelBench's timing method: on CUDA only
                                 "device_name": "fake",  # the card that timed it
                                 "tolerance_used": None, "correct_trials": 0,  # the fake compares nothing
                                 "energy": None}  # no meter: no energy windows
    assert document["best_tolerance_used"] is None and document["best_rechecked"] is False
    tree = json.loads((out / "tree.json").read_text())
    evaluated = [n for n in tree["nodes"] if n["parent"] is not None and n["transposition_of"] is None]
    assert len(evaluated) == 6
    assert any(node["parent"] != 0 for node in evaluated)  # the tree went deeper than the root's children
    for node in evaluated:
        assert set(node["techniques"]) <= set(TECHNIQUES)
        assert (out / node["file"]).exists() and (out / node["file"]).with_suffix(".json").exists()
    assert "class ModelNew" in (out / "best.py").read_text()


class ScriptedCoder:
    """A test coder: a broken candidate first, then it records what it is asked."""

    name = "scripted"

    def __init__(self, source: str):
        self.source = source
        self.requests = []

    def propose(self, request):
        self.requests.append(request)
        count = len(self.requests)
        if count == 1:
            return CoderProposal(source="BROKEN", techniques=("fuse_elementwise",), rationale="a bad first try",
                                 move="broken", prior=1.0)  # so PUCT comes back to repair it
        return CoderProposal(source=self.source + f"\n#   - move{count} (x): y\n", techniques=("library_call",),
                             rationale="fine", move=f"move{count}", state={"n": count}, prior=0.05)


def test_failed_candidates_get_repair_requests_with_the_reason(tmp_path):
    problem = DATA / "redundant.py"
    coder = ScriptedCoder(problem.read_text() + "\nModelNew = Model\n")
    # 20: the last 8 evaluations are MCTS's greedy tail, which refines the best node and repairs nothing
    settings = SearchSettings(problem=str(problem), out=str(tmp_path / "run"), budget=20, profile=False)
    document = SearchRun(settings, evaluator=FakeHarness(), coder=coder).run()
    assert document["verdicts"] == {"compile_error": 1, "correct": 19}
    repairs = [r for r in coder.requests if r.kind == "repair"]
    assert repairs and "BROKEN" in repairs[0].failure and repairs[0].parent_source == "BROKEN"
    refine = [r for r in coder.requests if r.kind == "refine"]
    assert refine and all(r.parent_state.get("n") for r in refine)


class RulingCoder(ScriptedCoder):
    """A test coder that predicted one move to fail and never offered it."""

    def ruled_out(self):
        return {"tf32_matmul": "predicted to fail: eager itself with TF32 puts 53.2% of its output outside"}


def test_the_moves_a_coder_ruled_out_are_kept_in_run_json_and_named_in_the_report(tmp_path):
    problem = DATA / "redundant.py"
    settings = SearchSettings(problem=str(problem), out=str(tmp_path / "run"), budget=2, profile=False)
    document = SearchRun(settings, evaluator=FakeHarness(),
                         coder=RulingCoder(problem.read_text() + "\nModelNew = Model\n")).run()
    assert document["moves_ruled_out"] == {"tf32_matmul": "predicted to fail: eager itself with TF32 puts 53.2% "
                                                          "of its output outside"}
    assert json.loads((tmp_path / "run" / "run.json").read_text())["moves_ruled_out"] == document["moves_ruled_out"]
    # a bench's record of the search (bench.db) keeps it too
    assert summarize_run(tmp_path / "run")["moves_ruled_out"] == document["moves_ruled_out"]
    assert ("| not offered | tf32_matmul: predicted to fail: eager itself with TF32 puts 53.2% of its output outside |"
            in (tmp_path / "run" / "report.md").read_text())
    # a coder without ruled_out (this one) keeps nothing
    plain = SearchRun(SearchSettings(problem=str(problem), out=str(tmp_path / "plain"), budget=2, profile=False),
                      evaluator=FakeHarness(),
                      coder=ScriptedCoder(problem.read_text() + "\nModelNew = Model\n")).run()
    assert plain["moves_ruled_out"] == {} and "not offered" not in (tmp_path / "plain" / "report.md").read_text()


class StartedCoder(ScriptedCoder):
    def start(self, root=None):
        self.root = root


def test_the_root_request_a_coder_starts_on_is_the_root_it_is_then_asked_for(tmp_path):
    """On CUDA the search hands the coder the root's request before the reference is evaluated (the offline coder
    begins its answer then); it must name the same node as the root's request proper, or the answer asked ahead is
    not the one read. On the CPU nothing is asked ahead: the worker would take a core from the reference's timing."""
    problem = DATA / "redundant.py"
    coder = StartedCoder(problem.read_text() + "\nModelNew = Model\n")
    settings = SearchSettings(problem=str(problem), out=str(tmp_path / "run"), budget=2, profile=False)
    run = SearchRun(settings, evaluator=FakeHarness(), coder=coder)
    run.run()
    assert coder.root is None
    ahead, asked = run.briefing.root_request(), coder.requests[0]
    for name in ("problem_path", "problem_source", "parent_source", "parent_state", "parent_verdict", "kind",
                 "device", "precision", "policy", "model_mode"):
        assert getattr(ahead, name) == getattr(asked, name), name


# -- end to end on the CPU, with the real harness ------------------------------------------------------
def run_cli(*args, cwd=ROOT, env=None, timeout=900) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelpro", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


@pytest.fixture(scope="module")
def attention_run(tmp_path_factory):
    """A real budget-3 search of examples/attention_block.py on the CPU, built once per run of the suite. The example
    at a sixteenth of its size (2 x 128 tokens of 256 features): the same graph and moves, and an evaluation of about
    a second instead of ten on this CPU."""
    def build(folder: Path) -> dict:
        sizes = "BATCH = 4\nTOKENS = 512\nWIDTH = 512\nHEADS = 8\n"
        source = (EXAMPLES / "attention_block.py").read_text()
        assert sizes in source
        problem = folder / "attention_block.py"
        problem.write_text(source.replace(sizes, "BATCH = 2\nTOKENS = 128\nWIDTH = 256\nHEADS = 4\n"))
        done = run_cli("search", str(problem), "--model-mode", "eval", "--budget", "3", "--device",
                       "cpu", "--out", str(folder / "run"), "--json")
        assert done.returncode == 0, done.stderr[-3000:]
        return {"out": str(folder / "run"), "document": json.loads(done.stdout)}
    built = built_once(tmp_path_factory, "attention_run", build)
    return Path(built["out"]), built["document"]  # the problem searched is beside the run: ../attention_block.py


def test_end_to_end_search_writes_every_output(attention_run):
    out, document = attention_run
    for name in ("best.py", "report.md", "report.html", "run.json", "tree.json", "state.db"):
        assert (out / name).exists(), name
    for key in ("baseline_ms", "best_ms", "speedup", "evaluations", "verdicts", "objective", "device", "coder"):
        assert key in document
    assert document["coder"] == "offline" and document["device"] == "cpu" and document["objective"] == "time"
    assert document["launch_ranking"] == "auto"
    assert sum(document["verdicts"].values()) == document["evaluations"] <= 3
    assert document["evaluations"] == 3 or document["stopped"] == "no moves left"
    split = document["time_split_s"]  # where the time went: every part took some, and they add up to the wall
    for part in ("reference", "profile", "coder", "evaluations"):
        assert split[part] > 0, part
    assert split["reference"] + split["profile"] + split["coder"] + split["evaluations"] + split["other"] == \
        pytest.approx(document["wall_s"], abs=0.01)
    assert split["phases"]["timing"] > 0 and split["phases"]["correctness"] > 0
    # the best is re-measured after the search where a candidate beat the reference (on a loaded CPU it may not)
    assert (split["final"] > 0) == bool(document["best_node"])
    assert sum(split["phases"].values()) + split["harness"] == pytest.approx(split["evaluations"], abs=0.05)
    throughput = next(line for line in (out / "report.md").read_text().splitlines() if "evaluations/min" in line)
    assert f"reference {split['reference']:.1f} s" in throughput and f"timing {split['phases']['timing']:.1f} s" in throughput
    profile = sqlite3.connect(out / "state.db").execute("SELECT COUNT(*) FROM profiles").fetchone()[0]
    assert profile >= 1  # the reference was profiled, and its guidance reached the coder
    header = (out / "best.py").read_text().splitlines()[:8]
    assert header[0].startswith("# kernelpro: best candidate") and any("device: cpu" in h for h in header)


def test_best_py_runs_without_kernelpro_and_passes_eval(attention_run, tmp_path, capsys):
    out, _ = attention_run
    check = tmp_path / "standalone.py"
    check.write_text(
        "import sys\nsys.modules['kernelpro'] = None  # any import of kernelpro now fails\n"
        "import importlib.util, torch\n"
        f"spec = importlib.util.spec_from_file_location('best', {str(out / 'best.py')!r})\n"
        "best = importlib.util.module_from_spec(spec); spec.loader.exec_module(best)\n"
        "torch.manual_seed(0); reference = best.Model(*best.get_init_inputs()).eval()\n"
        "torch.manual_seed(0); candidate = best.ModelNew(*best.get_init_inputs()).eval()\n"
        "inputs = best.get_inputs()\n"
        "with torch.no_grad():\n    torch.testing.assert_close(candidate(*inputs), reference(*inputs), "
        "atol=1e-4, rtol=1e-4)\nprint('standalone ok')\n")
    done = subprocess.run([sys.executable, str(check)], capture_output=True, text=True, cwd=tmp_path)
    assert done.returncode == 0 and "standalone ok" in done.stdout, done.stderr[-2000:]
    capsys.readouterr()
    code, _ = cli(["eval", str(out.parent / "attention_block.py"), str(out / "best.py"), "--device", "cpu",
                   "--model-mode", "eval", "--trials", "3", "--json-file", str(tmp_path / "verdict.json")], capsys)
    assert code == 0 and json.loads((tmp_path / "verdict.json").read_text())["verdict"] == "correct"


CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.skipif(CHROMIUM is None, reason="Debian chromium is not installed (make test installs it as root)")
def test_report_renders_in_headless_chromium(attention_run, tmp_path):
    out, document = attention_run
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
             "--disable-background-networking", "--disable-component-update", "--disable-sync",
             f"--user-data-dir={tmp_path / 'profile'}"]
    url = (out / "report.html").resolve().as_uri()
    dom = subprocess.run([CHROMIUM, *flags, "--dump-dom", url], capture_output=True, text=True, timeout=120)
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'id="summary"' in dom.stdout and dom.stdout.count("<svg") >= 2
    assert f"{document['speedup']:.2f}x" in dom.stdout
    shot = tmp_path / "report.png"
    subprocess.run([CHROMIUM, *flags, f"--screenshot={shot}", "--window-size=1200,1600", url],
                   capture_output=True, timeout=120)
    assert shot.exists() and shot.stat().st_size > 20_000  # a rendered page (a blank PNG is a few kB)


def test_kill_minus_9_then_resume_loses_and_repeats_nothing(tmp_path, capsys):
    out = tmp_path / "run"
    problem = str(DATA / "redundant.py")
    args = [sys.executable, "-m", "kernelpro", "search", problem, "--budget", "4",
            "--device", "cpu", "--no-profile", "--out", str(out), "--json"]
    process = subprocess.Popen(args, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                               start_new_session=True)
    database = out / "state.db"
    deadline = time.monotonic() + 600
    count = 0
    while time.monotonic() < deadline and process.poll() is None:
        if database.exists():
            try:
                count = sqlite3.connect(database).execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
            except sqlite3.OperationalError:
                count = 0
            if count >= 2:
                break
        time.sleep(0.5)
    assert process.poll() is None, process.stderr.read()[-2000:]
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    before = sqlite3.connect(database).execute("SELECT node_id, sha256 FROM evaluations ORDER BY seq").fetchall()
    assert len(before) >= 2
    killed_s = json.loads(sqlite3.connect(database).execute("SELECT value FROM meta WHERE key = 'wall_s'").fetchone()[0])
    assert killed_s > 0  # the killed segment's time is kept
    code, _ = cli(["search", problem, "--budget", "4", "--device", "cpu", "--no-profile", "--out", str(out), "--json",
                   "--resume"], capsys)
    assert code == 0
    document = json.loads((out / "run.json").read_text())
    after = sqlite3.connect(database).execute("SELECT node_id, sha256 FROM evaluations ORDER BY seq").fetchall()
    assert after[:len(before)] == before  # nothing lost
    assert len({sha for _, sha in after}) == len(after)  # nothing evaluated twice
    assert document["evaluations"] == len(after) == 4  # the final count equals the budget
    assert json.loads((out / "run.json").read_text())["wall_s"] > killed_s  # both segments' time
    code, text = cli(["search", problem, "--out", str(out)], capsys)
    assert code == 2 and "not empty" in text


class SlowFakeHarness(FakeHarness):
    """The fake harness, recording how many evaluations overlap. Until three have overlapped once,
    each waits (up to 15 s) for the others, so the coder's own latency cannot hide a real overlap."""

    def __init__(self):
        super().__init__()
        import threading
        self.lock, self.running, self.most = threading.Lock(), 0, 0
        self.overlapped = threading.Event()

    def evaluate(self, problem, source, options):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
            if self.most >= 3:
                self.overlapped.set()
        if "The reference itself" not in source:  # the baseline evaluation runs alone
            self.overlapped.wait(timeout=15)
        with self.lock:
            self.running -= 1
        return super().evaluate(problem, source, options)


def test_resume_of_a_run_stopped_before_it_recorded_its_settings_starts_afresh(tmp_path):
    """A Ctrl-C between the state file's creation and the run's first record (its settings) left a state.db
    with nothing in it; --resume crashed on it (a bench resumed after Ctrl-C failed the problem)."""
    from kernelpro.runstore import RunStore
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=2, profile=False)
    RunStore(Path(settings.out)).close()  # the state file exists, with no settings in it
    document = SearchRun(settings, resume=True, evaluator=FakeHarness()).run()
    assert document["evaluations"] >= 1 and document["budget"] == 2
    assert RunStore(Path(settings.out)).get("settings")["problem"] == settings.problem


def test_remeasure_only_times_the_finished_best_again_and_evaluates_nothing_new(tmp_path):
    from kernelpro.search_settings import SearchInputError
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=3, profile=False)
    first = SearchRun(settings, evaluator=FakeHarness()).run()
    rows = sqlite3.connect(tmp_path / "run" / "state.db").execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    with pytest.raises(SearchInputError, match="--remeasure"):
        SearchRun(settings.model_copy(update=dict(out=str(tmp_path / "other"))), remeasure_only=True)
    harness = FakeHarness()
    # a larger budget on the command line does not make it search on
    again = SearchRun(settings.model_copy(update=dict(budget=9)), resume=True, remeasure_only=True, evaluator=harness).run()
    assert len(harness.sources) == 1  # the best, once; the reference's times are the run's own
    assert (again["evaluations"], again["budget"], again["stopped"]) == (first["evaluations"], 3, first["stopped"])
    assert first["final"] and again["final"] == first["final"] and again["best_moves"] == first["best_moves"]
    # each re-measurement is kept beside the earlier ones, not written over them
    def undated(history: list[dict]) -> list[dict]:
        return [{k: v for k, v in entry.items() if k != "date"} for entry in history]
    assert undated(first["final_history"]) == [first["final"]]
    assert undated(again["final_history"]) == [first["final"], again["final"]]
    third = SearchRun(settings, resume=True, remeasure_only=True, evaluator=FakeHarness()).run()
    assert len(third["final_history"]) == 3 and third["final_history"][:2] == again["final_history"]
    assert sqlite3.connect(tmp_path / "run" / "state.db").execute(
        "SELECT COUNT(*) FROM evaluations").fetchone()[0] == rows
    # the run's problem is its identity: another one (by content) is refused, not judged as this one
    other = tmp_path / "redundant.py"
    other.write_text((DATA / "redundant.py").read_text() + "\n# changed\n")
    with pytest.raises(SearchInputError, match="is a run of another problem"):
        SearchRun(settings.model_copy(update=dict(problem=str(other))), resume=True, evaluator=FakeHarness())


def test_parallel_keeps_several_candidates_in_flight(tmp_path):
    harness = SlowFakeHarness()
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=7,
                              parallel=3, profile=False)
    document = SearchRun(settings, evaluator=harness).run()
    assert document["evaluations"] == 7 and len(harness.sources) == 9  # 7 candidates, the reference, the best re-measured
    assert harness.most == 3


class PipelinedFakeHarness(FakeHarness):
    """The fake harness, recording the builds asked for and the evaluations in order. Each candidate's evaluation
    waits (up to 10 s) until a build is asked for while a candidate is being evaluated: a child written ahead (with
    one in flight, nothing else asks for a build then)."""

    def __init__(self):
        super().__init__()
        import threading
        self.lock, self.built, self.started, self.running = threading.Lock(), [], [], 0
        self.written_ahead = threading.Event()

    def prebuild(self, source, options=None, problem=None):
        with self.lock:
            if source not in self.built:
                self.built.append(source)
                if self.running:
                    self.written_ahead.set()
        return None

    def evaluate(self, problem, source, options):
        candidate = "The reference itself" not in source and not options.measure_energy
        with self.lock:
            self.started.append(source)
            self.running += candidate
        if candidate:
            self.written_ahead.wait(timeout=10)
        try:
            return super().evaluate(problem, source, options)
        finally:
            with self.lock:
                self.running -= candidate


@pytest.mark.parametrize("parallel, ahead", [(1, 1), (2, 2)])
def test_children_written_ahead_are_built_during_the_evaluations_and_evaluated_in_order(tmp_path, parallel, ahead):
    """--ahead: the coder writes the next children while the evaluations run, their builds start at once, and they
    are evaluated in the order written; none is lost or evaluated twice, and the budget holds."""
    harness = PipelinedFakeHarness()
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=5,
                              parallel=parallel, ahead=ahead, profile=False)
    document = SearchRun(settings, evaluator=harness).run()
    assert harness.written_ahead.is_set()
    candidates = [source for source in harness.started if "The reference itself" not in source][:5]
    assert document["evaluations"] == 5 and len(set(candidates)) == 5
    assert candidates == harness.built[:5]  # evaluated in the order their builds were asked for
    rows = sqlite3.connect(tmp_path / "run" / "state.db").execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]
    assert rows == 5


def test_the_coder_is_told_the_moves_of_children_in_flight_or_written_ahead(tmp_path):
    """With two in flight and one written ahead, the coder is asked for children while others are evaluated or
    written: each such request names their moves (`CoderRequest.pending`)."""
    problem = DATA / "redundant.py"
    coder = ScriptedCoder(problem.read_text() + "\nModelNew = Model\n")
    settings = SearchSettings(problem=str(problem), out=str(tmp_path / "run"), budget=6, parallel=2, ahead=1,
                              profile=False)
    SearchRun(settings, evaluator=PipelinedFakeHarness(), coder=coder).run()
    told = [set(r.pending) for r in coder.requests]
    assert any(moves & {f"move{n}" for n in range(2, 12)} for moves in told), told


class InterruptingCoder:
    """The offline coder, until Ctrl-C arrives while it is asked for its third candidate."""

    name = "offline"

    def __init__(self):
        from kernelpro.coders import make_coder
        self.inner = make_coder("offline", seed=42)
        self.calls = 0

    def propose(self, request):
        self.calls += 1
        if self.calls == 3:
            raise KeyboardInterrupt
        return self.inner.propose(request)

    def close(self):
        getattr(self.inner, "close", lambda: None)()


def test_ctrl_c_keeps_what_was_found_and_says_how_to_go_on(tmp_path):
    from kernelpro.driver import SearchInterrupted
    out = tmp_path / "run"
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(out), budget=6, profile=False)
    with pytest.raises(SearchInterrupted) as stop:
        SearchRun(settings, evaluator=FakeHarness(), coder=InterruptingCoder()).run()
    assert stop.value.exit_code == 130
    assert "after 2 evaluations" in str(stop.value) and f"--out {out} --resume" in str(stop.value)
    written = json.loads((out / "run.json").read_text())
    assert written == stop.value.document and written["stopped"] == "interrupted" and written["evaluations"] == 2
    assert (out / "best.py").exists() and (out / "report.md").exists()
    shown = []  # what the live display shows, from the resumed run's first evaluation on
    resumed = SearchRun(settings, resume=True, evaluator=FakeHarness(),
                        on_change=lambda status: shown.append((status.phase, status.evaluations, status.best_ratio)))
    document = resumed.run()
    assert document["evaluations"] == 6 and document["stopped"] != "interrupted"
    first = next(row for row in shown if row[0] != "starting")  # the best found before Ctrl-C, not 1.000x
    assert first[1] == 2 and first[2] == pytest.approx(written["speedup"]) and first[2] > 1


def test_resume_goes_on_with_the_runs_own_settings_and_names_a_conflicting_flag(tmp_path):
    """--resume restores the budget, seed and model mode the run started with; a flag given again with
    another value is refused by its name; a larger --budget extends the run."""
    from kernelpro.driver import SearchInterrupted
    from kernelpro.search_settings import SearchInputError
    out = tmp_path / "run"
    started = SearchSettings(problem=str(DATA / "redundant.py"), out=str(out), budget=5, seed=3,
                             model_mode="eval", profile=False)
    with pytest.raises(SearchInterrupted):
        SearchRun(started, evaluator=FakeHarness(), coder=InterruptingCoder()).run()
    as_typed = SearchSettings(problem=str(DATA / "redundant.py"), out=str(out), profile=False)  # the CLI's defaults
    with pytest.raises(SearchInputError, match=r"--model-mode 'train' \(the run has 'eval'\); --seed 7 \(the run has 3\)"):
        SearchRun(as_typed.model_copy(update=dict(seed=7)), resume=True, given=frozenset({"seed", "model_mode"}),
                  evaluator=FakeHarness())
    document = SearchRun(as_typed, resume=True, given=frozenset(), evaluator=FakeHarness()).run()
    assert document["budget"] == 5 and document["evaluations"] == 5  # not the default 16
    settings = json.loads(sqlite3.connect(out / "state.db").execute(
        "SELECT value FROM meta WHERE key = 'settings'").fetchone()[0])
    assert (settings["seed"], settings["model_mode"]) == (3, "eval")
    longer = SearchRun(as_typed.model_copy(update=dict(budget=7)), resume=True, given=frozenset({"budget"}), evaluator=FakeHarness())
    assert longer.settings.budget == 7 and longer.settings.seed == 3


def exit_code(argv: list[str]) -> int:
    with pytest.raises(SystemExit) as done:
        main(argv)
    return done.value.code


def test_the_printed_resume_command_continues_the_run_from_another_folder(tmp_path, monkeypatch, capsys):
    """Paths are stored absolute: the resume command works from any working folder, and keeps the budget."""
    import kernelpro.driver
    monkeypatch.setattr(kernelpro.driver, "Evaluator", lambda *args, **kwargs: FakeHarness())
    monkeypatch.setattr(kernelpro.driver.SearchRun, "loop", lambda self, *args: "interrupted")  # as Ctrl-C leaves it
    work = tmp_path / "work"
    shutil.copytree(DATA, work / "problems")
    monkeypatch.chdir(work)
    assert exit_code(["search", "problems/redundant.py", "--budget", "3", "--seed", "2", "--no-profile",
                      "--device", "cpu", "--no-kb", "--out", "runs/r", "--json"]) == 130
    command = re.search(r"go on with: (kernelpro search .*--resume)", capsys.readouterr().err).group(1)
    monkeypatch.undo()
    monkeypatch.setattr(kernelpro.driver, "Evaluator", lambda *args, **kwargs: FakeHarness())
    monkeypatch.chdir(tmp_path)
    assert exit_code(shlex.split(command)[1:] + ["--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert document["budget"] == 3 and document["evaluations"] == 3
    assert exit_code(shlex.split(command)[1:] + ["--seed", "5"]) == 2
    assert "--seed 5 (the run has 2)" in capsys.readouterr().err


def test_ctrl_c_on_the_command_line_exits_130_with_the_resume_command(tmp_path):
    out = tmp_path / "run"
    process = subprocess.Popen([sys.executable, "-m", "kernelpro", "search", str(DATA / "redundant.py"),
                                "--budget", "50", "--device", "cpu", "--no-kb", "--no-profile", "--out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                               preexec_fn=default_sigint)
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and process.poll() is None:  # until the first evaluation is stored
        time.sleep(0.5)
        if (out / "state.db").exists():
            try:
                with sqlite3.connect(out / "state.db") as db:
                    if db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0] >= 1:
                        break
            except sqlite3.Error:
                pass
    if process.poll() is not None:
        pytest.skip("the search ended before it could be interrupted")
    process.send_signal(signal.SIGINT)
    _, err = process.communicate(timeout=120)
    assert process.returncode == 130, err[-2000:]
    assert "interrupted: after" in err and "--resume" in err, err[-2000:]
    assert json.loads((out / "run.json").read_text())["stopped"] == "interrupted"


class SlowerOnceMoreHarness(FakeHarness):
    """As FakeHarness, but every evaluation after the budget's (the re-measurement of the best) finds
    the candidate slower than eager: a search best that was a lucky timing."""

    def __init__(self, budget: int):
        super().__init__()
        self.budget = budget

    def evaluate(self, problem, source, options):
        result = super().evaluate(problem, source, options)
        if len(self.sources) <= self.budget + 1 or not result.ok:  # the baseline, then the budget
            return result
        slower = result.candidate.model_copy(update={"median_ms": 1.25})
        return result.model_copy(update={"candidate": slower, "speedup": 1.0 / 1.25})


def test_a_best_re_measured_slower_than_eager_gives_way_to_the_reference(tmp_path):
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=3, profile=False)
    document = SearchRun(settings, evaluator=SlowerOnceMoreHarness(3)).run()
    rejected = document["rejected_best"]
    assert rejected and rejected["speedup"] > 1.0 and rejected["final"]["speedup"] == pytest.approx(0.8)
    assert document["speedup"] == 1.0 and document["best_moves"] == [] and document["final"] is None
    best = (tmp_path / "run" / "best.py").read_text()
    assert "re-measured at 0.800x vs eager: this is the reference itself" in best
    assert "ModelNew = Model" in best or "class ModelNew" in best
    assert "rejected after re-measurement" in (tmp_path / "run" / "report.md").read_text()
    # a best the re-measurement confirms stays
    kept = SearchRun(settings.model_copy(update=dict(out=str(tmp_path / "kept"))), evaluator=FakeHarness()).run()
    assert kept["rejected_best"] is None and kept["speedup"] > 1.0


def test_a_run_folder_in_use_by_another_search_is_refused_until_that_one_ends(tmp_path):
    # A resume started while the interrupted search still ran (SIGINT ignored in a background job) went on in the
    # same folder: both counted and wrote each other's evaluations (budget 4, 5 evaluations in run.json).
    from kernelpro.runstore import RunStore
    from kernelpro.search_settings import SearchInputError
    settings = SearchSettings(problem=str(DATA / "redundant.py"), out=str(tmp_path / "run"), budget=2, profile=False)
    SearchRun(settings, evaluator=FakeHarness()).run()
    other = RunStore(tmp_path / "run")  # another process's hold: a lock of its own open file
    assert other.hold()
    with pytest.raises(SearchInputError, match="is in use by another kernelpro search"):
        SearchRun(settings.model_copy(update=dict(budget=3)), resume=True, evaluator=FakeHarness()).run()
    other.close()
    document = SearchRun(settings.model_copy(update=dict(budget=3)), resume=True, evaluator=FakeHarness(), given=frozenset({"budget"})).run()
    assert document["evaluations"] == 3
