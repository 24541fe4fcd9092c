"""From ready units to calls on machines: the run cache first, then the placer, then the broker.

A ready unit is restored from the cache when an earlier call left its outputs;
otherwise it joins the wait list of its request's kind, and the head of each
list is placed as soon as the placer grants it (in its turn among every waiting
call of the installation: by the run's priority, then age). What waits, and why,
is said in the run's ``status_reason``, in ``node_queued`` events (with the run's
priority and the node's pool) and to the placer. A retry that backs off waits
here, in the drive's own schedule, holding no grant, until its time comes.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from fluksio.driver.rows import bare_rows, cached_row
from fluksio.driver.state import DriveState
from fluksio.driver.waiting import ask_for_machine
from fluksio.driver.waitlists import RequestKind, kind_of
from fluksio.errors import PlacementError
from fluksio.messages import NodeCall
from fluksio.placement.placer import Request, Waiting
from fluksio.placement.turns import Why
from fluksio.routing import queue_for
from fluksio.schemas import Grant, NodeStatus, split_unit
from fluksio.store import family as store_family
from fluksio.store import run_rows

log = logging.getLogger(__name__)

#: ``settle(call_id, unit, grant, error)`` ends a call whose send failed, as an error (see ``settling``).
SettleUnsent = Callable[[str, str, Grant, str], None]


class Dispatcher:
    """Places and sends one drive's ready units; ``settle_unsent`` ends a call whose send failed, ``start_child``
    starts the child run a subflow call is (no machine is placed for it: its own nodes are)."""

    def __init__(self, state: DriveState, settle_unsent: SettleUnsent, start_child: Callable[[str], None]) -> None:
        self.s = state
        self._settle_unsent = settle_unsent
        self._start_child = start_child

    def schedule(self) -> None:
        """Take what became ready, restore what the cache has, place what it can; say what waits."""
        s = self.s
        restored = False
        self._end_backoffs(time.monotonic())
        while fresh := s.walk.take_fresh():
            for unit in fresh:
                spec = s.flow.nodes[split_unit(unit)[0]]
                if spec.subflow is not None:
                    self._start_child(unit)
                    continue
                if self._restore_from_cache(unit):
                    restored = True
                    continue
                kind = kind_of(spec, s.asks.get(unit))
                reason = s.waitlists.add(unit, kind)
                if reason is not None:  # the first of its node to join a queue that waits: it waits for that
                    self._announce(kind, split_unit(unit)[0], reason)
            s.journal_ended()
        if restored:
            s.journal.write()  # rows restored from the cache, in one transaction, before their dependents go
        for kind, unit in list(s.waitlists.heads()):
            while not s.cancel_found and self._place(unit, kind):
                s.waitlists.placed(kind)
                queue = s.waitlists.queues[kind]
                if not queue:
                    break
                unit = queue[0]
        due, reason = s.waitlists.status_reason(time.monotonic(), s.rt.settings.lease_interval_s)
        if due:
            run_rows.set_reason(s.rt.db, s.run_id, reason, s.epoch)

    def _end_backoffs(self, now: float) -> None:
        """Retries whose wait is over become ready again (``now``: ``time.monotonic()``)."""
        s = self.s
        due = [unit for unit, at in s.backoff.items() if at <= now]
        for unit in due:
            del s.backoff[unit]
            s.walk.retry(unit)
        if due:
            s.waitlists.say_again()  # the run's reason said it backs off: say what it does now

    def backoff_due_at(self) -> float | None:
        """When (``time.monotonic()``) the next retry's wait is over, if one waits."""
        return min(self.s.backoff.values(), default=None)

    def forget_waiting(self) -> None:
        """Take this drive's waiting calls off the placer's list (the drive ends, or stops scheduling)."""
        for unit in self.s.waitlists.waiting_heads():
            self.s.rt.placer.forget(self.s.call_id(unit))

    def keep_waiting(self) -> None:
        """Still alive, still waiting: `fluksio placer` drops waiting calls nobody keeps."""
        self.s.rt.placer.keep_waiting([self.s.call_id(unit) for unit in self.s.waitlists.waiting_heads()])

    def _restore_from_cache(self, unit: str) -> bool:
        s = self.s
        if unit in s.attempts:  # a unit that ran before in this run (a retry, a resume) runs again
            return False
        found = s.cache.hit(unit)
        if found is None:
            return False
        key, hit = found
        s.journal.add(cached_row(s.run_id, unit, key, hit, s.cache.code(split_unit(unit)[0])),
                      event={"node": unit, "status": NodeStatus.CACHED.value, "cached_from": hit.run_id})
        s.walk.start(unit)
        s.walk.complete(unit, hit.outputs)
        return True

    def _place(self, unit: str, kind: RequestKind) -> bool:
        """Claim resources for the unit and send it (``True``), or note why it waits."""
        s = self.s
        node, index = split_unit(unit)
        spec = s.flow.nodes[node]
        call_id = s.call_id(unit)
        detail = (f"{s.waitlists.waiting_of(kind, node)} of {s.walk.elements(node)} elements"
                  if index is not None else None)
        asks = kind[0]
        try:
            outcome = s.rt.placer.try_claim(
                Request(call_id, asks, spec.device, spec.device_policy, s.run_id, node if detail else unit,
                        detail=detail, priority=s.priority, pool=spec.pool)
            )
        except PlacementError as exc:  # a pool this driver's settings lack (submit checked the submitter's)
            self._fail_unplaced(unit, str(exc))
            return True
        if isinstance(outcome, Waiting):
            reason = outcome.reason
            if outcome.why is Why.MACHINES:
                # A shape a cluster could start: ask for a machine, and say what became of the ask.
                asked = ask_for_machine(s.rt, outcome.wanted or asks, spec.device, f"run {s.run_id} node {unit}")
                if asked:
                    reason = f"{reason}; {asked}"
            # Announced when the kind of wait changes, not per attempt (nor per move up the installation's order).
            category = None if outcome.why is Why.MACHINES else outcome.why.value
            for queued in s.waitlists.blocked(kind, reason, category):
                self._announce(kind, queued, reason)
            return False
        if s.parent_id is not None and store_family.cancel_on_the_way(s.rt.db, s.run_id):
            # Cancelling a parent frees its children's machines child by child: one freed before this child's
            # own cancel came (or was even sent) is granted here, and the call would start under a cancelled
            # parent. Given back unsent; the loop cancels the run. (A run with no parent hears of its own
            # cancel before anything the cancel frees: no read per call for it.)
            s.rt.placer.release(outcome)
            s.cancel_found = True
            return False
        if outcome.clamped_from is not None:
            s.warnings[unit] = (
                f"clamped: requested {outcome.clamped_from.describe()}, granted {outcome.cpus} cpu(s), "
                f"{len(outcome.gpus)} gpu(s), {outcome.ram_mb} MB RAM on {outcome.machine}"
            )
            log.warning("run %s node %s %s", s.run_id, unit, s.warnings[unit])
        else:
            s.warnings.pop(unit, None)  # an earlier attempt's warning is not this one's
        self._send(unit, call_id, outcome)
        return True

    def _fail_unplaced(self, unit: str, error: str) -> None:
        """The unit can never be placed: it fails with a row saying why (and is taken off its wait list)."""
        s = self.s
        [row] = bare_rows(s.run_id, [unit], s.attempts, NodeStatus.ERROR, error)
        s.journal.add(row, event={"node": unit, "status": row.status, "error": error})
        s.walk.fail(unit, error)
        s.journal_ended()

    def _announce(self, kind: RequestKind, node: str, reason: str) -> None:
        s = self.s
        fields: dict[str, object] = {}
        total = s.walk.elements(node)
        if total is not None:
            waiting = s.waitlists.waiting_of(kind, node)
            fields = {"elements_waiting": waiting, "elements": total}
            reason = f"{waiting} of {total} elements {reason}"
        s.rt.events.publish("node_queued", run_id=s.run_id, node=node, reason=reason, priority=s.priority,
                            pool=s.flow.nodes[node].pool, **fields)

    def _send(self, unit: str, call_id: str, grant: Grant) -> None:
        s = self.s
        node, index = split_unit(unit)
        call = NodeCall(call_id=call_id, run_id=s.run_id, flow=s.flow.name, node=node,
                        attempt=s.attempts.get(unit, 1), inputs=s.walk.inputs_of(unit), grant=grant,
                        code_digest=s.code_digest, epoch=s.epoch, index=index, code_entry=s.code_entry,
                        code_signature=s.code_signature)
        s.walk.start(unit)
        s.calls.add(call_id, unit, grant)
        try:
            s.dispatch(call, queue_for(grant), f"{s.flow.name}.{unit}")
        except Exception as exc:
            # Giving the grant back (when settled) also voids a copy of the message that got out and has not
            # started (Books.start refuses it); one already running would run on (a failed send rarely gets
            # out).
            s.calls.pop(call_id)
            self._settle_unsent(call_id, unit, grant,
                                f"could not send the call to the broker: {type(exc).__name__}: {exc}")
