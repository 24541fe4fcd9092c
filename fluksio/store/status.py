"""The one table of run status transitions; every status write checks it."""

from __future__ import annotations

from fluksio.schemas import RunStatus

#: Which statuses a run may move to from each status. A run that did not end ``ok`` may go back to
#: ``queued`` only by being resumed; ``ok`` is final. One move is not in the table, so that no plain
#: :func:`~fluksio.store.run_rows.transition` can make it: auto-resume sends a ``running`` run whose driver is
#: gone straight back to ``queued`` (recorded as resumed from ``abandoned``), in the guarded UPDATEs of
#: ``requeue_stale`` and ``requeue_handed_over``.
TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.ERROR}),
    RunStatus.RUNNING: frozenset({RunStatus.OK, RunStatus.ERROR, RunStatus.CANCELLED, RunStatus.ABANDONED}),
    RunStatus.OK: frozenset(),
    RunStatus.ERROR: frozenset({RunStatus.QUEUED}),
    RunStatus.CANCELLED: frozenset({RunStatus.QUEUED}),
    RunStatus.ABANDONED: frozenset({RunStatus.QUEUED}),
}

#: Statuses from which `fluksio resume` re-drives a run.
RESUMABLE = frozenset({RunStatus.ERROR, RunStatus.CANCELLED, RunStatus.ABANDONED})


def allowed_from(target: RunStatus) -> list[str]:
    """The statuses from which ``target`` may be reached, as stored strings (for a guarded UPDATE)."""
    return [source.value for source, targets in TRANSITIONS.items() if target in targets]
