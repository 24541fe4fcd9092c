"""``fluksio artifact get`` and ``fluksio db upgrade``: what the stores hold, and the run store's schema."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from fluksio.settings import load_settings
from fluksio.store.contact import open_run_store

#: Bytes copied per step when an artifact streams to a file.
STREAM_CHUNK = 1 << 20


@click.group()
def artifact() -> None:
    """Artifacts: bytes nodes made, stored under their digest (sha256: or blake3:)."""


@artifact.command("get")
@click.argument("digest")
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, writable=True), required=True,
              help="File to write the bytes to ('-' for standard output).")
def artifact_get(digest: str, output: str) -> None:
    """Write the bytes of artifact DIGEST (sha256:… or blake3:…) to a file, streamed and checked against the digest."""
    from fluksio.artifacts.digests import validate_digest
    from fluksio.artifacts.factory import open_store

    store = open_store(load_settings(), check=True)
    with store.open(validate_digest(digest)) as source:
        if output == "-":
            # Bytes already written cannot be taken back: a copy found corrupt at its end exits non-zero.
            shutil.copyfileobj(source, sys.stdout.buffer, STREAM_CHUNK)
            return
        target = Path(output)
        partial = target.with_name(f".{target.name}.partial")
        try:
            with partial.open("wb") as handle:
                shutil.copyfileobj(source, handle, STREAM_CHUNK)
            partial.replace(target)  # only a checked, whole copy gets the name asked for
        finally:
            partial.unlink(missing_ok=True)
    click.echo(f"wrote {target.stat().st_size} bytes to {output}", err=True)


@click.group()
def db() -> None:
    """The run store."""


@db.command()
def upgrade() -> None:
    """Create or upgrade the run store's tables to the newest schema."""
    database = open_run_store(load_settings(), upgrade=False)
    before = database.current_revision()
    database.upgrade()
    click.echo(f"run store at revision {database.current_revision()} (was {before or 'empty'})")
    database.dispose()
