"""Engines, sessions and schema upgrades for the run store."""

from __future__ import annotations

import functools
import logging
import sqlite3
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, InterfaceError, OperationalError
from sqlalchemy.orm import Session, sessionmaker

from fluksio.errors import ConfigError, StoreUnavailable
from fluksio.failures import reason
from fluksio.outage import Notices
from fluksio.settings import redact_url

T = TypeVar("T")

#: The newest migration (a test checks it is Alembic's head), so a store already there needs no Alembic.
HEAD_REVISION = "0007"
#: Where Alembic finds our migrations (a package resource, so it works when installed).
MIGRATIONS = "fluksio.store:migrations"
#: How long SQLite waits for another writer before failing, in milliseconds.
SQLITE_BUSY_TIMEOUT_MS = 30_000
#: How long connecting to a PostgreSQL server may take, in seconds, unless the URL sets ``connect_timeout``
#: (libpq's own default waits for the operating system: two minutes and more on a host that drops packets).
CONNECT_TIMEOUT_S = 5

_upgrade_lock = threading.Lock()
log = logging.getLogger(__name__)


def _transient(exc: DBAPIError) -> bool:
    """A lost connection, a server restarting, a busy SQLite file: worth trying again."""
    return exc.connection_invalidated or isinstance(exc, (OperationalError, InterfaceError))


def retried(fn: Callable[..., T]) -> Callable[..., T]:
    """Retry a store function (its first argument a :class:`Database`) through a brief outage.

    Gives up with :class:`StoreUnavailable` after ``db.outage_s`` seconds; any
    other database error is raised at once. While it waits, ``db.notices`` says so.
    """

    @functools.wraps(fn)
    def wrapper(db: Database, *args: Any, **kwargs: Any) -> T:
        deadline = None
        pause = 0.05
        while True:
            try:
                result = fn(db, *args, **kwargs)
            except DBAPIError as exc:
                if not _transient(exc):
                    raise
                now = time.monotonic()
                deadline = deadline or now + db.outage_s
                if now >= deadline:
                    raise StoreUnavailable(
                        f"the run store at {redact_url(str(db.url))} was unreachable for {db.outage_s:g} s: "
                        f"{type(exc.orig).__name__}: {str(exc.orig).strip().splitlines()[0] if exc.orig else exc}"
                    ) from None
                log.debug("run store unreachable; retrying %s", fn.__name__, exc_info=True)
                db.notices.waiting(reason(exc), deadline - now)
                time.sleep(pause)
                pause = min(pause * 2, 1.0)
                continue
            if deadline is not None:
                db.notices.over()
            return result

    return wrapper


def _begin_immediate(connection: Connection) -> None:
    """``BEGIN IMMEDIATE``, waiting for another writer in short steps of our own.

    SQLite's busy handler sleeps 1, 2, 5 … 25, 50, 100 ms between tries, so a writer that finds the file
    locked often waits longer than the other writer needed. Here a write connection has no busy timeout
    (see ``Database._sqlite_engine``) and a try is made every 0.5–4 ms, up to the same limit; once it
    holds the write lock, nothing in the transaction waits on another writer (WAL). Measured with
    ``benchmarks/submit.py --no-redis`` against SQLite's handler, alternating: submit p99 25.8–31.3 ms
    against 34.5–35.4 ms. (Turning the timeout off and on again around each BEGIN cost two more calls
    into SQLite per transaction, each letting go of the GIL and waiting to take it back.)
    """
    sqlite = connection.connection.driver_connection
    if sqlite is None:  # a connection already closed: SQLAlchemy reconnects (and its errors are retried)
        connection.exec_driver_sql("BEGIN IMMEDIATE")
        return
    deadline = time.monotonic() + SQLITE_BUSY_TIMEOUT_MS / 1000
    pause = 0.0005
    try:
        while time.monotonic() + pause < deadline:
            try:
                sqlite.execute("BEGIN IMMEDIATE")
                return
            except sqlite3.OperationalError as exc:
                if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                    break
            time.sleep(pause)
            pause = min(pause * 2, 0.004)
    except sqlite3.Error:
        pass  # a closed or broken connection: retried below, through SQLAlchemy (which invalidates it)
    # The last try (the time is up, or another error came) through SQLAlchemy: its error is raised as the
    # store's retries know it.
    connection.exec_driver_sql("BEGIN IMMEDIATE")


