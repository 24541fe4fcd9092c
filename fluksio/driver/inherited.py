"""What a resumed run keeps from its drive before: the calls that ended while it had no driver, and those
still running.

Workers push a call's completion onto its run's inbox whether or not a driver is there to take it. When a
run whose driver died is resumed (under a new epoch), the completions its earlier drive never took — or
took and never journaled — still wait in the inbox. Those calls ran on the inputs the resumed run restores
(an ``ok`` row never changes), so each is journaled as the row the earlier driver would have written, before
the resumed drive restores its rows and sends anything: nothing that finished runs again.

A call of an earlier drive whose grant is still held in the placer's books, and that a worker started, is
still running (a worker gives its grant back just before it pushes its completion): the resumed drive
*adopts* it — it counts it as its own call in flight, under its old id, and takes its completion when it
comes — rather than send it again. If its machine is lost meanwhile, the drive notices as for any call of
its own, and runs it again. A grant no worker started is voided instead, and its unit sent again.
"""

from __future__ import annotations

import logging

from fluksio.broker.inbox.base import InboxMessage
from fluksio.driver.rows import completion_rows
from fluksio.messages import Completion, parse_call_id
from fluksio.runtime import Runtime
from fluksio.schemas import Grant
from fluksio.store.models import RunNode
from fluksio.store.nodes import record_nodes

log = logging.getLogger(__name__)

#: Messages taken off the inbox at a time.
DRAIN_LIMIT = 500


def journal_earlier_ends(runtime: Runtime, run_id: str, epoch: int, rows: list[RunNode]) -> int:
    """Journal the completions of calls of earlier drives waiting in the run's inbox; how many were journaled.

    ``rows``: the run's node rows now (a completion whose row the earlier driver did write is not written
    twice). Other messages (a cancel, a wake-up) go back onto the inbox for the drive to read.
    """
    inbox = runtime.inbox
    waiting: list[InboxMessage] = list(inbox.recover(run_id))  # taken by the dead driver, never journaled
    while batch := inbox.drain(run_id, DRAIN_LIMIT):
        waiting += batch
    written = {(row.node, row.element, row.attempt) for row in rows}
    ended, artifacts, kept = [], [], []
    for message in waiting:
        if not isinstance(message, Completion) or message.epoch >= epoch:
            kept.append(message)
            continue
        key = (message.node, -1 if message.index is None else message.index, message.attempt)
        if key in written:
            continue  # journaled before its driver died (or taken twice)
        written.add(key)
        # No cache key: the unit's inputs are not known before restoring; the row counts, it is not offered
        # to later runs as a cache entry.
        row, made = completion_rows(run_id, message, None)
        ended.append(row)
        artifacts += made
    if ended:
        record_nodes(runtime.db, ended, artifacts)
        log.info("run %s: %d call(s) ended while it had no driver; their rows are kept, and none runs again",
                 run_id, len(ended))
    for message in kept:
        inbox.push(run_id, message)
    inbox.forget_taken(run_id)
    return len(ended)


def running_before(runtime: Runtime, run_id: str, epoch: int) -> dict[str, tuple[int, Grant]]:
    """The calls of the run's earlier drives that a worker started and that still hold their grant (they are
    running): unit → (attempt, grant). The grant's id is the call's id.

    A grant held for a call no worker started is one its driver died between claiming and sending (or whose
    message waits in a queue still): the resumed drive starts it itself — one atomic step, the one a worker
    takes before it runs a call, so that no delivery of that message can run it from now on — gives it back,
    and sends the unit again. One a worker did start (the step refuses this drive) is adopted.
    """
    books = runtime.placer.books
    found: dict[str, tuple[int, Grant]] = {}
    for grants in books.held().values():
        for grant in grants:
            ref = parse_call_id(grant.id)
            if ref is None or ref.run_id != run_id or ref.epoch >= epoch:
                continue
            if books.start(grant, f"resumed {run_id} r{epoch}"):  # never started: void it, send the unit again
                books.give(grant)
                log.info("run %s: call %s of an earlier drive was never started; its grant is given back and "
                         "its unit sent again", run_id, grant.id)
                continue
            if ref.node not in found or found[ref.node][0] < ref.attempt:
                found[ref.node] = (ref.attempt, grant)
    return found
