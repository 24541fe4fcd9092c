"""What `fluksio show` and `fluksio runs` say of fair sharing: each attempt's grant, why it was retried, the
run's priority."""

from __future__ import annotations

from datetime import datetime, timezone

from rich.console import Console

from fluksio.cli import render
from fluksio.schemas import NodeRecord, NodeStatus, Resources, RunRecord, RunStatus

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)


def shown(renderable) -> str:  # noqa: ANN001
    console = Console(record=True, width=200)
    console.print(renderable)
    return console.export_text()


def record(priority: int = 0) -> RunRecord:
    return RunRecord(id="r1", flow="solve", status=RunStatus.OK, created_at=NOW, priority=priority, nodes=[
        NodeRecord(node="solve", status=NodeStatus.ERROR, attempt=1, machine="m", granted=Resources(ram_mb=4000),
                   error="out of memory: MemoryError: (at solve.py:3 in solve)"),
        NodeRecord(node="solve", status=NodeStatus.OK, attempt=2, machine="m", granted=Resources(ram_mb=8000)),
    ])


def test_show_lists_each_attempts_grant_and_why_it_was_retried():
    text = shown(render.run_summary(record(priority=10), {}, []))
    [first] = [line for line in text.splitlines() if "1 cpu · 4000 MB" in line]
    assert "retried after: out of memory: MemoryError" in first
    [second] = [line for line in text.splitlines() if "1 cpu · 8000 MB" in line]
    assert "retried" not in second
    assert "priority 10" in text


def test_runs_shows_a_priority_column_only_when_some_run_has_one():
    assert "prio" not in shown(render.runs_table([record()]))
    table = shown(render.runs_table([record(priority=10), record()]))
    assert "prio" in table.splitlines()[0] and " 10 " in table
