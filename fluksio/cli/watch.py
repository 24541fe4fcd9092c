"""``fluksio watch``: run and node events, as they happen, one readable line each."""

from __future__ import annotations

import json
import sys
import time
from typing import TYPE_CHECKING, Any

import click

from fluksio.cli import live, render
from fluksio.cli.connection import open_client
from fluksio.errors import ConfigError
from fluksio.schemas import RunRecord, RunStatus
from fluksio.settings import load_settings

if TYPE_CHECKING:
    from fluksio.broker.events.redis import EventStream
    from fluksio.client import Client

#: Silence after which a watched run's row is read again, in seconds: a lost event must not
#: leave ``watch --run`` waiting for a run that has already ended.
RECHECK_S = 2.0
#: How long ``watch --run`` of a run that ended as it subscribed waits for that run's ``run_finished``, in
#: seconds (its other events came already; the end event follows the row within milliseconds).
END_GRACE_S = 0.5
#: Exit codes: the watched run ended other than ``ok`` (or was still going at ``--timeout``); Ctrl-C.
EXIT_RUN_FAILED, EXIT_INTERRUPTED = 1, 130


@click.command()
@click.option("--run", "run_id", metavar="RUN", help="Only this run's events (an id or a unique prefix); "
              "stop when it ends, exiting 0 only if it ended ok.")
@click.option("--timeout", type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Stop watching after this many seconds.")
@click.option("--json", "as_json", is_flag=True, help="Print each event as one JSON object per line.")
def watch(run_id: str | None, timeout: float | None, as_json: bool) -> None:
    """Stream run and node events (run_started, node_queued, node_started, node_finished, run_finished)."""
    settings = load_settings()
    if settings.embedded:
        raise ConfigError(
            "fluksio watch follows the events of a shared broker, and none is configured: in the embedded "
            "default a run's events are only visible inside the process running it (`fluksio run` shows them "
            "live). Set FLUKSIO_BROKER_URL to the installation's Redis to watch runs from another terminal")
    with open_client(settings) as client:
        with client.event_stream() as stream:  # subscribed before the run's row is read: nothing falls between
            record = client.get(run_id) if run_id else None
            if record is not None and record.status.is_terminal():
                if not _print_its_end(stream, record, as_json):
                    _say_already_over(record)
                sys.exit(0 if record.status is RunStatus.OK else EXIT_RUN_FAILED)
            try:
                status = _follow(client, stream, record, timeout, as_json)
            except KeyboardInterrupt:
                sys.exit(EXIT_INTERRUPTED)
    if record is not None:
        if status is None:
            click.echo(f"run {record.id} still going after {timeout:g} s; stopped watching", err=True)
        sys.exit(0 if status is RunStatus.OK else EXIT_RUN_FAILED)


def _follow(client: Client, stream: EventStream, record: RunRecord | None, timeout: float | None,
            as_json: bool) -> RunStatus | None:
    """Print events until the watched run ends (its status) or ``timeout`` passes (``None``)."""
    out = render.console()
    deadline = None if timeout is None else time.monotonic() + timeout
    quiet_since = time.monotonic()
    while deadline is None or time.monotonic() < deadline:
        wait = RECHECK_S if deadline is None else max(0.0, min(RECHECK_S, deadline - time.monotonic()))
        event = stream.next(wait)
        if event is not None and (record is None or event.get("run_id") == record.id):
            _print(out, event, as_json)
            quiet_since = time.monotonic()
            if record is not None and event.get("event") == "run_finished":
                return client.get(record.id).status
        elif record is not None and time.monotonic() - quiet_since >= RECHECK_S:
            quiet_since = time.monotonic()
            now = client.get(record.id)
            if now.status.is_terminal():
                _say_already_over(now)
                return now.status
    return None


def _print_its_end(stream: EventStream, record: RunRecord, as_json: bool) -> bool:
    """Print the events of ``record``'s run that came since subscribing, and whether its end was among them.

    A run that ended while the watch subscribed left its last events on the subscription, and they are
    shown rather than dropped. A driver writes a run's end before it publishes ``run_finished``: once one
    of the run's events came, its ``run_finished`` is awaited for up to :data:`END_GRACE_S`.
    """
    out = render.console()
    seen = False
    deadline = time.monotonic()
    while True:
        event = stream.next(max(0.0, deadline - time.monotonic()))
        if event is None:
            return False
        if event.get("run_id") != record.id:
            continue
        if not seen:
            seen, deadline = True, time.monotonic() + END_GRACE_S
        _print(out, event, as_json)
        if event.get("event") == "run_finished":
            return True


def _print(out: Any, event: dict[str, Any], as_json: bool) -> None:
    if as_json:
        out.file.write(json.dumps(event, default=str) + "\n")
    else:
        out.print(live.event_line(event), soft_wrap=True)
    out.file.flush()  # a pipe (`| grep`, a test) must see each line as it happens


def _say_already_over(record: RunRecord) -> None:
    reason = f": {record.status_reason}" if record.status_reason else ""
    click.echo(f"run {record.id} ({record.flow}) has ended: {record.status.value}{reason}", err=True)
