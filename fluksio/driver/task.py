"""The drive Celery task, and how a driver sends and kills node calls through Celery."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from celery import Celery
from celery.worker import state as worker_state
from kombu import Queue

from fluksio.constants import CALL_TASK, DRIVE_TASK
from fluksio.driver.drive import drive


class CallSender:
    """Sends one driver's node calls: one producer on a connection of its own, for the whole run.

    Celery's ``send_task`` takes a producer from its pool and binds the target queue to its channel
    for every message; here both are done once (measured on the memory transport: 103 µs a send
    through the pool, 53 µs with a held producer and bound queues). A driver cannot keep a pooled
    producer instead: a run may last hours, and the pool is shared with every other driver.
    """

    def __init__(self, app: Celery) -> None:
        self.app = app
        self._connection = app.connection_for_write()
        self._producer = app.amqp.Producer(self._connection, auto_declare=False)
        self._queues: dict[str, Queue] = {}

    def send(self, call: dict[str, Any], queue: str, display: str) -> None:
        # What logs, events and Flower show of the call: who it is, not its inputs (Celery would
        # otherwise repr the whole call, inputs and all, for every message it sends).
        shown = {key: call[key] for key in ("call_id", "run_id", "node", "attempt")}
        self.app.send_task(CALL_TASK, kwargs={"call": call}, queue=self._queue(queue), task_id=call["call_id"],
                           shadow=display, argsrepr="()", kwargsrepr=repr({"call": shown}),
                           producer=self._producer)

    def _queue(self, name: str) -> Queue:
        """Celery's queue of that name, bound to the producer's channel (again after a reconnection)."""
        bound = self._queues.get(name)
        if bound is None or bound.channel is not self._producer.channel:
            bound = self._queues[name] = self.app.amqp.queues[name].bind(self._producer.channel)
        return bound

    def close(self) -> None:
        self._producer.release()
        self._connection.release()


def register_drive_task(app: Celery, interrupt_local: Callable[[str], object] | None = None) -> None:
    """Register the drive task. ``interrupt_local`` stops a call running on a thread of this process
    (the embedded default); without it, calls are revoked through Celery and their processes killed."""
    @app.task(name=DRIVE_TASK, bind=True, shared=False, ignore_result=True, acks_late=True)
    def drive_task(self: Any, run_id: str) -> None:
        runtime = self.app.fluksio_runtime

        def revoke(call_id: str) -> None:
            if interrupt_local is not None:
                # One process: a call not yet started never starts; one running is interrupted.
                worker_state.revoked.add(call_id)
                interrupt_local(call_id)
            else:
                self.app.control.revoke(call_id, terminate=True, signal="SIGKILL")

        def requeue(queued_run_id: str) -> None:
            self.app.send_task(DRIVE_TASK, args=[queued_run_id], shadow="drive (handed over)")

        sender = CallSender(self.app)
        try:
            drive(runtime, run_id, sender.send, revoke, requeue)
        finally:
            sender.close()
