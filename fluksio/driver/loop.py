"""The driver's loop: dispatch every ready node, take completions, keep the lease, until the run is over.

It waits on the run's inbox for completions, wake-ups and cancel requests —
never on a result backend. A node that fails cannot take the driver down; a
driver that fails still ends its run with the reason.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fluksio.driver.caching import NodeCache
from fluksio.driver.inflight import CallsInFlight
from fluksio.driver.journal import Journal
from fluksio.driver.restore import restore_earlier
from fluksio.driver.rows import bare_rows, cached_row, completion_rows, unreported
from fluksio.driver.verdict import End, verdict
from fluksio.driver.waiting import ask_for_machine
from fluksio.driver.waitlists import RequestKind, WaitLists, kind_of
from fluksio.driver.walk import Walk
from fluksio.flows.flow import Flow
from fluksio.messages import Cancel, Completion, InboxMessage, NodeCall
from fluksio.placement.placer import Request, Waiting
from fluksio.routing import queue_for
from fluksio.runs.runtime import Runtime
from fluksio.schemas import Grant, NodeStatus, RunStatus
from fluksio.settings import redact_url
from fluksio.store import runs as run_rows

log = logging.getLogger(__name__)

#: ``dispatch(call, queue, display_name)`` sends one node call to a worker queue.
Dispatch = Callable[[NodeCall, str, str], None]
#: ``revoke(call_id)`` kills a dispatched call (or stops it from starting).
Revoke = Callable[[str], None]
#: Most completions a driver takes from its inbox in one go.
DRAIN_LIMIT = 500


class Driver:
    """Drives one claimed run: owns its walk, its calls in flight, its wait lists and its unwritten rows.

    Invariants: every call in flight holds a grant until its completion is handled or the driver
    gives the grant back itself; a row is written before anything that depends on it is sent; once
    the run is another driver's (``End.LOST``) nothing more is written to it.
    """

    def __init__(self, runtime: Runtime, run_id: str, params: dict, flow: Flow, dispatch: Dispatch, revoke: Revoke,
                 code_digest: str | None = None, use_cache: bool = True, epoch: int = 0,
                 requeue_on_shutdown: bool = False) -> None:
        self.rt = runtime
        self.run_id = run_id
        #: How often the run was resumed when this driver claimed it; guards its writes and names its calls.
        self.epoch = epoch
        self.flow = flow
        self.walk = Walk(flow, params)
        self.dispatch = dispatch
        self.revoke = revoke
        self.code_digest = code_digest
        self.end = End.DRIVING
        #: Node → the attempt its next call is (a resumed run continues the count).
        self.attempts: dict[str, int] = {}
        self.calls = CallsInFlight()
        self.waitlists = WaitLists()
        self.cache = NodeCache(runtime.db, runtime.artifacts, flow, code_digest, use_cache, self.walk.inputs_of)
        #: Node → the warning its grant came with (it was clamped to fit).
        self.warnings: dict[str, str] = {}
        #: Node → its last error.
        self.errors: dict[str, str] = {}
        #: Rows of nodes that finished (or were restored from the cache, skipped, cancelled).
        self.journal = Journal(runtime.db, runtime.events, run_id)
        #: On shutdown, send the run back to ``queued`` (auto-resume) rather than mark it ``abandoned``.
        self.requeue_on_shutdown = requeue_on_shutdown
        self.attempts.update(restore_earlier(self.walk, run_rows.node_rows(runtime.db, run_id)))
        #: Per node, the attempt this drive started from: retries are counted from here.
        self.first_attempt = dict(self.attempts)

    @property
    def cancelled(self) -> bool:
        return self.end is End.CANCELLED

    def run(self) -> None:
        def wake() -> None:
            if self.waitlists.waiting:  # only a driver with nodes waiting for resources cares
                self.rt.inbox.wake(self.run_id)

        self.rt.placer.add_listener(wake)
        self.rt.driving.add(self.run_id)
        try:
            self._loop()
            self._wind_up()
        except Exception as exc:
            log.exception("driver of run %s failed", self.run_id)
            self._abort(self._describe_failure(exc))
        finally:
            self.rt.driving.discard(self.run_id)
            self.rt.placer.remove_listener(wake)
            for node in self.waitlists.waiting_heads():
                self.rt.placer.forget(self._call_id(node))
            if self.end is End.LOST:
                self.rt.inbox.leave(self.run_id)  # the inbox is the new driver's now
            else:
                self.rt.inbox.close(self.run_id)

    def _wind_up(self) -> None:
        """After the loop: write (or, for a lost run, drop) the rows, then end the run as the loop left it."""
        if not self.end.writes_rows:
            # The run is another driver's now, and so are its rows: one written from here could take the
            # place of the new driver's row for the same attempt. Its calls in flight are of no use to
            # anyone (their rows would be discarded too): they stop and free their machines.
            self._stop_calls()
            self.journal.discard()
            return
        self.journal.write()
        self.journal.announce()
        if self.end is End.HANDED_OVER:
            self._stop_calls()
            self._leave_to_another_driver()
        else:
            self._finish()

    def _leave_to_another_driver(self) -> None:
        reason = "its driver's worker was shut down mid-run"
        if self.requeue_on_shutdown and run_rows.requeue_handed_over(self.rt.db, self.run_id, self.epoch, reason):
            self.end = End.REQUEUED
            return
        run_rows.finish(self.rt.db, self.run_id, RunStatus.ABANDONED,
                        f"{reason}; `fluksio resume` re-drives it", None, self.epoch)

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        settings = self.rt.settings
        next_lease = time.monotonic() + settings.lease_interval_s
        next_check = time.monotonic() + settings.heartbeat_interval_s
        while True:
            if self._rows_due():
                self.journal.write()  # what finished is journaled before anything is sent on from it
            if self.rt.stopping.is_set() and not self.cancelled:
                self.end = End.HANDED_OVER
                return
            if not self.cancelled:
                self._schedule()
            # Watchers can wait a moment for their events; the next node should not wait for them.
            self.journal.announce()
            if self.cancelled:
                return
            if self.walk.drained:
                self.end = End.DRAINED
                return
            wake_at = min(next_lease, next_check, self.journal.due_at() or next_check)
            message = self.rt.inbox.pop(self.run_id, timeout=max(0.0, wake_at - time.monotonic()))
            now = time.monotonic()
            if now >= next_lease:
                next_lease = now + settings.lease_interval_s
                if not self._keep_lease():
                    return
            if message is not None:
                self._handle([message])
                if self.end is End.LOST:
                    return
            if now >= next_check:
                # After the messages taken: a completion in hand is not a call that never reported.
                next_check = now + settings.heartbeat_interval_s
                self._check_calls()

    def _keep_lease(self) -> bool:
        """Refresh the lease; ``False`` when the run is no longer ours. A cancel asked for is acted on here."""
        held, cancel = run_rows.refresh_lease(self.rt.db, self.run_id, self.epoch)
        if not held:
            # A sweeper declared us dead (the store was unreachable past the stale limit): the run is
            # someone else's now.
            log.warning("run %s is no longer ours (marked abandoned); stopping", self.run_id)
            self.end = End.LOST
            return False
        if cancel:
            self._cancel()
            return True
        # Still alive, still waiting: `fluksio placer` drops waiting calls nobody keeps.
        self.rt.placer.keep_waiting([self._call_id(node) for node in self.waitlists.waiting_heads()])
        return True

    def _handle(self, messages: list[InboxMessage]) -> None:
        """Act on what the inbox gave; a completion brings along the others that came meanwhile."""
        if isinstance(messages[0], Completion) and len(self.calls) > 1:
            # Other calls may have finished meanwhile (a fan-out): take them now, write them together.
            # (With one call in flight, as in a chain, there is nothing else to take: no round trip.)
            messages += self.rt.inbox.drain(self.run_id, DRAIN_LIMIT)
        for index, message in enumerate(messages):
            if isinstance(message, Completion):
                self._completed(message)
            elif isinstance(message, Cancel):
                self._cancel()
            if self.end is End.LOST:
                self._hand_back(messages[index:])
                return

    def _call_id(self, node: str) -> str:
        # A resumed run's calls are named apart from the calls of the drive that went before it.
        drive = f".r{self.epoch}" if self.epoch else ""
        return f"{self.run_id}{drive}.{node}.{self.attempts.get(node, 1)}"

    # -- scheduling -----------------------------------------------------------------------------

    def _schedule(self) -> None:
        restored = False
        while fresh := self.walk.take_fresh():
            for node in fresh:
                if self._restore_from_cache(node):
                    restored = True
                    continue
                reason = self.waitlists.add(node, kind_of(self.flow.nodes[node]))
                if reason is not None:  # joins a queue that waits: it waits for the same reason
                    self._announce(node, reason)
        if restored:
            self.journal.write()  # rows restored from the cache, in one transaction, before their dependents go
        for kind, node in list(self.waitlists.heads()):
            while self._place(node, kind):
                self.waitlists.placed(kind)
                queue = self.waitlists.queues[kind]
                if not queue:
                    break
                node = queue[0]
        due, reason = self.waitlists.status_reason(time.monotonic(), self.rt.settings.lease_interval_s)
        if due:
            run_rows.set_reason(self.rt.db, self.run_id, reason, self.epoch)

    def _restore_from_cache(self, node: str) -> bool:
        if node in self.attempts:  # a node that ran before in this run (a retry, a resume) runs again
            return False
        found = self.cache.hit(node)
        if found is None:
            return False
        key, hit = found
        self.journal.add(cached_row(self.run_id, node, key, hit.run_id, hit.outputs),
                         event={"node": node, "status": NodeStatus.CACHED.value, "cached_from": hit.run_id})
        self.walk.start(node)
        self.walk.complete(node, hit.outputs)
        return True

    def _place(self, node: str, kind: RequestKind) -> bool:
        """Claim resources for the node and send it (``True``), or note why it waits."""
        spec = self.flow.nodes[node]
        call_id = self._call_id(node)
        outcome = self.rt.placer.try_claim(
            Request(call_id, spec.resources, spec.device, spec.device_policy, self.run_id, node)
        )
        if isinstance(outcome, Waiting):
            reason = outcome.reason
            # A shape a cluster could start: ask for a machine, and say what became of the ask.
            asked = ask_for_machine(self.rt, outcome.wanted or spec.resources, spec.device,
                                    f"run {self.run_id} node {node}")
            if asked:
                reason = f"{reason}; {asked}"
            if self.waitlists.blocked(kind, reason):
                for queued in self.waitlists.queues[kind]:  # only when the reason changes: not per attempt
                    self._announce(queued, reason)
            return False
        if outcome.clamped_from is not None:
            self.warnings[node] = (
                f"clamped: requested {outcome.clamped_from.describe()}, granted {outcome.cpus} cpu(s), "
                f"{len(outcome.gpus)} gpu(s), {outcome.ram_mb} MB RAM on {outcome.machine}"
            )
            log.warning("run %s node %s %s", self.run_id, node, self.warnings[node])
        self._send(node, call_id, outcome)
        return True

    def _announce(self, node: str, reason: str) -> None:
        self.rt.events.publish("node_queued", run_id=self.run_id, node=node, reason=reason)

    def _send(self, node: str, call_id: str, grant: Grant) -> None:
        call = NodeCall(call_id=call_id, run_id=self.run_id, flow=self.flow.name, node=node,
                        attempt=self.attempts.get(node, 1), inputs=self.walk.inputs_of(node), grant=grant,
                        code_digest=self.code_digest, epoch=self.epoch)
        self.walk.start(node)
        self.calls.add(call_id, node, grant)
        try:
            self.dispatch(call, queue_for(grant), f"{self.flow.name}.{node}")
        except Exception as exc:
            # Giving the grant back (in _settle_unreported) also voids a copy of the message that got out and
            # has not started (Books.start refuses it); one already running would run on (a failed send
            # rarely gets out).
            self.calls.pop(call_id)
            self._settle_unreported(call_id, node, grant, started=True, dispatched=False,
                                    error=f"could not send the call to the broker: {type(exc).__name__}: {exc}")

    # -- completions ----------------------------------------------------------------------------

    def _completed(self, completion: Completion, dispatched: bool = True) -> None:
        if dispatched and self.calls.pop(completion.call_id) is None:
            if completion.epoch > self.epoch:
                # The run was resumed and another driver sent this call: the run is no longer ours, and the
                # completion is the other driver's (both drives share the run's inbox; see _hand_back).
                log.warning("run %s was resumed by another driver (a completion of its call %s came here); "
                            "stopping", self.run_id, completion.call_id)
                self.end = End.LOST
            else:
                log.info("run %s: dropping a completion for %s, which is already settled", self.run_id,
                         completion.call_id)
            return
        node = completion.node
        row, artifacts = completion_rows(self.run_id, completion, self.cache.key(node) if completion.ok else None,
                                         self.warnings.get(node))
        self.journal.add(row, artifacts, {"node": node, "status": row.status, "machine": row.machine,
                                          "attempt": row.attempt, "error": row.error})
        if completion.ok:
            self.walk.complete(node, completion.outputs or {})
            return
        self.errors[node] = completion.error or "failed"
        tries = completion.attempt - self.first_attempt.get(node, 1) + 1
        if tries <= self.flow.nodes[node].retries and not self.cancelled:
            self.attempts[node] = completion.attempt + 1
            self.walk.retry(node)
            return
        self.journal.add_all(bare_rows(self.run_id, self.walk.fail(node), self.attempts, NodeStatus.SKIPPED,
                                       f"skipped: upstream node {node!r} failed"))

    def _rows_due(self) -> bool:
        """Whether the rows collected must be written now: something depends on them, nothing else is
        running (no company is coming), the run is ending, or they have waited long enough."""
        return self.journal.due() or (self.journal.waiting and (
            self.walk.has_fresh or not self.calls or self.cancelled or self.rt.stopping.is_set()))

    def _hand_back(self, messages: list[InboxMessage]) -> None:
        """Put back what this driver took after the run became another driver's: that driver's completions,
        cancel requests and wake-ups. Completions of this driver's own calls (or older ones) are dropped."""
        for message in messages:
            if not isinstance(message, Completion) or message.epoch > self.epoch:
                self.rt.inbox.push(self.run_id, message)

    def _check_calls(self) -> None:
        """Settle, as errors, calls that will never report (see ``inflight``)."""
        given_back, overdue = self.calls.given_back(self.rt.placer)
        if overdue:
            # Overdue completions: the inbox may have handed them out into a connection that dropped.
            for message in self.rt.inbox.recover(self.run_id):
                if isinstance(message, Completion) and message.call_id in self.calls:
                    log.warning("run %s: the completion of %s was taken off the inbox but never reached the "
                                "driver; recovered", self.run_id, message.call_id)
                    self._completed(message)
            given_back = {call_id for call_id in given_back if call_id in self.calls}
        self.rt.inbox.forget_taken(self.run_id)
        for call_id, sent, lost in self.calls.unreported(given_back, self.rt.placer):
            machine = sent.grant.machine
            if lost:
                log.warning("run %s: machine %s was lost while running %s", self.run_id, machine, sent.node)
                error = (f"machine {machine} was lost while running the call (its heartbeat is gone from "
                         f"{redact_url(self.rt.settings.broker_url)})")
            else:
                log.warning("run %s: %s ended on %s, but its completion never came", self.run_id, sent.node,
                            machine)
                error = (f"the call ended on {machine}, but its completion was lost on the way to the driver; "
                         "it is run again if the node has retries left")
            self.calls.pop(call_id)
            self._settle_unreported(call_id, sent.node, sent.grant, started=False, dispatched=False, error=error)
        self.calls.remember_given_back(given_back)

    def _settle_unreported(self, call_id: str, node: str, grant: Grant, *, started: bool, dispatched: bool,
                           error: str) -> None:
        """End a call that will never report (it was never sent, or its machine died) as an error."""
        self.rt.placer.release(grant)
        self._completed(unreported(call_id, node, self.attempts.get(node, 1), self.epoch, grant, started=started,
                                   error=error), dispatched=dispatched)

    # -- endings --------------------------------------------------------------------------------

    def _cancel(self) -> None:
        if self.cancelled:
            return
        self.end = End.CANCELLED
        self.journal.add_all(bare_rows(self.run_id, self.walk.cancel_pending(), self.attempts, NodeStatus.CANCELLED,
                                       "cancelled before it started"))
        for node in self.waitlists.waiting_heads():
            self.rt.placer.forget(self._call_id(node))
        self.waitlists.clear()
        for call_id, sent in self.calls.take_all():
            self.revoke(call_id)
            # The call is killed (or never starts: its grant is void once given back); its resources are free.
            self.rt.placer.release(sent.grant)
            self.walk.cancel(sent.node)
            self.journal.add_all(bare_rows(self.run_id, [sent.node], self.attempts, NodeStatus.CANCELLED,
                                           "cancelled while running", sent.grant))

    def _finish(self) -> None:
        ended = verdict(self.walk, self.errors, self.end)
        run_rows.finish(self.rt.db, self.run_id, ended.status, ended.reason, self.walk.result(), self.epoch)
        self.rt.events.publish("run_finished", run_id=self.run_id, flow=self.flow.name, status=ended.status.value,
                               reason=ended.reason)

    def _describe_failure(self, exc: Exception) -> str:
        if type(exc).__module__.split(".")[0] in ("redis", "kombu", "amqp"):
            broker = redact_url(self.rt.settings.broker_url)
            return f"lost the broker {broker} for longer than {self.rt.settings.broker_outage_s:g} s: " \
                   f"{type(exc).__name__}: {exc}"
        return f"the driver failed: {type(exc).__name__}: {exc}"

    def _stop_calls(self) -> None:
        """Kill the calls in flight and give their resources back (the run is over for this driver)."""
        for call_id, sent in self.calls.take_all():
            self.revoke(call_id)
            self.rt.placer.release(sent.grant)

    def _abort(self, reason: str) -> None:
        self._stop_calls()
        try:  # rows of nodes that finished before the failure are worth keeping, if the store takes them
            self.journal.write()
            self.journal.announce()
        except Exception:
            log.exception("could not record the finished nodes of run %s", self.run_id)
        try:
            run_rows.finish(self.rt.db, self.run_id, RunStatus.ERROR, reason, None, self.epoch)
        except Exception:
            log.exception("could not record the failure of run %s", self.run_id)
