"""`kernelpro tools list`: the installed profiling tools and why any is unavailable."""

from __future__ import annotations

import typer
from rich.table import Table

from kernelpro.cli.options import JsonFile, JsonOutput, make_console, write_json


def list_tools() -> list[dict]:
    """The library call behind `kernelpro tools list`."""
    from kernelpro.tools.registry import load_tools
    return load_tools().describe()


def register(app: typer.Typer) -> None:
    tools_app = typer.Typer(help="Profiling-tool plugins (entry-point group kernelpro.tools).",
                            no_args_is_help=True)

    @tools_app.command("list")
    def list_command(json_output: JsonOutput = False, json_file: JsonFile = None) -> None:
        """Each tool, its level, and whether it can run here (and why not); and the sandbox candidates run in."""
        rows = list_tools()
        write_json(rows, json_output, json_file)
        if json_output:
            return
        table = Table(title="kernelpro tools")
        for column in ("name", "level", "available", "reason", "source"):
            table.add_column(column)
        for row in rows:
            table.add_row(row["name"], row["level"] or "-", "[green]yes[/]" if row["available"] else "[red]no[/]",
                          row["reason"], row["source"])
        make_console().print(table)
        from kernelpro.harness import memguard, sandbox
        typer.echo(sandbox.describe())
        typer.echo(memguard.describe_limit())

    app.add_typer(tools_app, name="tools")
