"""A node call's start and end as a worker says them: each one round trip to Redis where it can be.

Starting a call marks its grant started (``Books.start``), then says ``node_started``; ending it gives the
grant back, then pushes the completion onto its driver's inbox — in that order, so that the driver's next
claim finds the resources free. Those were four round trips per call on the critical path of a chain. The
distributed runtime keeps its books, inboxes and events on one Redis client (``Runtime.redis``), so each
pair becomes one script there: the books send the message on in their own step (``backend.Tell``). The
embedded runtime takes the steps one by one, in the same order.
"""

from __future__ import annotations

import logging
from typing import Any

from fluksio.messages import InboxMessage
from fluksio.runtime import Runtime
from fluksio.schemas import Grant

log = logging.getLogger(__name__)


def _together(runtime: Runtime) -> bool:
    """Whether the books reach the runtime's inboxes and events in their own steps: they tell, and all three
    are on the runtime's one Redis client."""
    client = runtime.redis
    books = runtime.placer.books
    return (client is not None and books.tells
            and all(getattr(part, "redis", None) is client for part in (books, runtime.inbox, runtime.events)))


def start(runtime: Runtime, grant: Grant, token: str, started_event: dict[str, Any] | None) -> bool:
    """Whether delivery ``token`` may run the grant's call (``Books.start``); when it may, the ``node_started``
    event with the fields ``started_event`` is published too (``None``: no event)."""
    tell = None
    if started_event is not None and _together(runtime):
        tell = runtime.events.tell("node_started", **started_event)
    if not runtime.placer.start(grant, token, tell):
        return False
    if started_event is not None and tell is None:
        runtime.events.publish("node_started", **started_event)
    return True


def give_back(runtime: Runtime, grant: Grant, run_id: str, message: InboxMessage) -> None:
    """Give the grant back, then put ``message`` (the call's completion) in its run's inbox — whatever
    happens to the give-back: without it, the run would wait for the call forever. (A copy the driver gets
    twice is dropped there.)"""
    if _together(runtime):
        try:
            tell = runtime.inbox.tell(run_id, message)
            if tell is not None:
                runtime.placer.release(grant, tell)
                return
        except Exception:
            log.warning("could not give back call %s's grant and tell its driver in one step; trying each alone",
                        grant.id, exc_info=True)
        except BaseException:  # shutting down under the script: whether it pushed is not known, so push
            runtime.inbox.push(run_id, message)
            raise
    try:
        runtime.placer.release(grant)
    finally:
        runtime.inbox.push(run_id, message)
