"""What becomes of a call's end: its row, its outputs in the walk, a retry, or the failure of its node.

Also the calls that will never report themselves: never sent, lost with their
machine, or whose completion went astray — each ends as an error completion of
its own, so its run never waits for it forever — and the calls a cancel kills.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable

from fluksio.driver.children import ChildRuns
from fluksio.driver.retrying import Retry, plan_retry
from fluksio.driver.rows import bare_rows, completion_rows, unreported
from fluksio.driver.state import DriveState
from fluksio.driver.verdict import End
from fluksio.errors import first_line
from fluksio.messages import Completion
from fluksio.schemas import Grant, NodeStatus, split_unit
from fluksio.settings import redact_url
from fluksio.store import run_rows

log = logging.getLogger(__name__)


class Settler:
    """Settles one drive's calls."""

    def __init__(self, state: DriveState) -> None:
        self.s = state

    def completed(self, completion: Completion, dispatched: bool = True, grant: Grant | None = None) -> None:
        """Journal a call's end and move the walk on: its outputs, a retry, or its unit's failure.

        ``grant``: what a call that was not dispatched (or never reported) held.
        """
        s = self.s
        sent = s.calls.pop(completion.call_id) if dispatched else None
        if dispatched and sent is None:
            if completion.epoch > s.epoch:
                # The run was resumed and another driver sent this call: the run is no longer ours, and the
                # completion is the other driver's (both drives share the run's inbox; see Driver.hand_back).
                log.warning("run %s was resumed by another driver (a completion of its call %s came here); "
                            "stopping", s.run_id, completion.call_id)
                s.end = End.LOST
            else:
                log.info("run %s: dropping a completion for %s, which is already settled", s.run_id,
                         completion.call_id)
            return
        # The unit this driver sent under that call id (a completion's own word for it is only checked).
        unit = sent.unit if sent is not None else completion.unit
        if unit != completion.unit:
            log.error("run %s: the completion of %s says it is %s, but %s was sent; taking it as %s", s.run_id,
                      completion.call_id, completion.unit, unit, unit)
            completion = dataclasses.replace(completion, node=split_unit(unit)[0], index=split_unit(unit)[1])
        retry, note = None, None
        if not completion.ok and not s.cancelled:
            tries = completion.attempt - s.first_attempt.get(unit, 1) + 1
            retry, note = plan_retry(s.flow.nodes[completion.node], completion, tries, s.asks_for(unit))
        row, artifacts = completion_rows(s.run_id, completion, s.cache.key(unit) if completion.ok else None,
                                         s.warnings.get(unit), grant=sent.grant if sent is not None else grant,
                                         note=retry.note if retry is not None else note,
                                         node_code=s.cache.code(completion.node), cache_miss=s.cache.why(unit))
        s.journal.add(row, artifacts, {"node": unit, "status": row.status, "machine": row.machine,
                                       "attempt": row.attempt, "error": row.error})
        if completion.ok:
            s.walk.complete(unit, completion.outputs or {})
            s.journal_ended()
            return
        if retry is not None:
            self._retry(unit, retry, completion.error)
            return
        s.walk.fail(unit, completion.error or "failed")
        s.journal_ended()

    def _retry(self, unit: str, retry: Retry, error: str | None) -> None:
        """Run the unit again: at once, or once its backoff is over (it waits in the drive, holding nothing)."""
        s = self.s
        s.attempts[unit] = retry.attempt
        if retry.asks != s.flow.nodes[split_unit(unit)[0]].resources:
            s.asks[unit] = retry.asks
        if not retry.delay_s:
            s.walk.retry(unit)
            return
        s.backoff[unit] = time.monotonic() + retry.delay_s
        reason = (f"{unit}: retrying in {retry.delay_s:.1f} s (attempt {retry.attempt}) after: "
                  f"{first_line(error, 'failed')}")
        s.rt.events.publish("node_queued", run_id=s.run_id, node=unit, reason=reason, priority=s.priority,
                            pool=s.flow.nodes[split_unit(unit)[0]].pool, retry_in_s=round(retry.delay_s, 3))
        run_rows.set_reason(s.rt.db, s.run_id, reason[0].upper() + reason[1:], s.epoch)

    def check_calls(self, take_waiting: Callable[[], None]) -> None:
        """Settle, as errors, calls that will never report (see ``inflight``).

        ``take_waiting``: handles what waits on the run's inbox now (a completion may be there, behind
        messages the driver has not got to).
        """
        s = self.s
        given_back, overdue = s.calls.given_back(s.rt.placer)
        lost = s.calls.lost_machines(s.rt.placer)
        if overdue or lost:
            # A worker that pushed its completion and then left (a scale-down) takes its machine with it:
            # what it sent may be waiting here all the same.
            take_waiting()
            if s.end is End.LOST:
                return
            # Overdue completions: the inbox may have handed them out into a connection that dropped.
            for message in s.rt.inbox.recover(s.run_id):
                if isinstance(message, Completion) and message.call_id in s.calls:
                    log.warning("run %s: the completion of %s was taken off the inbox but never reached the "
                                "driver; recovered", s.run_id, message.call_id)
                    self.completed(message)
            given_back = {call_id for call_id in given_back if call_id in s.calls}
        s.rt.inbox.forget_taken(s.run_id)
        now = time.monotonic()
        grace_s = s.rt.settings.heartbeat_ttl_s
        for call_id, sent, machine_lost in s.calls.unreported(given_back, lost, now, grace_s):
            machine = sent.grant.machine
            if machine_lost:
                log.warning("run %s: machine %s was lost while running %s", s.run_id, machine, sent.unit)
                error = (f"machine {machine} was lost while running the call (its heartbeat is gone from "
                         f"{redact_url(s.rt.settings.broker_url)})")
            else:
                log.warning("run %s: %s ended on %s, but its completion never came", s.run_id, sent.unit, machine)
                error = (f"the call ended on {machine}, but its completion was lost on the way to the driver; "
                         "it is run again if the node has retries left")
            s.calls.pop(call_id)
            self.unreported(call_id, sent.unit, sent.grant, started=False, error=error)
        s.calls.remember_given_back(given_back, now)

    def unsent(self, call_id: str, unit: str, grant: Grant, error: str) -> None:
        """A call whose send failed: it never started anywhere, so it ends here."""
        self.unreported(call_id, unit, grant, started=True, error=error)

    def unreported(self, call_id: str, unit: str, grant: Grant, *, started: bool, error: str) -> None:
        """End a call that will never report (it was never sent, or its machine died) as an error."""
        s = self.s
        s.rt.placer.release(grant)
        self.completed(unreported(call_id, unit, s.attempts.get(unit, 1), s.epoch, grant, started=started,
                                  error=error), dispatched=False, grant=grant)

    def cancel(self, children: ChildRuns) -> None:
        """Stop scheduling: pending units never start, calls in flight are killed, their machines freed, child
        runs cancelled."""
        s = self.s
        if s.cancelled:
            return
        s.end = End.CANCELLED
        children.cancel_all()
        unstarted = {node: s.walk.unstarted_elements(node) for node in s.walk.state
                     if s.walk.elements(node) is not None}
        s.journal.add_all(bare_rows(s.run_id, s.walk.cancel_pending(), s.attempts, NodeStatus.CANCELLED,
                                    "cancelled before it started"))
        for node, count in unstarted.items():
            if count:
                s.journal.add_all(bare_rows(s.run_id, [node], s.attempts, NodeStatus.CANCELLED,
                                            f"cancelled before {count} of its {s.walk.elements(node)} elements "
                                            "started"))
        for unit in list(s.backoff):  # retries waiting out their backoff never start
            s.walk.cancel(unit)
            s.journal.add_all(bare_rows(s.run_id, [unit], s.attempts, NodeStatus.CANCELLED,
                                        "cancelled while waiting to be retried"))
        s.backoff.clear()
        for call_id, sent in s.calls.take_all():
            s.revoke(call_id)
            # The call is killed (or never starts: its grant is void once given back); its resources are free.
            s.rt.placer.release(sent.grant)
            s.walk.cancel(sent.unit)
            s.journal.add_all(bare_rows(s.run_id, [sent.unit], s.attempts, NodeStatus.CANCELLED,
                                        "cancelled while running", sent.grant))

    def stop_calls(self) -> None:
        """Kill the calls in flight and give their resources back (the run is over for this driver)."""
        for call_id, sent in self.s.calls.take_all():
            self.s.revoke(call_id)
            self.s.rt.placer.release(sent.grant)
