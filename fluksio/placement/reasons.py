"""Why a call waits, as one word of a small fixed vocabulary, read from the reason the placer lists it under. Pure.

The placer says why a call waits in words a user reads (``waiting for pool 'licenses' (4/4 in use)``), made in
``placer._plan``, ``turns.pool_reason``/``behind_reason`` and their Lua twins in ``redis_claim``. Dashboards
and alerts need a word they can group by instead (a Prometheus label must not be free text: each distinct
value is a series of its own), so :func:`wait_kind` maps each of those sentences onto :class:`WaitKind`.
tests/unit/placement/test_reasons.py holds it to the sentences the placer really makes.
"""

from __future__ import annotations

import re
from enum import StrEnum


class WaitKind(StrEnum):
    """What a waiting call waits for."""

    #: No attached machine carries its label (or no machine is attached at all): only a new worker helps.
    NO_MACHINE = "no_machine"
    #: Machines that could take it are attached, but none has what it asks for free now.
    RESOURCES = "resources"
    #: Every slot of its pool is held.
    POOL = "pool"
    #: It would fit, but calls ahead of it (higher priority, or older) can use what is free.
    TURN = "turn"
    #: A reason none of the above names (a newer sentence this module does not know yet).
    OTHER = "other"


#: What a driver puts before the reason of a mapped node's waiting elements (``driver/dispatching.py``):
#: one entry on the list stands for that many calls.
_ELEMENTS = re.compile(r"^(?P<waiting>\d+) of \d+ elements ")


def wait_kind(reason: str) -> WaitKind:
    """The kind of wait a listed reason names (:attr:`WaitKind.OTHER` for one it does not know)."""
    text = _ELEMENTS.sub("", reason, count=1)
    if text.startswith("waiting for pool "):
        return WaitKind.POOL
    if text.startswith("waiting for its turn"):
        return WaitKind.TURN
    if text.startswith("waiting for a worker"):
        # "… with 2 gpu(s) free" once some machine could take it; without resources named, none could.
        return WaitKind.RESOURCES if text.endswith(" free") else WaitKind.NO_MACHINE
    return WaitKind.OTHER


def calls_listed(reason: str) -> int:
    """How many calls one entry of the waiting list stands for: a mapped node's waiting elements are listed
    once, as ``12 of 40 elements waiting …``; any other entry is one call."""
    found = _ELEMENTS.match(reason)
    return int(found.group("waiting")) if found else 1
