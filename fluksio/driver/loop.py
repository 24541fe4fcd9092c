"""The driver's loop: dispatch every ready unit, take completions, keep the lease, until the run is over.

It waits on the run's inbox for completions, wake-ups and cancel requests —
never on a result backend. A node that fails cannot take the driver down; a
driver that fails still ends its run with the reason.
"""

from __future__ import annotations

import logging
import time

from fluksio.cache.node_cache import NodeCache
from fluksio.driver.children import ChildRuns
from fluksio.driver.dispatching import Dispatcher
from fluksio.driver.inherited import journal_earlier_ends, running_before
from fluksio.driver.journal import Journal
from fluksio.driver.restore import restore_earlier
from fluksio.driver.settling import Settler
from fluksio.driver.state import Dispatch, DriveState, Revoke
from fluksio.driver.verdict import End, verdict
from fluksio.driver.waitlists import QUIET_S, WaitLists
from fluksio.driver.walk import Walk
from fluksio.flows.flow import Flow
from fluksio.messages import Cancel, ChildEnded, Completion, InboxMessage
from fluksio.runtime import Runtime
from fluksio.schemas import Grant, RunStatus
from fluksio.settings import redact_url
from fluksio.store import family as store_family
from fluksio.store import run_rows
from fluksio.store.models import Run

log = logging.getLogger(__name__)

#: Most completions a driver takes from its inbox in one go.
DRAIN_LIMIT = 500


