"""How a drive ends, and what that makes of its run. Pure: no Celery, no SQL.

A driver stops for one reason (:class:`End`); only a drive that ran out of work
(``DRAINED``) or was cancelled writes the run's end, and :func:`verdict` says
which end from the walk alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import Enum

from fluksio.driver.walk import NodeState, Walk
from fluksio.schemas import RunStatus


class End(str, Enum):
    """Why a driver stopped driving its run. ``DRIVING`` until it does; each other value is final."""

    DRIVING = "driving"
    #: Nothing is running and nothing more can run: the run ends ``ok`` or ``error`` (see :func:`verdict`).
    DRAINED = "drained"
    #: A cancel was asked for: pending nodes never start, running calls were killed.
    CANCELLED = "cancelled"
    #: The run became another driver's (a sweeper took its lease, or it was resumed elsewhere): this driver
    #: writes nothing more, not even the rows it holds.
    LOST = "lost"
    #: This process is shutting down: the run is left ``abandoned`` for `fluksio resume` …
    HANDED_OVER = "handed_over"
    #: … or, with auto-resume, sent straight back to ``queued`` for another driver.
    REQUEUED = "requeued"

    @property
    def writes_rows(self) -> bool:
        """Whether the rows this driver collected are still its to write."""
        return self is not End.LOST


@dataclass(frozen=True)
class Verdict:
    status: RunStatus
    reason: str | None = None


def verdict(walk: Walk, errors: Mapping[str, str], end: End) -> Verdict:
    """The end of a run whose drive stopped ``DRAINED`` or ``CANCELLED``.

    ``errors`` holds each failed node's last error. A run is ``ok`` only when every node ended well:
    nodes still pending with nothing left running could never get their inputs (the flow changed
    between submit and claim), which is an error too.
    """
    if end is End.CANCELLED:
        return Verdict(RunStatus.CANCELLED, "cancelled by request")
    stranded = [n for n, s in walk.state.items() if s is NodeState.PENDING]
    if stranded:
        missing = sorted({m for n in stranded for m in walk.flow.nodes[n].requires if m not in walk.messages})
        return Verdict(RunStatus.ERROR, f"node(s) {', '.join(stranded)} could never run: nobody provided "
                                        f"{', '.join(missing)} (did the flow change since the submit?)")
    failed = walk.failed()
    if failed:
        details = "; ".join(f"{n}: {errors.get(n, 'failed').splitlines()[0]}" for n in failed)
        skipped = [n for n, s in walk.state.items() if s is NodeState.SKIPPED]
        tail = f" ({len(skipped)} downstream node(s) skipped: {', '.join(skipped)})" if skipped else ""
        return Verdict(RunStatus.ERROR, f"node(s) {', '.join(failed)} failed — {details}{tail}")
    return Verdict(RunStatus.OK)
