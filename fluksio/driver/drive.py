"""``drive(run_id)``: claim a queued run and drive it to its end (the body of the drive task).

It waits (queued, saying why) while the run requires a label no machine
carries, claims the run with the code it was submitted with (driver/code.py), and hands it to a
:class:`~fluksio.driver.loop.Driver`. A run another driver claimed, or that was
cancelled meanwhile, is left alone.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from fluksio.clock import utcnow
from fluksio.driver.code import flow_to_drive
from fluksio.driver.loop import Driver
from fluksio.driver.state import Dispatch, Revoke
from fluksio.driver.verdict import End
from fluksio.driver.waiting import missing_labels, wait_for_labels
from fluksio.errors import FluksioError, RunNotFound
from fluksio.runtime import Runtime
from fluksio.schemas import RunStatus
from fluksio.store import family as store_family
from fluksio.store import run_rows
from fluksio.store.models import Run

log = logging.getLogger(__name__)


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
    if run.status == RunStatus.RUNNING.value and run.park_state == store_family.WOKEN:
        _drive_woken(runtime, run, dispatch, revoke)
        return
    if run.status != RunStatus.QUEUED.value:
        return
    try:
        flow = flow_to_drive(runtime, run)
    except FluksioError as exc:
        if run_rows.transition(db, run_id, RunStatus.ERROR, status_reason=str(exc), finished_at=utcnow()):
            runtime.run_ended(run_id, RunStatus.ERROR, orphan=run.parent_id is None)  # alerts, a waiting parent
        return
    missing = missing_labels(runtime, flow)
    if missing and not wait_for_labels(runtime, run_id, flow, missing):
        if runtime.stopping.is_set() and requeue is not None:
            requeue(run_id)  # still queued: another driver takes over the wait
        return  # cancelled, claimed elsewhere, or handed over while it waited
    # The code is the one the run was submitted with (driver/code.py: this process walks that very code, or
    # its graph); a run that recorded none runs the code this process loaded. Every call carries the digest,
    # and a worker that holds other code runs the call from the run's package, or refuses it.
    code_digest = run.code_digest or runtime.registry.digest(flow)
    epoch = run_rows.claim(db, run_id, code_digest, runtime.machine)
    if epoch is None:
        return  # another driver won the claim, or the run was cancelled while queued
    runtime.events.publish("run_started", run_id=run_id, flow=flow.name)
    # The row read above differs from the claimed one only in what the claim wrote (status, start, lease,
    # code), unless the run waited for labels meanwhile or was resumed in between (its epoch moved).
    claimed = run if not missing and epoch == run.resume_count else run_rows.get_run(db, run_id)
    driver = Driver(runtime, run_id, run.params or {}, flow, dispatch, revoke, code_digest=code_digest,
                    use_cache=not run.no_cache, epoch=epoch,
                    requeue_on_shutdown=runtime.settings.auto_resume and requeue is not None, run=claimed)
    driver.run()
    if driver.end is End.REQUEUED and requeue is not None:
        requeue(run_id)


def _drive_woken(runtime: Runtime, run: Run, dispatch: Dispatch, revoke: Revoke) -> None:
    """Drive again a run that parked while its children ran, and that a child's end (or a cancel) woke.

    Its calls carry the code it was claimed with; its driver starts from its rows, finds the children it
    started (by their identity), and goes on.
    """
    try:
        flow = flow_to_drive(runtime, run)
    except FluksioError as exc:
        log.error("run %s was woken, but this process cannot load its flow: %s; the sweepers hand it on", run.id,
                  exc)
        return
    epoch = store_family.claim_woken(runtime.db, run.id)
    if epoch is None:
        return  # another driver took it
    claimed = run_rows.get_run(runtime.db, run.id)
    driver = Driver(runtime, run.id, run.params or {}, flow, dispatch, revoke, code_digest=run.code_digest,
                    use_cache=not run.no_cache, epoch=epoch, run=claimed)
    driver.run()
