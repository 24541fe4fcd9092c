"""Node rows and the artifacts nodes made, written together in one transaction."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

from sqlalchemy import insert, select
from sqlalchemy.dialects.postgresql import insert as pg_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from fluksio.schemas import NodeStatus
from fluksio.store.db import Database, retried
from fluksio.store.models import Run, RunArtifact, RunNode
from fluksio.store.rows import ArtifactRow, NodeRow

__all__ = ["ArtifactRow", "NodeRow", "artifact_by_digest", "artifact_of_run", "artifacts_of", "cache_entries",
           "last_call", "node_values", "record_nodes"]


@retried
def record_nodes(db: Database, rows: Sequence[NodeRow | RunNode],
                 artifacts: Sequence[ArtifactRow | RunArtifact] = ()) -> None:
    """Node rows (and the artifacts their nodes made) in one transaction.

    A driver writes every completion it collected in one go: a fan-out finishing a hundred calls at
    once costs one transaction, not a hundred. The statements are plain inserts run for many rows at
    once (an ORM unit of work cost 2.5× as much per row, measured on SQLite). A row whose (run, node,
    attempt) is there already is left as it is: that is a retry of this very write whose commit went
    through but whose answer was lost in an outage, and it must not fail the run.
    """
    if not rows and not artifacts:
        return
    with db.write_connection() as connection:
        written = set()
        if rows:
            # RETURNING names the rows inserted, not those already there: their nodes' artifacts are too.
            written = {tuple(r) for r in connection.execute(_insert_nodes(db.is_sqlite),
                                                             [node_values(row) for row in rows])}
        made = [a for a in artifacts if (a.run_id, a.node, _element(a)) in written or not rows]
        if made:
            connection.execute(insert(RunArtifact), [artifact_values(a) for a in made])


def node_values(row: NodeRow | RunNode) -> dict[str, Any]:
    """The row's columns, its id aside (the database numbers rows), with the model's defaults filled in."""
    return {
        "run_id": row.run_id, "node": row.node, "attempt": row.attempt or 1, "status": row.status,
        "element": _element(row), "granted": row.granted, "child_run": row.child_run,
        "machine": row.machine, "gpus": row.gpus or [], "started_at": row.started_at,
        "finished_at": row.finished_at, "duration_ms": row.duration_ms, "error": row.error, "logs": row.logs,
        "cache_key": row.cache_key, "outputs": row.outputs, "cached_from": row.cached_from,
        "cached_element": row.cached_element, "node_code": row.node_code, "cache_miss": row.cache_miss,
    }


def artifact_values(artifact: ArtifactRow | RunArtifact) -> dict[str, Any]:
    return {
        "run_id": artifact.run_id, "node": artifact.node, "message": artifact.message, "digest": artifact.digest,
        "size": artifact.size, "media_type": artifact.media_type, "name": artifact.name, "codec": artifact.codec,
        "element": _element(artifact),
    }


def _element(row: NodeRow | RunNode | ArtifactRow | RunArtifact) -> int:
    """The row's element, -1 (not mapped) for an ORM row made without one (its default applies only on flush)."""
    return -1 if row.element is None else row.element


@functools.cache
def _insert_nodes(sqlite: bool) -> Any:
    statement = (sqlite_insert if sqlite else pg_insert)(RunNode)
    return (statement.on_conflict_do_nothing(index_elements=["run_id", "node", "element", "attempt"])
            .returning(RunNode.run_id, RunNode.node, RunNode.element))


def cache_entries(db: Database, key: str, limit: int) -> list[tuple[str, int | None, dict[str, Any] | None]]:
    """``(run id, element, outputs)`` of the newest node rows ending ``ok`` or ``cached`` under a cache key:
    the run and element that made the outputs (a row restored from the cache names its origin).

    Not retried: a cache that cannot answer now is a miss, not a wait (see ``fluksio.cache.lookup``).
    """
    with db.read() as session:
        rows = session.execute(
            select(RunNode.run_id, RunNode.element, RunNode.cached_from, RunNode.cached_element, RunNode.outputs)
            .where(RunNode.cache_key == key, RunNode.status.in_([NodeStatus.OK.value, NodeStatus.CACHED.value]))
            .order_by(RunNode.id.desc())
            .limit(limit)
        ).all()
    return [(cached_from, cached_element, outputs) if cached_from else (run_id, None if element < 0 else element,
                                                                         outputs)
            for run_id, element, cached_from, cached_element, outputs in rows]


def last_call(db: Database, flow: str, node: str, other_than: str) -> tuple[str | None, bool] | None:
    """``(code identity, whether it left a cache entry)`` of the newest call of ``node`` of flow ``flow`` that
    ended ``ok`` or ``cached`` in a run other than ``other_than``; ``None`` when there is none.

    Not retried: it only explains a cache miss (see ``fluksio.cache.node_cache``).
    """
    with db.read() as session:
        row = session.execute(
            select(RunNode.node_code, RunNode.cache_key.is_not(None))
            .join(Run, Run.id == RunNode.run_id)
            .where(RunNode.node == node, Run.flow == flow, RunNode.run_id != other_than,
                   RunNode.status.in_([NodeStatus.OK.value, NodeStatus.CACHED.value]))
            .order_by(RunNode.id.desc())
            .limit(1)
        ).first()
    return None if row is None else (row[0], bool(row[1]))


@retried
def artifacts_of(db: Database, run_id: str) -> list[RunArtifact]:
    with db.read() as session:
        return list(session.scalars(select(RunArtifact).where(RunArtifact.run_id == run_id).order_by(RunArtifact.id)))


@retried
def artifact_by_digest(db: Database, digest: str) -> RunArtifact | None:
    """A row of some run's artifact with these bytes (the oldest), ``None`` when no run made them."""
    with db.read() as session:
        return session.scalars(select(RunArtifact).where(RunArtifact.digest == digest)
                               .order_by(RunArtifact.id).limit(1)).first()


@retried
def artifact_of_run(db: Database, run_id: str, name: str) -> RunArtifact | None:
    """An artifact the run made as message ``name``, or whose file is called ``name``."""
    with db.read() as session:
        return session.scalars(
            select(RunArtifact).where(RunArtifact.run_id == run_id,
                                      (RunArtifact.message == name) | (RunArtifact.name == name)).limit(1)
        ).first()


@retried
def cached_rows_of(db: Database, run_ids: Sequence[str]) -> list[RunNode]:
    """The node rows of these runs that were restored from the cache (``cached_from`` set)."""
    if not run_ids:
        return []
    with db.read() as session:
        return list(session.scalars(select(RunNode).where(RunNode.run_id.in_(list(run_ids)),
                                                          RunNode.cached_from.is_not(None))))
