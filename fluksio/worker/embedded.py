"""The embedded default: an in-process broker and two Celery workers on threads.

Each embedded runtime gets a memory transport of its own (kombu's keeps its
queues in class attributes shared by the whole process), and each worker gets
an app of its own (a worker's queue selection is stored on its app). Drivers
and node calls run in separate pools, so a driver can never take the slot a
node call needs. A worker's consumer sleeps until a message comes or one of its
pool threads asks it for an acknowledgement; idle, it looks at its queues once a
second, so an idle client costs no CPU.
"""

from __future__ import annotations

import logging
import queue
import socket
import threading
import time
import weakref
from collections import defaultdict
from collections.abc import Callable
from concurrent.futures import Future
from queue import Empty
from typing import Any

from celery import Celery
from celery.concurrency.thread import TaskPool as ThreadTaskPool
from celery.worker import WorkController
from celery.worker.consumer import Consumer
from kombu.transport import memory, virtual

from fluksio.constants import DRIVERS_QUEUE
from fluksio.routing import node_queues
from fluksio.runtime import Runtime
from fluksio.worker.app import close_app, create_app

log = logging.getLogger(__name__)

#: How long closing waits for each worker thread, in seconds.
STOP_TIMEOUT_S = 10.0
#: A consumer that took no message for this long, in seconds, is idle: …
IDLE_AFTER_S = 2.0
#: … and waits up to this long between two looks at its queues (it is woken by what comes meanwhile).
IDLE_DRAIN_S = 1.0


class Arrivals:
    """Which queues of one in-process broker got a message: a consumer waits here instead of sleeping.

    kombu's memory transport polls: a consumer whose queues are empty sleeps ``polling_interval`` and
    looks again, so a message waits half an interval on average before a worker sees it — in a
    fan-out on 2 slots that wait, not the work, set the pace. Here every put wakes the consumers, and
    so does an operation a pool thread leaves for its consumer (:meth:`poke`).
    """

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._counts: defaultdict[str, int] = defaultdict(int)
        #: A consumer's transport (one per connection) → the operations its pool threads leave for it
        #: (Celery's own list, emptied by its loop between two drains).
        self._operations: weakref.WeakKeyDictionary[Any, list[Any]] = weakref.WeakKeyDictionary()
        #: The workers are stopping: no drain waits any more (each returns, and its loop sees the stop).
        self._closed = False

    def mark(self, queue: str) -> None:
        with self._changed:
            self._counts[queue] += 1
            self._changed.notify_all()

    def seen(self, queues: list[str]) -> tuple[int, ...]:
        with self._changed:
            return tuple(self._counts[q] for q in queues)

    def operations_for(self, transport: Any, operations: list[Any]) -> None:
        """``operations`` are what the consumer draining through ``transport`` does between two drains."""
        with self._changed:
            self._operations[transport] = operations

    def poke(self) -> None:
        """An operation was left for a consumer: its drain returns, so that its loop does it."""
        with self._changed:
            self._changed.notify_all()

    def pending(self, transport: Any) -> bool:
        """Whether the consumer draining through ``transport`` has operations left for it."""
        with self._changed:
            return bool(self._operations.get(transport))

    def close(self) -> None:
        """The workers stop: every wait ends now, and none waits again."""
        with self._changed:
            self._closed = True
            self._changed.notify_all()

    def wait(self, queues: list[str], seen: tuple[int, ...], timeout_s: float, transport: Any = None) -> None:
        """Until one of ``queues`` got a message since ``seen`` was taken, an operation was left for the
        consumer draining through ``transport``, the workers stop, or ``timeout_s`` seconds passed."""
        operations = self._operations.get(transport, ()) if transport is not None else ()
        with self._changed:
            self._changed.wait_for(lambda: self._closed or bool(operations)
                                   or tuple(self._counts[q] for q in queues) != seen, timeout_s)


