"""Calls whose pool process died under them, ended by the worker's main process.

A prefork pool process killed while it runs a call (by the kernel's OOM killer, or kill -9) ends no call:
its grant (and pool slot) would stay held and its driver would wait for it as long as the machine lives,
since the machine's heartbeat goes on. Celery's main process sees the child die and fails the task with
``WorkerLostError`` (the message is acknowledged: ``task_reject_on_worker_lost`` is off, so it is not
redelivered to run twice); here that failure becomes the call's completion, as out of memory when the
signal was SIGKILL, so that an ``escalate_ram`` node asks for more on its retry.
"""

from __future__ import annotations

import logging
from typing import Any

from billiard.exceptions import WorkerLostError
from celery.signals import task_failure

from fluksio.constants import CALL_TASK
from fluksio.errors import MessageRefused
from fluksio.execution.call import settle
from fluksio.execution.run_here import OUT_OF_MEMORY
from fluksio.flows.node import error_types
from fluksio.messages import NodeCall
from fluksio.runtime import Runtime

log = logging.getLogger(__name__)


def describe_lost(exception: BaseException) -> tuple[str, bool]:
    """The error of a call whose process died, and whether it ran out of memory (it was SIGKILLed)."""
    # billiard says how the child ended: "Worker exited prematurely: signal 9 (SIGKILL) Job: 3."
    said = str(exception)
    if "signal 9 " in said or "(SIGKILL)" in said:
        return (f"{OUT_OF_MEMORY}the pool process running the call was killed by SIGKILL (the kernel's OOM killer, "
                "or kill -9)"), True
    how = said.partition("prematurely: ")[2].partition(" Job:")[0] or said
    return f"the pool process running the call died ({how})", False


def settle_lost_calls(runtime: Runtime) -> None:
    """In a node worker's main process: end every call whose pool process dies under it."""

    @task_failure.connect(weak=False)
    def _settle_lost(sender: Any = None, exception: BaseException | None = None,
                     kwargs: dict[str, Any] | None = None, **_: Any) -> None:
        if getattr(sender, "name", None) != CALL_TASK or not isinstance(exception, WorkerLostError):
            return
        try:
            call = NodeCall.from_wire((kwargs or {}).get("call"))
        except MessageRefused:
            return
        try:
            if runtime.placer.given_back([call.grant]):
                return  # settled already: cancelled (its process killed on purpose), or it had ended
            error, oom = describe_lost(exception)
            log.warning("call %s of run %s: %s", call.call_id, call.run_id, error)
            settle(runtime, call, started=None, status="error", error=error, oom=oom,
                   error_types=error_types(MemoryError()) if oom else ())
        except Exception:  # never into Celery's own failure handling; the broker may be what is failing
            log.exception("could not settle call %s, whose pool process died", call.call_id)
