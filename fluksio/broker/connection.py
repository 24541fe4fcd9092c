"""The distributed mode's Redis: first contact, and patience through an outage once connected.

A client or command that cannot reach its broker when it starts is told so
within seconds (:func:`check_broker`, :data:`PROBE_TIMEOUT_S`): one line naming
the URL (password hidden), what failed and what to check. It does not wait
through ``FLUKSIO_BROKER_OUTAGE_S`` first: that patience is for a process that
was connected and lost the connection, which :class:`OutageRetry` carries
through a broker restart while saying so (:mod:`fluksio.outage`). A worker
started before its broker says so at once and keeps trying, as Celery does
(:func:`wait_for_broker`).

Imported only in the distributed mode: the embedded default never loads redis-py.
"""

from __future__ import annotations

import logging
import socket
import ssl
import threading
import time
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import redis
from redis.backoff import ExponentialBackoff, NoBackoff
from redis.exceptions import AuthenticationError
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError
from redis.retry import Retry

from fluksio.errors import BrokerUnavailable, ConfigError
from fluksio.failures import CLOSED, broker_message, classify, reason
from fluksio.outage import Notices
from fluksio.security.tls import tls_config_error, tls_failure
from fluksio.settings import Settings, redact_url, verified_redis_url

log = logging.getLogger(__name__)

#: Longest a first look at the broker may take to connect, and then to answer, in seconds.
PROBE_TIMEOUT_S = 3.0
#: First and longest pause between two tries of a worker waiting for its broker at start, in seconds.
WORKER_RETRY_FIRST_S, WORKER_RETRY_MAX_S = 1.0, 10.0
#: The oldest Redis the distributed mode works with (a driver takes its completions with BLMOVE).
MIN_REDIS = (6, 2)
#: What a running process waits through: a lost connection, a command that got no answer in time (redis-py's
#: own default list, which also has the socket's timeout).
OUTAGE_ERRORS: tuple[type[Exception], ...] = (RedisConnectionError, RedisTimeoutError, socket.timeout)


class OutageRetry(Retry):
    """Retries a Redis command through an outage of up to ``outage_s`` seconds — never a refused login.

    The outage is timed from a command's first failure, also across the retries
    nested inside it (redis-py retries the reconnect inside the command's retry):
    one command waits about ``outage_s`` in all, not once per level. Each failed
    try is reported to ``notices`` with the time left, so that a person watching
    sees why nothing moves; a success after failures says the broker is back.
    """

    def __init__(self, outage_s: float, notices: Notices) -> None:
        super().__init__(ExponentialBackoff(cap=1.0, base=0.05), retries=-1, supported_errors=OUTAGE_ERRORS)
        #: How long one command keeps trying, from its first failure, in seconds.
        self.outage_s = outage_s
        self.notices = notices
        self._local = threading.local()  # per thread: the depth of nesting and when the outage began

    def __deepcopy__(self, memo: dict[int, Any]) -> OutageRetry:
        # redis-py deep-copies its retry policy into every connection. This one holds no state a connection
        # may not share (the backoff is a pure function of the failure count), and nested retries must find
        # the outage their command is in.
        return self

    def call_with_retry(self, do, fail, is_retryable=None, with_failure_count=False):  # type: ignore[no-untyped-def]
        state = self._local
        outermost = not getattr(state, "depth", 0)
        if outermost:
            state.since = None

        def retryable(error: Exception) -> bool:
            # Never a refused login, nor a TLS failure no retry mends (a certificate that does not verify).
            return (not isinstance(error, AuthenticationError) and tls_failure(error) is None
                    and (is_retryable is None or is_retryable(error)))

        def failed(error: Exception, *count: int) -> None:
            fail(error, *count)
            now = time.monotonic()
            state.since = state.since or now
            left = self.outage_s - (now - state.since)
            if left <= 0:
                raise error
            self.notices.waiting(reason(error), left)

        state.depth = getattr(state, "depth", 0) + 1
        try:
            result = super().call_with_retry(do, failed, retryable, with_failure_count)
        finally:
            state.depth -= 1
        if outermost and state.since is not None:
            self.notices.over()
        return result


#: How long a command waits through an outage once its process is stopping, in seconds: a worker told to stop
#: while its broker is away must go within seconds; what it leaves in the books expires with its heartbeat.
STOPPING_OUTAGE_S = 2.0


def stopping(client: redis.Redis | None) -> None:
    """From now on, ``client``'s commands wait through an outage for :data:`STOPPING_OUTAGE_S` at most (this
    process is stopping). ``None`` (no broker): nothing to do."""
    if client is None:
        return
    retry = client.get_retry()
    if isinstance(retry, OutageRetry):
        retry.outage_s = min(retry.outage_s, STOPPING_OUTAGE_S)