class Database:
    """The run store: a read engine and a write engine (the same one except on SQLite).

    On SQLite, writes begin with ``BEGIN IMMEDIATE`` so that two writers queue on
    the busy timeout instead of one failing when its read lock cannot be upgraded.
    """

    def __init__(self, url: str, outage_s: float = 30.0) -> None:
        #: How long :func:`retried` store functions keep trying through a lost connection, in seconds.
        self.outage_s = outage_s
        try:
            self.url = make_url(url)
        except ArgumentError:
            raise ConfigError(f"database URL {redact_url(url)!r} is not a SQLAlchemy URL; fluksio supports "
                              "sqlite:///PATH and postgresql+psycopg://USER@HOST/DB") from None
        #: Says on the ``fluksio.outage`` logger while a store function waits through an outage.
        self.notices = Notices(f"run store {redact_url(str(self.url))}")
        self.is_sqlite = self.url.get_backend_name() == "sqlite"
        if self.is_sqlite:
            self._prepare_sqlite_file()
            self.engine = self._sqlite_engine(immediate=False)
            self.write_engine = self._sqlite_engine(immediate=True)
        else:
            # No pre-ping: it cost a round trip before every transaction (14 of a five-node run's 58
            # statements). A connection the server dropped fails its first statement instead, before
            # anything was written; SQLAlchemy then invalidates the pool's connections made before it,
            # and retried() tries the store function again on a new one.
            self.engine = create_engine(self.url, future=True, connect_args=self._connect_args())
            self.write_engine = self.engine
        # A read on PostgreSQL in autocommit: no BEGIN and ROLLBACK around it (two more round trips). At
        # READ COMMITTED, PostgreSQL's default, each statement takes its own snapshot within a transaction
        # too, so a read session sees what it saw before.
        self._reads = self.engine if self.is_sqlite else self.engine.execution_options(isolation_level="AUTOCOMMIT")
        self._read = sessionmaker(self._reads, expire_on_commit=False)
        self._write = sessionmaker(self.write_engine, expire_on_commit=False)

    def _connect_args(self) -> dict[str, Any]:
        if (self.url.get_backend_name() == "postgresql" and self.url.get_driver_name() in ("psycopg", "psycopg2")
                and "connect_timeout" not in self.url.query):
            return {"connect_timeout": CONNECT_TIMEOUT_S}
        return {}

    def _prepare_sqlite_file(self) -> None:
        database = self.url.database
        if database and database != ":memory:" and not database.startswith("file:"):
            Path(database).parent.mkdir(parents=True, exist_ok=True)

    def _sqlite_engine(self, immediate: bool) -> Engine:
        engine = create_engine(
            self.url,
            connect_args={"check_same_thread": False, "timeout": SQLITE_BUSY_TIMEOUT_MS / 1000},
            future=True,
        )

        @event.listens_for(engine, "connect")
        def _on_connect(dbapi_connection: Any, _record: Any) -> None:
            # Take transaction control away from pysqlite so that BEGIN is ours to issue.
            dbapi_connection.isolation_level = None
            cursor = dbapi_connection.cursor()
            cursor.execute("PRAGMA journal_mode=WAL")
            # A writer waits for the write lock in _begin_immediate, not in SQLite's busy handler.
            cursor.execute(f"PRAGMA busy_timeout={0 if immediate else SQLITE_BUSY_TIMEOUT_MS}")
            cursor.execute("PRAGMA synchronous=NORMAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.close()

        @event.listens_for(engine, "begin")
        def _on_begin(connection: Any) -> None:
            if immediate:
                _begin_immediate(connection)
            else:
                connection.exec_driver_sql("BEGIN")

        return engine

    @contextmanager
    def read(self) -> Iterator[Session]:
        with self._read() as session:
            yield session

    @contextmanager
    def read_connection(self) -> Iterator[Connection]:
        """A Core connection for a plain read on a hot path (on PostgreSQL in autocommit, as sessions read)."""
        with self._reads.connect() as connection:
            yield connection

    @contextmanager
    def write(self) -> Iterator[Session]:
        """A session whose work is committed on exit (rolled back on error)."""
        with self._write() as session, session.begin():
            yield session

    @contextmanager
    def write_connection(self) -> Iterator[Connection]:
        """A Core connection in a transaction committed on exit: for plain statements on hot paths,
        where an ORM session's setup costs more than the statement."""
        with self.write_engine.begin() as connection:
            yield connection

    def reachable(self) -> bool:
        """Whether the store answers a trivial query now (one try, no retries)."""
        try:
            with self.read() as session:
                session.execute(text("SELECT 1"))
            return True
        except DBAPIError:
            return False

    # -- schema -------------------------------------------------------------------------------

    def alembic_config(self) -> Any:
        # Alembic is imported here, not at the top: it costs every command ~80 ms to load, and a store
        # already at the newest revision never needs it (see current_revision).
        from alembic.config import Config

        config = Config()
        config.set_main_option("script_location", MIGRATIONS)
        config.set_main_option("sqlalchemy.url", self.url.render_as_string(hide_password=False).replace("%", "%%"))
        return config

    def current_revision(self) -> str | None:
        with self.engine.connect() as connection:
            if not inspect(connection).has_table("alembic_version"):
                return None
            return connection.execute(text("SELECT version_num FROM alembic_version")).scalar()

    def upgrade(self) -> None:
        """Bring the schema to the newest migration (a no-op when it is there already)."""
        with _upgrade_lock:
            head = HEAD_REVISION
            if self.current_revision() == head:
                return
            from alembic import command

            config = self.alembic_config()
            try:
                with self.write_engine.connect() as connection:
                    config.attributes["connection"] = connection
                    command.upgrade(config, "head")
                    connection.commit()
            except DBAPIError:
                # Several processes of one installation may start at once: if another one
                # finished the upgrade while ours failed on its tables, all is well.
                if self.current_revision() != head:
                    raise

    def dispose(self) -> None:
        self.engine.dispose()
        if self.write_engine is not self.engine:
            self.write_engine.dispose()
