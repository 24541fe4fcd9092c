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

import logging
import threading
from typing import Any

from celery import Celery

from fluksio.errors import ConfigError
from fluksio.runs import trust
from fluksio.runs.runtime import Runtime
from fluksio.runs.signing import load_signer
from fluksio.settings import Settings

log = logging.getLogger(__name__)

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

    The files are checked first (:func:`~fluksio.runs.signing.load_signer`) so that a mistake in them is one
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


class Introduction:
    """What a signing worker process said of itself (:func:`introduce`), said again every third of
    :data:`~fluksio.runs.trust.TTL_S` until :meth:`withdraw`."""

    def __init__(self, runtime: Runtime, name: str) -> None:
        self.runtime = runtime
        self.name = name
        self.signer = load_signer(runtime.settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="fluksio-signer", daemon=True)

    def start(self) -> Introduction:
        signer, client = self.signer, self.runtime.redis
        if signer is None or client is None:
            return self
        log.info("%s signs its messages as %r and trusts %d certificate(s) from %s", self.name, signer.identity,
                 len(signer.trusted), signer.store_path)
        others = trust.peers(client)
        trust.announce(client, self.name, signer)
        for problem in trust.disagreements(self.name, signer, others):
            log.error("message signing: %s", problem)
        self._thread.start()
        return self

    def _keep(self) -> None:
        assert self.signer is not None and self.runtime.redis is not None
        while not self._stop.wait(trust.TTL_S / 3):
            try:
                trust.announce(self.runtime.redis, self.name, self.signer)
            except Exception:  # the broker away for a moment: the next try says it again
                log.debug("could not say again which certificate %s signs with", self.name, exc_info=True)

    def withdraw(self) -> None:
        """A process that stops cleanly takes back what it said of itself."""
        self._stop.set()
        if self.signer is None or self.runtime.redis is None:
            return
        try:
            trust.withdraw(self.runtime.redis, self.name)
        except Exception:  # the broker may be what is going away
            log.debug("could not withdraw %s from the signers", self.name, exc_info=True)


def introduce(runtime: Runtime, name: str) -> Introduction:
    """As a signing worker process ``name`` (``nodes@box1``) starts: say which certificate it signs with, and
    tell its log at once of every running process that would refuse its messages, or whose messages it would
    refuse. Keeps saying it while the process runs; call ``withdraw()`` as it stops."""
    return Introduction(runtime, name).start()