def waking_consumer(arrivals: Arrivals) -> type[Consumer]:
    """Celery's consumer, whose drain is woken when a pool thread leaves it an operation.

    Celery's blocking loop (on transports without an event loop, such as memory) does what pool threads ask
    of it — above all, acknowledging a call that finished — only between two drains. With one message per
    slot in the prefetch window, the next call is taken only once the one before is acknowledged; its
    message may come before the acknowledgement is asked for, and an idle drain, asleep until the next
    message, would then hold the next call for a whole drain (a review measured 1 s per hand-off after a
    call of more than 2 s).
    """

    class WakingConsumer(Consumer):
        def connect(self) -> Any:
            connection = super().connect()
            arrivals.operations_for(connection.transport, self._pending_operations)
            return connection

        def call_soon(self, p: Any, *args: Any, **kwargs: Any) -> Any:
            operation = super().call_soon(p, *args, **kwargs)
            arrivals.poke()
            return operation

    return WakingConsumer


def drain_timeout(asked_s: float | None, busy_s: float, since_took_s: float) -> float:
    """How long one drain may wait: ``busy_s`` while its consumer took something in the last
    :data:`IDLE_AFTER_S` seconds (``since_took_s`` ago), :data:`IDLE_DRAIN_S` once it is idle, and never
    longer than Celery asked (``asked_s``)."""
    longest = IDLE_DRAIN_S if since_took_s >= IDLE_AFTER_S else busy_s
    return longest if asked_s is None else min(asked_s, longest)


def private_memory_transport(drain_timeout_s: float, arrivals: Arrivals) -> type[memory.Transport]:
    """A memory transport of its own, whose consumers wake when a message comes, not on a poll.

    A blocking drain returns as soon as a message comes for one of its queues, consumable or not, or
    its consumer is left an operation (see :func:`waking_consumer`), so that Celery can run its pending
    acknowledgements (its blocking loop runs them only between two drains) and take the message.
    Otherwise it returns after ``drain_timeout_s`` seconds while its consumer is busy, and after
    :data:`IDLE_DRAIN_S` once it has taken nothing for :data:`IDLE_AFTER_S`.
    Looking often while busy keeps a hop from waiting for a sleeping thread to be scheduled again (a
    fan-out ran at 483–499 calls/s with 2 s drains, against about 700 with 1 ms ones); sleeping long
    while idle keeps an idle client from spinning (1 ms looks throughout kept 17 % of a core busy).
    """

    class Channel(memory.Channel):
        queues: dict[str, Any] = {}
        events: defaultdict[str, set[Any]] = defaultdict(set)

        def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
            super()._put(queue, message, **kwargs)
            arrivals.mark(queue)

    def drain_events(self: Any, connection: object, timeout: float | None = None) -> None:
        now = time.monotonic()
        timeout_s = drain_timeout(timeout, drain_timeout_s, now - getattr(self, "fluksio_took_at", -IDLE_AFTER_S))
        queues = [q for channel in self.channels for q in channel._active_queues]
        seen = arrivals.seen(queues)
        try:
            self.cycle.get(self._deliver, timeout=timeout_s)
            self.fluksio_took_at = now
            return
        except Empty:
            pass
        if arrivals.pending(self):  # left meanwhile: done (by Celery's loop) before waiting for anything else
            raise socket.timeout()
        arrivals.wait(queues, seen, timeout_s, self)
        try:
            self.cycle.get(self._deliver, timeout=timeout_s)
            self.fluksio_took_at = time.monotonic()
        except Empty:
            raise socket.timeout() from None

    return type("Transport", (memory.Transport,), {
        "Channel": Channel, "global_state": virtual.BrokerState(), "drain_events": drain_events,
    })


