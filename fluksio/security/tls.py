"""TLS to the broker: which failures no retry mends, and a first look that says so at once.

A broker that is restarting is waited for (``FLUKSIO_BROKER_OUTAGE_S``); a certificate that does not verify
will not verify on the next try either. :func:`tls_failure` tells the two apart, so that the distributed
mode's Redis client never retries it (``broker/connection.py``) and the first contact with the broker turns it
into one line at start (:func:`tls_config_error`): which check failed, and which setting to look at.

The TLS options are query parameters of the ``rediss://`` URL (``ssl_ca_certs``, ``ssl_certfile``,
``ssl_keyfile``, ``ssl_cert_reqs``, ``ssl_check_hostname``): the one spelling kombu, Celery's result backend
and redis-py all read (see :func:`fluksio.settings.verified_redis_url`).
"""

from __future__ import annotations

import ssl

from fluksio.errors import ConfigError
from fluksio.settings import redact_url

#: OpenSSL reasons that a configuration causes, not an outage: the server refused our certificate (or
#: wanted one), or one side does not speak TLS at all.
PERMANENT_REASONS = frozenset({
    "CERTIFICATE_VERIFY_FAILED", "TLSV1_ALERT_UNKNOWN_CA", "SSLV3_ALERT_BAD_CERTIFICATE",
    "TLSV13_ALERT_CERTIFICATE_REQUIRED", "SSLV3_ALERT_CERTIFICATE_UNKNOWN", "TLSV1_ALERT_ACCESS_DENIED",
    "SSLV3_ALERT_CERTIFICATE_EXPIRED", "WRONG_VERSION_NUMBER", "PEM_LIB", "KEY_VALUES_MISMATCH",
    "CA_MD_TOO_WEAK", "EE_KEY_TOO_SMALL",
})


def _chain(error: BaseException) -> list[BaseException]:
    found: list[BaseException] = []
    current: BaseException | None = error
    while current is not None and current not in found:
        found.append(current)
        current = current.__cause__ or current.__context__
    return found


def tls_failure(error: BaseException) -> str | None:
    """What went wrong, when ``error`` (or what it was raised from) is a TLS failure that a retry cannot mend;
    else ``None``.

    redis-py wraps the :class:`ssl.SSLError` in its ConnectionError (keeping it as the context), so the text
    of the error is looked at too.
    """
    for cause in _chain(error):
        if isinstance(cause, ssl.SSLCertVerificationError):
            return (f"the server's certificate did not verify "
                    f"({getattr(cause, 'verify_message', None) or getattr(cause, 'reason', None) or cause})")
        if isinstance(cause, ssl.SSLError) and getattr(cause, "reason", None) in PERMANENT_REASONS:
            return f"TLS failed ({cause.reason}: {cause.strerror or cause})"
        if isinstance(cause, (FileNotFoundError, IsADirectoryError, PermissionError)) and cause.filename:
            return f"cannot read the TLS file {cause.filename} ({cause.strerror})"
    text = str(error)
    if "CERTIFICATE_VERIFY_FAILED" in text:
        detail = text.rsplit("certificate verify failed", 1)[-1].lstrip(": ").strip().rstrip(".")
        return f"the server's certificate did not verify ({detail or 'certificate verify failed'})"
    reason = next((reason for reason in PERMANENT_REASONS if reason in text), None)
    return f"TLS failed ({reason})" if reason else None


def hint(failure: str) -> str:
    """What to check for a failure :func:`tls_failure` named."""
    if "Hostname mismatch" in failure or "IP address mismatch" in failure:
        return ("connect by a name (or IP address) the server's certificate carries, or add "
                "ssl_check_hostname=false to the URL")
    if "did not verify" in failure:
        return ("give the CA that signed the server's certificate as ?ssl_ca_certs=FILE in the URL (or "
                "ssl_cert_reqs=none to skip the check, which lets anyone in the middle read and forge messages)")
    if "cannot read" in failure:
        return "check the ssl_ca_certs, ssl_certfile and ssl_keyfile paths in the URL"
    if "WRONG_VERSION_NUMBER" in failure:
        return "the server does not speak TLS on that port: use redis:// there, or the server's TLS port"
    if "during the handshake" in failure:
        return ("the server may want a client certificate (check ssl_certfile and ssl_keyfile in the URL), or not "
                "speak TLS on that port")
    return "the server refused this client's certificate: check ssl_certfile and ssl_keyfile in the URL"


def tls_config_error(url: str, error: BaseException, setting: str = "FLUKSIO_BROKER_URL") -> ConfigError | None:
    """At first contact, the one-line :class:`ConfigError` for a TLS failure no retry mends (naming the URL,
    password hidden, the check that failed and what to look at); ``None`` when ``error`` is none (an outage,
    a refused login).

    Also a server that hangs up in the middle of the handshake: with TLS 1.3 a server that wants a client
    certificate and gets none may just close the connection. At first contact that is the likely reading
    (a connected process that sees it later is retried as an outage, see ``broker/connection.py``).
    """
    failure = tls_failure(error)
    if failure is None and url.startswith("rediss://") and any(isinstance(cause, ssl.SSLEOFError)
                                                                for cause in _chain(error)):
        failure = "TLS failed (the server closed the connection during the handshake)"
    return None if failure is None else ConfigError(f"{setting}={redact_url(url)}: {failure}; {hint(failure)}")
