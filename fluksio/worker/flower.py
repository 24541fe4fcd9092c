"""Flower's side of an installation: a listening Celery app, task events, and how calls are shown.

Node calls show in Flower under ``<flow>.<node>`` and drivers under
``drive <flow>`` (the names fluksio sends them with); the tasks page shows a
call's run id, node and attempt in its kwargs column.
"""

from __future__ import annotations

import re
from typing import Any

from celery import Celery

from fluksio.errors import ConfigError
from fluksio.security.celery_signing import secure
from fluksio.settings import Settings
from fluksio.worker.app import celery_config, new_app

#: The run id, node and attempt in the kwargs repr of a node call (``{'call': {'call_id': …, 'run_id': …}}``).
_CALL_FIELD = re.compile(r"'(run_id|node|attempt)': '?([^',}]+)'?")


def flower_app(settings: Settings) -> Celery:
    """A Celery app with the installation's broker and serializers; it only listens, it runs no tasks."""
    if settings.embedded:
        raise ConfigError(
            "fluksio flower watches a shared broker, and none is configured: the embedded default's tasks live "
            "inside the process that runs them. Set FLUKSIO_BROKER_URL (e.g. redis://127.0.0.1:6379/0) to the "
            "broker your `fluksio worker`s use")
    app = new_app()
    app.conf.update(celery_config(settings))
    secure(app, settings)  # Flower's control commands (enable_events, revoke …) are signed like any task
    return app


def prepare_flower(app: Celery) -> None:
    """Before Flower starts: teach it our names, and switch task events on in the running workers.

    Workers send no task events unless asked (``task_events``), to save the broker four messages per
    call. Flower asks them itself, but only after its first interval (5 s): asking now means the
    calls of a run submitted as soon as Flower answers are seen too. The names come first: a broker
    that cannot be reached yet fails the asking, and Flower must still show calls as fluksio names them.
    """
    _use_compact_kwargs()
    _keep_shadow_names()
    app.control.enable_events()


def compact_kwargs(task: Any) -> Any:
    """Flower's ``format_task`` hook: a node call's kwargs shown as ``node=… attempt=… run_id=…``.

    A call's full kwargs carry its input values, which fill the tasks page
    with noise; the run id and node are what tell one call from another.
    """
    kwargs = getattr(task, "kwargs", None)
    if isinstance(kwargs, str) and kwargs.startswith("{'call': "):
        fields: dict[str, str] = {}
        for key, value in _CALL_FIELD.findall(kwargs):
            fields.setdefault(key, value)  # the call's own fields come first; an input may reuse the names
        if "run_id" in fields and "node" in fields:
            task.kwargs = " ".join(f"{k}={fields[k]}" for k in ("node", "attempt", "run_id") if k in fields)
    return task


def _use_compact_kwargs() -> None:
    import flower.options  # noqa: F401 - defines the options set below
    from tornado.options import options

    options.format_task = compact_kwargs


def _keep_shadow_names() -> None:
    """Keep ``<flow>.<node>`` when a call's ``task-sent`` event reaches Flower after its ``task-received``.

    The sent event names the registered task (``fluksio.call``), the received one
    the name it was sent under. They come from different processes (the driver,
    the worker), so either may arrive first, and Celery's state merges every
    field of a late, "logically earlier" event: the call would be renamed
    ``fluksio.call``. A late sent event may fill in fields, never the name.
    """
    from celery import states
    from celery.events.state import Task
    from flower.events import EventsState

    sent_fields = ("args", "kwargs", "parent_id", "root_id", "retries", "eta", "expires", "queue", "exchange",
                   "routing_key")

    class ShadowNamedTask(Task):
        merge_rules = {**Task.merge_rules, states.PENDING: sent_fields}

    EventsState.Task = ShadowNamedTask


