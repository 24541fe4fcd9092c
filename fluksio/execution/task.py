"""The node-call Celery task: one task for every node, shown in Flower under ``<flow>.<node>``."""

from __future__ import annotations

from typing import Any

from celery import Celery

from fluksio.constants import CALL_TASK
from fluksio.execution.call import execute_call
from fluksio.execution.isolated import run_in_child
from fluksio.execution.warm import StartOnGpus


def register_call_task(app: Celery, start_on_gpus: StartOnGpus = run_in_child) -> None:
    """Register the call task; ``start_on_gpus`` starts the calls granted GPUs (fluksio/execution/warm.py)."""
    @app.task(name=CALL_TASK, bind=True, shared=False, ignore_result=True, acks_late=True)
    def call(self: Any, call: dict[str, Any]) -> None:
        execute_call(self.app.fluksio_runtime, call, start_on_gpus)
