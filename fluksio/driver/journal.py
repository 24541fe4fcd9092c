"""A driver's journal: rows of finished nodes, written in batches, announced once written.

The driver decides when rows must be written (before anything depending on
them is sent, and before the run ends); otherwise, while other calls still run,
rows wait a little for company, so that a fan-out costs a transaction per batch
of completions rather than one per node.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

from fluksio.broker.events.base import Events
from fluksio.store.db import Database
from fluksio.store.nodes import ArtifactRow, NodeRow, record_nodes

#: Rows that wait for company are written once this many have come (a drain of the inbox may bring
#: more at once: they go in the same transaction), …
WRITE_BATCH_ROWS = 200
#: … and none waits longer than this, in seconds. A driver that dies loses at most this much finished
#: work, which resuming its run does again.
WRITE_DELAY_S = 0.05


class Journal:
    """The rows one driver has collected and not yet written, and the events of rows written.

    Invariant: an event is published only after its row is committed, so a watcher that reads the
    row on hearing the event finds it.
    """

    def __init__(self, db: Database, events: Events, run_id: str) -> None:
        self.db = db
        self.events = events
        self.run_id = run_id
        self._unwritten: list[tuple[NodeRow, list[ArtifactRow], dict[str, Any] | None]] = []
        #: ``time.monotonic()`` when the oldest unwritten row came, in seconds.
        self._since = 0.0
        #: ``node_finished`` events of rows written, published by ``announce``.
        self._unannounced: list[dict[str, Any]] = []

    def add(self, row: NodeRow, artifacts: list[ArtifactRow] | None = None,
            event: dict[str, Any] | None = None) -> None:
        """Collect a row (with the artifacts its node made, and the ``node_finished`` fields to announce)."""
        if not self._unwritten:
            self._since = time.monotonic()
        self._unwritten.append((row, artifacts or [], event))

    def add_all(self, rows: Iterable[NodeRow]) -> None:
        """Collect rows of nodes that ended without a call of their own (skipped, cancelled): no event."""
        for row in rows:
            self.add(row)

    @property
    def waiting(self) -> bool:
        """Whether some row is collected and not yet written."""
        return bool(self._unwritten)

    def due(self) -> bool:
        """Whether rows have waited long enough, or enough of them have come, to be written now."""
        return bool(self._unwritten) and (len(self._unwritten) >= WRITE_BATCH_ROWS
                                          or time.monotonic() - self._since >= WRITE_DELAY_S)

    def due_at(self) -> float | None:
        """``time.monotonic()`` at which the rows waiting fall due; ``None`` when none waits."""
        return self._since + WRITE_DELAY_S if self._unwritten else None

    def write(self) -> None:
        """Write every row collected, in one transaction; their events wait for ``announce``."""
        if not self._unwritten:
            return
        unwritten = self._unwritten
        record_nodes(self.db, [row for row, _, _ in unwritten],
                     [artifact for _, artifacts, _ in unwritten for artifact in artifacts])
        self._unwritten = []
        self._unannounced.extend(event for _, _, event in unwritten if event is not None)

    def discard(self) -> None:
        """Forget the rows not yet written (the run was taken over by another driver)."""
        self._unwritten = []
        self._unannounced = []

    def announce(self) -> None:
        """Publish ``node_finished`` for rows already written (a watcher that reads the row finds it)."""
        announced, self._unannounced = self._unannounced, []
        if announced:  # a batch of rows, a batch of events: one round trip on Redis
            self.events.publish_all("node_finished", [{"run_id": self.run_id, **event} for event in announced])
