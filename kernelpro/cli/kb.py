"""`kernelpro kb show|export|import|reset`: the persistent knowledge base (kernelpro.knowledge)."""

from __future__ import annotations

import json
import math
import sys
from dataclasses import asdict
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table
from kernelpro.cli.options import JsonFile, JsonOutput, ObjectiveChoice, make_console, write_json

KbPath = Annotated[Path | None, typer.Option("--kb", help="the knowledge base (default: $KERNELPRO_HOME/kb.sqlite, "
                                                          "else the user data folder)")]


def show(kb: Path | None = None, family: str = "", roofline: str = "", objective: str = "time") -> dict:
    """The library call behind `kernelpro kb show --json`."""
    from kernelpro.knowledge import KnowledgeBase, State
    with KnowledgeBase(kb, read_only=True) as base:
        state = State(family, roofline) if family else None
        stats = base.stats(state, objective)
        return {"path": str(base.path), "schema_version": base.version, "observations": base.count(),
                "state": asdict(state) if state else None, "objective": objective,
                "techniques": [asdict(s) | {"factor": round(s.factor(objective), 4)} for s in stats],
                "summary": base.summary(state, stats) if state else ""}


def register(app: typer.Typer) -> None:
    kb_app = typer.Typer(help="The knowledge base: which techniques worked in which states, across runs.",
                         no_args_is_help=True)

    @kb_app.command("show")
    def show_command(
        kb: KbPath = None,
        family: Annotated[str, typer.Option("--family", help="weigh by similarity to this operator family "
                                                             "(attention, conv, gemm, norm, reduction, pointwise)")] = "",
        roofline: Annotated[str, typer.Option("--roofline", help="and this roofline class (with --family)")] = "",
        objective: Annotated[ObjectiveChoice, typer.Option("--objective", help="rank and give prior factors for "
                                                                              "this search objective")] = ObjectiveChoice.time,
        json_output: JsonOutput = False,
        json_file: JsonFile = None,
    ) -> None:
        """Per technique: attempts, successes, mean and spread of the time gain, the energy effect where it was
        measured, and the prior factor it gives a search of the objective."""
        if roofline and not family:
            raise typer.BadParameter("needs --family too", param_hint="--roofline")
        document = show(kb, family, roofline, objective.value)
        write_json(document, json_output, json_file)
        if json_output:
            return
        console = make_console()
        where = f" like {family}" + (f"/{roofline}" if roofline else "") if family else ""
        table = Table(title=f"{document['observations']} observations in {document['path']}{where}")
        for column in ("technique", "attempts", "successes", "mean gain", "spread (log)", "energy per call (measured)",
                       f"prior factor ({objective.value})"):
            table.add_column(column, justify="left" if column == "technique" else "right")
        for t in document["techniques"]:
            energy = (f"{math.exp(-t['mean_energy_gain']):.3f}x ({t['energy_successes']:g})"
                      if t["energy_successes"] else "-")
            table.add_row(t["technique"], f"{t['attempts']:g}", f"{t['successes']:g}",
                          f"{math.exp(t['mean_gain']):.3f}x", f"{t['spread_gain']:.3f}", energy, f"{t['factor']:.2f}")
        console.print(table)
        if document["summary"]:
            console.print(document["summary"], highlight=False)

    @kb_app.command("export")
    def export_command(
        kb: KbPath = None,
        output: Annotated[Path | None, typer.Option("-o", "--output", help="write here (default: stdout)")] = None,
    ) -> None:
        """Every observation as JSON, to share a base with a team (`kernelpro kb import`)."""
        from kernelpro.knowledge import KnowledgeBase
        with KnowledgeBase(kb, read_only=True) as base:
            text = json.dumps(base.export(), indent=1)
        if output is None:
            sys.stdout.write(text + "\n")
        else:
            output.write_text(text + "\n")
            make_console(stderr=True).print(f"wrote {output}")

    @kb_app.command("import")
    def import_command(
        source: Annotated[Path, typer.Argument(metavar="SOURCE", help="a file written by `kernelpro kb export`", exists=True,
                                               dir_okay=False)],
        kb: KbPath = None,
    ) -> None:
        """Add the observations of an export (those already here are skipped)."""
        from kernelpro.knowledge import KnowledgeBase, KnowledgeError
        try:
            document = json.loads(source.read_text())
        except json.JSONDecodeError as error:
            raise KnowledgeError(f"{source} is not JSON: {error}") from None
        with KnowledgeBase(kb) as base:
            added = base.import_(document)
            typer.echo(f"added {added} observations ({base.count()} in {base.path})")

    @kb_app.command("reset")
    def reset_command(
        kb: KbPath = None,
        yes: Annotated[bool, typer.Option("--yes", "-y", help="do not ask")] = False,
    ) -> None:
        """Forget every observation."""
        from kernelpro.knowledge import KnowledgeBase
        with KnowledgeBase(kb) as base:
            if not yes and not typer.confirm(f"forget the {base.count()} observations in {base.path}?"):
                raise typer.Exit(1)
            typer.echo(f"forgot {base.reset()} observations")

    app.add_typer(kb_app, name="kb")
