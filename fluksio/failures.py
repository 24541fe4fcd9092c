"""Why a connection to the broker or the run store failed, in one line a person can act on.

Pure wording: these functions look at an exception (and the exceptions it was
raised from) and say what failed — refused, unknown host, timed out,
authentication, TLS — and what to check. They open nothing; the callers in
:mod:`fluksio.store.contact` and :mod:`fluksio.broker.connection` do. Every message hides the URL's password.
"""

from __future__ import annotations

import re
import socket
import ssl
import sys
from collections.abc import Callable
from dataclasses import dataclass
from urllib.parse import urlsplit

from sqlalchemy.engine import make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, NoSuchModuleError

from fluksio.settings import redact_url

#: What can go wrong on the way to a server, as the messages name it.
REFUSED, UNKNOWN_HOST, TIMED_OUT, AUTHENTICATION, TLS = "refused", "unknown host", "timed out", "authentication", "TLS"
#: The server dropped the connection at once, or answered in another protocol; anything else.
CLOSED, NOT_REDIS, OTHER = "closed", "not Redis", "other"
#: Failures that may pass by themselves (a server starting, a network coming back): worth trying again.
TRANSIENT = frozenset({REFUSED, UNKNOWN_HOST, TIMED_OUT, CLOSED, OTHER})

#: The dialects the suite runs on, as a store URL is written for each.
TESTED_STORES = ("SQLite (sqlite:///PATH)", "PostgreSQL (postgresql+psycopg://USER@HOST/DB, "
                 "pip install 'fluksio[postgres]')")
#: What to install for a missing database driver, by the module SQLAlchemy tried to import.
DRIVER_PACKAGES = {
    "psycopg": "'fluksio[postgres]'", "psycopg2": "psycopg2-binary", "asyncpg": "asyncpg", "pg8000": "pg8000",
    "MySQLdb": "mysqlclient", "pymysql": "PyMySQL", "mysql": "mysql-connector-python", "mariadb": "mariadb",
    "oracledb": "oracledb", "cx_Oracle": "cx_Oracle", "pyodbc": "pyodbc", "pymssql": "pymssql",
}


@dataclass(frozen=True)
class Failure:
    #: One of :data:`REFUSED`, :data:`UNKNOWN_HOST`, :data:`TIMED_OUT`, :data:`AUTHENTICATION`, :data:`TLS`,
    #: :data:`CLOSED`, :data:`NOT_REDIS`, :data:`OTHER`.
    kind: str
    #: The words of the library that failed, on one line (for :data:`OTHER`, all there is to say).
    detail: str

    @property
    def transient(self) -> bool:
        return self.kind in TRANSIENT


def _redis(name: str) -> Callable[[BaseException], bool]:
    """Whether an error is redis-py's ``name`` (not imported here: the embedded default never loads redis-py,
    and an error of its classes cannot exist unless it was)."""

    def matches(exc: BaseException) -> bool:
        cls = getattr(sys.modules.get("redis.exceptions"), name, None)
        return isinstance(cls, type) and isinstance(exc, cls)

    return matches


def _words(pattern: str) -> Callable[[BaseException], bool]:
    found = re.compile(pattern, re.IGNORECASE).search
    return lambda exc: bool(found(str(exc)))


# Checked in this order over every exception of the chain: the first kind that matches any of them wins
# (a timeout during a TLS handshake is a TLS failure; a refused login is never "closed").
_RULES: tuple[tuple[str, Callable[[BaseException], bool]], ...] = (
    (AUTHENTICATION, _redis("AuthenticationError")),
    (AUTHENTICATION, _words(r"password authentication failed|no password supplied|authentication failed|"
                            r"WRONGPASS|NOAUTH|invalid username-password|access denied")),
    (TLS, lambda e: isinstance(e, ssl.SSLError)),
    (TLS, _words(r"\bSSL\b|\bTLS\b|handshake|certificate")),
    (UNKNOWN_HOST, lambda e: isinstance(e, socket.gaierror)),
    (UNKNOWN_HOST, _words(r"could not translate host name|failed to resolve host|name or service not known|"
                          r"nodename nor servname|temporary failure in name resolution")),
    (REFUSED, lambda e: isinstance(e, ConnectionRefusedError)),
    (REFUSED, _words(r"connection refused")),
    (TIMED_OUT, lambda e: isinstance(e, TimeoutError)),
    (TIMED_OUT, _redis("TimeoutError")),
    (TIMED_OUT, _words(r"timed out|timeout")),
    (CLOSED, lambda e: isinstance(e, (ConnectionResetError, BrokenPipeError, ConnectionAbortedError))),
    (CLOSED, _words(r"connection reset|closed by server|server closed the connection|connection closed")),
    (NOT_REDIS, _redis("InvalidResponse")),
)


