"""A parent's child runs: starting one per subflow call, hearing how each ended, cancelling them.

Each call of a subflow node (``trial``, or ``trial[2]`` for an element) is a child run with a
deterministic identity (``store.family.child_key``): a parent driven again — woken after parking, or
resumed after its driver died — finds the children it started instead of starting them twice. A child
that ended ``ok`` is kept; one that ended otherwise before the parent was resumed is resumed under its
id; one that ended during this drive is this drive's answer.
"""

from __future__ import annotations

import logging
from collections import Counter

from fluksio.driver.rows import ChildEnd, child_row
from fluksio.driver.state import DriveState
from fluksio.errors import FluksioError, RunNotFound
from fluksio.flows.flow import Flow
from fluksio.runs import family
from fluksio.runs.code import DESCRIBED, RunCode
from fluksio.runs.submit import submit_run
from fluksio.schemas import NodeStatus, RunStatus, split_unit
from fluksio.store import family as store_family
from fluksio.store import run_rows
from fluksio.store.models import Run

log = logging.getLogger(__name__)


class ChildRuns:
    """The child runs one drive has started and not yet heard the end of (``DriveState.children``)."""

    def __init__(self, state: DriveState) -> None:
        self.s = state

    def start(self, unit: str) -> None:
        """Start (or find again) the child run that is the call ``unit``, and wait for it."""
        s = self.s
        node, _index = split_unit(unit)
        spec = s.flow.nodes[node]
        call = spec.subflow
        assert call is not None  # only a subflow node's calls are started as child runs
        inputs = s.walk.inputs_of(unit)
        params = {name: inputs[message] for name, message in zip(spec.params, spec.requires) if message in inputs}
        params.update(dict(call.constants))
        s.walk.start(unit)
        try:
            child, created = submit_run(
                s.rt.db, s.rt.registry, s.rt.artifacts, call.flow, engine=s.engine, params=params, seed=s.seed,
                no_cache=not s.cache.use_cache, idempotency_key=store_family.child_key(s.run_id, unit),
                priority=s.priority, parent_id=s.run_id, parent_node=unit, code=self._inherited(call.flow),
                code_max_mb=s.rt.settings.code_max_mb, signer=s.rt.signer)
        except FluksioError as exc:  # the child's own checks refused what this call would give it
            self._settle(unit, None, f"could not start the child run of {unit}: {exc}")
            return
        s.children[child.id] = unit
        status = RunStatus(child.status)
        if created or status is RunStatus.QUEUED:
            # A queued child found again may have lost its hand-over with the parent's driver: claiming is
            # idempotent, so it is handed over again.
            self._hand_over(child)
        elif status.is_terminal() and status is not RunStatus.OK and self._before_this_drive(child):
            family.resume(s.rt, child)  # it failed in an earlier drive of this run: resumed, not repeated
            log.info("run %s: resumed child run %s of %s (it ended %s)", s.run_id, child.id, unit, status.value)
        elif status.is_terminal():
            self.ended(child.id)
            return
        s.rt.events.publish("node_started", run_id=s.run_id, node=unit, child_run=child.id,
                            attempt=s.attempts.get(unit, 1))

    def _inherited(self, child: Flow) -> RunCode | None:
        """The code a child run records: a subflow of a graph rebuilt from its description is in its parent's
        package (``None``: the child's own code, shipped as a submitted run's is)."""
        s = self.s
        if child.module != DESCRIBED:
            return None
        return RunCode(s.code_digest, s.code_entry, s.code_signature)

    def _before_this_drive(self, child: Run) -> bool:
        """Whether the child ended before this run was last resumed (then its end was an earlier drive's)."""
        return (self.s.resumed_at is not None and child.finished_at is not None
                and child.finished_at < self.s.resumed_at)

    def _hand_over(self, child: Run) -> None:
        if self.s.rt.hand_over is None:
            raise RuntimeError("this driver's runtime has no Celery app to hand child runs to")
        self.s.rt.hand_over(child.id, child.flow)

    def ended(self, child_id: str) -> None:
        """A child run ended (a ``ChildEnded`` message, or found ended): its row, and the walk moves on."""
        s = self.s
        unit = s.children.get(child_id)
        if unit is None:
            return  # not this drive's (an earlier drive's, or settled already)
        try:
            child = run_rows.get_run(s.rt.db, child_id)
        except RunNotFound:
            child = None
        if child is not None and not RunStatus(child.status).is_terminal():
            return  # a stale message: it was resumed and runs again
        del s.children[child_id]
        self._settle(unit, child, None)

    def _settle(self, unit: str, child: Run | None, refused: str | None) -> None:
        s = self.s
        call = s.flow.nodes[split_unit(unit)[0]].subflow
        assert call is not None  # only a subflow node's calls are child runs
        end = None if child is None else ChildEnd(
            run_id=child.id, status=RunStatus(child.status), reason=child.status_reason, result=child.result or {},
            started_at=child.started_at, finished_at=child.finished_at, cached=self._all_cached(child))
        row = child_row(s.run_id, unit, s.attempts.get(unit, 1), call.outputs, end, refused)
        s.journal.add(row, event={"node": unit, "status": row.status, "error": row.error, "child_run": row.child_run})
        if row.status in (NodeStatus.OK.value, NodeStatus.CACHED.value):
            s.walk.complete(unit, row.outputs or {})
        else:
            s.walk.fail(unit, row.error or "the child run failed")
        s.journal_ended()

    def _all_cached(self, child: Run) -> bool:
        statuses = [row.status for row in run_rows.node_rows(self.s.rt.db, child.id)]
        return bool(statuses) and all(status == NodeStatus.CACHED.value for status in statuses)

    def cancel_all(self) -> None:
        """Cancel every child still running (each cancels its own calls and children); rows for them here."""
        s = self.s
        for child_id, unit in list(s.children.items()):
            try:
                family.cancel(s.rt, child_id, f"its parent run {s.run_id} was cancelled")
            except FluksioError:
                log.warning("run %s: could not cancel child run %s", s.run_id, child_id, exc_info=True)
            s.walk.cancel(unit)
            row = child_row(s.run_id, unit, s.attempts.get(unit, 1), (), None, "cancelled while running")
            row.status, row.child_run = NodeStatus.CANCELLED.value, child_id
            s.journal.add(row)
        s.children.clear()

    def status_reason(self) -> str | None:
        """``trial: 3 of 8 child runs running, 5 queued`` for each subflow node with children out."""
        if not self.s.children:
            return None
        counts = store_family.child_statuses(self.s.rt.db, self.s.run_id)
        waiting_on = {split_unit(unit)[0] for unit in self.s.children.values()}
        parts = []
        for node in sorted(waiting_on):
            by_status: Counter[str] = counts.get(node, Counter())
            total = sum(by_status.values())
            running = by_status.get(RunStatus.RUNNING.value, 0)
            queued = by_status.get(RunStatus.QUEUED.value, 0)
            parts.append(f"{node}: {running} of {total} child runs running, {queued} queued")
        return "; ".join(parts)
