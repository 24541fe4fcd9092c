"""The one clock: stored times are aware and in UTC, so any two of them compare."""

from __future__ import annotations

from datetime import datetime, timedelta, timezone

from fluksio.clock import utcnow


def test_now_is_aware_utc_and_current() -> None:
    now = utcnow()
    assert now.tzinfo is timezone.utc
    assert abs(now - datetime.now(timezone.utc)) < timedelta(seconds=5)
