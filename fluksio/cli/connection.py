"""How a command at the terminal reaches its installation, and says so when it cannot.

A command's client fails within seconds, in one line, when the broker or the
run store cannot be reached at start (:func:`fluksio.connect` checks both; a
command that only reads the store checks the same, :func:`run_store_alone`).
Once connected, a command waits through an outage as every fluksio process
does, and prints on stderr why nothing moves (``broker … unreachable
(refused), retrying for 47 s more``). A connection lost for longer than that
ends the command with one line too (:func:`lost_connection`), never a traceback.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from fluksio.errors import FluksioError
from fluksio.outage import LOGGER

if TYPE_CHECKING:
    from fluksio.client import Client
    from fluksio.settings import Settings
    from fluksio.store.db import Database

# Each command imports what it uses when it runs (the client: Celery, kombu, SQLAlchemy; the store: SQLAlchemy),
# so that `fluksio --help`, and a command that needs less, start without them.

#: The errors that mean "a connection was lost and did not come back", by the module that defines them.
#: (Looked up by name: the embedded default never loads redis-py or kombu's transports.)
LOST = {"redis.exceptions": ("ConnectionError", "TimeoutError"), "kombu.exceptions": ("OperationalError",),
        "sqlalchemy.exc": ("OperationalError", "InterfaceError")}


class TerminalNotices(logging.Handler):
    """Prints the ``fluksio.outage`` notices on stderr, one line each (above a live display, if one runs)."""

    def emit(self, record: logging.LogRecord) -> None:
        from rich.text import Text

        from fluksio.cli import render

        label = ("waiting:", "yellow") if record.levelno >= logging.WARNING else ("back:", "green")
        try:
            render.console(stderr=True).print(Text.assemble(label, " ", record.getMessage()), soft_wrap=True)
        except Exception:
            self.handleError(record)


def show_outage_notices() -> None:
    """From now on, say on the terminal when this process waits through an outage (once per process)."""
    logger = logging.getLogger(LOGGER)
    if not any(isinstance(handler, TerminalNotices) for handler in logger.handlers):
        logger.addHandler(TerminalNotices(logging.INFO))
        logger.setLevel(logging.INFO)  # "reachable again" is an info, and the root logger shows warnings only


def open_client(settings: Settings | None = None) -> Client:
    """``connect()`` for a command at the terminal: outage notices on stderr, one line if it cannot connect."""
    from fluksio.client import connect
    from fluksio.settings import load_settings

    show_outage_notices()
    return connect(settings or load_settings())


@contextmanager
def run_store_alone(settings: Settings) -> Iterator[Database]:
    """The installation's run store alone, for a command that only reads it (``fluksio runs``).

    Checked at start as ``connect()`` checks it, in one line if it cannot be reached: in the distributed mode
    the broker first (a command that works on one installation says when that installation is down), then the
    store (brought to the newest schema, as a client brings it). Nothing that drives runs is started: no
    Celery app, no embedded workers.
    """
    from fluksio.settings import require_redis_broker
    from fluksio.store.contact import open_run_store

    show_outage_notices()
    if not settings.embedded:
        from fluksio.broker.connection import check_broker  # redis-py only: no Celery, no kombu

        require_redis_broker(settings)
        check_broker(settings)
    db = open_run_store(settings)
    try:
        yield db
    finally:
        db.dispose()


def lost_connection(exc: BaseException) -> str | None:
    """One line for a broker or store connection ``exc`` says was lost for good; ``None`` for other errors."""
    part = None
    for module, names in LOST.items():
        classes = [getattr(sys.modules.get(module), name, None) for name in names]
        if any(isinstance(cls, type) and isinstance(exc, cls) for cls in classes):
            part = "run store" if module == "sqlalchemy.exc" else "broker"
    if part is None:  # (click's own exits pass here too, as `fluksio runs --help` ends: they must stay cheap)
        return None
    from fluksio.failures import lost_message, reason
    from fluksio.settings import load_settings

    try:
        settings = load_settings()
    except FluksioError:  # it loaded when the command began; if it no longer does, say what is known
        return f"lost the {part} and it did not answer again ({reason(exc)})"
    if part == "broker":
        return lost_message(exc, settings.broker_url, part, settings.broker_outage_s)
    return lost_message(exc, settings.database_url, part, settings.db_outage_s)
