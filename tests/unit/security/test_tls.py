"""Which TLS failures are configuration, not an outage: those are never retried and are said at start."""

from __future__ import annotations

import ssl

import pytest
from redis.exceptions import ConnectionError as RedisConnectionError

from fluksio.security.tls import hint, tls_failure


def wrapped(cause: BaseException) -> RedisConnectionError:
    """As redis-py raises it: its ConnectionError, raised while handling the ssl error."""
    try:
        try:
            raise cause
        except OSError as exc:
            raise RedisConnectionError(f"Error 1 connecting to 127.0.0.1:6380. {exc}.") from None
    except RedisConnectionError as error:
        error.__context__ = cause
        return error


def test_a_certificate_that_does_not_verify_is_named_with_how_to_fix_it() -> None:
    cause = ssl.SSLCertVerificationError(1, "[SSL: CERTIFICATE_VERIFY_FAILED] certificate verify failed")
    cause.verify_message = "self-signed certificate in certificate chain"
    failure = tls_failure(wrapped(cause))
    assert failure == "the server's certificate did not verify (self-signed certificate in certificate chain)"
    assert "ssl_ca_certs=FILE" in hint(failure)


def test_the_text_alone_is_enough_when_the_cause_was_lost() -> None:
    error = RedisConnectionError("Error 1 connecting to h:6380. [SSL: CERTIFICATE_VERIFY_FAILED] certificate "
                                 "verify failed: unable to get local issuer certificate (_ssl.c:1006).")
    assert tls_failure(error) == "the server's certificate did not verify (unable to get local issuer certificate " \
                                 "(_ssl.c:1006))"


def test_a_missing_ca_file_is_configuration() -> None:
    failure = tls_failure(wrapped(FileNotFoundError(2, "No such file or directory", "/etc/nope.pem")))
    assert failure == "cannot read the TLS file /etc/nope.pem (No such file or directory)"
    assert "ssl_ca_certs" in hint(failure)


@pytest.mark.parametrize("error", [
    RedisConnectionError("Error 111 connecting to 127.0.0.1:6380. Connection refused."),
    RedisConnectionError("Connection closed by server."),
    TimeoutError("Timeout reading from socket"),
])
def test_an_outage_is_not_a_tls_failure(error: Exception) -> None:
    assert tls_failure(error) is None


def test_a_server_that_refuses_the_clients_certificate_says_so() -> None:
    cause = ssl.SSLError(1, "[SSL: TLSV13_ALERT_CERTIFICATE_REQUIRED] tlsv13 alert certificate required")
    cause.reason = "TLSV13_ALERT_CERTIFICATE_REQUIRED"  # type: ignore[misc]
    failure = tls_failure(wrapped(cause))
    assert failure is not None and "TLSV13_ALERT_CERTIFICATE_REQUIRED" in failure
    assert "ssl_certfile" in hint(failure)


def test_a_server_that_hangs_up_in_the_handshake_is_a_tls_refusal_at_first_contact() -> None:
    """TLS 1.3: a server that wants a client certificate and gets none may only close the connection."""
    from fluksio.security.tls import tls_config_error

    failure = wrapped(ssl.SSLEOFError(8, "EOF occurred in violation of protocol (_ssl.c:2427)"))
    assert tls_failure(failure) is None  # for a connected process: an outage, retried
    refused = tls_config_error("rediss://:s3cret@127.0.0.1:6380/0", failure)
    assert refused is not None and "TLS failed (the server closed the connection during the handshake)" in str(refused)
    assert "ssl_certfile" in str(refused) and "s3cret" not in str(refused)
    assert tls_config_error("redis://127.0.0.1:6379/0", failure) is None  # no TLS asked for: not a TLS refusal
