"""How a command at the terminal reaches its installation, and says so when it cannot.

A command's client fails within seconds, in one line, when the broker or the
run store cannot be reached at start (:func:`fluksio.connect` checks both).
Once connected, a command waits through an outage as every fluksio process
does, and prints on stderr why nothing moves (``broker … unreachable
(refused), retrying for 47 s more``). A connection lost for longer than that
ends the command with one line too (:func:`lost_connection`), never a traceback.
"""

from __future__ import annotations

import logging
import sys

from rich.text import Text

from fluksio.cli import render
from fluksio.client import Client, connect
from fluksio.errors import FluksioError
from fluksio.failures import lost_message, reason
from fluksio.outage import LOGGER
from fluksio.settings import Settings, load_settings

#: The errors that mean "a connection was lost and did not come back", by the module that defines them.
#: (Looked up by name: the embedded default never loads redis-py or kombu's transports.)
LOST = {"redis.exceptions": ("ConnectionError", "TimeoutError"), "kombu.exceptions": ("OperationalError",),
        "sqlalchemy.exc": ("OperationalError", "InterfaceError")}


class TerminalNotices(logging.Handler):
    """Prints the ``fluksio.outage`` notices on stderr, one line each (above a live display, if one runs)."""

    def emit(self, record: logging.LogRecord) -> None:
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
    show_outage_notices()
    return connect(settings or load_settings())


def lost_connection(exc: BaseException) -> str | None:
    """One line for a broker or store connection ``exc`` says was lost for good; ``None`` for other errors."""
    part = None
    for module, names in LOST.items():
        classes = [getattr(sys.modules.get(module), name, None) for name in names]
        if any(isinstance(cls, type) and isinstance(exc, cls) for cls in classes):
            part = "run store" if module == "sqlalchemy.exc" else "broker"
    if part is None:
        return None
    try:
        settings = load_settings()
    except FluksioError:  # it loaded when the command began; if it no longer does, say what is known
        return f"lost the {part} and it did not answer again ({reason(exc)})"
    if part == "broker":
        return lost_message(exc, settings.broker_url, part, settings.broker_outage_s)
    return lost_message(exc, settings.database_url, part, settings.db_outage_s)
