"""The Celery app of an installation: JSON only (signed, with FLUKSIO_SIGNING_*), late acks, one message at a time."""

from __future__ import annotations

import math
from functools import partial
from typing import Any

from celery import Celery
from celery.app.amqp import AMQP
from kombu import Connection
from kombu.connection import ConnectionPool, PooledConnection

from fluksio.constants import DRIVE_TASK, DRIVERS_QUEUE
from fluksio.driver.task import CallSenders, register_drive_task
from fluksio.execution.interrupt import interrupt
from fluksio.execution.isolated import run_in_child, run_package_in_child
from fluksio.execution.task import register_call_task
from fluksio.execution.warm import StartOnGpus, StartPackaged
from fluksio.runs.lease import Sweeper
from fluksio.runtime import Runtime
from fluksio.security.celery_signing import secure, signing_config
from fluksio.settings import Settings, verified_redis_url

#: Longest pause between two tries of sending a message through a broker outage, in seconds.
PUBLISH_RETRY_MAX_S = 0.5


def publish_retry_policy(outage_s: float) -> dict[str, Any]:
    """kombu's retry policy for sending a message (Celery's ``task_publish_retry_policy``): it tries again for
    about ``outage_s`` seconds, pausing 0, 0.1 … 0.5 seconds, then :data:`PUBLISH_RETRY_MAX_S`, between tries.

    Celery's default gives up within a second: a driver sending a call while Redis restarts lost the call's
    attempt (a node without retries, its run), though every other Redis command of a connected process waits
    through ``FLUKSIO_BROKER_OUTAGE_S`` (fluksio/broker/connection.py). Found by the fault soak
    (tests/integration/test_soak.py)."""
    # The six pauses up to the longest add up to three of the longest: three tries more than the longest
    # pause goes into the outage.
    return {"max_retries": math.ceil(outage_s / PUBLISH_RETRY_MAX_S) + 3, "interval_start": 0,
            "interval_step": 0.1, "interval_max": PUBLISH_RETRY_MAX_S}


def celery_config(settings: Settings) -> dict[str, Any]:
    config: dict[str, Any] = {
        # A rediss:// URL verifies the server's certificate unless it says otherwise (kombu would not).
        "broker_url": verified_redis_url(settings.broker_url),
        # JSON only: a pickled message is refused before it is decoded, let alone executed.
        "task_serializer": "json",
        "result_serializer": "json",
        "event_serializer": "json",
        "accept_content": ["json"],
        "result_accept_content": ["json"],
        # A call is acknowledged when it ends, so a worker that dies mid-call leaves it on the broker.
        "task_acks_late": True,
        "task_reject_on_worker_lost": False,
        # After a broker reconnect, keep calls running: a redelivered copy is dropped (its grant says it started).
        "worker_cancel_long_running_tasks_on_connection_loss": False,
        "worker_prefetch_multiplier": 1,
        # Drivers learn of completions through their inbox; nothing reads Celery results.
        "task_ignore_result": True,
        "task_routes": {DRIVE_TASK: {"queue": DRIVERS_QUEUE}},
        "broker_connection_retry_on_startup": True,
        # A message sent while the broker restarts waits for it, as other Redis commands do.
        "task_publish_retry_policy": publish_retry_policy(settings.broker_outage_s),
        "worker_hijack_root_logger": False,
        # Events are for Flower; it switches them on in the workers it watches (`fluksio flower`).
        "task_send_sent_event": settings.task_events,
        "worker_send_task_events": settings.task_events,
        "fluksio_embedded": settings.embedded,
        # With FLUKSIO_SIGNING_*: tasks (and control commands) signed, and only signed ones accepted.
        **signing_config(settings),
    }
    if settings.result_backend:
        config["result_backend"] = verified_redis_url(settings.result_backend)
    return config


class _OnFluksioTransport(Connection):
    def get_transport_cls(self) -> Any:
        if self.transport_cls in ("redis", "rediss"):
            from fluksio.broker.transport import Transport  # here: the embedded default never imports redis-py

            return Transport
        return super().get_transport_cls()


