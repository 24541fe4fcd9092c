"""``fluksio code``: the code a run ran, as the files of its code package."""

from __future__ import annotations

from pathlib import Path

import click

from fluksio.cli import render
from fluksio.cli.connection import open_client


@click.group()
def code() -> None:
    """The code packages runs ship (README: "Code that travels with the run")."""


@code.command("get")
@click.argument("run_id", metavar="RUN")
@click.option("-o", "--output", "into", required=True, type=click.Path(file_okay=False, path_type=Path),
              help="A new or empty folder to write the files into.")
def get(run_id: str, into: Path) -> None:
    """Write exactly the files RUN ran (its code package) into a folder."""
    with open_client() as client:
        files = client.get_code(run_id, into)  # a FluksioError is one line and exit 2 (cli/main.py)
        total = sum(f.size for f in files)
        render.console(stderr=True).print(f"wrote {len(files)} file(s), {render.size_text(total)}, to {into}")
        for packed in files:
            click.echo(packed.path)
