"""Who trusts whom: each signing process says, as it starts, which certificate it signs with and which it
trusts, so that a worker whose certificate the others do not trust is told so at once (not by runs whose
calls and completions are silently refused).

What the broker says here is only what processes said of themselves: a hint for people, never a reason
to accept a message (that is the signatures' job; see fluksio/security/signatures.py).
"""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from fluksio.constants import SIGNER_KEY
from fluksio.security.signatures import Signer, load_signer

if TYPE_CHECKING:
    from fluksio.settings import Settings

log = logging.getLogger(__name__)

#: How long what a process said of itself stands unless it says it again, in seconds (it does, every third).
TTL_S = 60.0


@dataclass(frozen=True)
class Peer:
    """What one signing process said of itself as it started."""

    name: str
    certificate: str
    trusts: frozenset[str]
    at: float


def announce(redis: Any, name: str, signer: Signer) -> None:
    """Say, for the next :data:`TTL_S` seconds, which certificate the process ``name`` signs with and which
    ones it trusts (a process that dies stops saying it, and is forgotten)."""
    redis.set(SIGNER_KEY + name, json.dumps({"certificate": signer.identity, "trusts": sorted(signer.trusted),
                                             "at": time.time()}), px=int(TTL_S * 1000))


def withdraw(redis: Any, name: str) -> None:
    redis.delete(SIGNER_KEY + name)


def peers(redis: Any) -> list[Peer]:
    """Every signing process that is running (it said so within :data:`TTL_S`), by name."""
    keys = sorted(redis.scan_iter(match=SIGNER_KEY + "*", count=500))
    found = []
    for key, raw in zip(keys, redis.mget(keys) if keys else [], strict=True):
        name = key.decode() if isinstance(key, bytes) else str(key)
        try:
            data = json.loads(raw)
            found.append(Peer(name=name[len(SIGNER_KEY):], certificate=str(data["certificate"]),
                              trusts=frozenset(map(str, data["trusts"])), at=float(data["at"])))
        except (ValueError, KeyError, TypeError):
            continue  # gone meanwhile, or not something a fluksio wrote: nothing to say about it
    return found


def disagreements(name: str, signer: Signer, others: list[Peer]) -> list[str]:
    """What is wrong between the process ``name`` and the others, one sentence each (empty: all trust all)."""
    problems = []
    if not signer.trusts(signer.identity):
        problems.append(f"{name} does not trust its own certificate {signer.identity!r}: add "
                        f"{signer.certificate_path} to {signer.store_path}, or its drivers and nodes refuse what "
                        "each other sends")
    for peer in others:
        if peer.name == name:
            continue
        if signer.identity not in peer.trusts:
            problems.append(f"{peer.name} does not trust the certificate {name} signs with ({signer.identity!r}): "
                            f"it refuses what {name} sends; add that certificate to {peer.name}'s "
                            "FLUKSIO_SIGNING_CERT_STORE")
        if not signer.trusts(peer.certificate):
            problems.append(f"{name} does not trust the certificate {peer.name} signs with ({peer.certificate!r}): "
                            f"it refuses what {peer.name} sends; add that certificate to {signer.store_path}")
    return problems


class Introduction:
    """What a signing worker process said of itself (:func:`introduce`), said again every third of
    :data:`TTL_S` until :meth:`withdraw`."""

    def __init__(self, settings: Settings, redis: Any, name: str) -> None:
        self.redis = redis
        self.name = name
        self.signer = load_signer(settings)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._keep, name="fluksio-signer", daemon=True)

    def start(self) -> Introduction:
        signer, client = self.signer, self.redis
        if signer is None or client is None:
            return self
        log.info("%s signs its messages as %r and trusts %d certificate(s) from %s", self.name, signer.identity,
                 len(signer.trusted), signer.store_path)
        others = peers(client)
        announce(client, self.name, signer)
        for problem in disagreements(self.name, signer, others):
            log.error("message signing: %s", problem)
        self._thread.start()
        return self

    def _keep(self) -> None:
        assert self.signer is not None and self.redis is not None
        while not self._stop.wait(TTL_S / 3):
            try:
                announce(self.redis, self.name, self.signer)
            except Exception:  # the broker away for a moment: the next try says it again
                log.debug("could not say again which certificate %s signs with", self.name, exc_info=True)

    def withdraw(self) -> None:
        """A process that stops cleanly takes back what it said of itself."""
        self._stop.set()
        if self.signer is None or self.redis is None:
            return
        try:
            withdraw(self.redis, self.name)
        except Exception:  # the broker may be what is going away
            log.debug("could not withdraw %s from the signers", self.name, exc_info=True)


def introduce(settings: Settings, redis: Any, name: str) -> Introduction:
    """As a signing worker process ``name`` (``nodes@box1``) starts: say which certificate it signs with, and
    tell its log at once of every running process that would refuse its messages, or whose messages it would
    refuse. Keeps saying it while the process runs; call ``withdraw()`` as it stops."""
    return Introduction(settings, redis, name).start()
