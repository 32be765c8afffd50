"""The commands the README and the docs show, checked against the CLI so that they cannot rot.

Every `kernelpro ...` line in a shell block of README.md or docs/*.md names a command that exists and
only options that command (or the root) takes; a synopsis (`[--budget N]`, `PROBLEM`) is checked the
same way. A concrete command whose files exist here is parsed in full by the command's own parser
(types, choices, ranges; nothing runs). The README's search command then runs for real, at a budget
of 1 on the CPU, into a temporary folder.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from kernelpro.cli import _command

REPO = Path(__file__).resolve().parent.parent
PAGES = [REPO / "README.md"] + sorted((REPO / "docs").glob("*.md"))
BLOCK = re.compile(r"```(?:bash|sh|console)?\n(.*?)```", re.S)


def shown_commands() -> list[tuple[str, str]]:
    """(page:line number, command) for every kernelpro command in a shell block."""
    found = []
    for page in PAGES:
        text = page.read_text()
        for match in BLOCK.finditer(text):
            first = text[:match.start()].count("\n") + 2  # the block's first line, after its fence
            command, start = "", first
            for number, line in enumerate(match.group(1).splitlines(), first):
                start = start if command else number
                command += line.strip().removesuffix("\\") + " "
                if line.rstrip().endswith("\\"):
                    continue  # a continued command goes on on the next line
                if re.match(r"^(\.venv/bin/)?kernelpro\s", command):
                    found.append((f"{page.relative_to(REPO)}:{start}", command.split(" #")[0].strip()))
                command = ""
    return found


COMMANDS = shown_commands()


def _resolve(words: list[str]):
    """The click command the words name, the words left for it, and the root and group options on the way."""
    command, options = _command(), []
    while words and hasattr(command, "commands") and not words[0].startswith("-"):
        options += [o for p in command.params for o in p.opts + p.secondary_opts]
        if words[0] not in command.commands:
            break
        command, words = command.commands[words[0]], words[1:]
    return command, words, options


def test_the_pages_show_commands():
    pages = {where.split(":")[0] for where, _ in COMMANDS}
    assert "README.md" in pages and len(COMMANDS) >= 10


@pytest.mark.parametrize("where, shown", COMMANDS, ids=[where for where, _ in COMMANDS])
def test_every_shown_command_names_real_options(where, shown):
    words = shlex.split(shown)[1:]
    while words and words[0] in ("-q", "-v", "--quiet", "--verbose"):
        words = words[1:]
    command, rest, root_options = _resolve(words)
    assert not hasattr(command, "commands"), f"{where}: {shown!r} names no command"
    known = set(root_options) | {o for p in command.params for o in p.opts + p.secondary_opts} | {"-h", "--help"}
    named = {re.split(r"[=\[\]|]", w.strip("[]"))[0] for w in rest if w.lstrip("[").startswith("-")}
    assert named <= known, f"{where}: {shown!r} names options {sorted(named - known)} that the command lacks"
    synopsis = any(c in shown for c in "[]|") or any(re.fullmatch(r"[A-Z][A-Z_]+", w) for w in rest)
    paths = [w for w in rest if not w.startswith("-") and ("/" in w or w.endswith(".py"))]
    if synopsis or not all((REPO / w.lstrip("@")).exists() for w in paths):
        return  # placeholders, or files a user has (a KernelBench clone): the option names are what can rot
    context = command.make_context(command.name, list(rest))  # types, choices and ranges; runs nothing
    assert context.params


def test_the_readme_search_command_runs(tmp_path):
    """The README's first command as a user runs it, with a budget of 1 on the CPU, without profiling, and a
    temporary --out."""
    shown = next(c for where, c in COMMANDS if where.startswith("README") and " search " in c)
    words = shlex.split(shown)
    words[0] = sys.executable
    words[1:1] = ["-m", "kernelpro"]
    words[words.index("--budget") + 1] = "1"
    words[words.index("--out") + 1] = str(tmp_path / "run")
    # --no-profile: the profiler's two sandboxed runs are tested in test_profile.py and the end-to-end search
    done = subprocess.run(words + ["--device", "cpu", "--json", "--no-kb", "--no-profile"], cwd=REPO, capture_output=True,
                          text=True, timeout=900)
    assert done.returncode == 0, done.stderr[-2000:]
    record = json.loads(done.stdout)
    assert record["evaluations"] >= 1 and (tmp_path / "run" / "best.py").exists()
