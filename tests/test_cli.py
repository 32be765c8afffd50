"""The kernelpro CLI, run as a user would run it: a real subprocess where the process matters (the interpreter's
traceback, the terminal width, a whole search's output to a pipe), else main() in this process (`in_process`)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from conftest import DATA, REPO, in_process
from kernelpro.cli import main

PROBLEM = DATA / "problems" / "linear_relu_residual.py"


def kernelpro(*args, env=None):
    return subprocess.run([sys.executable, "-m", "kernelpro", *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, timeout=240)


def test_version_and_help():
    import kernelpro as package
    done = kernelpro("--version")
    assert done.returncode == 0 and done.stdout.strip() == f"kernelpro {package.__version__}"
    done = kernelpro("eval", "--help")
    assert done.returncode == 0 and "--policy" in done.stdout and "--json" in done.stdout


def test_correct_candidate_exits_zero_and_writes_json(tmp_path, capsys):
    out = tmp_path / "verdict.json"
    done = in_process(capsys, "eval", PROBLEM, DATA / "candidates" / "good.py", "--trials", "5", "--json-file", out)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "device: cpu (no CUDA GPU is visible)" in done.stdout
    assert "correct" in done.stdout
    record = json.loads(out.read_text())
    assert record["verdict"] == "correct" and record["speedup"] > 0 and record["phase"] == "done"
    assert record["reason"]


def test_incorrect_candidate_exits_one_and_json_to_stdout(capsys):
    done = in_process(capsys, "eval", PROBLEM, DATA / "candidates" / "wrong_shape.py", "--device", "cpu", "--json")
    assert done.returncode == 1
    record = json.loads(done.stdout)
    assert record["verdict"] == "incorrect" and record["speedup"] is None and "shape" in record["reason"]


def test_usage_errors_exit_two_in_the_one_error_style(capsys):
    for args, says in [(("eval", PROBLEM), "Missing argument 'CANDIDATE'"),
                       (("eval", PROBLEM, PROBLEM, "--policy", "lenient"), "'lenient' is not one of"),
                       (("eval", PROBLEM, PROBLEM, "--correct-trials", "2"), "--correct-trials"),
                       (("search", PROBLEM, "--nope"), "No such option: --nope"),
                       (("-q", "-v", "tools", "list"), "give one of them")]:
        done = in_process(capsys, *args)
        assert done.returncode == 2, args
        # one `error:` line as for project errors, then a hint naming the command's -h; no box, no usage dump
        lines = done.stderr.splitlines()
        assert lines[0].startswith("error: ") and says in lines[0], done.stderr
        assert len(lines) == 2 and lines[1].startswith("hint: kernelpro") and lines[1].endswith("-h lists the "
                                                                                               "arguments and options")
        assert not set("╭│╰") & set(done.stderr) and "KERNELPRO_DEBUG" not in done.stderr
    done = in_process(capsys)  # no command: the help, and exit 2
    assert done.returncode == 2 and "Usage: " in done.stdout and done.stderr == ""


def test_project_errors_are_one_line_unless_debugging(tmp_path, capsys):
    done = in_process(capsys, "eval", tmp_path / "missing.py", PROBLEM)
    assert done.returncode == 2
    assert done.stderr.startswith("error: ") and "missing.py: no such file" in done.stderr
    assert "Traceback" not in done.stderr and "KERNELPRO_DEBUG=1" not in done.stderr  # nothing behind it
    done = kernelpro("eval", tmp_path / "missing.py", PROBLEM, env={"KERNELPRO_DEBUG": "1"})
    assert "Traceback" in done.stderr
    raising = tmp_path / "raising.py"  # the problem's own exception is named in the line, in the worker's words
    raising.write_text(PROBLEM.read_text().replace("def get_inputs():", "def get_inputs():\n    raise KeyError('x')"
                                                   "\n\n\ndef _unused():", 1))
    done = in_process(capsys, "eval", raising, PROBLEM)
    assert done.returncode == 2 and "get_inputs() raised KeyError" in done.stderr


def test_cuda_without_a_gpu_is_a_clear_error():
    import torch
    if torch.cuda.is_available():
        return
    done = kernelpro("eval", PROBLEM, DATA / "candidates" / "good.py", "--device", "cuda")
    assert done.returncode == 2 and "no CUDA device" in done.stderr


def test_timeout_option_limits_every_phase(capsys):
    done = in_process(capsys, "eval", PROBLEM, DATA / "candidates" / "infinite_loop.py", "--timeout", "5", "--json")
    record = json.loads(done.stdout)
    assert done.returncode == 1
    assert record["verdict"] == "timeout" and record["phase"] == "correctness"


def test_shipped_example_is_honestly_faster(tmp_path, capsys):
    """The README's demo: an algebraic rewrite that does a fraction of the work."""
    done = in_process(capsys, "eval", REPO / "examples" / "matmul_rowsum.py", REPO / "examples" / "matmul_rowsum_new.py",
                     "--trials", "10", "--json")
    record = json.loads(done.stdout)
    assert done.returncode == 0, record["reason"]
    assert record["speedup"] > 1.0


