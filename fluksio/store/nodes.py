"""Node rows and the artifacts a node made, written together in one transaction."""

from __future__ import annotations

from sqlalchemy import select

from fluksio.store.db import Database, retried
from fluksio.store.models import RunArtifact, RunNode


@retried
def record_node(db: Database, row: RunNode, artifacts: list[RunArtifact] = ()) -> None:
    with db.write() as session:
        session.add(row)
        session.add_all(artifacts)


@retried
def record_nodes(db: Database, rows: list[RunNode]) -> None:
    """Several node rows in one transaction (nodes skipped or cancelled together)."""
    with db.write() as session:
        session.add_all(rows)


@retried
def artifacts_of(db: Database, run_id: str) -> list[RunArtifact]:
    with db.read() as session:
        return list(session.scalars(select(RunArtifact).where(RunArtifact.run_id == run_id).order_by(RunArtifact.id)))
