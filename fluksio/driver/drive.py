"""The driver: walks one run's graph from claim to finish, writing its rows as it goes.

It dispatches every ready node at once (each to the machine the placer
granted), waits on its inbox for completions, wake-ups and cancel requests —
never on a result backend — and ends the run ``ok``, ``error`` (naming the
failed nodes) or ``cancelled``. A node that fails cannot take the driver
down; a driver that fails still ends its run with the reason.
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from typing import Any

from fluksio.constants import DEFAULT_LABEL
from fluksio.driver.journal import Journal
from fluksio.driver.waiting import ask_for_machine, wait_for_labels
from fluksio.driver.walk import NodeState, Walk
from fluksio.errors import FluksioError, RunNotFound
from fluksio.flows.flow import Flow
from fluksio.placement.placer import Request, Waiting
from fluksio.runs.cache import lookup
from fluksio.runs.cache_key import cache_key, cacheable
from fluksio.runs.inbox import CANCEL, DONE
from fluksio.runs.runtime import Runtime
from fluksio.schemas import Grant, NodeStatus, RunStatus
from fluksio.settings import redact_url
from fluksio.store import runs as run_rows
from fluksio.store.models import RunNode
from fluksio.store.nodes import ArtifactRow, NodeRow

log = logging.getLogger(__name__)

#: ``dispatch(call, queue, display_name)`` sends one node call to a worker queue.
Dispatch = Callable[[dict[str, Any], str, str], None]
#: ``revoke(call_id)`` kills a dispatched call (or stops it from starting).
Revoke = Callable[[str], None]
#: Most completions a driver takes from its inbox in one go.
DRAIN_LIMIT = 500


def queue_for(grant: Grant) -> str:
    """``<label>@<machine>``; a ``prefer`` node placed on a machine without its label goes to ``default``."""
    return f"{grant.queue_label or DEFAULT_LABEL}@{grant.machine}"


def drive(runtime: Runtime, run_id: str, dispatch: Dispatch, revoke: Revoke,
          requeue: Callable[[str], None] | None = None) -> None:
    """Drive one run to its end. Returns quietly when another driver has claimed it.

    ``requeue(run_id)`` hands a queued run to another driver; it is used when this process is shutting
    down while the run waits (or, with auto_resume, runs).
    """
    db = runtime.db
    if runtime.stopping.is_set() and requeue is not None:
        requeue(run_id)  # this process is shutting down: leave the run to another driver
        return
    try:
        run = run_rows.get_run(db, run_id)
    except RunNotFound:
        log.warning("drive: run %s does not exist; dropping the message", run_id)
        return
    if run.status != RunStatus.QUEUED.value:
        return
    try:
        flow = runtime.registry.get(run.flow)
    except FluksioError as exc:
        run_rows.transition(db, run_id, RunStatus.ERROR, status_reason=str(exc), finished_at=run_rows.utcnow())
        return
    if not wait_for_labels(runtime, run_id, flow):
        if runtime.stopping.is_set() and requeue is not None:
            requeue(run_id)  # still queued: another driver takes over the wait
        return  # cancelled, claimed elsewhere, or handed over while it waited
    # The code is the one this process loaded and walks (not the files on disk now, nor at submit); every
    # call carries its digest, and a worker that loaded other code refuses it.
    epoch = run_rows.claim(db, run_id, runtime.registry.digest(flow))
    if epoch is None:
        return  # another driver won the claim, or the run was cancelled while queued
    runtime.events.publish("run_started", run_id=run_id, flow=flow.name)
    claimed = run_rows.get_run(db, run_id)
    driver = Driver(runtime, run_id, run.params or {}, flow, dispatch, revoke, code_digest=claimed.code_digest,
                    use_cache=not run.no_cache, epoch=epoch,
                    requeue_on_shutdown=runtime.settings.auto_resume and requeue is not None)
    driver.run()
    if driver.requeued and requeue is not None:
        requeue(run_id)


class Driver:
    def __init__(self, runtime: Runtime, run_id: str, params: dict[str, Any], flow: Flow,
                 dispatch: Dispatch, revoke: Revoke, code_digest: str | None = None, use_cache: bool = True,
                 epoch: int = 0, requeue_on_shutdown: bool = False) -> None:
        self.rt = runtime
        self.run_id = run_id
        #: How often the run was resumed when this driver claimed it; guards its writes and names its calls.
        self.epoch = epoch
        self.flow = flow
        self.walk = Walk(flow, params)
        self.dispatch = dispatch
        self.revoke = revoke
        self.attempts: dict[str, int] = {}
        self.in_flight: dict[str, tuple[str, Grant]] = {}  # call_id -> (node, grant)
        #: Ready nodes waiting to be placed, one queue per distinct request (resources, device, policy):
        #: when the head of a queue cannot be placed, neither can the rest, so they are not asked.
        self.queues: dict[tuple[Any, ...], deque[str]] = {}
        #: Why the head of each blocked queue waits.
        self.waiting: dict[tuple[Any, ...], str] = {}
        self.warnings: dict[str, str] = {}  # node -> clamp warning
        self.errors: dict[str, str] = {}
        self.cancelled = False
        self._reason: str | None = None
        self._kinds: tuple[str, ...] = ()
        self._reason_at = 0.0
        self.code_digest = code_digest
        self.use_cache = use_cache
        self.cache_keys: dict[str, str | None] = {}
        #: Per node, the attempt number this drive started from (a resumed run continues the count).
        self.first_attempt: dict[str, int] = {}
        self.lost_run = False
        #: Calls in flight whose grant was found given back at the last check (see ``_check_calls``).
        self._given_back: set[str] = set()
        #: Rows of nodes that finished (or were restored from the cache, skipped, cancelled).
        self.journal = Journal(runtime.db, runtime.events, run_id)
        #: This process is shutting down: the run was left for another driver.
        self.handed_over = False
        #: On shutdown, send the run back to ``queued`` (auto-resume) rather than mark it ``abandoned``.
        self.requeue_on_shutdown = requeue_on_shutdown
        #: It was sent back to ``queued``: the caller hands it to another driver.
        self.requeued = False
        self._restore_earlier_rows()

    def _restore_earlier_rows(self) -> None:
        """A resumed run: nodes that succeeded before are restored from their rows; the rest run again."""
        latest: dict[str, RunNode] = {}
        for row in run_rows.node_rows(self.rt.db, self.run_id):
            if row.node in self.flow.nodes and (row.node not in latest or row.attempt >= latest[row.node].attempt):
                latest[row.node] = row
        for node in self.flow.order:
            row = latest.get(node)
            if row is None:
                continue
            inputs_there = self.walk.missing[node] == 0 and self.walk.state[node] is NodeState.PENDING
            if row.status in (NodeStatus.OK.value, NodeStatus.CACHED.value) and inputs_there:
                self.walk.start(node)
                self.walk.complete(node, row.outputs or {})
            else:
                self.attempts[node] = self.first_attempt[node] = row.attempt + 1

    def run(self) -> None:
        def wake() -> None:
            if self.waiting:  # only a driver with nodes waiting for resources cares
                self.rt.inbox.wake(self.run_id)

        self.rt.placer.add_listener(wake)
        self.rt.driving.add(self.run_id)
        try:
            self._loop()
            if self.lost_run:
                # The run is another driver's now, and so are its rows: one written from here could take the
                # place of the new driver's row for the same attempt. Its calls in flight are of no use to
                # anyone (their rows would be discarded too): they stop and free their machines.
                self._stop_calls()
                self.journal.discard()
            else:
                self.journal.write()
                self.journal.announce()
            if self.handed_over:
                self._stop_calls()
                self._leave_to_another_driver()
            elif not self.lost_run:
                self._finish()
        except Exception as exc:
            log.exception("driver of run %s failed", self.run_id)
            self._abort(self._describe_failure(exc))
        finally:
            self.rt.driving.discard(self.run_id)
            self.rt.placer.remove_listener(wake)
            for key in self.waiting:
                if self.queues.get(key):
                    self.rt.placer.forget(self._call_id(self.queues[key][0]))
            if self.lost_run:
                self.rt.inbox.leave(self.run_id)  # the inbox is the new driver's now
            else:
                self.rt.inbox.close(self.run_id)

    def _leave_to_another_driver(self) -> None:
        reason = "its driver's worker was shut down mid-run"
        if self.requeue_on_shutdown:
            self.requeued = run_rows.requeue_handed_over(self.rt.db, self.run_id, self.epoch, reason)
        if not self.requeued:
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
                self.handed_over = True
                return
            if not self.cancelled:
                self._schedule()
            # Watchers can wait a moment for their events; the next node should not wait for them.
            self.journal.announce()
            if self.cancelled or self.walk.drained:
                return
            wake_at = min(next_lease, next_check, self.journal.due_at() or next_check)
            timeout = max(0.0, wake_at - time.monotonic())
            message = self.rt.inbox.pop(self.run_id, timeout=timeout)
            now = time.monotonic()
            if now >= next_lease:
                next_lease = now + settings.lease_interval_s
                held, cancel = run_rows.refresh_lease(self.rt.db, self.run_id, self.epoch)
                if not held:
                    # A sweeper declared us dead (the store was unreachable past the stale limit);
                    # the run is someone else's now.
                    log.warning("run %s is no longer ours (marked abandoned); stopping", self.run_id)
                    self.lost_run = True
                    return
                if cancel:
                    self._cancel()
                    continue
                # Still alive, still waiting: `fluksio placer` drops waiting calls nobody keeps.
                self.rt.placer.keep_waiting([self._call_id(queue[0])
                                             for key, queue in self.queues.items() if key in self.waiting and queue])
            if message is not None:
                messages = [message]
                if message["kind"] == DONE and len(self.in_flight) > 1:
                    # Other calls may have finished meanwhile (a fan-out): take them now, write them together.
                    # (With one call in flight, as in a chain, there is nothing else to take: no round trip.)
                    messages += self.rt.inbox.drain(self.run_id, DRAIN_LIMIT)
                for index, message in enumerate(messages):
                    if message["kind"] == DONE:
                        self._completed(message)
                    elif message["kind"] == CANCEL:
                        self._cancel()
                    if self.lost_run:
                        self._hand_back(messages[index:])
                        return
            if now >= next_check:
                # After the messages taken: a completion in hand is not a call that never reported.
                next_check = now + settings.heartbeat_interval_s
                self._check_calls()

    def _call_id(self, node: str) -> str:
        # A resumed run's calls are named apart from the calls of the drive that went before it.
        drive = f".r{self.epoch}" if self.epoch else ""
        return f"{self.run_id}{drive}.{node}.{self.attempts.get(node, 1)}"

    def _schedule(self) -> None:
        restored = False
        while fresh := self.walk.take_fresh():
            for node in fresh:
                if self._restore_from_cache(node):
                    restored = True
                else:
                    spec = self.flow.nodes[node]
                    key = (spec.resources, spec.device, spec.device_policy)
                    self.queues.setdefault(key, deque()).append(node)
                    if key in self.waiting:  # joins a queue that waits: it waits for the same reason
                        self._announce(node, self.waiting[key])
        if restored:
            self.journal.write()  # rows restored from the cache, in one transaction, before their dependents go
        for key, queue in self.queues.items():
            while queue and self._place(queue[0], key):
                queue.popleft()
            if not queue:
                self.waiting.pop(key, None)
        self._say_why()

    def _key(self, node: str) -> str | None:
        if node not in self.cache_keys:
            spec = self.flow.nodes[node]
            try:
                self.cache_keys[node] = (cache_key(self.flow.name, spec, self.code_digest, self.walk.inputs_of(node))
                                         if spec.cache else None)
            except (TypeError, ValueError):  # inputs JSON cannot key (it never should): just not cached
                self.cache_keys[node] = None
        return self.cache_keys[node]

    def _restore_from_cache(self, node: str) -> bool:
        key = self._key(node)
        if key is None or not self.use_cache or node in self.attempts:
            return False
        hit = lookup(self.rt.db, self.rt.artifacts, key)
        if hit is None:
            return False
        now = run_rows.utcnow()
        self.journal.add(NodeRow(
            run_id=self.run_id, node=node, attempt=1, status=NodeStatus.CACHED.value, started_at=now,
            finished_at=now, duration_ms=0, cache_key=key, outputs=hit.outputs, cached_from=hit.run_id,
        ), event={"node": node, "status": NodeStatus.CACHED.value, "cached_from": hit.run_id})
        self.walk.start(node)
        self.walk.complete(node, hit.outputs)
        return True

    def _place(self, node: str, key: tuple[Any, ...]) -> bool:
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
            if self.waiting.get(key) != reason:
                for queued in self.queues[key]:  # only when the reason changes: not per attempt
                    self._announce(queued, reason)
            self.waiting[key] = reason
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
        call = {
            "call_id": call_id, "run_id": self.run_id, "flow": self.flow.name, "node": node,
            "attempt": self.attempts.get(node, 1), "inputs": self.walk.inputs_of(node),
            "grant": grant.model_dump(mode="json"), "code_digest": self.code_digest, "epoch": self.epoch,
        }
        self.walk.start(node)
        self.in_flight[call_id] = (node, grant)
        try:
            self.dispatch(call, queue_for(grant), f"{self.flow.name}.{node}")
        except Exception as exc:
            # Giving the grant back (in _settle_failed) also voids a copy of the message that got out and has not
            # started (Books.start refuses it); one already running would run on (a failed send rarely gets out).
            del self.in_flight[call_id]
            self._settle_failed(call_id, node, grant, started=True, dispatched=False,
                                error=f"could not send the call to the broker: {type(exc).__name__}: {exc}")

    def _say_why(self) -> None:
        """Keep the run's ``status_reason`` saying what waits and why.

        Written at once when the kinds of wait change; when only who waits changes (a fan-out moving
        through its queue), at most once per lease interval — a write per dispatched node would cost
        the driver more than the dispatch.
        """
        parts = []
        for key, why in self.waiting.items():
            queue = self.queues.get(key)
            if queue:
                who = queue[0] if len(queue) == 1 else f"{queue[0]} and {len(queue) - 1} more node(s)"
                parts.append(f"{who}: {why}")
        reason = "; ".join(parts) or None
        if reason:
            reason = reason[0].upper() + reason[1:]
        kinds = tuple(sorted(why for key, why in self.waiting.items() if self.queues.get(key)))
        now = time.monotonic()
        due = kinds != self._kinds or now - self._reason_at >= self.rt.settings.lease_interval_s
        if reason != self._reason and due:
            self._reason, self._kinds, self._reason_at = reason, kinds, now
            run_rows.set_reason(self.rt.db, self.run_id, reason, self.epoch)

    # -- completions ----------------------------------------------------------------------------

    def _completed(self, message: dict[str, Any], dispatched: bool = True) -> None:
        call_id = message["call_id"]
        if dispatched:
            entry = self.in_flight.pop(call_id, None)
            if entry is None and message.get("epoch", 0) > self.epoch:
                # The run was resumed and another driver sent this call: the run is no longer ours, and the
                # completion is the other driver's (both drives share the run's inbox; see _hand_back).
                log.warning("run %s was resumed by another driver (a completion of its call %s came here); "
                            "stopping", self.run_id, call_id)
                self.lost_run = True
                return
            if entry is None:
                log.info("run %s: dropping a completion for %s, which is already settled", self.run_id, call_id)
                return
        node = message["node"]
        spec = self.flow.nodes[node]
        ok = message.get("status") == "ok"
        logs = message.get("logs")
        if node in self.warnings:
            logs = f"[fluksio] {self.warnings[node]}\n{logs or ''}"
        row = NodeRow(
            run_id=self.run_id, node=node, attempt=message["attempt"],
            status=NodeStatus.OK.value if ok else NodeStatus.ERROR.value,
            machine=message.get("machine"), gpus=message.get("gpus") or [],
            started_at=_parse(message.get("started_at")), finished_at=_parse(message.get("finished_at")),
            error=None if ok else message.get("error"), logs=logs,
            outputs=message.get("outputs") if ok else None,
        )
        if ok and cacheable(row.outputs):
            row.cache_key = self._key(node)
        if row.started_at and row.finished_at:
            row.duration_ms = int((row.finished_at - row.started_at).total_seconds() * 1000)
        artifacts = [
            ArtifactRow(run_id=self.run_id, node=node, message=a["message"], digest=a["digest"], size=a["size"],
                        media_type=a.get("media_type") or "application/octet-stream", name=a.get("name"))
            for a in (message.get("artifacts") or [])
        ] if ok else []
        self.journal.add(row, artifacts, {"node": node, "status": row.status, "machine": row.machine,
                                          "attempt": row.attempt, "error": row.error})
        if ok:
            self.walk.complete(node, message.get("outputs") or {})
            return
        self.errors[node] = message.get("error") or "failed"
        tries = message["attempt"] - self.first_attempt.get(node, 1) + 1
        if tries <= spec.retries and not self.cancelled:
            self.attempts[node] = message["attempt"] + 1
            self.walk.retry(node)
            return
        self._record_bare(self.walk.fail(node), NodeStatus.SKIPPED, f"skipped: upstream node {node!r} failed")

    def _rows_due(self) -> bool:
        """Whether the rows collected must be written now: something depends on them, nothing else is
        running (no company is coming), the run is ending, or they have waited long enough."""
        return self.journal.due() or (self.journal.waiting and (
            self.walk.has_fresh or not self.in_flight or self.cancelled or self.rt.stopping.is_set()))

    def _hand_back(self, messages: list[dict[str, Any]]) -> None:
        """Put back what this driver took after the run became another driver's: that driver's completions,
        cancel requests and wake-ups. Completions of this driver's own calls (or older ones) are dropped."""
        for message in messages:
            if message["kind"] != DONE or message.get("epoch", 0) > self.epoch:
                self.rt.inbox.push(self.run_id, message)

    def _check_calls(self) -> None:
        """Settle, as errors, calls that will never report.

        A call whose machine died (or restarted) is lost. A call whose grant its worker gave back, yet
        whose completion has not come by the next check either, reported into a message that went astray:
        it is looked for among what the inbox handed out lately (a connection that dropped between Redis
        taking it off the inbox and the driver hearing it), and if it is not there either, waiting on it
        would hold the run forever.
        """
        given_back = self.rt.placer.given_back([grant for _node, grant in self.in_flight.values()])
        if given_back & self._given_back:
            # Overdue completions: the inbox may have handed them out into a connection that dropped.
            for message in self.rt.inbox.recover(self.run_id):
                if message.get("kind") == DONE and message.get("call_id") in self.in_flight:
                    log.warning("run %s: the completion of %s was taken off the inbox but never reached the "
                                "driver; recovered", self.run_id, message["call_id"])
                    self._completed(message)
            given_back &= self.in_flight.keys()
        self.rt.inbox.forget_taken(self.run_id)
        lost: dict[tuple[str, str | None], bool] = {}  # one look per machine (and start of it), not per call
        for call_id, (node, grant) in list(self.in_flight.items()):
            machine = (grant.machine, grant.incarnation)
            if machine not in lost:
                lost[machine] = self.rt.placer.lost(grant)
            if lost[machine]:
                log.warning("run %s: machine %s was lost while running %s", self.run_id, grant.machine, node)
                self._settle_failed(call_id, node, grant, started=False, dispatched=True,
                                    error=f"machine {grant.machine} was lost while running the call (its "
                                          f"heartbeat is gone from {redact_url(self.rt.settings.broker_url)})")
            elif call_id in given_back and call_id in self._given_back:
                log.warning("run %s: %s ended on %s, but its completion never came", self.run_id, node,
                            grant.machine)
                self._settle_failed(call_id, node, grant, started=False, dispatched=True,
                                    error=f"the call ended on {grant.machine}, but its completion was lost on the "
                                          "way to the driver; it is run again if the node has retries left")
        self._given_back = given_back & self.in_flight.keys()

    def _settle_failed(self, call_id: str, node: str, grant: Grant, *, started: bool, dispatched: bool,
                       error: str) -> None:
        """End a call that will never report (it was never sent, or its machine died) as an error."""
        self.rt.placer.release(grant)
        now = run_rows.utcnow().isoformat()
        self._completed({"kind": DONE, "call_id": call_id, "node": node, "attempt": self.attempts.get(node, 1),
                         "status": "error", "machine": grant.machine, "gpus": list(grant.gpus),
                         "started_at": now if started else None, "finished_at": now, "error": error},
                        dispatched=dispatched)

    def _record_bare(self, nodes: list[str], status: NodeStatus, error: str | None,
                     grant: Grant | None = None) -> None:
        """Rows for nodes that never ran (or were killed); written with the next batch of rows."""
        now = run_rows.utcnow()
        for node in nodes:
            self.journal.add(NodeRow(
                run_id=self.run_id, node=node, attempt=self.attempts.get(node, 1), status=status.value,
                machine=grant.machine if grant else None, gpus=list(grant.gpus) if grant else [],
                finished_at=now, error=error,
            ))

    # -- endings --------------------------------------------------------------------------------

    def _cancel(self) -> None:
        if self.cancelled:
            return
        self.cancelled = True
        self._record_bare(self.walk.cancel_pending(), NodeStatus.CANCELLED, "cancelled before it started")
        for key in self.waiting:
            if self.queues.get(key):
                self.rt.placer.forget(self._call_id(self.queues[key][0]))
        self.waiting.clear()
        self.queues.clear()
        for call_id, (node, grant) in list(self.in_flight.items()):
            self.revoke(call_id)
            # The call is killed (or never starts: its grant is void once given back); its resources are free.
            self.rt.placer.release(grant)
            self.walk.cancel(node)
            self._record_bare([node], NodeStatus.CANCELLED, "cancelled while running", grant)
        self.in_flight.clear()

    def _finish(self) -> None:
        result = self.walk.result()
        reason = None
        if self.cancelled:
            status, reason = RunStatus.CANCELLED, "cancelled by request"
        elif stranded := [n for n, s in self.walk.state.items() if s is NodeState.PENDING]:
            # Inputs they need never came (the flow changed between submit and start): never "ok".
            missing = sorted({m for n in stranded for m in self.flow.nodes[n].requires if m not in self.walk.messages})
            status, reason = RunStatus.ERROR, (f"node(s) {', '.join(stranded)} could never run: nobody provided "
                                               f"{', '.join(missing)} (did the flow change since the submit?)")
        elif failed := self.walk.failed():
            details = "; ".join(f"{n}: {self.errors.get(n, 'failed').splitlines()[0]}" for n in failed)
            skipped = [n for n, s in self.walk.state.items() if s is NodeState.SKIPPED]
            tail = f" ({len(skipped)} downstream node(s) skipped: {', '.join(skipped)})" if skipped else ""
            status, reason = RunStatus.ERROR, f"node(s) {', '.join(failed)} failed — {details}{tail}"
        else:
            status = RunStatus.OK
        run_rows.finish(self.rt.db, self.run_id, status, reason, result, self.epoch)
        self.rt.run_ended(self.run_id, status)
        self.rt.events.publish("run_finished", run_id=self.run_id, flow=self.flow.name, status=status.value,
                               reason=reason)

    def _describe_failure(self, exc: Exception) -> str:
        if type(exc).__module__.split(".")[0] in ("redis", "kombu", "amqp"):
            broker = redact_url(self.rt.settings.broker_url)
            return f"lost the broker {broker} for longer than {self.rt.settings.broker_outage_s:g} s: " \
                   f"{type(exc).__name__}: {exc}"
        return f"the driver failed: {type(exc).__name__}: {exc}"

    def _stop_calls(self) -> None:
        """Kill the calls in flight and give their resources back (the run is over for this driver)."""
        for call_id, (_node, grant) in list(self.in_flight.items()):
            self.revoke(call_id)
            self.rt.placer.release(grant)
        self.in_flight.clear()

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


def _parse(value: str | None) -> datetime | None:
    return datetime.fromisoformat(value) if value else None