class Driver:
    """Drives one claimed run to its end, through its parts: a :class:`Dispatcher` sends ready units, a
    :class:`Settler` turns what comes back into rows and walk steps; the loop keeps the lease.

    Invariants: every call in flight holds a grant until its completion is handled or the driver
    gives the grant back itself; a row is written before anything that depends on it is sent; once
    the run is another driver's (``End.LOST``) nothing more is written to it.
    """

    def __init__(self, runtime: Runtime, run_id: str, params: dict, flow: Flow, dispatch: Dispatch, revoke: Revoke,
                 code_digest: str | None = None, use_cache: bool = True, epoch: int = 0,
                 requeue_on_shutdown: bool = False, run: Run | None = None) -> None:
        walk = Walk(flow, params, max_elements=runtime.settings.max_elements)
        self.s = DriveState(
            rt=runtime, run_id=run_id, epoch=epoch, flow=flow, walk=walk,
            cache=NodeCache(runtime.db, runtime.artifacts, flow, code_digest, use_cache, walk.inputs_of, run_id),
            journal=Journal(runtime.db, runtime.events, run_id), dispatch=dispatch, revoke=revoke,
            code_digest=code_digest, waitlists=WaitLists(walk.elements, QUIET_S),
        )
        #: A cancel was asked for before this drive began (a parked run woken to carry it out): done first,
        #: before its children's ends (cancelled too) could be taken for failures.
        self._cancel_first = bool(run is not None and run.cancel_requested)
        if run is not None:  # what its child runs inherit
            self.s.seed, self.s.priority, self.s.engine = run.seed, run.priority or 0, run.engine
            self.s.resumed_at = run.resumed_at
            self.s.parent_id = run.parent_id
            self.s.code_entry, self.s.code_signature = run.code_entry, run.code_signature
        # A run never claimed before (never started, never resumed) has no rows yet: only a driver writes
        # them. Not reading them saves one of a short run's dozen statements.
        fresh = run is not None and run.started_at is None and not run.resume_count
        rows = [] if fresh else run_rows.node_rows(runtime.db, run_id)
        running: dict[str, tuple[int, Grant]] = {}
        if epoch > 0:  # a resumed run: what ended while it had no driver, and what still runs
            if journal_earlier_ends(runtime, run_id, epoch, rows):
                rows = run_rows.node_rows(runtime.db, run_id)
            running = running_before(runtime, run_id, epoch)
        self.s.attempts.update(restore_earlier(walk, rows, running))
        for unit, (attempt, grant) in running.items():
            if unit in walk.running():  # adopted: its completion is taken as this drive's own call's
                self.s.calls.add(grant.id, unit, grant)
                self.s.attempts[unit] = attempt
        if self.s.calls:
            log.info("run %s: %d call(s) of its earlier drive still run; they are adopted, none is sent again",
                     run_id, len(self.s.calls))
        self.s.first_attempt.update(self.s.attempts)
        self.settler = Settler(self.s)
        self.children = ChildRuns(self.s)
        self.dispatcher = Dispatcher(self.s, self.settler.unsent, self.children.start)
        #: On shutdown, send the run back to ``queued`` (auto-resume) rather than mark it ``abandoned``.
        self.requeue_on_shutdown = requeue_on_shutdown
        #: The run is known to have no parent run to tell of its end.
        self._orphan = run is not None and run.parent_id is None

    @property
    def end(self) -> End:
        return self.s.end

    def run(self) -> None:
        s = self.s

        def wake() -> None:
            if s.waitlists.waiting:  # only a driver with units waiting for resources cares
                s.rt.inbox.wake(s.run_id)

        s.rt.placer.add_listener(wake, run_id=s.run_id)  # woken when a call of this run may go
        s.rt.driving.add(s.run_id)
        try:
            s.journal_ended()  # nodes the walk decided at once (a condition on an input, say)
            if self._cancel_first:
                self._cancel()
            self._loop()
            self._wind_up()
        except Exception as exc:
            log.exception("driver of run %s failed", s.run_id)
            self._abort(self._describe_failure(exc))
        finally:
            s.rt.driving.discard(s.run_id)
            s.rt.placer.remove_listener(wake)
            self.dispatcher.forget_waiting()
            if s.end in (End.LOST, End.PARKED):
                s.rt.inbox.leave(s.run_id)  # the inbox is the new driver's now (or the next one's)
            else:
                s.rt.inbox.close(s.run_id)

    def _wind_up(self) -> None:
        """After the loop: write (or, for a lost run, drop) the rows, then end the run as the loop left it."""
        s = self.s
        if not s.end.writes_rows:
            # The run is another driver's now, and so are its rows: one written from here could take the
            # place of the new driver's row for the same attempt. Its calls in flight are of no use to
            # anyone (their rows would be discarded too): they stop and free their machines.
            self.settler.stop_calls()
            s.journal.discard()
            return
        s.journal.write()
        s.journal.announce()
        if s.end is End.HANDED_OVER:
            self.settler.stop_calls()
            self._leave_to_another_driver()
        elif s.end is not End.PARKED:
            self._finish()

    def _leave_to_another_driver(self) -> None:
        s = self.s
        reason = "its driver's worker was shut down mid-run"
        if self.requeue_on_shutdown and run_rows.requeue_handed_over(s.rt.db, s.run_id, s.epoch, reason):
            s.end = End.REQUEUED
            return
        if run_rows.finish(s.rt.db, s.run_id, RunStatus.ABANDONED, f"{reason}; `fluksio resume` re-drives it", None,
                           s.epoch):
            s.rt.run_ended(s.run_id, RunStatus.ABANDONED, orphan=self._orphan)

    # -- the loop -------------------------------------------------------------------------------

    def _loop(self) -> None:
        s = self.s
        settings = s.rt.settings
        next_lease = time.monotonic() + settings.lease_interval_s
        next_check = time.monotonic() + settings.heartbeat_interval_s
        while True:
            if self._rows_due():
                s.journal.write()  # what finished is journaled before anything is sent on from it
            if s.rt.stopping.is_set() and not s.cancelled:
                s.end = End.HANDED_OVER
                return
            if not s.cancelled:
                self.dispatcher.schedule()
                if s.cancel_found:  # found before the run's Cancel came (it may not even be sent yet)
                    self._cancel()
            # Watchers can wait a moment for their events; the next call should not wait for them.
            s.journal.announce()
            if s.cancelled:
                return
            if s.walk.drained and not s.children:
                s.end = End.DRAINED
                return
            if self._only_children_left() and self._park():
                return
            # A retry backing off is woken for here, in the drive's own schedule: it holds no grant meanwhile.
            wake_at = min(next_lease, next_check, s.journal.due_at() or next_check,
                          self.dispatcher.backoff_due_at() or next_check, s.waitlists.said_due_at() or next_check)
            message = s.rt.inbox.pop(s.run_id, timeout=max(0.0, wake_at - time.monotonic()))
            now = time.monotonic()
            if now >= next_lease:
                next_lease = now + settings.lease_interval_s
                if not self._keep_lease():
                    return
            if message is not None:
                self._handle([message])
                if s.end is End.LOST:
                    return
            if now >= next_check:
                # After the messages taken: a completion in hand is not a call that never reported.
                next_check = now + settings.heartbeat_interval_s
                self.settler.check_calls(self._take_waiting)
                if s.end is End.LOST:
                    return

    def _keep_lease(self) -> bool:
        """Refresh the lease; ``False`` when the run is no longer ours. A cancel asked for is acted on here."""
        s = self.s
        held, cancel = run_rows.refresh_lease(s.rt.db, s.run_id, s.epoch)
        if not held:
            # A sweeper declared us dead (the store was unreachable past the stale limit): the run is
            # someone else's now.
            log.warning("run %s is no longer ours (marked abandoned); stopping", s.run_id)
            s.end = End.LOST
            return False
        if cancel:
            self._cancel()
        else:
            self.dispatcher.keep_waiting()
        return True

    def _handle(self, messages: list[InboxMessage]) -> None:
        """Act on what the inbox gave; a completion brings along the others that came meanwhile."""
        s = self.s
        if isinstance(messages[0], Completion) and len(s.calls) > 1:
            # Other calls may have finished meanwhile (a fan-out): take them now, write them together.
            # (With one call in flight, as in a chain, there is nothing else to take: no round trip.)
            messages += s.rt.inbox.drain(s.run_id, DRAIN_LIMIT)
        for index, message in enumerate(messages):
            if isinstance(message, Completion):
                self.settler.completed(message)
            elif isinstance(message, ChildEnded):
                self.children.ended(message.run_id)
                self._say_how_children_go()
            elif isinstance(message, Cancel):
                if run_rows.cancel_requested(s.rt.db, s.run_id):
                    self._cancel()
                else:  # the row is the truth: a cancel message it does not hold was sent again, or forged
                    log.warning("run %s: ignoring a cancel message its row does not ask for", s.run_id)
            if s.end is End.LOST:
                self._hand_back(messages[index:])
                return

    def _take_waiting(self) -> None:
        """Handle every message already waiting on the inbox, not one per turn of the loop."""
        s = self.s
        while messages := s.rt.inbox.drain(s.run_id, DRAIN_LIMIT):
            self._handle(messages)
            if s.end is End.LOST or len(messages) < DRAIN_LIMIT:
                return

    def _rows_due(self) -> bool:
        """Whether the rows collected must be written now: something depends on them, nothing else is
        running (no company is coming), the run is ending, or they have waited long enough."""
        s = self.s
        return s.journal.due() or (s.journal.waiting and (
            s.walk.has_fresh or not s.calls or s.cancelled or s.rt.stopping.is_set()))

    def _hand_back(self, messages: list[InboxMessage]) -> None:
        """Put back what this driver took after the run became another driver's: that driver's completions,
        cancel requests and wake-ups. Completions of this driver's own calls (or older ones) are dropped."""
        for message in messages:
            if not isinstance(message, Completion) or message.epoch > self.s.epoch:
                self.s.rt.inbox.push(self.s.run_id, message)

    # -- child runs ----------------------------------------------------------------------------

    def _only_children_left(self) -> bool:
        """Whether all this drive waits for is child runs: nothing in flight, nothing to place or to write."""
        s = self.s
        return (bool(s.children) and not s.calls and not s.walk.has_fresh and not s.cancelled and not s.backoff
                and not any(queue for queue in s.waitlists.queues.values()))

    def _park(self) -> bool:
        """Let go of the run while its children run, so this driver's slot serves them (no deadlock on driver
        slots, however deep the subflows). ``True`` when parked (the loop ends here).

        Lost wake-ups cannot happen: a child writes its end, then wakes the parent if parked; the parent
        parks, then looks at its children. One of the two sees the other: if a child ended meanwhile, the
        parent takes the run back (or, if the child woke it first, leaves it to the driver that child asked for).
        """
        s = self.s
        news = s.rt.inbox.drain(s.run_id, DRAIN_LIMIT)
        if news:  # a child's end, a cancel: acted on before letting go (the next drive would not see them soon)
            self._handle(news)
            return s.end is End.LOST
        s.journal.write()
        s.journal.announce()
        self._say_how_children_go()
        if not store_family.park(s.rt.db, s.run_id, s.epoch):
            held, cancel = run_rows.refresh_lease(s.rt.db, s.run_id, s.epoch)
            if held and cancel:
                self._cancel()
                return False
            log.warning("run %s could not park: it is no longer this driver's", s.run_id)
            s.end = End.LOST
            return True
        ended = [child.id for child in store_family.children_of(s.rt.db, s.run_id)
                 if child.id in s.children and RunStatus(child.status).is_terminal()]
        if not ended:
            s.end = End.PARKED
            return True
        if not store_family.unpark(s.rt.db, s.run_id):
            s.end = End.PARKED  # a child woke it first: the driver it asked for takes the run
            return True
        for child_id in ended:
            self.children.ended(child_id)
        return False

    def _say_how_children_go(self) -> None:
        reason = self.children.status_reason()
        if reason:
            run_rows.set_reason(self.s.rt.db, self.s.run_id, reason, self.s.epoch)

    # -- endings --------------------------------------------------------------------------------

    def _cancel(self) -> None:
        if not self.s.cancelled:
            self.dispatcher.forget_waiting()
            self.s.waitlists.clear()
            self.settler.cancel(self.children)

    def _finish(self) -> None:
        s = self.s
        ended = verdict(s.walk, s.end)
        run_rows.finish(s.rt.db, s.run_id, ended.status, ended.reason, s.walk.result(), s.epoch)
        s.rt.run_ended(s.run_id, ended.status, orphan=self._orphan)
        s.rt.events.publish("run_finished", run_id=s.run_id, flow=s.flow.name, status=ended.status.value,
                            reason=ended.reason)

    def _describe_failure(self, exc: Exception) -> str:
        settings = self.s.rt.settings
        if type(exc).__module__.split(".")[0] in ("redis", "kombu", "amqp"):
            return (f"lost the broker {redact_url(settings.broker_url)} for longer than "
                    f"{settings.broker_outage_s:g} s: {type(exc).__name__}: {exc}")
        return f"the driver failed: {type(exc).__name__}: {exc}"

    def _abort(self, reason: str) -> None:
        s = self.s
        self.settler.stop_calls()
        try:  # rows of nodes that finished before the failure are worth keeping, if the store takes them
            s.journal.write()
            s.journal.announce()
        except Exception:
            log.exception("could not record the finished nodes of run %s", s.run_id)
        try:
            ended = run_rows.finish(s.rt.db, s.run_id, RunStatus.ERROR, reason, None, s.epoch)
        except Exception:
            log.exception("could not record the failure of run %s", s.run_id)
            return  # the sweeper ends it (abandoned) and tells who is to be told
        if ended:
            s.rt.run_ended(s.run_id, RunStatus.ERROR, orphan=self._orphan)
