"""The rows a driver writes for what became of its nodes. Pure: plain objects, no SQL.

A completion becomes a node row and the rows of the artifacts it made; a node
restored from the cache, skipped, or cancelled gets a row with no call behind it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from fluksio.cache.keys import CacheHit, cacheable
from fluksio.clock import utcnow
from fluksio.driver.walk import Ended
from fluksio.errors import first_line
from fluksio.messages import Completion
from fluksio.schemas import Grant, NodeStatus, RunStatus, split_unit
from fluksio.store.rows import ArtifactRow, NodeRow


def completion_rows(run_id: str, completion: Completion, cache_key: str | None,
                    warning: str | None = None, grant: Grant | None = None,
                    note: str | None = None, node_code: str | None = None,
                    cache_miss: str | None = None) -> tuple[NodeRow, list[ArtifactRow]]:
    """The node row of a finished call (with the placer's warning and the driver's ``note`` — what became of
    a failure: retried, or why not — before its logs), and its artifacts.

    ``cache_key`` is recorded only for an ``ok`` call whose outputs are small enough to be a cache entry;
    ``grant`` is what the call held (its ``granted`` resources); ``node_code`` the code identity it was keyed
    on, ``cache_miss`` why it was not restored from the cache.
    """
    ok = completion.ok
    logs = completion.logs
    for said in (note, warning):
        if said:
            logs = f"[fluksio] {said}\n{logs or ''}"
    started, finished = _parse(completion.started_at), _parse(completion.finished_at)
    element = -1 if completion.index is None else completion.index
    row = NodeRow(
        run_id=run_id, node=completion.node, element=element, attempt=completion.attempt,
        status=NodeStatus.OK.value if ok else NodeStatus.ERROR.value,
        machine=completion.machine, gpus=list(completion.gpus), started_at=started, finished_at=finished,
        error=None if ok else completion.error, logs=logs, outputs=completion.outputs if ok else None,
        duration_ms=int((finished - started).total_seconds() * 1000) if started and finished else None,
        granted=granted(grant), node_code=node_code, cache_miss=cache_miss,
    )
    if ok and cacheable(row.outputs):
        row.cache_key = cache_key
    artifacts = [
        ArtifactRow(run_id=run_id, node=completion.node, message=a.message, digest=a.digest, size=a.size,
                    media_type=a.media_type or "application/octet-stream", name=a.name, codec=a.codec,
                    element=element)
        for a in completion.artifacts
    ] if ok else []
    return row, artifacts


def cached_row(run_id: str, unit: str, cache_key: str, hit: CacheHit, node_code: str | None = None) -> NodeRow:
    """The row of a unit restored from the cache: no call, the original run's outputs (and where they came from)."""
    now = utcnow()
    node, index = split_unit(unit)
    return NodeRow(run_id=run_id, node=node, element=-1 if index is None else index, attempt=1,
                   status=NodeStatus.CACHED.value, started_at=now, finished_at=now, duration_ms=0,
                   cache_key=cache_key, outputs=hit.outputs, cached_from=hit.run_id, cached_element=hit.element,
                   node_code=node_code)


def bare_rows(run_id: str, units: Iterable[str], attempts: Mapping[str, int], status: NodeStatus,
              error: str | None, grant: Grant | None = None) -> list[NodeRow]:
    """Rows of units that never ran (cancelled before they started) or were killed holding ``grant``."""
    now = utcnow()
    rows = []
    for unit in units:
        node, index = split_unit(unit)
        rows.append(NodeRow(run_id=run_id, node=node, element=-1 if index is None else index,
                            attempt=attempts.get(unit, 1), status=status.value,
                            machine=grant.machine if grant else None, gpus=list(grant.gpus) if grant else [],
                            finished_at=now, error=error, granted=granted(grant)))
    return rows


def granted(grant: Grant | None) -> dict[str, int] | None:
    """A grant's resources as a row keeps them (``RunNode.granted``): cpus, gpus and ram_mb."""
    return None if grant is None else grant.resources.model_dump()


@dataclass(frozen=True)
class ChildEnd:
    """How a child run (a subflow call) ended, as its parent reads it from the child's row."""

    run_id: str
    status: RunStatus
    reason: str | None
    #: The child's result: its output messages.
    result: dict[str, Any]
    started_at: datetime | None
    finished_at: datetime | None
    #: Every node of the child was restored from the cache.
    cached: bool


def child_row(run_id: str, unit: str, attempt: int, child_outputs: Iterable[tuple[str, str]],
              end: ChildEnd | None, refused: str | None = None) -> NodeRow:
    """The parent's row for one subflow call: ``ok`` (``cached`` when the whole child was) with the child's
    outputs under the parent's message names, else ``error`` with the child's reason (or why it never
    started: ``refused``)."""
    node, index = split_unit(unit)
    element = -1 if index is None else index
    if end is None:
        return NodeRow(run_id=run_id, node=node, element=element, attempt=attempt, status=NodeStatus.ERROR.value,
                       finished_at=utcnow(), error=refused)
    ok = end.status is RunStatus.OK
    status = (NodeStatus.CACHED if end.cached else NodeStatus.OK) if ok else NodeStatus.ERROR
    reason = first_line(end.reason, "no reason given")
    return NodeRow(
        run_id=run_id, node=node, element=element, attempt=attempt, status=status.value, child_run=end.run_id,
        started_at=end.started_at, finished_at=end.finished_at or utcnow(),
        duration_ms=(int((end.finished_at - end.started_at).total_seconds() * 1000)
                     if end.started_at and end.finished_at else None),
        outputs={message: end.result.get(output) for message, output in child_outputs} if ok else None,
        error=None if ok else f"child run {end.run_id} ended {end.status.value}: {reason}",
    )


def ended_row(run_id: str, ended: Ended, attempt: int) -> NodeRow:
    """The row of a node the walk ended without a call: skipped or failed (why, as its error), or a map
    over no elements (``ok``, its empty lists as outputs, why in its logs)."""
    ok = ended.status is NodeStatus.OK
    return NodeRow(run_id=run_id, node=ended.node, attempt=attempt, status=ended.status.value,
                   finished_at=utcnow(), error=None if ok else ended.reason,
                   logs=f"[fluksio] {ended.reason}" if ok else None, outputs=ended.outputs)


def unreported(call_id: str, unit: str, attempt: int, epoch: int, grant: Grant, *, started: bool,
               error: str) -> Completion:
    """The completion of a call that will never report itself (never sent, or its machine died)."""
    now = utcnow().isoformat()
    node, index = split_unit(unit)
    return Completion(call_id=call_id, node=node, index=index, attempt=attempt, status="error",
                      machine=grant.machine, gpus=tuple(grant.gpus), started_at=now if started else None,
                      finished_at=now, epoch=epoch, error=error)


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None
