"""The rows a driver writes for what became of its nodes. Pure: plain objects, no SQL.

A completion becomes a node row and the rows of the artifacts it made; a node
restored from the cache, skipped, or cancelled gets a row with no call behind it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from datetime import datetime, timezone
from typing import Any

from fluksio.messages import Completion
from fluksio.runs.cache_key import cacheable
from fluksio.schemas import Grant, NodeStatus
from fluksio.store.rows import ArtifactRow, NodeRow


def utcnow() -> datetime:
    return datetime.now(timezone.utc)


def completion_rows(run_id: str, completion: Completion, cache_key: str | None,
                    warning: str | None = None) -> tuple[NodeRow, list[ArtifactRow]]:
    """The node row of a finished call (with the placer's warning, if any, before its logs), and its artifacts.

    ``cache_key`` is recorded only for an ``ok`` call whose outputs are small enough to be a cache entry.
    """
    ok = completion.ok
    logs = completion.logs
    if warning:
        logs = f"[fluksio] {warning}\n{logs or ''}"
    started, finished = _parse(completion.started_at), _parse(completion.finished_at)
    row = NodeRow(
        run_id=run_id, node=completion.node, attempt=completion.attempt,
        status=NodeStatus.OK.value if ok else NodeStatus.ERROR.value,
        machine=completion.machine, gpus=list(completion.gpus), started_at=started, finished_at=finished,
        error=None if ok else completion.error, logs=logs, outputs=completion.outputs if ok else None,
        duration_ms=int((finished - started).total_seconds() * 1000) if started and finished else None,
    )
    if ok and cacheable(row.outputs):
        row.cache_key = cache_key
    artifacts = [
        ArtifactRow(run_id=run_id, node=completion.node, message=a.message, digest=a.digest, size=a.size,
                    media_type=a.media_type or "application/octet-stream", name=a.name, codec=a.codec)
        for a in completion.artifacts
    ] if ok else []
    return row, artifacts


def cached_row(run_id: str, node: str, cache_key: str, cached_from: str, outputs: dict[str, Any]) -> NodeRow:
    """The row of a node restored from the cache: no call, the original run's outputs."""
    now = utcnow()
    return NodeRow(run_id=run_id, node=node, attempt=1, status=NodeStatus.CACHED.value, started_at=now,
                   finished_at=now, duration_ms=0, cache_key=cache_key, outputs=outputs, cached_from=cached_from)


def bare_rows(run_id: str, nodes: Iterable[str], attempts: Mapping[str, int], status: NodeStatus,
              error: str | None, grant: Grant | None = None) -> list[NodeRow]:
    """Rows of nodes that never ran (skipped, cancelled before they started) or were killed holding ``grant``."""
    now = utcnow()
    return [NodeRow(run_id=run_id, node=node, attempt=attempts.get(node, 1), status=status.value,
                    machine=grant.machine if grant else None, gpus=list(grant.gpus) if grant else [],
                    finished_at=now, error=error)
            for node in nodes]


def unreported(call_id: str, node: str, attempt: int, epoch: int, grant: Grant, *, started: bool,
               error: str) -> Completion:
    """The completion of a call that will never report itself (never sent, or its machine died)."""
    now = utcnow().isoformat()
    return Completion(call_id=call_id, node=node, attempt=attempt, status="error", machine=grant.machine,
                      gpus=tuple(grant.gpus), started_at=now if started else None, finished_at=now, epoch=epoch,
                      error=error)


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None
