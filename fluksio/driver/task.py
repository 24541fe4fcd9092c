"""The drive Celery task, and how a driver sends and kills node calls through Celery."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.worker import state as worker_state

from fluksio.constants import CALL_TASK, DRIVE_TASK
from fluksio.driver.drive import drive


def register_drive_task(app: Celery, interrupt_local: Callable[[str], object] | None = None) -> None:
    """Register the drive task. ``interrupt_local`` stops a call running on a thread of this process
    (the embedded default); without it, calls are revoked through Celery and their processes killed."""
    @app.task(name=DRIVE_TASK, bind=True, shared=False, ignore_result=True, acks_late=True)
    def drive_task(self: Any, run_id: str) -> None:
        runtime = self.app.fluksio_runtime

        def dispatch(call: dict[str, Any], queue: str, display: str) -> None:
            # What logs, events and Flower show of the call: who it is, not its inputs (Celery would
            # otherwise repr the whole call, inputs and all, for every message it sends).
            shown = {key: call[key] for key in ("call_id", "run_id", "node", "attempt")}
            self.app.send_task(CALL_TASK, kwargs={"call": call}, queue=queue, task_id=call["call_id"],
                               shadow=display, argsrepr="()", kwargsrepr=repr({"call": shown}))

        def revoke(call_id: str) -> None:
            if interrupt_local is not None:
                # One process: a call not yet started never starts; one running is interrupted.
                worker_state.revoked.add(call_id)
                interrupt_local(call_id)
            else:
                self.app.control.revoke(call_id, terminate=True, signal="SIGKILL")

        def requeue(queued_run_id: str) -> None:
            self.app.send_task(DRIVE_TASK, args=[queued_run_id], shadow="drive (handed over)")

        drive(runtime, run_id, dispatch, revoke, requeue)
