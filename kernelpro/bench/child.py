"""A problem's search as a child process (`python -m kernelpro search --settings FILE`).

Used by both backends: the local one (runner.py, a worker per GPU) and Ray's (ray_backend.py,
a task per problem). A child that exits with 130 was stopped by Ctrl-C: its problem stays
unfinished and resumes. A crash or an error exit is the problem's failure, in one line.
"""

from __future__ import annotations

import logging
import json
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from kernelpro.bench.suite import Entry, select
from kernelpro.errors import KernelproError
from kernelpro.harness.process import exit_description
from kernelpro.settings import BENCH_FLAGS, PER_COMMAND, WHERE, BenchSettings

logger = logging.getLogger("kernelpro.bench")


class ChildInterrupted(Exception):
    """A search or baseline run stopped by Ctrl-C (exit 130): its problem stays unfinished."""


def check_interrupted(code: int) -> None:
    if code in (130, -signal.SIGINT):
        raise ChildInterrupted


class BenchInterrupted(KernelproError):
    """Ctrl-C: the searches running were stopped (each keeps its state), the leaderboards written."""

    exit_code = 130
    label = "interrupted"


class BenchError(KernelproError):
    """Bad input to `kernelpro bench`."""


def resumed_settings(saved: BenchSettings, asked: BenchSettings, given: frozenset[str] | None) -> BenchSettings:
    """The settings a resumed bench goes on with: the recorded ones, where it runs as `asked` where `given` (the
    BenchSettings fields the command line set, flat), the suite folder as this command names it (a path from where it
    runs now; the bench's problems are the keys it registered), and this command's choice of what `PER_COMMAND` names
    (--unsafe-no-sandbox). A recorded setting given with another value is refused by its option. None (a program's
    call): nothing is refused."""
    from kernelpro.search_settings import conflicting_options  # here: it imports torch, a bench's start need not
    conflicts = conflicting_options(BENCH_FLAGS, given or (), asked.flat(), saved.flat(), "the bench")
    if conflicts:
        raise BenchError(f"--resume finishes the bench in {asked.out} with the settings it was started with; "
                         f"{'; '.join(conflicts)}. Leave {'them' if len(conflicts) > 1 else 'it'} out, or start a new "
                         "bench in another --out folder")
    searches = saved.searches.model_copy(update={name: getattr(asked.searches, name) for name in PER_COMMAND})
    return saved.model_copy(update={"searches": searches, "suite": asked.suite,
                                    **{name: getattr(asked, name) for name in WHERE if name in (given or ())}})


def recorded_selection(saved: BenchSettings, asked: BenchSettings, given: frozenset[str] | None,
                       recorded: set[str], suite: list[Entry]) -> tuple[BenchSettings, frozenset[str] | None]:
    """A resumed bench's saved settings with a selection recorded as a file ('@FILE', a path from where the bench
    started) replaced by the keys the bench `recorded`; and `given` without --problems where the spec given again
    selects exactly those keys of `suite` (the problems of the suite folder the command names: the same file by
    another path, or the keys written out)."""
    if saved.problems.startswith("@"):
        saved = saved.model_copy(update={"problems": ",".join(sorted(recorded))})
    if given and "problems" in given and asked.problems != saved.problems:
        levels = asked.levels if "levels" in given else saved.levels
        if {entry.key for entry in select(suite, levels, asked.problems)} == recorded:
            given = given - {"problems"}
    return saved, given


def summarize_run(folder: Path) -> dict:
    """What the leaderboard needs from a search's run.json (and tree.json for the winning techniques)."""
    run = json.loads((folder / "run.json").read_text())
    techniques: list[str] = []
    tree_path = folder / "tree.json"
    if tree_path.exists() and run.get("best_node"):
        nodes = {n["id"]: n for n in json.loads(tree_path.read_text())["nodes"]}
        node = nodes.get(run["best_node"])
        while node is not None and node.get("parent") is not None:
            techniques = list(node.get("techniques", [])) + techniques
            node = nodes.get(node["parent"])
    usage = run.get("coder_usage") or {}
    keep = ("device_name", "torch_version", "baseline_ms", "baseline_compile_ms", "best_ms", "best_reference_ms",
            "speedup", "speedup_vs_compile", "final_speedup", "best_moves", "evaluations", "verdicts", "wall_s",
            "energy_j", "baseline_energy_j", "stopped", "coder", "strategy", "objective", "precision", "budget",
            "time_split_s", "final", "final_failure", "final_history", "model_mode", "kernelbench_speedup", "energy",
            "baseline_compile_correct", "launch_ranking", "launch_rankings", "search", "time_and_energy",
            "device_wait_s", "device_since", "best_tolerance_used", "best_rechecked", "moves_ruled_out")
    return {k: run.get(k) for k in keep} | {
        "techniques": list(dict.fromkeys(techniques)),
        "tokens": (usage.get("input_tokens", 0) or 0) + (usage.get("output_tokens", 0) or 0) if usage else None,
        "cost_usd": usage.get("cost_usd") if usage else None}


