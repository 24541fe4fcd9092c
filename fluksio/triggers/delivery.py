"""Sending one alert once: a webhook POST (stdlib ``urllib``) or an email (stdlib ``smtplib``).

Each try either returns, or raises :class:`DeliveryFailed` saying whether trying again could help: a
refused connection, a timeout, a 5xx or 429 answer may pass; a 404 or a rejected recipient will not.
"""

from __future__ import annotations

import http.client
import smtplib
import socket
import urllib.error
import urllib.request
from email.message import EmailMessage
from importlib.metadata import PackageNotFoundError, version
from typing import Any

from fluksio.settings import Settings
from fluksio.triggers.message import SIGNATURE_HEADER, email_text, encode, signature, summary
from fluksio.triggers.rules import AlertRule, EmailTarget, WebhookTarget

#: HTTP answers worth another try: the receiver is busy or briefly broken, not wrongly addressed.
RETRYABLE_HTTP = frozenset({408, 425, 429, 500, 502, 503, 504})


class DeliveryFailed(Exception):
    """One try failed; ``retryable`` says whether another may succeed."""

    def __init__(self, message: str, retryable: bool) -> None:
        super().__init__(message)
        self.retryable = retryable


def _user_agent() -> str:
    try:
        return f"fluksio/{version('fluksio')}"
    except PackageNotFoundError:
        return "fluksio"


def send(rule: AlertRule, body: dict[str, Any], settings: Settings) -> str:
    """Send ``body`` to the rule's target once; returns what the target answered (for the log)."""
    if rule.webhook is not None:
        return post_webhook(rule.webhook, body, settings.alert_timeout_s)
    assert rule.email is not None
    return send_email(rule.email, body, settings)


def post_webhook(target: WebhookTarget, body: dict[str, Any], timeout_s: float) -> str:
    data = encode(body, target.format)
    headers = {"Content-Type": "application/json", "User-Agent": _user_agent()}
    if target.secret is not None:
        headers[SIGNATURE_HEADER] = signature(target.secret, data)
    request = urllib.request.Request(target.url, data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:  # noqa: S310 - http(s) checked
            return f"HTTP {response.status}"
    except urllib.error.HTTPError as exc:
        raise DeliveryFailed(f"{target.describe()} answered HTTP {exc.code} {exc.reason}",
                             exc.code in RETRYABLE_HTTP) from None
    except (urllib.error.URLError, OSError) as exc:
        reason = exc.reason if isinstance(exc, urllib.error.URLError) else exc
        raise DeliveryFailed(f"cannot reach {target.describe()}: {reason}", True) from None
    except http.client.HTTPException as exc:  # an answer that is no HTTP: a wrong port, a proxy in the way
        raise DeliveryFailed(f"{target.describe()} did not answer in HTTP: {type(exc).__name__}: {exc}", True) from None
    except ValueError as exc:  # a URL urllib cannot send to (the rule's check lets few through)
        raise DeliveryFailed(f"cannot send to {target.describe()}: {exc}", False) from None


def send_email(target: EmailTarget, body: dict[str, Any], settings: Settings) -> str:
    if not settings.smtp_host:
        raise DeliveryFailed("no SMTP server is configured (FLUKSIO_SMTP_HOST)", False)
    message = EmailMessage()
    try:
        message["Subject"] = f"{target.subject_prefix} {summary(body)}".strip()
        message["From"] = settings.smtp_from or f"fluksio@{socket.getfqdn()}"
        message["To"] = ", ".join(target.to)
    except ValueError as exc:  # a header with a line break in it (FLUKSIO_SMTP_FROM, say)
        raise DeliveryFailed(f"cannot write the email: {exc}", False) from None
    message.set_content(email_text(body))
    smtp_class = smtplib.SMTP_SSL if settings.smtp_ssl else smtplib.SMTP
    try:
        with smtp_class(settings.smtp_host, settings.smtp_port, timeout=settings.alert_timeout_s) as smtp:
            if settings.smtp_starttls and not settings.smtp_ssl:
                smtp.starttls()
            if settings.smtp_username:
                smtp.login(settings.smtp_username, settings.smtp_password or "")
            smtp.send_message(message)
    except smtplib.SMTPRecipientsRefused as exc:
        raise DeliveryFailed(f"the SMTP server refused {', '.join(exc.recipients)}", False) from None
    except smtplib.SMTPAuthenticationError as exc:
        raise DeliveryFailed(f"the SMTP server refused the login: {exc.smtp_code}", False) from None
    except smtplib.SMTPResponseException as exc:
        raise DeliveryFailed(f"the SMTP server answered {exc.smtp_code} {exc.smtp_error!r}",
                             400 <= exc.smtp_code < 500) from None
    except (smtplib.SMTPException, OSError) as exc:
        raise DeliveryFailed(f"cannot reach the SMTP server {settings.smtp_host}:{settings.smtp_port}: {exc}",
                             True) from None
    return f"accepted by {settings.smtp_host}"
