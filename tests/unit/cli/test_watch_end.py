"""`fluksio watch --run` of a run that ended while it subscribed prints the events that came, not just its end."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Any

import pytest

from fluksio.cli.watch import _print_its_end
from fluksio.schemas import RunRecord, RunStatus

RUN = RunRecord(id="01JPA3QY7K8ZX4W2M9N6B5C3D1", flow="gated", status=RunStatus.OK,
                created_at=datetime(2025, 3, 14, tzinfo=timezone.utc))


class Buffered:
    """A subscription holding the events that came before the run's row was read."""

    def __init__(self, events: list[dict[str, Any]]) -> None:
        self.events = list(events)
        self.waits: list[float] = []

    def next(self, timeout_s: float) -> dict[str, Any] | None:
        self.waits.append(timeout_s)
        return self.events.pop(0) if self.events else None


def test_the_events_since_subscribing_are_printed_up_to_run_finished(capsys: pytest.CaptureFixture[str]) -> None:
    stream = Buffered([{"event": "node_finished", "run_id": "another-run", "node": "x"},
                       {"event": "node_finished", "run_id": RUN.id, "node": "wait_for_gate"},
                       {"event": "run_finished", "run_id": RUN.id, "status": "ok"}])
    assert _print_its_end(stream, RUN, as_json=True)  # type: ignore[arg-type]
    printed = [json.loads(line) for line in capsys.readouterr().out.splitlines()]
    assert [e["event"] for e in printed] == ["node_finished", "run_finished"]
    assert all(e["run_id"] == RUN.id for e in printed)


def test_a_run_long_over_is_said_over_at_once(capsys: pytest.CaptureFixture[str]) -> None:
    stream = Buffered([])
    assert not _print_its_end(stream, RUN, as_json=False)  # type: ignore[arg-type]
    assert stream.waits == [0.0] and capsys.readouterr().out == ""
