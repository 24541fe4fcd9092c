"""The node-call Celery task: one task for every node, shown in Flower under ``<flow>.<node>``."""

from __future__ import annotations

import logging
from typing import Any

from celery import Celery
from celery.exceptions import Reject

from fluksio.constants import CALL_TASK
from fluksio.errors import CallNotStarted
from fluksio.execution.call import execute_call
from fluksio.execution.isolated import run_in_child, run_package_in_child
from fluksio.execution.warm import StartOnGpus, StartPackaged

log = logging.getLogger(__name__)


def register_call_task(app: Celery, start_on_gpus: StartOnGpus = run_in_child,
                       start_packaged: StartPackaged = run_package_in_child) -> None:
    """Register the call task; ``start_on_gpus`` starts the calls granted GPUs, ``start_packaged`` those of a
    shipped code package (fluksio/execution/warm.py)."""
    @app.task(name=CALL_TASK, bind=True, shared=False, ignore_result=True, acks_late=True)
    def call(self: Any, call: dict[str, Any]) -> None:
        try:
            execute_call(self.app.fluksio_runtime, call, start_on_gpus, start_packaged)
        except CallNotStarted as exc:
            # Acknowledged, the message would be gone and the call's run would wait for it forever.
            log.warning("%s; its message goes back to the queue", exc)
            raise Reject(str(exc), requeue=True) from None