COMMANDS = ["", "search", "eval", "profile", "bench", "tools", "tools list", "kb", "kb show", "kb export",
            "kb import", "kb reset", "cutlass"]


@pytest.mark.parametrize("command", COMMANDS, ids=[c or "kernelpro" for c in COMMANDS])
@pytest.mark.parametrize("flag", ["-h", "--help"])
def test_every_command_takes_h_and_help(command, flag, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main([*command.split(), flag])
    assert exit_info.value.code == 0
    shown = capsys.readouterr().out
    assert "Usage: " in shown and "<bool>" not in shown  # a flag takes no value: no type beside it


def test_force_starts_a_search_over_in_a_run_folder_and_refuses_any_other_folder(tmp_path, capsys):
    from kernelpro.errors import KernelproError
    from kernelpro.runstore import clear_output_folder
    other = tmp_path / "photos"
    other.mkdir()
    (other / "holiday.jpg").write_bytes(b"\xff\xd8")
    with pytest.raises(KernelproError, match="does not hold"):
        clear_output_folder(other, ("state.db",), "kernelpro search run")
    assert (other / "holiday.jpg").exists()
    done = in_process(capsys, "search", PROBLEM, "--out", other, "--force", "--budget", "1", "--device", "cpu")
    assert done.returncode == 2 and "not removing it" in done.stderr and (other / "holiday.jpg").exists()
    done = in_process(capsys, "search", PROBLEM, "--out", other, "--force", "--resume")
    assert done.returncode == 2 and "--resume continues" in done.stderr
    run = tmp_path / "run"
    run.mkdir()
    (run / "state.db").write_bytes(b"a run from before")
    (run / "best.py").write_text("# from before\n")
    done = in_process(capsys, "search", PROBLEM, "--out", run, "--budget", "1", "--device", "cpu", "--no-profile")
    assert done.returncode == 2 and "--force to start over" in done.stderr
    done = in_process(capsys, "search", PROBLEM, "--out", run, "--force", "--budget", "1", "--device", "cpu", "--no-profile",
                     "--no-kb", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stopped"] and (run / "run.json").exists()  # a new run, start to end
    assert not (run / "best.py").exists() or "from before" not in (run / "best.py").read_text()


def test_quiet_keeps_only_the_result_and_verbose_logs_each_evaluation(tmp_path, capsys):
    args = ["eval", PROBLEM, DATA / "candidates" / "good.py", "--trials", "5"]
    plain, quiet, verbose = (in_process(capsys, *flag, *args) for flag in ([], ["-q"], ["-v"]))
    for done in (plain, quiet, verbose):
        assert done.returncode == 0, done.stderr
        assert "correct" in done.stdout
    assert "device: cpu" in plain.stdout and "device: cpu" not in quiet.stdout
    assert "kernelpro.harness: evaluated" in verbose.stderr and "kernelpro.harness" not in plain.stderr
    # a search, to a pipe: progress lines normally, none with -q (the summary stays)
    search = ["search", PROBLEM, "--budget", "1", "--device", "cpu", "--no-profile", "--no-kb"]
    normal = in_process(capsys, *search, "--out", tmp_path / "a")
    silent = in_process(capsys, "-q", *search, "--out", tmp_path / "b")
    assert normal.returncode == 0 and silent.returncode == 0, normal.stderr + silent.stderr
    assert "coder: offline" in normal.stderr and " s] " in normal.stderr
    assert "coder: offline" not in silent.stderr and " s] " not in silent.stderr
    assert "kernelpro search" in silent.stdout + silent.stderr  # the summary table
    assert in_process(capsys, "-q", "-v", "tools", "list").returncode == 2


def test_tables_to_a_pipe_keep_their_full_rows():
    done = kernelpro("tools", "list", env={"COLUMNS": ""})
    assert done.returncode == 0
    assert "…" not in done.stdout  # rich cuts cells to fit 80 columns off a terminal unless told otherwise
    assert "kernelpro.tools.sass:SassTool" in done.stdout and "\x1b[" not in done.stdout


def test_a_search_summary_to_a_pipe_has_no_empty_header_row_and_every_figure_agrees(tmp_path):
    out = tmp_path / "run"
    done = kernelpro("search", DATA / "search" / "redundant.py", "--budget", "2", "--device", "cpu", "--no-profile",
                     "--no-kb", "--out", out)
    assert done.returncode == 0, done.stderr
    table = (done.stdout + done.stderr).split("kernelpro search:")[1]
    assert "┃             ┃" not in table and "┃ " not in table  # a header row draws ┃ cells
    assert "evaluations" in table
    log = done.stdout + done.stderr  # off a terminal: no live display, so no cursor moves or colours
    assert "\x1b[" not in log and "\r" not in log
    check_every_figure(out, table)


def printed_ratios(text: str, pattern: str) -> list[tuple[str, str, str]]:
    """Each match of `pattern` (groups named ratio, candidate and reference) as printed (3, 4 and 4 decimals), after
    checking that the ratio is the quotient of the two timings to its last digit."""
    import re
    rows = []
    for match in re.finditer(pattern, text):
        ratio, candidate, reference = (float(match[name]) for name in ("ratio", "candidate", "reference"))
        # the timings are printed to 0.00005 ms: the quotient of the printed ones is known to within this
        slack = 0.0005 + ratio * (0.00005 / candidate + 0.00005 / reference) + 1e-9
        assert ratio == pytest.approx(reference / candidate, abs=slack), match[0]
        rows.append((f"{ratio:.3f}", f"{candidate:.4f}", f"{reference:.4f}"))
    return rows


def check_every_figure(out, terminal: str) -> None:
    """Every ratio the terminal summary, report.md, report.html and run.json print is the quotient of the two raw
    timings it names (each evaluation's record in candidates/), to the printed digit, and the report's tree and
    tables hold one node per evaluation."""
    import html
    import re
    document = json.loads((out / "run.json").read_text())
    records = {int(path.stem.split("_")[1]): json.loads(path.read_text())
               for path in (out / "candidates").glob("node_*.json")}
    assert len(records) == document["evaluations"] == 2
    if document["best_node"]:  # a candidate beat the reference (under load the reference may stay best)
        best = records[document["best_node"]]
        assert document["best_ms"] == best["candidate"]["median_ms"]
        assert document["best_reference_ms"] == best["reference"]["median_ms"]
    else:
        assert document["best_ms"] == document["best_reference_ms"] == document["baseline_ms"]
    assert document["speedup"] == pytest.approx(document["best_reference_ms"] / document["best_ms"], rel=1e-9)
    final = document["final"]  # the best re-measured after the search: only a candidate is
    assert bool(final) == bool(document["best_node"])
    shown = [(f"{document['speedup']:.3f}", f"{document['best_ms']:.4f}", f"{document['best_reference_ms']:.4f}")]
    if final:
        assert final["speedup"] == pytest.approx(final["eager_ms"] / final["best_ms"], rel=1e-9)
        shown.append((f"{final['speedup']:.3f}", f"{final['best_ms']:.4f}", f"{final['eager_ms']:.4f}"))
    r, c, e = (rf"(?P<{name}>[\d.]+)" for name in ("ratio", "candidate", "reference"))  # what printed_ratios reads
    assert printed_ratios(terminal, rf"best\s*│ {r}x vs eager: {c} ms vs {e} ms, timed in the same") + \
        printed_ratios(terminal, rf"re-measured\s*│ {r}x vs eager: {c} ms vs {e} ms, after the search") == shown
    assert ("re-measured" in terminal) == bool(final)
    page = re.sub(r"(\s*\|\s*)+", " | ", html.unescape(re.sub(r"<[^>]+>", " | ", (out / "report.html").read_text())))
    for text in ((out / "report.md").read_text(), page):
        assert printed_ratios(text, rf"(?:best|re-measured after the search) \| {c} ms, {r}x vs eager \({e} ms") == shown
        assert f"reference (eager) | {document['baseline_ms']:.4f} ms" in text
    report = (out / "report.md").read_text()
    drawn = re.findall(r"#(\d+) \[[^\]]*\] (\S+)(.*)", report)
    # one node per evaluation (a failed one shows its verdict), and the root; a transposition (the same candidate
    # reached by another order of moves, never evaluated again) is drawn as "= #N" of an evaluated node
    assert [int(node) for node, _, rest in drawn if "= #" not in rest] == [0, *sorted(records)]
    for _, _, rest in drawn:
        if "= #" in rest:
            assert int(re.search(r"= #(\d+)", rest)[1]) in records
    repeats = sum("= #" in rest for _, _, rest in drawn)  # and the legend under the tree counts them so
    legend = f"#0 is the reference; {len(records)} candidate node(s), one per evaluation"
    assert legend + (f"; {repeats} node(s) marked" if repeats else ".") in report
    tree = [(node, state[:-1]) for node, state, rest in drawn if "= #" not in rest and re.fullmatch(r"[\d.]+x", state)]
    assert [node for node, _ in tree[1:]] == [str(n) for n, r in sorted(records.items()) if r["verdict"] == "correct"]
    by_evaluation = re.findall(r"^\| (\d+) \| [^|]+ \| (\w+) \| ([\d.]+|-) \| ([\d.]+) \|$", report, re.M)
    assert len(by_evaluation) == document["evaluations"]
    for node, ratio in tree[1:]:
        record = records[int(node)]
        raw = record["reference"]["median_ms"] / record["candidate"]["median_ms"]
        assert float(ratio) == pytest.approx(raw, abs=0.0015), node
        assert f"{record['speedup']:.3f}" == f"{raw:.3f}" or abs(record["speedup"] - raw) < 1e-9
    assert float(by_evaluation[-1][3]) == pytest.approx(max(1.0, *(r["speedup"] or 0 for r in records.values())),
                                                        abs=0.0015)


def test_bad_input_is_answered_before_torch_is_imported(tmp_path):
    """Each refusal below comes from one process that never imports torch (about 2 s of start-up on the 2-core box),
    and leaves no folder behind."""
    (tmp_path / "empty").mkdir()
    # --settings FILE: a search's settings as a bench writes them for each problem
    good, typo, elsewhere = (tmp_path / f"{name}.json" for name in ("good", "typo", "elsewhere"))
    good.write_text(json.dumps({"problem": str(PROBLEM), "out": str(tmp_path / "f"), "budget": 2}))
    typo.write_text(json.dumps({"problem": str(PROBLEM), "out": str(tmp_path / "f"), "budgett": 2}))
    elsewhere.write_text(json.dumps({"problem": str(tmp_path / "nowhere.py"), "out": str(tmp_path / "f")}))
    settings = [["search"], ["search", "--settings", tmp_path / "missing.json"], ["search", "--settings", typo],
                ["search", PROBLEM, "--settings", good], ["search", "--settings", good, "--budget", "3", "--seed", "1"],
                ["search", "--settings", elsewhere]]
    refused = settings + [["search", tmp_path / "nowhere.py", "--out", tmp_path / "a"],
               ["search", PROBLEM, "--budget", "0", "--out", tmp_path / "b"],
               ["search", PROBLEM, "--budgett", "3"],
               ["bench", tmp_path / "empty", "--out", tmp_path / "c"],
               ["bench", DATA / "bench_suite", "--level", "7", "--out", tmp_path / "d"],
               ["eval", PROBLEM, tmp_path / "missing.py"], ["eval", tmp_path / "nowhere.py", PROBLEM]]
    from kernelpro.harness.toolchain import nvidia_driver_present
    if not nvidia_driver_present():  # energy needs an NVIDIA GPU: a machine without its driver refuses at once
        refused.append(["search", PROBLEM, "--objective", "energy", "--out", tmp_path / "e"])
    script = ("import sys\nfrom kernelpro.cli import main\nfor argv in " + repr([list(map(str, a)) for a in refused]) +
              ":\n    try:\n        main(argv)\n    except SystemExit as done:\n"
              "        print(done.code, 'torch' in sys.modules, flush=True)\n")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.stdout.split("\n")[:-1] == ["2 False"] * len(refused), done.stdout + done.stderr
    assert "no such file" in done.stderr and "holds no problem files" in done.stderr
    assert "names no problem of the suite" in done.stderr
    assert not any((tmp_path / name).exists() for name in "abcdef")
    for said in ("give a problem file, or --settings FILE", "missing.json: No such file", "budgett: Extra inputs",
                 "leave out PROBLEM", "leave out --budget, --seed", "nowhere.py: no such file"):
        assert said in done.stderr, said


def test_a_search_runs_from_a_settings_file_with_its_paths_made_absolute(tmp_path, capsys, monkeypatch):
    """kernelpro search --settings FILE, as a bench's child runs it: every setting from the file, relative paths
    taken from where it runs and recorded absolute (a resume may start elsewhere), and --resume compares the
    file with the record like flags given again."""
    import shutil
    from kernelpro.runstore import RunStore
    monkeypatch.chdir(tmp_path)
    shutil.copy(PROBLEM, tmp_path / "problem.py")
    settings = {"problem": "problem.py", "out": "run", "budget": 1, "device": "cpu", "profile": False,
                "use_kb": False, "seed": 3}
    (tmp_path / "settings.json").write_text(json.dumps(settings))
    done = in_process(capsys, "search", "--settings", "settings.json", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["stopped"] and (tmp_path / "run" / "run.json").is_file()
    store = RunStore(tmp_path / "run")
    try:
        recorded = store.get("settings")
    finally:
        store.close()
    assert recorded["problem"] == str(tmp_path / "problem.py") and recorded["out"] == str(tmp_path / "run")
    assert recorded["seed"] == 3 and recorded["budget"] == 1
    (tmp_path / "other.json").write_text(json.dumps(dict(settings, seed=4)))
    refused = in_process(capsys, "search", "--settings", "other.json", "--resume")
    assert refused.returncode == 2 and "--seed 4 (the run has 3)" in refused.stderr
