"""`kernelpro cutlass search|show|build`: the CUTLASS/CuTe code index (kernelpro.cutlass_index)."""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated

import typer
from rich.syntax import Syntax
from kernelpro.cli.options import JsonFile, JsonOutput, make_console, write_json


def search(query: str, k: int = 10, arch: str | None = None) -> list[dict]:
    """The library call behind `kernelpro cutlass search --json`."""
    from kernelpro.cutlass_index import load_index
    return [asdict(hit) for hit in load_index(progress=_stderr).search(query, k, arch=arch)]


def _stderr(message: str) -> None:
    make_console(stderr=True).print(f"[dim]{message}[/]")


def _where(spec: str) -> tuple[str, int | None]:
    path, _, line = spec.rpartition(":")
    return (path, int(line)) if path and line.isdigit() else (spec, None)


def register(app: typer.Typer) -> None:
    cutlass_app = typer.Typer(help="Search and read the CUTLASS/CuTe sources of the nvidia-cutlass wheel.",
                              no_args_is_help=True)

    @cutlass_app.command("search")
    def search_command(
        query: Annotated[str, typer.Argument(metavar="QUERY", help="words or identifiers, e.g. 'sm90 tma load' or make_tiled_copy")],
        k: Annotated[int, typer.Option("-k", "--top", min=1, max=200, help="how many results")] = 10,
        arch: Annotated[str, typer.Option("--arch", metavar="<smXY|any>", help="rank this GPU generation's "
                                          "declarations first and demote the others; default: the local GPU's, "
                                          "else none")] = "",
        json_output: JsonOutput = False,
        json_file: JsonFile = None,
    ) -> None:
        """Rank the declarations (structs, classes, functions, aliases, macros) that match QUERY, at most two
        per file, printed under their file (--json: the declarations in rank order)."""
        import re
        if not query.strip():
            raise typer.BadParameter("is empty: give words or identifiers", param_hint="QUERY")
        if arch and arch != "any" and not re.fullmatch(r"sm_?\d{2,3}[a-z]?", arch, re.I):
            raise typer.BadParameter(f"{arch!r} is not a GPU generation: give e.g. sm90, sm80 or any",
                                     param_hint="--arch")
        from kernelpro.cutlass_index import device_arch
        hits = search(query, k, None if arch == "any" else arch or device_arch())
        write_json(hits, json_output, json_file)
        if json_output:
            return
        console = make_console()
        if not hits:
            console.print(f"no declaration matches {query!r}")
        from kernelpro.cutlass_index import by_file
        for path, declarations in by_file(hits, lambda hit: hit["path"]):  # each file once, with its declarations
            console.print(f"[bold cyan]{path}[/]", highlight=False)
            for hit in declarations:
                console.print(f"  [bold]{hit['symbol']}[/] [dim]({hit['kind']}, line {hit['line']}, score "
                              f"{hit['score']:.2f})[/]", highlight=False)
                console.print(Syntax(hit["snippet"], "cpp", line_numbers=False, word_wrap=True))

    @cutlass_app.command("show")
    def show_command(
        where: Annotated[str, typer.Argument(metavar="WHERE", help="PATH[:LINE], a path as search prints it")],
        context: Annotated[int, typer.Option("--context", min=1, help="lines after LINE outside a declaration")] = 40,
    ) -> None:
        """Print a source file, or the declaration at PATH:LINE."""
        from kernelpro.cutlass_index import load_index
        from kernelpro.harness.errors import KernelproError
        path, line = _where(where)
        try:
            first, lines = load_index(progress=_stderr).show(path, line, context)
        except FileNotFoundError as error:
            raise KernelproError(str(error)) from error
        width = len(str(first + len(lines)))
        for number, text in enumerate(lines, start=first):
            typer.echo(f"{number:>{width}}  {text}")

    @cutlass_app.command("build")
    def build_command(json_output: JsonOutput = False, json_file: JsonFile = None) -> None:
        """Build the index again (it is built on first use, and again when the wheel's version changes)."""
        from kernelpro.cutlass_index import load_index
        meta = load_index(rebuild=True, progress=_stderr).meta
        write_json(meta, json_output, json_file)
        if not json_output:
            typer.echo(f"indexed {meta['chunks']} declarations in {meta['files']} files of CUTLASS {meta['version']} "
                       f"in {meta['build_seconds']:.1f} s")

    app.add_typer(cutlass_app, name="cutlass")
