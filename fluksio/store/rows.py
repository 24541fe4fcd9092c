"""Rows on their way to the store, as plain objects. Pure: no SQLAlchemy, so the driver's pure parts make them.

Each has a table's columns but the id (the database numbers rows); ``store.nodes`` writes them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any


@dataclass(slots=True)
class NodeRow:
    """A node row on its way to the store: ``RunNode``'s columns (but the id), as a plain object.

    A driver makes one per finished node; an ORM instance, with its per-instance bookkeeping, cost
    about 9 % of a fan-out driver's time, and ``record_nodes`` writes plain values anyway.
    """

    run_id: str
    node: str
    status: str
    attempt: int = 1
    #: A mapped node's element, -1 for a node that is not mapped (see ``RunNode.element``).
    element: int = -1
    machine: str | None = None
    gpus: list[int] = field(default_factory=list)
    granted: dict[str, Any] | None = None
    child_run: str | None = None
    started_at: datetime | None = None
    finished_at: datetime | None = None
    duration_ms: int | None = None
    error: str | None = None
    logs: str | None = None
    cache_key: str | None = None
    outputs: dict[str, Any] | None = None
    cached_from: str | None = None
    cached_element: int | None = None
    node_code: str | None = None
    cache_miss: str | None = None


@dataclass(slots=True)
class ArtifactRow:
    """An artifact row on its way to the store: ``RunArtifact``'s columns (but the id)."""

    run_id: str
    node: str
    message: str
    digest: str
    size: int
    media_type: str
    name: str | None = None
    codec: str | None = None
    element: int = -1
