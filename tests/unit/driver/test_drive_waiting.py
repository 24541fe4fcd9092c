"""A driver keeps the calls it waits to place on the placer's list while it lives, and only then."""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest

from fluksio import Flow
from tests.unit.driver.drives import answer, drive_with, hop


@pytest.fixture
def runtime(make_runtime):
    return make_runtime(cpus=1, lease_interval_s=0.05)


def test_a_driver_keeps_its_waiting_call_listed_while_it_waits(runtime):
    flow = Flow("two_on_one_cpu", outputs=["a", "b"])
    flow.node(hop, name="a", provides="a", requires=[])
    flow.node(hop, name="b", provides="b", requires=[])
    listed: list[list[float]] = []

    def dispatch(call: dict[str, Any], _queue: str, _display: str) -> None:
        if listed:  # the second call, sent once the first gave its cpu back
            answer(runtime, flow, call)
            return

        def end_first_later() -> None:
            # Meanwhile the other node waits for the only cpu: its driver should keep it on the list.
            for _ in range(4):
                time.sleep(0.1)
                listed.append([w.seen_at for w in runtime.placer.books.waiting()])
            answer(runtime, flow, call)

        threading.Thread(target=end_first_later, daemon=True).start()

    drive_with(runtime, flow, dispatch)
    assert all(len(marks) == 1 for marks in listed), listed  # one call waited the whole time
    marks = [m[0] for m in listed]
    assert marks == sorted(marks) and marks[-1] > marks[0]  # kept fresh, lease interval after lease interval
    assert runtime.placer.snapshot(stale_after_s=60)["waiting"] == []  # placed, and off the list at the end
