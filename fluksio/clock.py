"""The clock fluksio reads for the times it stores and compares: now, in UTC, as an aware ``datetime``.

One function, so every writer — the driver's node rows, the run store's leases, the beat's ticks, the
alert log — reads the same clock: an aware time never compares with a naive one (Python raises), and the
run store refuses naive times outright (``store/models.py``).
"""

from __future__ import annotations

from datetime import datetime, timezone


def utcnow() -> datetime:
    """Now, aware, in UTC (``tzinfo`` is :data:`datetime.timezone.utc`)."""
    return datetime.now(timezone.utc)
