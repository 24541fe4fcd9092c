"""What one drive knows of its run: the walk, the calls out, the wait lists, the rows not yet written.

The driver's parts (dispatching ready units, settling completions, the loop)
share one :class:`DriveState`; each part changes only what its job needs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from fluksio.cache.node_cache import NodeCache
from fluksio.driver.inflight import CallsInFlight
from fluksio.driver.journal import Journal
from fluksio.driver.rows import ended_row
from fluksio.driver.verdict import End
from fluksio.driver.waitlists import WaitLists
from fluksio.driver.walk import Walk
from fluksio.flows.flow import Flow
from fluksio.messages import NodeCall, call_id
from fluksio.runtime import Runtime
from fluksio.schemas import Resources, split_unit

#: ``dispatch(call, queue, display_name)`` sends one node call to a worker queue.
Dispatch = Callable[[NodeCall, str, str], None]
#: ``revoke(call_id)`` kills a dispatched call (or stops it from starting).
Revoke = Callable[[str], None]


@dataclass
class DriveState:
    """One drive of one run. ``epoch`` (how often the run was resumed when this driver claimed it) guards
    its writes and names its calls; ``end`` says why it stopped (``DRIVING`` until it does)."""

    rt: Runtime
    run_id: str
    epoch: int
    flow: Flow
    walk: Walk
    cache: NodeCache
    journal: Journal
    dispatch: Dispatch
    revoke: Revoke
    code_digest: str | None = None
    #: What a worker that does not hold the code imports from the run's package, and the submitter's
    #: signature over it (``None``: the code did not travel with the run).
    code_entry: str | None = None
    code_signature: str | None = None
    end: End = End.DRIVING
    calls: CallsInFlight = field(default_factory=CallsInFlight)
    waitlists: WaitLists = field(default_factory=WaitLists)
    #: Unit → the attempt its next call is (a resumed run continues the count).
    attempts: dict[str, int] = field(default_factory=dict)
    #: Unit → the attempt this drive started from: retries are counted from here.
    first_attempt: dict[str, int] = field(default_factory=dict)
    #: Unit → the warning its grant came with (it was clamped to fit).
    warnings: dict[str, str] = field(default_factory=dict)
    #: Unit → what its next attempt asks for, when not what its node declares (more RAM after running out).
    asks: dict[str, Resources] = field(default_factory=dict)
    #: Unit → when (``time.monotonic()``) its retry may be placed: until then it waits here, holding nothing.
    backoff: dict[str, float] = field(default_factory=dict)
    #: Child run id → the subflow call (unit) it is, for every child started and not yet heard the end of.
    children: dict[str, str] = field(default_factory=dict)
    #: Of the run: what its child runs inherit (seed, priority, engine), and when it was last resumed.
    seed: int | None = None
    priority: int = 0
    engine: str = "embedded"
    resumed_at: datetime | None = None
    #: The run's parent run, for a child run (a subflow call's): its grants are checked against a cancel above.
    parent_id: str | None = None
    #: A cancel of this run or of one above it was found as a call was placed: the loop carries it out.
    cancel_found: bool = False

    @property
    def cancelled(self) -> bool:
        return self.end is End.CANCELLED

    def asks_for(self, unit: str) -> Resources:
        """What the unit's next call asks the placer for."""
        return self.asks.get(unit) or self.flow.nodes[split_unit(unit)[0]].resources

    def call_id(self, unit: str) -> str:
        return call_id(self.run_id, self.epoch, unit, self.attempts.get(unit, 1))

    def journal_ended(self) -> None:
        """Rows for the nodes the walk ended without a call (skipped, failed before a call, mapped over nothing)."""
        for ended in self.walk.take_ended():
            self.journal.add(ended_row(self.run_id, ended, self.attempts.get(ended.node, 1)),
                             event={"node": ended.node, "status": ended.status.value, "error": ended.reason})