def broker_client(settings: Settings) -> redis.Redis:
    """The Redis client a distributed process shares: it waits through an outage of up to
    ``broker_outage_s`` seconds (saying so on the ``fluksio.outage`` logger), never through a refused login."""
    retry = OutageRetry(settings.broker_outage_s, Notices(f"broker {redact_url(settings.broker_url)}"))
    return redis.Redis.from_url(
        verified_redis_url(settings.broker_url), socket_keepalive=True, socket_connect_timeout=5,
        health_check_interval=30,
        retry=retry, retry_on_error=[RedisConnectionError, RedisTimeoutError],
    )


def check_broker(settings: Settings, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Return if the broker answers now; else raise :class:`BrokerUnavailable` saying why, within about
    ``timeout_s`` seconds (twice that at most: once to connect, once for the answer)."""
    url = verified_redis_url(settings.broker_url)
    try:
        probe = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                     retry=Retry(NoBackoff(), 0))
    except ValueError as exc:  # a port that is not a number, an unknown option …
        raise ConfigError(f"FLUKSIO_BROKER_URL={redact_url(url)} is not a Redis URL ({exc}); write it as "
                          "redis://[:PASSWORD@]HOST[:PORT]/DB") from None
    try:
        probe.ping()
        _check_version(probe, url)
    except redis.RedisError as exc:
        refused = tls_config_error(url, exc)  # a certificate that does not verify: configuration, not an outage
        if refused is not None:
            raise refused from None
        failure = classify(exc)
        speaks = speaks_tls(url, timeout_s) if failure.kind == CLOSED and url.startswith("redis://") else None
        raise BrokerUnavailable(broker_message(url, exc, timeout_s, speaks), transient=failure.transient) from None
    finally:
        probe.close()


def speaks_tls(url: str, timeout_s: float) -> bool | None:
    """Whether the server at ``url``'s host and port completes a TLS handshake, its certificate unchecked (only
    the protocol is asked); ``None`` when that cannot be told (no host in the URL, nothing accepts a connection).

    Asked of a server that closed a ``redis://`` connection at once: a Redis that speaks only TLS does that, and
    so does a server that is no Redis at all (PostgreSQL, say). Each needs its own advice.
    """
    try:
        parts = urlsplit(url)
        host, port = parts.hostname, parts.port or 6379
    except ValueError:
        return None
    if not host:
        return None
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE  # the protocol is asked, not trust: a certificate is checked on rediss://
    try:
        raw = socket.create_connection((host, port), timeout=timeout_s)
    except OSError:
        return None
    try:
        with context.wrap_socket(raw, server_hostname=host):
            return True
    except OSError:  # a reset, an EOF or a timeout during the handshake: a server that speaks no TLS
        return False
    finally:
        raw.close()


def _check_version(probe: redis.Redis, url: str) -> None:
    try:
        version = str(probe.info("server").get("redis_version", ""))
    except redis.ResponseError:  # INFO refused to this user (an ACL): the first BLMOVE will tell, if need be
        return
    numbers = tuple(int(part) for part in version.split(".")[:2] if part.isdigit())
    if len(numbers) == 2 and numbers < MIN_REDIS:
        raise ConfigError(f"the broker {redact_url(url)} (FLUKSIO_BROKER_URL) is Redis {version}, and fluksio "
                          f"needs {'.'.join(map(str, MIN_REDIS))} or newer (BLMOVE): upgrade redis-server")


def wait_for_broker(settings: Settings, say: Callable[[str], Any] = log.warning,
                    sleep: Callable[[float], Any] = time.sleep, timeout_s: float = PROBE_TIMEOUT_S) -> None:
    """Return once the broker answers. Until then say why not (at once, then after every try) and try again,
    pausing longer each time up to :data:`WORKER_RETRY_MAX_S` — as Celery's own worker does.

    A failure no wait can mend (a refused password, TLS, a server that is not Redis or too old) is raised
    at once as a :class:`~fluksio.errors.FluksioError`.
    """
    pause, tries = WORKER_RETRY_FIRST_S, 0
    while True:
        try:
            check_broker(settings, timeout_s)
        except BrokerUnavailable as exc:
            if not exc.transient:
                raise
            tries += 1
            say(f"{exc}; trying again in {pause:g} s (try {tries})")
            sleep(pause)
            pause = min(pause * 2, WORKER_RETRY_MAX_S)
            continue
        if tries:
            say(f"the broker {redact_url(settings.broker_url)} answers now")
        return
