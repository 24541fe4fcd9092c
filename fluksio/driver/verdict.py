"""How a drive ends, and what that makes of its run. Pure: no Celery, no SQL.

A driver stops for one reason (:class:`End`); only a drive that ran out of work
(``DRAINED``) or was cancelled writes the run's end, and :func:`verdict` says
which end from the walk alone.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

from fluksio.driver.walk import NodeState, Walk
from fluksio.errors import first_line
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
    #: Only child runs are left running: the driver let go of the run, whose rows are written; the first
    #: child to end hands it to a driver again (``store.family``).
    PARKED = "parked"

    @property
    def writes_rows(self) -> bool:
        """Whether the rows this driver collected are still its to write."""
        return self is not End.LOST


@dataclass(frozen=True)
class Verdict:
    status: RunStatus
    reason: str | None = None


#: How many failed elements of one mapped node a run's reason names before it counts the rest.
ELEMENTS_NAMED = 10


def verdict(walk: Walk, end: End) -> Verdict:
    """The end of a run whose drive stopped ``DRAINED`` or ``CANCELLED``.

    A run is ``ok`` when no node failed: nodes skipped by a condition (or by a skip that propagated)
    are part of a good run. Nodes still pending with nothing left running could never get their inputs
    (the flow changed between submit and claim): an error too.
    """
    if end is End.CANCELLED:
        return Verdict(RunStatus.CANCELLED, "cancelled by request")
    stranded = [n for n, s in walk.state.items() if s is NodeState.PENDING]
    if stranded:
        missing = sorted({m for n in stranded for m in walk.flow.nodes[n].needs
                          if m not in walk.messages and m not in walk.skipped})
        return Verdict(RunStatus.ERROR, f"node(s) {', '.join(stranded)} could never run: nobody provided "
                                        f"{', '.join(missing)} (did the flow change since the submit?)")
    failed = walk.failed()
    if failed:
        details = "; ".join(_failure(walk, node) for node in failed)
        skipped = [n for n in walk.state if n in walk.failure_skipped]
        tail = f" ({len(skipped)} downstream node(s) skipped: {', '.join(skipped)})" if skipped else ""
        return Verdict(RunStatus.ERROR, f"node(s) {', '.join(failed)} failed — {details}{tail}")
    return Verdict(RunStatus.OK)


def _failure(walk: Walk, node: str) -> str:
    """``fit: ValueError: …``; for a mapped node, each failed element (``count[3]: …``), the first ten."""
    elements = walk.failed_elements(node)
    if not elements:
        return f"{node}: {first_line(walk.errors.get(node), 'failed')}"
    named = "; ".join(f"{unit}: {first_line(walk.errors.get(unit), 'failed')}" for unit in elements[:ELEMENTS_NAMED])
    more = f"; and {len(elements) - ELEMENTS_NAMED} more element(s)" if len(elements) > ELEMENTS_NAMED else ""
    return f"{len(elements)} of {walk.elements(node)} elements of {node} failed: {named}{more}"