def extends(summary: dict | None, budget: int) -> bool:
    """Whether a finished search would go on under a larger budget: it stopped because it spent its own."""
    return bool(summary) and summary.get("stopped") == "budget" and (summary.get("budget") or budget) < budget


def write_search_settings(entry: Entry, settings: BenchSettings, folder: Path, out: Path) -> Path:
    """The settings of one problem's search (`BenchSettings.search_for`), as JSON in `out/settings/<key>.json`,
    for `kernelpro search --settings`; the file's path."""
    path = out / "settings" / f"{entry.key}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    search = settings.search_for(str(Path(entry.path).resolve()), str(folder.resolve()))
    path.write_text(search.model_dump_json(indent=1) + "\n")
    return path


def search_args(settings_file: Path, resume: bool) -> list[str]:
    """The `kernelpro search` command line of one problem: its settings file, and whether it resumes."""
    return ["search", "--settings", str(settings_file), "--json"] + (["--resume"] if resume else [])


def one_line_error(log_tail: str) -> str:
    """A child's failure in one line: its `error:` line (a kernelpro error), else its last line."""
    lines = [line.strip() for line in log_tail.strip().splitlines() if line.strip()]
    for line in reversed(lines):
        if line.startswith("error: "):
            return line[len("error: "):][:500]
    return (lines[-1] if lines else "no output")[:500]


def run_child(args: list[str], env: dict, log: Path, on_pid: Callable[[int], None] = lambda pid: None) -> tuple[int, str]:
    """`python -m kernelpro ARGS` with its stderr in `log`: (exit code, the log's tail)."""
    log.parent.mkdir(parents=True, exist_ok=True)
    logger.info("child: python -m kernelpro %s (its stderr: %s)", " ".join(args), log)
    with log.open("w") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "kernelpro", *args], env=env, stdout=subprocess.DEVNULL,
                                   stderr=stderr)
        on_pid(process.pid)
        code = process.wait()
    return code, log.read_text(errors="replace")[-3000:]


def finished_search(folder: Path) -> bool:
    """Whether a search finished in this folder (it wrote its results and kept its state); one stopped by
    Ctrl-C wrote its partial results, and resumes."""
    if not ((folder / "run.json").exists() and (folder / "state.db").exists()):
        return False
    try:
        return json.loads((folder / "run.json").read_text()).get("stopped") != "interrupted"
    except (OSError, ValueError):
        return False


def run_search(entry: Entry, settings: BenchSettings, out: Path, env: dict,
               on_pid: Callable[[int], None] = lambda pid: None, remeasure: bool = False) -> tuple[dict | None, str]:
    """One problem's search into `out/problems/<key>/`, resumed if it was cut off: (summary, error).
    `remeasure` resumes a finished search all the same, with `kernelpro search --remeasure`: it only
    times its best against eager and torch.compile again and rewrites its results."""
    folder = out / "problems" / entry.key
    finished = finished_search(folder)
    if finished and not remeasure:
        summary = summarize_run(folder)
        if not extends(summary, settings.searches.budget):
            return summary, ""  # it finished before the bench was killed
    # a search cut off, or one that spent a smaller budget, resumes its own state (and extends it)
    resume = (folder / "state.db").exists()
    if folder.exists() and not resume:
        shutil.rmtree(folder)  # killed before its search kept anything
    again = remeasure and finished  # a search cut off before it finished just resumes
    settings_file = write_search_settings(entry, settings, folder, out)
    code, tail = run_child(search_args(settings_file, resume) + (["--remeasure"] if again else []), env,
                           out / "logs" / f"{entry.key}.log", on_pid)
    check_interrupted(code)
    if code != 0 or not (folder / "run.json").exists():
        return None, f"the search failed ({exit_description(code)}): " + one_line_error(tail)
    return summarize_run(folder), ""