def chain(exc: BaseException) -> list[BaseException]:
    """``exc`` and what it was raised from or during, outermost first (a database error's driver error too)."""
    links: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in links and len(links) < 16:
        links.append(current)
        orig = getattr(current, "orig", None)  # SQLAlchemy's DBAPIError keeps the driver's error here
        current = orig if isinstance(orig, BaseException) else (current.__cause__ or current.__context__)
    return links


def first_line(exc: BaseException) -> str:
    """The error's message without SQLAlchemy's ``(driver.Error)`` prefix and background link, on one line."""
    if isinstance(exc, DBAPIError) and isinstance(exc.orig, BaseException):
        exc = exc.orig
    text = " ".join(str(exc).split("\n")[0].split()) or type(exc).__name__
    return text.rstrip(".")


def classify(exc: BaseException) -> Failure:
    """What kind of failure ``exc`` is, judged from it and every exception it was raised from."""
    links = chain(exc)
    for kind, matches in _RULES:
        for link in links:
            if matches(link):
                return Failure(kind, first_line(link))
    return Failure(OTHER, first_line(links[-1]))


def redis_outage(exc: BaseException) -> bool:
    """Whether ``exc`` is redis-py losing its server — a connection error or a timeout that may pass by itself,
    not a refused login nor TLS — as a client raises it once it gave up waiting out an outage."""
    return (_redis("ConnectionError")(exc) or _redis("TimeoutError")(exc)) and classify(exc).transient


def reason(exc: BaseException) -> str:
    """A few words for a notice: the kind of failure, or the library's words when it is of no known kind."""
    failure = classify(exc)
    return failure.kind if failure.kind != OTHER else failure.detail[:120]


def _password(url: str) -> str | None:
    try:
        return urlsplit(url).password
    except ValueError:
        return None


def _hide(text: str, url: str) -> str:
    """``text`` without the URL's password, should a library have quoted it (as a word of its own: a short
    password is not hidden inside other words, which would garble the message and hint at the password)."""
    password = _password(url)
    if not password:
        return text
    return re.sub(rf"(?<![\w]){re.escape(password)}(?![\w])", "***", text)


def _where(url: str, default_port: int) -> tuple[str, str]:
    """``(host, "host:port")`` of a URL, for saying where nothing answered."""
    try:
        parts = urlsplit(url)
        host, port = parts.hostname or "localhost", parts.port or default_port
    except ValueError:
        return "?", "?"
    return host, f"{host}:{port}"


def broker_message(url: str, exc: BaseException, timeout_s: float, speaks_tls: bool | None = None) -> str:
    """One line: the broker at ``url`` could not be reached because of ``exc``, and what to check.

    ``speaks_tls``: whether the server completed a TLS handshake when asked (``None``: not asked, or it could not
    be told). A server that closes a ``redis://`` connection is a Redis that speaks only TLS, or no Redis at
    all (a PostgreSQL port, say): only the handshake tells them apart, and each needs its own advice.
    """
    failure = classify(exc)
    host, where = _where(url, 6379)
    head = f"cannot reach the broker {redact_url(url)} (FLUKSIO_BROKER_URL)"
    tls = url.startswith("rediss://")
    has_password = bool(_password(url))
    advice = {
        REFUSED: f"connection refused by {where}: is redis-server running there? check the host and the port",
        UNKNOWN_HOST: f"unknown host {host!r} (the name does not resolve): check the host name",
        TIMED_OUT: f"no answer from {where} within {timeout_s:g} s: check the host, the port and any firewall "
                   "between (is it a Redis server?)",
        AUTHENTICATION: (f"authentication failed ({failure.detail}): check the user and password in the URL"
                         if has_password else
                         f"{where} asks for a password and the URL gives none: write it as "
                         f"{'rediss' if tls else 'redis'}://:PASSWORD@{where}/0"),
        TLS: (f"TLS failed ({failure.detail}): the server's certificate is not trusted here; give its CA as "
              "?ssl_ca_certs=FILE (or ?ssl_cert_reqs=none to skip the check)" if "certificate" in failure.detail
              else f"TLS failed ({failure.detail}): does {where} speak TLS? a server without it needs redis://, "
                   "not rediss://"),
        CLOSED: _closed_advice(where, failure.detail, tls, speaks_tls),
        NOT_REDIS: f"{where} does not answer as a Redis server ({failure.detail}): check the host and the port",
        OTHER: failure.detail,
    }[failure.kind]
    return _hide(f"{head}: {advice}", url)


