"""``fluksio flower``: Flower, the Celery dashboard, on the installation's broker.

Node calls show in Flower under ``<flow>.<node>`` and drivers under
``drive <flow>`` (the names fluksio sends them with); the tasks page shows a
call's run id, node and attempt in its kwargs column. Flower is an optional
extra (``pip install 'fluksio[flower]'``).
"""

from __future__ import annotations

import ipaddress
import re
import sys
from typing import Any

import click
from rich.text import Text

from fluksio.cli import render
from fluksio.errors import ConfigError
from fluksio.settings import Settings, load_settings, redact_url

#: Exit code when Flower cannot be started as asked.
EXIT_BAD_INPUT = 2
#: Columns of Flower's tasks page: a driver's args are its run id, a node call's kwargs its node and run id.
TASKS_COLUMNS = "name,state,args,kwargs,worker,received,started,runtime,uuid"

MISSING_FLOWER = ("fluksio flower runs Flower, which is not installed here; install it with "
                  "pip install 'fluksio[flower]' (or pip install flower)")

#: The run id, node and attempt in the kwargs repr of a node call (``{'call': {'call_id': …, 'run_id': …}}``).
_CALL_FIELD = re.compile(r"'(run_id|node|attempt)': '?([^',}]+)'?")


@click.command()
@click.option("--port", type=click.IntRange(1, 65535), default=5555, show_default=True)
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Address to listen on; 0.0.0.0 lets other hosts in (give them --basic-auth).")
@click.option("--basic-auth", "basic_auth", multiple=True, metavar="USER:PASSWORD",
              help="Ask for this user and password. Repeatable.")
@click.option("--url-prefix", help="Serve under this path (behind a reverse proxy), e.g. flower.")
def flower(port: int, address: str, basic_auth: tuple[str, ...], url_prefix: str | None) -> None:
    """Start Flower, the Celery dashboard, against this installation's broker."""
    argv = flower_argv(port, address, basic_auth, url_prefix)
    settings = load_settings()
    app = flower_app(settings)
    if not basic_auth and not _is_loopback(address):
        render.console(stderr=True).print(Text.assemble(
            ("warning:", "yellow"), f" Flower on {address} without --basic-auth lets anyone who reaches port "
            f"{port} see every run's arguments and revoke tasks"))
    _use_compact_kwargs()
    _keep_shadow_names()
    render.console(stderr=True).print(
        f"Flower on http://{address}:{port}/{(url_prefix or '').strip('/')} for broker "
        f"{redact_url(settings.broker_url)}", highlight=False)
    sys.exit(app.start(argv) or 0)


def flower_app(settings: Settings) -> Any:
    """A Celery app with the installation's broker and serializers; it only listens, it runs no tasks."""
    if settings.embedded:
        raise ConfigError(
            "fluksio flower watches a shared broker, and none is configured: the embedded default's tasks live "
            "inside the process that runs them. Set FLUKSIO_BROKER_URL (e.g. redis://127.0.0.1:6379/0) to the "
            "broker your `fluksio worker`s use")
    try:
        import flower as _flower  # noqa: F401 - only to say clearly that it is missing
    except ImportError:
        render.console(stderr=True).print(Text.assemble(("error:", "red"), " ", MISSING_FLOWER))
        sys.exit(EXIT_BAD_INPUT)
    from celery import Celery

    from fluksio.worker.app import celery_config

    app = Celery("fluksio", set_as_current=False)
    app.conf.update(celery_config(settings))
    return app


def flower_argv(port: int, address: str, basic_auth: tuple[str, ...], url_prefix: str | None) -> list[str]:
    """``celery flower`` arguments; a malformed --basic-auth is refused here, not by a Flower traceback."""
    for entry in basic_auth:
        user, sep, password = entry.partition(":")
        if not sep or not user or not password:
            raise click.BadParameter(f"expected USER:PASSWORD, got {entry.split(':')[0]!r}…",
                                     param_hint="--basic-auth")
        if "," in entry:  # Flower splits its list of users on commas
            raise click.BadParameter(f"the entry for user {user!r} contains a ',', which Flower cannot take; "
                                     "choose a password without one", param_hint="--basic-auth")
    argv = ["--quiet", "flower", f"--port={port}", f"--address={address}", f"--tasks_columns={TASKS_COLUMNS}"]
    if basic_auth:
        argv.append(f"--basic_auth={','.join(basic_auth)}")
    if url_prefix:
        argv.append(f"--url_prefix={url_prefix.strip('/')}")
    return argv


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


def _is_loopback(address: str) -> bool:
    """Whether only this host can reach ``address`` (Flower's ``''`` means every interface)."""
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
