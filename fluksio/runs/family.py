"""Runs and their child runs (subflow calls): telling a parent its child ended, and cancelling down the tree.

A parent learns of a child's end twice over: a :class:`~fluksio.messages.ChildEnded` on its inbox (for a
driver that is listening), and, if it had parked, a wake-up that hands it to a driver again (one waker
wins; see ``store.family``). The child's row is the truth either way: the parent reads it.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from fluksio.errors import RunNotFound
from fluksio.messages import Cancel, ChildEnded
from fluksio.schemas import RunStatus
from fluksio.store import family as store_family
from fluksio.store import run_rows
from fluksio.store.models import Run

if TYPE_CHECKING:
    from fluksio.runtime import Runtime

log = logging.getLogger(__name__)


def tell_parent(runtime: Runtime, run: Run) -> None:
    """``run`` ended (its end is written): tell its parent, and hand the parent to a driver if it parked."""
    if run.parent_id is None:
        return
    try:
        parent = run_rows.get_run(runtime.db, run.parent_id)
    except RunNotFound:
        return
    if parent.status != RunStatus.RUNNING.value:
        return  # it ended already (a cancel went down the tree): nobody listens
    runtime.inbox.push(parent.id, ChildEnded(run.id))
    wake(runtime, parent)


def wake(runtime: Runtime, run: Run) -> None:
    """Hand a parked run to a driver (it has something to hear: a child's end, a cancel)."""
    if not store_family.wake(runtime.db, run.id):
        return  # not parked (its driver listens), or another waker won
    if runtime.hand_over is None:
        log.error("run %s was woken but this process cannot hand runs to drivers; the sweepers will", run.id)
        return
    runtime.hand_over(run.id, run.flow)


def resume(runtime: Runtime, run: Run) -> None:
    """Re-drive a run that ended ``error``, ``cancelled`` or ``abandoned``, under its id. Its inbox is kept: the
    calls that ended after its last driver stopped are its new driver's to journal (driver/inherited.py)."""
    run_rows.resume(runtime.db, run.id)
    if runtime.hand_over is None:
        raise RuntimeError("this runtime has no Celery app to hand runs to drivers")  # a programming error
    runtime.hand_over(run.id, run.flow)


def cancel(runtime: Runtime, run_id: str, reason: str) -> RunStatus:
    """Cancel a run: a queued one at once, a running one by telling its driver — and its children, down the
    tree, right away: a parked parent needs a driver slot to end, and its children may hold them all until
    they are told. Returns the status after."""
    status, ended = run_rows.cancel_run(runtime.db, run_id, reason)
    run = run_rows.get_run(runtime.db, run_id)
    if ended:  # a queued run, cancelled by this call: nobody else will tell its alerts (or its parent)
        runtime.run_ended(run.id, RunStatus.CANCELLED)
    if status is RunStatus.RUNNING:
        runtime.inbox.push(run.id, Cancel())
        for child in store_family.children_of(runtime.db, run.id):
            if not RunStatus(child.status).is_terminal():
                cancel(runtime, child.id, f"its parent run {run.id} was cancelled")
        wake(runtime, run)
    return status
