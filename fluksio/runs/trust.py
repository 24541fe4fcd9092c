"""Who trusts whom: each signing process says, as it starts, which certificate it signs with and which it
trusts, so that a worker whose certificate the others do not trust is told so at once (not by runs whose
calls and completions are silently refused).

What the broker says here is only what processes said of themselves: a hint for people, never a reason
to accept a message (that is the signatures' job; see fluksio/runs/signing.py).
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from fluksio.constants import SIGNER_KEY
from fluksio.runs.signing import Signer

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
