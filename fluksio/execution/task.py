"""The node-call Celery task: one task for every node, shown in Flower under ``<flow>.<node>``."""

from __future__ import annotations

from typing import Any

from celery import Celery

from fluksio.constants import CALL_TASK
from fluksio.execution.call import execute_call


def register_call_task(app: Celery) -> None:
    @app.task(name=CALL_TASK, bind=True, shared=False, ignore_result=True, acks_late=True)
    def call(self: Any, call: dict[str, Any]) -> None:
        execute_call(self.app.fluksio_runtime, call)
