"""``fluksio beat``: Celery's beat service, with the scheduler that reads the schedules table.

Any number may run at once (on one host or several): the run store's unique index on a tick's
idempotency key lets exactly one of them start each tick's run, so a second beat is a spare, not a risk.
"""

from __future__ import annotations

import faulthandler
import signal

from celery import Celery

from fluksio.broker.connection import wait_for_broker
from fluksio.runtime import Runtime
from fluksio.settings import Settings
from fluksio.triggers.beat import TableScheduler
from fluksio.worker.app import create_app
from fluksio.worker.service import require_distributed


def start_beat(app: Celery, loglevel: str) -> None:
    """Run Celery beat on ``app`` (which carries its ``fluksio_runtime``) until SIGTERM or SIGINT.

    SIGUSR1 prints every thread's stack on stderr, as it does for a Celery worker: where a beat that does not
    stop is stuck, without stopping it.
    """
    settings = app.fluksio_runtime.settings  # type: ignore[attr-defined]
    faulthandler.register(signal.SIGUSR1, all_threads=True)
    try:
        app.Beat(scheduler=TableScheduler, loglevel=loglevel.upper(), max_interval=settings.schedule_refresh_s).run()
    finally:
        faulthandler.unregister(signal.SIGUSR1)


def run_beat(settings: Settings, loglevel: str) -> None:
    """The distributed beat: ticks are journaled in the shared run store and handed to the drivers' queue."""
    require_distributed(settings)
    runtime = Runtime.distributed(settings)  # a run store it cannot open ends it here
    wait_for_broker(settings)  # a broker not up yet is said at once, then waited for (as a worker does)
    app = create_app(settings, runtime)
    try:
        start_beat(app, loglevel)
    finally:
        runtime.close()
