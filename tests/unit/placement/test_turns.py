"""Sharing machines fairly: waiting calls granted by priority then age, backfill that never overtakes a call
that could use what is free, and pools of slots. The scenarios are in turn_scenarios.py: here on memory books,
and on Redis books in tests/integration/test_redis_books.py."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.unit.placement import turn_scenarios


@pytest.mark.parametrize("behaviour", turn_scenarios.SCENARIOS, ids=lambda behaviour: behaviour.__name__)
def test_waiting_calls_take_their_turns_on_memory_books(behaviour: Callable[[], None]) -> None:
    behaviour()
