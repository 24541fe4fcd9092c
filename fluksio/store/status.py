"""The one table of run status transitions; every status write checks it."""

from __future__ import annotations

from fluksio.schemas import RunStatus

#: Which statuses a run may move to from each status. Terminal statuses move only by resume.
TRANSITIONS: dict[RunStatus, frozenset[RunStatus]] = {
    RunStatus.QUEUED: frozenset({RunStatus.RUNNING, RunStatus.CANCELLED, RunStatus.ERROR}),
    RunStatus.RUNNING: frozenset({RunStatus.OK, RunStatus.ERROR, RunStatus.CANCELLED, RunStatus.ABANDONED}),
    RunStatus.OK: frozenset(),
    RunStatus.ERROR: frozenset(),
    RunStatus.CANCELLED: frozenset(),
    RunStatus.ABANDONED: frozenset(),
}


def allowed_from(target: RunStatus) -> list[str]:
    """The statuses from which ``target`` may be reached, as stored strings (for a guarded UPDATE)."""
    return [source.value for source, targets in TRANSITIONS.items() if target in targets]
