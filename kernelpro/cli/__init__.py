"""The `kernelpro` command. Each command group lives in its own module and calls a
plain library function; `main()` turns project errors into one clear line."""

from __future__ import annotations

import os
import sys
from typing import Annotated

import typer

import kernelpro
from kernelpro.errors import KernelproError

# the exceptions of the click that typer runs on (typer 0.2x carries its own copy of click)
_CLICK = sys.modules[typer.BadParameter.__module__]
_NO_ARGS = getattr(_CLICK, "NoArgsIsHelpError", ())
_ABORT = (getattr(_CLICK, "Abort", typer.Abort), typer.Abort)

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
    from kernelpro.cli.options import set_verbosity
    set_verbosity(quiet, verbose)


def _register_commands() -> None:
    from kernelpro.cli import bench, cutlass, kb, launch, profile, search, tools
    from kernelpro.cli import eval as evaluate
    search.register(app)
    evaluate.register(app)
    profile.register(app)
    tools.register(app)
    cutlass.register(app)
    kb.register(app)
    bench.register(app)
    launch.register(app)


_register_commands()


def main(argv: list[str] | None = None) -> None:
    """Entry point. Every error is one `error: ...` line on stderr: usage errors (exit 2, with a hint
    naming the command's -h) and project errors (exit 2, or their own code; 130 after Ctrl-C), whose
    hint about KERNELPRO_DEBUG=1 (the traceback) comes only where another exception lies behind the
    error. Always exits through SystemExit, as click's standalone mode does."""
    try:
        code = _command()(args=argv, standalone_mode=False, prog_name="kernelpro")
    except _NO_ARGS:  # a group without a command: typer has printed its help, as for -h
        sys.exit(2)
    except _CLICK.UsageError as error:
        _error(error.format_message())
        command = error.ctx.command_path if error.ctx else "kernelpro"
        typer.echo(f"hint: {command} -h lists the arguments and options", err=True)
        sys.exit(2)
    except _CLICK.ClickException as error:
        _error(error.format_message())
        sys.exit(error.exit_code)
    except _ABORT:
        _error("aborted")
        sys.exit(1)
    except KernelproError as error:
        if os.environ.get("KERNELPRO_DEBUG") == "1":
            raise
        _error(str(error), getattr(error, "label", "error"))
        if error.__cause__ is not None or (error.__context__ is not None and not error.__suppress_context__):
            # another exception lies behind it (a problem file that raised, a failed build): its traceback helps
            typer.echo("hint: set KERNELPRO_DEBUG=1 for the traceback", err=True)
        sys.exit(error.exit_code)
    sys.exit(code if isinstance(code, int) else 0)


def _command():
    """The click command typer builds from `app`, with no type shown for flags: typer labels every flag
    `<bool>` in help, where a flag takes no value."""
    command = typer.main.get_command(app)
    stack = [command]
    while stack:
        current = stack.pop()
        # click makes -h/--help on first use and keeps it: make it now, with the names every command has
        help_option = current.get_help_option(current.context_class(current, help_option_names=["-h", "--help"]))
        for param in current.params + [help_option]:
            if getattr(param, "is_flag", False) and param.metavar is None:
                param.metavar = ""
        stack.extend(getattr(current, "commands", {}).values())
    return command


def _error(message: str, label: str = "error") -> None:
    typer.secho(f"{label}: {message}", err=True, fg="red")