class BrokerConnection(_OnFluksioTransport):
    """kombu's connection, on fluksio's Redis transport for ``redis://`` and ``rediss://`` brokers: one Redis
    client per channel (fluksio/broker/transport.py). Chosen here rather than by Celery's ``broker_transport``,
    so that the URL kombu shows (Celery's banner, Flower's broker page) still names its scheme.

    Its pool's connections are on that transport too: kombu's pool makes plain ``PooledConnection`` objects, and
    every message Celery sends through its producer pool (a client's submit, a beat's tick, a driver handing
    a run over) made a Redis client of its own there.
    """

    def Pool(self, limit: int | None = None, **kwargs: Any) -> ConnectionPool:  # noqa: N802 - kombu's name
        return _BrokerConnectionPool(self, limit, **kwargs)


class _PooledBrokerConnection(_OnFluksioTransport, PooledConnection):
    pass


class _BrokerConnectionPool(ConnectionPool):
    def new(self) -> _PooledBrokerConnection:
        return _PooledBrokerConnection(self, **dict(self.connection._info(resolve=False)))


class BrokerAMQP(AMQP):
    Connection = BrokerConnection


def new_app() -> Celery:
    """An empty app that talks to brokers as fluksio's processes do."""
    return Celery("fluksio", set_as_current=False, amqp=BrokerAMQP)


def create_app(settings: Settings, runtime: Runtime, *, start_on_gpus: StartOnGpus = run_in_child,
               start_packaged: StartPackaged | None = None, **overrides: Any) -> Celery:
    """An app with fluksio's two tasks registered, bound to ``runtime``; ``start_on_gpus`` starts the calls
    granted GPUs, ``start_packaged`` the calls of shipped code packages (a node worker with a fork server forks
    both warm: fluksio/execution/warm.py; by default each starts in a fresh interpreter, which is handed the
    runtime's settings: the embedded default's may have been given in code, not in the environment)."""
    if start_packaged is None:
        start_packaged = partial(run_package_in_child, settings=runtime.settings)
    app = new_app()
    app.conf.update(celery_config(settings), **overrides)
    secure(app, settings)
    app.fluksio_runtime = runtime  # type: ignore[attr-defined]
    if runtime.hand_over is None:  # every app of one runtime talks to the same broker: the first one will do
        runtime.hand_over = lambda run_id, flow: send_drive(app, run_id, flow)
    # Kept for the app's lifetime: close_app closes them.
    app.fluksio_senders = CallSenders(app, keep=settings.driver_concurrency)  # type: ignore[attr-defined]
    register_drive_task(app, app.fluksio_senders, interrupt_local=interrupt if settings.embedded else None)
    register_call_task(app, start_on_gpus, start_packaged)
    return app


def close_app(app: Celery) -> None:
    """Release what an app of :func:`create_app` keeps open between tasks once its worker stopped."""
    app.fluksio_senders.close()  # type: ignore[attr-defined]


def send_drive(app: Celery, run_id: str, flow: str) -> None:
    """Hand a queued run to a driver (Flower shows the task as ``drive <flow>``)."""
    app.send_task(DRIVE_TASK, args=[run_id], shadow=f"drive {flow}")


def start_sweeper(app: Celery, runtime: Runtime) -> Sweeper:
    """The lease sweeper of a driver process; with ``auto_resume``, it re-drives what it finds stale."""
    settings = runtime.settings

    def hand_over(run_id: str, flow: str, resumed: bool) -> None:
        # A resumed run's inbox stays: the completions its dead driver left are its driver's to keep.
        send_drive(app, run_id, flow)

    interval = max(0.2, min(settings.stale_after_s / 3, settings.lease_interval_s))
    return Sweeper(runtime.db, settings.stale_after_s, interval, spare=lambda: set(runtime.driving),
                   drivable=runtime.registry.names, hand_over=hand_over, auto_resume=settings.auto_resume,
                   ended=runtime.run_ended, shipped=settings.accept_code != "registered").start()