def _closed_advice(where: str, detail: str, tls: bool, speaks_tls: bool | None) -> str:
    if tls or speaks_tls is None:
        also = "" if tls else "; a Redis that speaks only TLS needs rediss://"
        return f"{where} closed the connection ({detail}): check the host and the port{also}"
    if speaks_tls:
        return f"{where} closed the connection ({detail}) and speaks TLS: a server that speaks only TLS needs rediss://"
    return (f"{where} closed the connection ({detail}) and speaks no TLS either: it is not a Redis server (another "
            "service listens there?); check the host and the port (Redis listens on 6379 unless told otherwise)")


def store_message(url: str, exc: BaseException) -> str:
    """One line: the run store at ``url`` could not be opened because of ``exc``, and what to do."""
    shown = redact_url(url)
    if isinstance(exc, ImportError):
        return _hide(missing_driver_message(shown, exc), url)
    if isinstance(exc, (NoSuchModuleError, ArgumentError)):
        scheme = url.split("://", 1)[0] if "://" in url else url
        return _hide(f"the run store {shown} (FLUKSIO_DATABASE_URL) has an unknown scheme {scheme!r} (SQLAlchemy "
                     f"has no such dialect or driver); fluksio supports and is tested on "
                     f"{' and '.join(TESTED_STORES)}", url)
    head = f"cannot open the run store {shown} (FLUKSIO_DATABASE_URL)"
    if isinstance(exc, OSError) and not isinstance(exc, TimeoutError) and exc.filename:
        return _hide(f"{head}: {exc.strerror or exc} ({exc.filename}): check that the folder exists and that "
                     "you may write there", url)
    failure = classify(exc)
    try:
        parsed = make_url(url)
        host, port, sqlite = parsed.host or "localhost", parsed.port or 5432, parsed.get_backend_name() == "sqlite"
    except ArgumentError:
        host, port, sqlite = "?", 0, False
    if sqlite:
        return _hide(f"{head}: {failure.detail}: check that the file's folder exists and that you may write there",
                     url)
    where = f"{host}:{port}"
    advice = {
        REFUSED: f"connection refused by {where}: is the database server running there? check the host and the "
                 "port",
        UNKNOWN_HOST: f"unknown host {host!r} (the name does not resolve): check the host name",
        TIMED_OUT: f"no answer from {where} ({failure.detail}): check the host, the port and any firewall between",
        AUTHENTICATION: f"authentication failed ({failure.detail}): check the user and password in the URL",
        TLS: f"TLS failed ({failure.detail}): check the sslmode and certificate settings in the URL",
        CLOSED: f"{where} closed the connection ({failure.detail}): check the host and the port",
    }.get(failure.kind, failure.detail)
    return _hide(f"{head}: {advice}", url)


def missing_driver_message(shown_url: str, exc: ImportError) -> str:
    module = (exc.name or str(exc)).split(".")[0]
    package = DRIVER_PACKAGES.get(module)
    install = f"pip install {package}" if package else f"install the package that provides the module {module!r}"
    return (f"the run store {shown_url} (FLUKSIO_DATABASE_URL) needs a database driver that is not installed "
            f"(no module {module!r}): {install}. fluksio is tested on {' and '.join(TESTED_STORES)}")


def lost_message(exc: BaseException, url: str, part: str, outage_s: float) -> str:
    """One line for a command whose broker or store went away while it ran and did not come back in time."""
    failure = classify(exc)
    what = failure.detail if failure.kind == OTHER else f"{failure.kind}: {failure.detail}"
    return _hide(f"lost the {part} {redact_url(url)} and it did not answer again within {outage_s:g} s ({what})",
                 url)
