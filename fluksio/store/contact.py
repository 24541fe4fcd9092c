"""First contact with the run store: open it, or say in one line why not.

What a front door (``connect()``, a CLI command, a dashboard) calls before it
serves anyone, so that a misconfigured installation says so at once: a store
whose driver is missing names the package to install, an unknown scheme the
ones that work, an unreachable server what failed and what to check. The
broker's side is :mod:`fluksio.broker.connection`; both at once,
:func:`fluksio.runtime.check_installation`.
"""

from __future__ import annotations

from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from fluksio.errors import ConfigError, StoreUnavailable
from fluksio.failures import store_message
from fluksio.settings import Settings
from fluksio.store.db import Database


def open_run_store(settings: Settings, upgrade: bool = True) -> Database:
    """The run store of ``settings``, reached once (and brought to the newest schema when ``upgrade``).

    Raises :class:`ConfigError` for a URL no driver here can open (a missing package, an unknown scheme)
    and :class:`StoreUnavailable` for a server or file that cannot be reached, each in one line.
    """
    url = settings.database_url
    try:
        db = Database(url, outage_s=settings.db_outage_s)
    except (ImportError, NoSuchModuleError, ArgumentError) as exc:  # create_engine imports the driver
        raise ConfigError(store_message(url, exc)) from None
    except OSError as exc:  # SQLite's folder could not be made
        raise StoreUnavailable(store_message(url, exc)) from None
    try:
        if upgrade:
            db.upgrade()
        else:
            db.current_revision()
    except (DBAPIError, OSError) as exc:
        db.dispose()
        raise StoreUnavailable(store_message(url, exc)) from None
    return db
