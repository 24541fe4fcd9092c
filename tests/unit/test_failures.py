"""Why a connection failed, in words: the kinds read off exception chains, and the one-line messages."""

from __future__ import annotations

import socket
import ssl

import pytest
import redis.exceptions as rx
from sqlalchemy.exc import NoSuchModuleError, OperationalError

from fluksio.failures import (
    AUTHENTICATION,
    CLOSED,
    NOT_REDIS,
    OTHER,
    REFUSED,
    TIMED_OUT,
    TLS,
    UNKNOWN_HOST,
    broker_message,
    classify,
    lost_message,
    reason,
    redis_outage,
    store_message,
)


def raised_from(outer: BaseException, inner: BaseException) -> BaseException:
    """``outer`` as redis-py raises it: inside the handler of ``inner`` (so ``inner`` is its context)."""
    try:
        try:
            raise inner
        except BaseException:
            raise outer  # noqa: B904 - the implicit context is what redis-py leaves
    except BaseException as exc:
        return exc


def db_error(message: str) -> OperationalError:
    """An error as SQLAlchemy wraps a driver's (psycopg's words)."""
    return OperationalError("SELECT 1", {}, Exception(message))


REDIS_CASES = [
    (raised_from(rx.ConnectionError("Error 111 connecting to 127.0.0.1:1. Connection refused."),
                 ConnectionRefusedError(111, "Connection refused")), REFUSED),
    (raised_from(rx.ConnectionError("Error -2 connecting to nohost:6379. Name or service not known."),
                 socket.gaierror(-2, "Name or service not known")), UNKNOWN_HOST),
    (raised_from(rx.TimeoutError("Timeout reading from socket"), TimeoutError("timed out")), TIMED_OUT),
    (raised_from(rx.TimeoutError("Timeout connecting to server"),
                 TimeoutError("_ssl.c:989: The handshake operation timed out")), TLS),
    (raised_from(rx.ConnectionError("Error 1 connecting to 127.0.0.1:6380. [SSL: CERTIFICATE_VERIFY_FAILED]"),
                 ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")), TLS),
    (rx.AuthenticationError("invalid username-password pair or user is disabled."), AUTHENTICATION),
    (raised_from(rx.ConnectionError("Error while reading from 127.0.0.1:6380 : (104, 'Connection reset by peer')"),
                 ConnectionResetError(104, "Connection reset by peer")), CLOSED),
    (rx.InvalidResponse("Protocol Error: b'HTTP/1.1 400 Bad Request'"), NOT_REDIS),
    (rx.ConnectionError("something nobody foresaw"), OTHER),
]

STORE_CASES = [
    (db_error('connection failed: connection to server at "127.0.0.1", port 1 failed: Connection refused\n'
              "\tIs the server running on that host and accepting TCP/IP connections?"), REFUSED),
    (db_error("failed to resolve host 'nohost': [Errno -2] Name or service not known"), UNKNOWN_HOST),
    (db_error("connection timeout expired"), TIMED_OUT),
    (db_error('connection failed: FATAL:  password authentication failed for user "fluksio"'), AUTHENTICATION),
    (db_error("SSL error: certificate verify failed"), TLS),
    (db_error('database "runs" does not exist'), OTHER),
]


@pytest.mark.parametrize(("exc", "kind"), REDIS_CASES + STORE_CASES)
def test_each_failure_is_of_the_kind_its_chain_says(exc: BaseException, kind: str) -> None:
    failure = classify(exc)
    assert failure.kind == kind
    assert "\n" not in failure.detail and failure.detail


def test_waiting_can_mend_an_outage_but_not_a_refused_login_or_tls() -> None:
    kinds = {kind: classify(exc).transient for exc, kind in REDIS_CASES}
    assert kinds[REFUSED] and kinds[UNKNOWN_HOST] and kinds[TIMED_OUT] and kinds[CLOSED]
    assert not kinds[AUTHENTICATION] and not kinds[TLS] and not kinds[NOT_REDIS]


def test_a_redis_outage_is_a_lost_connection_or_timeout_not_a_refused_login_nor_another_error() -> None:
    assert redis_outage(rx.ConnectionError("Error 111 connecting to h:6379. Connection refused."))
    assert redis_outage(rx.TimeoutError("Timeout reading from socket"))
    assert not redis_outage(rx.AuthenticationError("invalid username-password pair"))  # a ConnectionError too
    assert not redis_outage(rx.ResponseError("WRONGTYPE Operation against a key holding the wrong kind of value"))
    assert not redis_outage(ConnectionRefusedError("not redis-py's: the caller's own to judge"))


@pytest.mark.parametrize(("exc", "kind"), REDIS_CASES)
def test_a_broker_message_is_one_line_naming_the_url_without_its_password(exc: BaseException, kind: str) -> None:
    message = broker_message("redis://:hunter2@127.0.0.1:6380/0", exc, 3.0)
    assert "\n" not in message and "hunter2" not in message
    assert message.startswith("cannot reach the broker redis://:***@127.0.0.1:6380/0 (FLUKSIO_BROKER_URL): ")


def test_broker_messages_say_what_failed_and_what_to_check() -> None:
    url = "redis://127.0.0.1:1/0"
    by_kind = {kind: broker_message(url, exc, 3.0) for exc, kind in REDIS_CASES}
    assert "connection refused by 127.0.0.1:1: is redis-server running there?" in by_kind[REFUSED]
    assert "unknown host '127.0.0.1'" in by_kind[UNKNOWN_HOST] and "check the host name" in by_kind[UNKNOWN_HOST]
    assert "no answer from 127.0.0.1:1 within 3 s" in by_kind[TIMED_OUT]
    assert "asks for a password and the URL gives none: write it as redis://:PASSWORD@127.0.0.1:1/0" in by_kind[
        AUTHENTICATION]
    assert "speaks only TLS needs rediss://" in by_kind[CLOSED]
    assert "does not answer as a Redis server" in by_kind[NOT_REDIS]
    refused_login = broker_message("redis://:pw@h:6379/0", rx.AuthenticationError("WRONGPASS invalid"), 3.0)
    assert "authentication failed" in refused_login and "check the user and password" in refused_login


def test_tls_messages_tell_a_distrusted_certificate_from_a_server_without_tls() -> None:
    handshake, certificate = (exc for exc, kind in REDIS_CASES if kind == TLS)
    assert "a server without it needs redis://" in broker_message("rediss://h:6379/0", handshake, 3.0)
    assert "?ssl_ca_certs=FILE" in broker_message("rediss://h:6379/0", certificate, 3.0)


def test_a_closed_connection_is_told_as_tls_or_as_no_redis_by_the_handshake() -> None:
    closed = next(exc for exc, kind in REDIS_CASES if kind == CLOSED)
    assert broker_message("redis://h:5432/0", closed, 3.0, speaks_tls=True).endswith(
        "and speaks TLS: a server that speaks only TLS needs rediss://")
    no_redis = broker_message("redis://h:5432/0", closed, 3.0, speaks_tls=False)
    assert "it is not a Redis server" in no_redis and "rediss" not in no_redis


def test_a_password_a_library_quotes_is_hidden_too() -> None:
    message = broker_message("redis://:s3cr3t@h:1/0", rx.ConnectionError("bad password s3cr3t given"), 3.0)
    assert "s3cr3t" not in message and "***" in message


@pytest.mark.parametrize(("exc", "kind"), STORE_CASES)
def test_a_store_message_is_one_line_naming_the_url_without_its_password(exc: BaseException, kind: str) -> None:
    message = store_message("postgresql+psycopg://fluksio:hunter2@db.example:5433/runs", exc)
    assert "\n" not in message and "hunter2" not in message
    assert message.startswith("cannot open the run store postgresql+psycopg://fluksio:***@db.example:5433/runs "
                              "(FLUKSIO_DATABASE_URL): ")


def test_store_messages_say_what_failed_and_what_to_check() -> None:
    url = "postgresql+psycopg://u@db.example/runs"
    by_kind = {kind: store_message(url, exc) for exc, kind in STORE_CASES}
    assert "connection refused by db.example:5432: is the database server running there?" in by_kind[REFUSED]
    assert "unknown host 'db.example'" in by_kind[UNKNOWN_HOST]
    assert "no answer from db.example:5432" in by_kind[TIMED_OUT]
    assert "check the user and password in the URL" in by_kind[AUTHENTICATION]
    assert by_kind[OTHER].endswith(': database "runs" does not exist')


@pytest.mark.parametrize(("module", "install"), [
    ("MySQLdb", "pip install mysqlclient"), ("psycopg", "pip install 'fluksio[postgres]'"),
    ("psycopg2", "pip install psycopg2-binary"), ("pymysql", "pip install PyMySQL"),
    ("someday_db", "install the package that provides the module 'someday_db'"),
])
def test_a_missing_driver_names_what_to_install_and_the_tested_dialects(module: str, install: str) -> None:
    message = store_message("mysql://u:hunter2@h/db", ModuleNotFoundError(f"No module named {module!r}", name=module))
    assert install in message and "hunter2" not in message and "\n" not in message
    assert "mysql://u:***@h/db" in message
    assert "tested on SQLite (sqlite:///PATH) and PostgreSQL (postgresql+psycopg://" in message


def test_an_unknown_scheme_names_the_supported_ones() -> None:
    message = store_message("foo://x", NoSuchModuleError("Can't load plugin: sqlalchemy.dialects:foo"))
    assert "unknown scheme 'foo'" in message
    assert "SQLite (sqlite:///PATH)" in message and "PostgreSQL (postgresql+psycopg://USER@HOST/DB" in message


def test_a_sqlite_file_that_cannot_be_opened_says_to_check_its_folder() -> None:
    message = store_message("sqlite:////no/such/dir/runs.db", db_error("unable to open database file"))
    assert "unable to open database file" in message and "folder exists" in message


def test_notices_and_lost_connections_say_the_kind_or_the_words() -> None:
    refused = REDIS_CASES[0][0]
    assert reason(refused) == REFUSED
    assert reason(rx.ConnectionError("something nobody foresaw")) == "something nobody foresaw"
    lost = lost_message(refused, "redis://:hunter2@h:1/0", "broker", 60)
    assert lost.startswith("lost the broker redis://:***@h:1/0 and it did not answer again within 60 s (refused:")
