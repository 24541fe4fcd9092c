"""The drive Celery task, and how a driver sends and kills node calls through Celery."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from celery import Celery
from celery.utils.nodenames import anon_nodename
from celery.worker import state as worker_state

from fluksio.constants import CALL_TASK, DRIVE_TASK
from fluksio.driver.drive import drive
from fluksio.messages import NodeCall


class CallSender:
    """Sends one driver's node calls: one producer on a connection of its own, for the whole run.

    ``app.send_task`` takes a producer from Celery's pool, routes the call, declares the target queue
    (through kombu's cache) and looks up the calling task for every message. A driver sends to few
    queues from one task, so here each queue is declared once per channel, and each call goes out
    through Celery's own message API (``amqp.create_task_message`` and ``send_task_message``: the same
    message, the same publish signals and retries). Measured on the memory transport: 103 µs a send
    through ``send_task``, 31 µs here (before the declaration was made once). (A driver cannot keep a
    producer of Celery's pool instead: a run may last hours, and that pool is shared with every other
    sender of the process; :class:`CallSenders` keeps these between drives.)
    """

    def __init__(self, app: Celery, drive_id: str | None = None) -> None:
        self.app = app
        #: The drive task's id: Flower shows the calls as its children.
        self.drive_id = drive_id
        self._connection = app.connection_for_write()
        self._producer = app.amqp.Producer(self._connection, auto_declare=False)
        #: Queue name → the channel it was last declared on.
        self._declared_on: dict[str, Any] = {}
        #: The message's ``origin`` header: Celery works it out again (host name and pid) for every message.
        self._origin = anon_nodename()

    def send(self, call: NodeCall, queue: str, display: str) -> None:
        # What logs, events and Flower show of the call: who it is, not its inputs (Celery would
        # otherwise repr the whole call, inputs and all, for every message it sends).
        amqp = self.app.amqp
        message = amqp.create_task_message(
            call.call_id, CALL_TASK, (), {"call": call.to_wire()},
            create_sent_event=self.app.conf.task_send_sent_event,
            root_id=self.drive_id, parent_id=self.drive_id, shadow=display, ignore_result=True,
            argsrepr="()", kwargsrepr=repr({"call": call.shown()}), origin=self._origin,
        )
        # A broker error surfaces as the transport's own (redis-py's, say): the driver ends the call as
        # one that could not be sent, whichever library raised it.
        # A queue is declared with the first message sent to it on this channel, inside Celery's retried
        # publish (kombu binds it to the producer's channel); after that, declare=[] (Celery would ask
        # kombu's declaration cache again for every message).
        target = amqp.queues[queue]
        try:
            self._publish(message, queue, target)
        except Exception:
            # kombu's Redis transport, caught halfway through a reconnection while Redis restarts, can fail
            # with an error of its own (AttributeError: its channel's client is gone) that its retry policy
            # does not take for a connection error. Once more, on a connection of its own (found by the fault
            # soak); a second failure is the call's.
            self._reconnect()
            self._publish(message, queue, target)

    def _publish(self, message: Any, queue: str, target: Any) -> None:
        fresh = self._declared_on.get(queue) is not self._producer.channel
        self.app.amqp.send_task_message(self._producer, CALL_TASK, message, queue=target,
                                        declare=[target] if fresh else [])
        if fresh:  # only once a message went out with its declaration (a reconnection brings a new channel)
            self._declared_on[queue] = self._producer.channel

    def _reconnect(self) -> None:
        try:
            self.close()
        except Exception:  # noqa: BLE001 - what is let go may be broken already: a new one is made below
            pass
        self._connection = self.app.connection_for_write()
        self._producer = self.app.amqp.Producer(self._connection, auto_declare=False)
        self._declared_on.clear()

    def close(self) -> None:
        self._producer.release()
        self._connection.release()


class CallSenders:
    """A driver process's call senders, each lent to one drive at a time and kept for the next.

    Setting a sender up costs more than sending a short run's calls: a kombu connection, its channel
    with a Redis connection pool of its own, that connection's handshake, and each target queue's
    declaration. Measured in a sweep of 300 five-node runs on Redis, building one per drive took 12–20 %
    of the driver processes' CPU. Kept here, a process builds one per drive running at once, not one
    per run. A channel is not shared between threads, so a sender serves one drive until it is given
    back; one whose drive raised is closed instead (its connection may be what failed). At most
    ``keep`` idle senders stay open: drives beyond the worker's concurrency (a subflow's children) close
    theirs when they end.
    """

    def __init__(self, app: Celery, keep: int) -> None:
        self.app = app
        self.keep = keep
        self._idle: list[CallSender] = []
        self._lock = threading.Lock()
        self._closed = False

    @contextmanager
    def lend(self, drive_id: str | None) -> Iterator[CallSender]:
        with self._lock:
            sender = self._idle.pop() if self._idle else None
        if sender is None:
            sender = CallSender(self.app)
        sender.drive_id = drive_id
        try:
            yield sender
        except BaseException:
            sender.close()
            raise
        sender.drive_id = None
        with self._lock:
            if not self._closed and len(self._idle) < self.keep:
                self._idle.append(sender)
                return
        sender.close()

    def close(self) -> None:
        """Close the idle senders; those lent out now are closed when given back."""
        with self._lock:
            self._closed = True
            idle, self._idle = self._idle, []
        for sender in idle:
            sender.close()


def register_drive_task(app: Celery, senders: CallSenders,
                        interrupt_local: Callable[[str], object] | None = None) -> None:
    """Register the drive task, sending calls through ``senders``. ``interrupt_local`` stops a call
    running on a thread of this process (the embedded default); without it, calls are revoked through
    Celery and their processes killed."""
    # Acknowledged as a driver takes it (docs/architecture.md: "a run is acknowledged when claimed"; its row
    # is the truth from then on). Held unacknowledged for a whole run instead, the message would come back
    # after the broker's visibility timeout (1 h on Redis) to a second driver while the first still
    # drives. A drive lost between this acknowledgement and the claim leaves the run queued with no
    # driver: the lease sweeper hands it over again (see runs/lease.py).
    @app.task(name=DRIVE_TASK, bind=True, shared=False, ignore_result=True, acks_late=False)
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

        with senders.lend(self.request.id) as sender:
            drive(runtime, run_id, sender.send, revoke, requeue)
