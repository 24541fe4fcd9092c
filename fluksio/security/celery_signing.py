"""Celery's message signing for every app of an installation that sets ``FLUKSIO_SIGNING_*``.

Celery's ``auth`` serializer signs each task message's body with this process's key and accepts only
messages whose signature verifies against a certificate in its store (RSA-PSS, SHA-256). The drive
tasks the clients and beats send, the node calls the drivers send and the control commands Flower and
``fluksio flower`` send (``enable_events``, ``revoke``; they use the task serializer) are all signed, and a
worker takes nothing else: a plain JSON message is refused before it is decoded, as a pickled one is.

Task events (what Flower shows) stay JSON: they run nothing. Celery's serializer registry is one per
process, so one process signs with one key whatever number of apps it builds.
"""

from __future__ import annotations

from typing import Any

from celery import Celery

from fluksio.errors import ConfigError
from fluksio.security.signatures import load_signer
from fluksio.settings import Settings

#: Celery's name for its signing serializer, and the content type its messages carry.
AUTH, AUTH_CONTENT_TYPE = "auth", "application/data"


def signing_config(settings: Settings) -> dict[str, Any]:
    """The Celery settings that sign every task message and accept only signed ones (empty when off)."""
    if not settings.signing:
        return {}
    return {
        "task_serializer": AUTH,
        "accept_content": [AUTH],
        "security_key": str(settings.signing_key),
        "security_certificate": str(settings.signing_certificate),
        "security_cert_store": str(settings.signing_cert_store),
        "security_digest": "sha256",
    }


def secure(app: Celery, settings: Settings) -> None:
    """Register the signing serializer for ``app`` (when signing is on): after this, what it sends is signed.

    The files are checked first (:func:`~fluksio.security.signatures.load_signer`) so that a mistake in them is one
    line naming the file, not a traceback from deep inside Celery.
    """
    if not settings.signing:
        return
    load_signer(settings)
    try:
        # JSON stays enabled for what is not a task: task events, results. Every consumer of tasks and control
        # commands accepts only `auth` (accept_content), whatever the registry holds.
        app.setup_security(allowed_serializers=["json", AUTH_CONTENT_TYPE])
    except Exception as exc:  # Celery's SecurityError, ImproperlyConfigured …: all a configuration mistake here
        raise ConfigError(f"cannot set up message signing (FLUKSIO_SIGNING_*): {type(exc).__name__}: {exc}") from None