class DaemonThreadExecutor:
    """A fixed set of daemon threads taking work from a queue.

    Unlike :class:`concurrent.futures.ThreadPoolExecutor`, neither closing it nor
    the interpreter's exit waits for a call that never returns (a cancelled node
    blocked in ``time.sleep(3600)``): such a thread is abandoned, not joined.
    """

    def __init__(self, max_workers: int, initializer: Callable[[], object], name: str) -> None:
        self._work: queue.SimpleQueue[tuple[Future[Any], Callable[..., Any], tuple[Any, ...]] | None] = (
            queue.SimpleQueue())
        self._initializer = initializer
        self._threads = [threading.Thread(target=self._serve, name=f"{name}-{i}", daemon=True)
                         for i in range(max_workers)]
        for thread in self._threads:
            thread.start()

    def _serve(self) -> None:
        self._initializer()
        while (item := self._work.get()) is not None:
            future, fn, args = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                future.set_result(fn(*args))
            except BaseException as exc:  # noqa: BLE001 - handed to whoever waits on the future
                future.set_exception(exc)

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        self._work.put((future, fn, args))
        return future

    def shutdown(self, wait: bool = False, cancel_futures: bool = False) -> None:
        for _ in self._threads:
            self._work.put(None)


def thread_pool_for(app: Celery, role: str) -> type[ThreadTaskPool]:
    """Celery's thread pool on daemon threads, with ``app`` as the current app in its threads.

    Celery runs a task by looking its name up in the *current* app, which is
    thread-local and, in a pool thread, the default app (which knows none of our
    tasks). Several embedded runtimes may live in one process, so each pool
    must see its own app.
    """

    class AppThreadPool(ThreadTaskPool):
        executor: Any

        def __init__(self, *args: object, **kwargs: object) -> None:
            super().__init__(*args, **kwargs)
            self.executor.shutdown(wait=False)  # the stock executor has started no thread yet
            self.executor = DaemonThreadExecutor(self.limit, app.set_current, f"fluksio-{role}")

    return AppThreadPool


class EmbeddedWorkers:
    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        settings = runtime.settings
        self.arrivals = Arrivals()
        self.transport = private_memory_transport(settings.memory_polling_interval_s, self.arrivals)
        overrides: dict[str, Any] = {
            # A host name, only so that kombu does not warn about its absence.
            "broker_url": "memory://localhost/",
            "broker_transport": self.transport,
            "broker_transport_options": {"polling_interval": settings.memory_polling_interval_s},
            "worker_enable_remote_control": False,
            "task_send_sent_event": False,
            "worker_send_task_events": False,
        }
        self.app = create_app(settings, runtime, **overrides)
        inventory = next(m for m in runtime.placer.machines() if m.name == runtime.machine)
        self._controllers: list[tuple[WorkController, threading.Thread]] = []
        self._start("drivers", [DRIVERS_QUEUE], settings.driver_concurrency, overrides)
        self._start("nodes", node_queues(inventory), inventory.cpus, overrides)

    def _start(self, role: str, queues: list[str], concurrency: int, overrides: dict) -> None:
        app: Celery = create_app(self.runtime.settings, self.runtime, **overrides)
        controller = WorkController(
            app=app, hostname=f"{role}@{self.runtime.machine}", pool_cls=thread_pool_for(app, role),
            consumer_cls=waking_consumer(self.arrivals),
            concurrency=concurrency,
            queues=queues, without_heartbeat=True, without_mingle=True, without_gossip=True,
            loglevel="WARNING",
        )
        thread = threading.Thread(target=controller.start, name=f"fluksio-{role}", daemon=True)
        thread.start()
        self._controllers.append((controller, thread))

    def stop(self) -> None:
        self.arrivals.close()  # a drain waiting now would hold its worker's stop for a whole drain timeout
        for controller, _thread in self._controllers:
            try:
                controller.stop(in_sighandler=False)
            except Exception:  # a worker that failed to start has nothing to stop
                log.debug("stopping an embedded worker failed", exc_info=True)
        for controller, thread in self._controllers:
            thread.join(STOP_TIMEOUT_S)
            close_app(controller.app)
        self._controllers.clear()
