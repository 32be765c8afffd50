"""The `kernelpro` command. Each command group lives in its own module and calls a
plain library function; `main()` turns project errors into one clear line."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

import kernelpro
from kernelpro.errors import KernelproError

app = typer.Typer(name="kernelpro", no_args_is_help=True, add_completion=True,
                  pretty_exceptions_enable=False, context_settings={"help_option_names": ["-h", "--help"]},
                  help="Search for faster GPU implementations of PyTorch operators.")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"kernelpro {kernelpro.__version__}")
        raise typer.Exit()


@app.callback()
def _root(version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                                help="print the version and exit")] = False,
          quiet: Annotated[bool, typer.Option("-q", "--quiet", help="only results and errors: no banner, no "
                                                                     "progress display")] = False,
          verbose: Annotated[bool, typer.Option("-v", "--verbose", help="log each evaluation, candidate and bench "
                                                                         "child on stderr")] = False) -> None:
    """kernelpro: search for faster GPU implementations of PyTorch operators.

    -q and -v go before the command: kernelpro -q search PROBLEM."""
    if quiet and verbose:
        raise typer.BadParameter("-q and -v: give one of them", param_hint="-q/-v")
    from kernelpro.cli_options import set_verbosity
    set_verbosity(quiet, verbose)


def _register_commands() -> None:
    from kernelpro import cli_bench, cli_cutlass, cli_eval, cli_kb, cli_profile, cli_search, cli_tools
    cli_search.register(app)
    cli_eval.register(app)
    cli_profile.register(app)
    cli_tools.register(app)
    cli_cutlass.register(app)
    cli_kb.register(app)
    cli_bench.register(app)


_register_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point: project errors become one line (KERNELPRO_DEBUG=1 shows the traceback; the hint
    says so only where another exception lies behind the error).

    Usage errors exit with 2 (typer), a project error with its own code (2; 130 after Ctrl-C).
    """
    try:
        app(args=argv)
    except KernelproError as error:
        if os.environ.get("KERNELPRO_DEBUG") == "1":
            raise
        typer.secho(f"{getattr(error, 'label', 'error')}: {error}", err=True, fg="red")
        if error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
            # another exception lies behind it (a problem file that raised, a failed build): its traceback helps
            typer.echo("hint: set KERNELPRO_DEBUG=1 for the traceback", err=True)
        sys.exit(error.exit_code)
