"""One CLI vocabulary: every option of every command, and an option name that means one thing everywhere."""

from __future__ import annotations

import collections
import enum
import typing

import typer

from kernelpro.cli import app

#: the commands whose result is a run or a verdict: each prints it with --json and writes it with --json-file
RESULT_COMMANDS = {"kernelpro search", "kernelpro bench", "kernelpro eval", "kernelpro profile"}


def commands(group, path: str = "kernelpro"):
    for name, command in getattr(group, "commands", {}).items():
        if getattr(command, "commands", None):
            yield from commands(command, f"{path} {name}")
        else:
            yield f"{path} {name}", command


def kind(param) -> tuple:
    """What an option takes: a switch, one of some choices, or a value of one type."""
    if param.is_flag:
        return ("switch",)
    annotation = param.type_descriptor.annotation
    base = ([a for a in typing.get_args(annotation) if a is not type(None)] or [annotation])[0]  # X | None: X
    if isinstance(base, type) and issubclass(base, enum.Enum):
        return ("choice", tuple(sorted(member.value for member in base)))
    return ("value", getattr(base, "__name__", str(base)))


def test_an_option_name_means_one_thing_on_every_command():
    root = typer.main.get_command(app)
    seen: dict[str, dict[tuple, list[str]]] = collections.defaultdict(lambda: collections.defaultdict(list))
    listed = list(commands(root))
    assert len(listed) >= 12
    for path, command in listed:
        for param in command.params:
            for name in param.opts + param.secondary_opts:
                if name.startswith("--"):
                    seen[name][kind(param)].append(path)
    mixed = {name: dict(kinds) for name, kinds in seen.items() if len(kinds) > 1}
    assert not mixed, f"an option name with two meanings: {mixed}"
    for name in ("--seed", "--objective", "--device", "--budget", "--json"):
        assert sum(map(len, seen[name].values())) >= 2, name  # shared, so the check above has something to hold


def test_every_command_with_a_result_takes_json_and_json_file():
    root = typer.main.get_command(app)
    found = {path: {name for param in command.params for name in param.opts} for path, command in commands(root)}
    assert RESULT_COMMANDS <= set(found)
    lacking = {path for path in RESULT_COMMANDS if not {"--json", "--json-file"} <= found[path]}
    assert not lacking, f"without --json or --json-file: {sorted(lacking)}"
    # any command that prints JSON writes the same into a file with --json-file
    half = {path for path, names in found.items() if ("--json" in names) != ("--json-file" in names)}
    assert not half, f"--json without --json-file, or the reverse: {sorted(half)}"
    assert len([path for path, names in found.items() if "--json" in names]) >= 12


def test_json_file_holds_what_json_prints(tmp_path, capsys):
    """`tools list` and `kb show`, two listing commands: --json-file writes the document --json prints, and
    without --json the table still goes to the terminal."""
    import json
    import pytest
    from kernelpro.cli import main
    from kernelpro.knowledge import KnowledgeBase
    KnowledgeBase(tmp_path / "kb.sqlite").close()  # an empty one
    for command in (["tools", "list"], ["kb", "show", "--kb", str(tmp_path / "kb.sqlite")]):
        path = tmp_path / "out.json"
        with pytest.raises(SystemExit) as done:
            main([*command, "--json"])
        assert done.value.code == 0
        printed = json.loads(capsys.readouterr().out)
        with pytest.raises(SystemExit) as done:
            main([*command, "--json-file", str(path)])
        assert done.value.code == 0 and capsys.readouterr().out.strip()  # the table, on the terminal
        assert json.loads(path.read_text()) == printed
