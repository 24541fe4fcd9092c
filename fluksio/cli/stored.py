"""``fluksio artifact get`` and ``fluksio db upgrade``: what the stores hold, and the run store's schema."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path

import click

from fluksio.errors import ArtifactError
from fluksio.settings import Settings, load_settings

#: Bytes copied per step when an artifact streams to a file.
STREAM_CHUNK = 1 << 20


@click.group()
def artifact() -> None:
    """Artifacts: bytes nodes made, stored under their digest (sha256: or blake3:)."""


@artifact.command("get")
@click.argument("target", metavar="DIGEST | RUN OUTPUT")
@click.argument("run_output", metavar="", required=False)
@click.option("-o", "--output", "output", type=click.Path(dir_okay=False, writable=True), required=True,
              help="File to write the bytes to ('-' for standard output).")
def artifact_get(target: str, run_output: str | None, output: str) -> None:
    """Write the bytes of an artifact to a file, streamed and checked against its digest: artifact DIGEST
    (sha256:… or blake3:…), or output OUTPUT of run RUN (an Artifact or a codec's value a node returned;
    OUTPUT[I]: element I of a mapped node's output)."""
    from fluksio.artifacts.digests import DIGEST_FORM, looks_like_digest, validate_digest
    from fluksio.artifacts.factory import open_store

    settings = load_settings()
    if run_output is None and not looks_like_digest(target):
        raise ArtifactError(f"{target!r} is not an artifact's digest ({DIGEST_FORM}); for an output of a run, "
                            f"name the output too: fluksio artifact get {target} OUTPUT -o FILE")
    if looks_like_digest(target) and run_output is not None:
        raise ArtifactError(f"{target} is an artifact's digest, which needs no OUTPUT; give RUN OUTPUT to name "
                            "an output of a run")
    digest = validate_digest(target) if run_output is None else _output_digest(settings, target, run_output)
    store = open_store(settings, check=True)
    with store.open(digest) as source:
        if output == "-":
            # Bytes already written cannot be taken back: a copy found corrupt at its end exits non-zero.
            shutil.copyfileobj(source, sys.stdout.buffer, STREAM_CHUNK)
            return
        written = Path(output)
        partial = written.with_name(f".{written.name}.partial")
        try:
            with partial.open("wb") as handle:
                shutil.copyfileobj(source, handle, STREAM_CHUNK)
            partial.replace(written)  # only a checked, whole copy gets the name asked for
        finally:
            partial.unlink(missing_ok=True)
    click.echo(f"wrote {written.stat().st_size} bytes to {output}", err=True)


def _output_digest(settings: Settings, run_id: str, output: str) -> str:
    """The digest of the bytes that hold output ``output`` of run ``run_id`` (read from the run store alone)."""
    from fluksio.runs.outputs import output_artifact
    from fluksio.store.contact import open_run_store  # SQLAlchemy: imported by the commands that need it

    database = open_run_store(settings, upgrade=False)
    try:
        return str(output_artifact(database, run_id, output)["digest"])
    finally:
        database.dispose()


@click.group()
def db() -> None:
    """The run store."""


@db.command()
def upgrade() -> None:
    """Create or upgrade the run store's tables to the newest schema."""
    from fluksio.store.contact import open_run_store

    database = open_run_store(load_settings(), upgrade=False)
    before = database.current_revision()
    database.upgrade()
    click.echo(f"run store at revision {database.current_revision()} (was {before or 'empty'})")
    database.dispose()
