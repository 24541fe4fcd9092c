"""What a terminal shows of a run while it runs: ``fluksio run``'s live view, and ``fluksio watch``'s event lines."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from rich.console import Group
from rich.table import Table
from rich.text import Text

from fluksio.cli import render
from fluksio.schemas import RunRecord

#: Most running calls the live display lists one by one.
LIVE_ROWS = 8
EVENT_STYLE = {
    "run_queued": "blue", "run_started": "bold", "node_queued": "blue", "node_started": "yellow",
    "node_finished": "green", "run_finished": "bold",
}


def progress_view(record: RunRecord, total: int, latest: dict[str, tuple[int, float]],
                  activity: RunActivity | None = None, now: float | None = None) -> Group:
    """What ``fluksio run`` redraws while it waits: nodes done/total, what runs where, what waits and why,
    and the newest value of each metric. ``activity`` (fed with the run's events) knows the running
    and waiting nodes; without it the run's ``status_reason`` stands in for the waiting ones."""
    now = time.time() if now is None else now
    running, waiting = activity.snapshot() if activity is not None else ({}, {})
    parts: list[Any] = [progress_header(record, total, running, now, waiting)]
    if running or waiting:
        parts.append(activity_table(running, waiting, now))
    elif record.status_reason and not record.status.is_terminal():
        parts.append(Text(f"  waiting: {record.status_reason}", style="yellow"))
    if latest:
        parts.append(metrics_line(latest))
    return Group(*parts)


def nodes_done(record: RunRecord, running: Mapping[str, Any] | None = None,
               waiting: Mapping[str, Any] | None = None) -> int:
    """Nodes with a final row; a node that failed and is running again (a retry), or a mapped node with an
    element running or waiting (``count[3]``), is not done."""
    busy = {unit.partition("[")[0] for unit in (*(running or ()), *(waiting or ()))}
    return len({n.node for n in record.nodes} - busy)


def progress_header(record: RunRecord, total: int, running: Mapping[str, Any], now: float,
                    waiting: Mapping[str, Any] | None = None) -> Text:
    done = nodes_done(record, running, waiting)
    text = Text.assemble(render.styled(record.status.value), "  ", (f"{done}/{total}", "bold"), " nodes done")
    if running:
        text.append(f" · {len(running)} running")
    if record.started_at is not None:
        end = record.finished_at.timestamp() if record.finished_at is not None else now
        text.append(f" · {end - record.started_at.timestamp():.1f}s", style="dim")
    return text


def activity_table(running: Mapping[str, RunningCall], waiting: Mapping[str, str], now: float) -> Table:
    """One row per running call (at most :data:`LIVE_ROWS`), one per distinct reason to wait."""
    table = Table.grid(padding=(0, 2))
    table.add_column(no_wrap=True)
    table.add_column(no_wrap=True)
    table.add_column()
    calls = sorted(running.items())
    for node, call in calls[:LIVE_ROWS]:
        where = f"on {call.machine}" + (f" · gpus {','.join(map(str, call.gpus))}" if call.gpus else "")
        attempt = f" · attempt {call.attempt}" if call.attempt > 1 else ""
        table.add_row(Text("  ▶ running", style="yellow"), node,
                      Text(f"{where} · {max(0.0, now - call.since):.1f}s{attempt}"))
    if len(calls) > LIVE_ROWS:
        table.add_row(Text("  ▶ running", style="yellow"), f"+{len(calls) - LIVE_ROWS} more", "")
    by_reason: dict[str, list[str]] = {}
    for node, reason in sorted(waiting.items()):
        by_reason.setdefault(reason, []).append(node)
    for reason, nodes in by_reason.items():
        table.add_row(Text("  ⏸ waiting", style="blue"), render.name_list(nodes), Text(reason, style="yellow"))
    return table


def metrics_line(latest: Mapping[str, tuple[int, float]]) -> Text:
    text = Text("  ")
    for index, (name, (step, value)) in enumerate(sorted(latest.items())):
        if index:
            text.append(" · ", style="dim")
        text.append(name, style="cyan")
        text.append(f" {value:.4g}")
        text.append(f" (step {step})", style="dim")
    return text


@dataclass(frozen=True)
class RunningCall:
    machine: str
    gpus: tuple[int, ...]
    attempt: int
    #: When the call started, in seconds since the epoch (the event's time).
    since: float


class RunActivity:
    """What a run's events say is happening now: which nodes run where, which wait and why.

    Subscribe :meth:`observe` to the events *before* submitting (a run's first
    calls may start before ``submit`` returns), then name the run: events of
    every run are kept until then, and only the named run's are shown. Events
    arrive on the events' thread and are read on the display's, hence the lock.
    """

    def __init__(self, run_id: str | None = None) -> None:
        #: The run :meth:`snapshot` describes.
        self.run_id = run_id
        self._running: dict[tuple[str, str], RunningCall] = {}
        self._waiting: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()

    def observe(self, event: Mapping[str, Any]) -> None:
        run_id, node, kind = event.get("run_id"), event.get("node"), event.get("event")
        if not run_id or not node or (self.run_id is not None and run_id != self.run_id):
            return
        key = (str(run_id), str(node))
        with self._lock:
            if kind == "node_queued":
                self._waiting[key] = str(event.get("reason") or "waiting for a machine")
            elif kind == "node_started":
                self._waiting.pop(key, None)
                self._running[key] = RunningCall(str(event.get("machine") or "?"), tuple(event.get("gpus") or ()),
                                                 int(event.get("attempt") or 1), float(event.get("at") or time.time()))
            elif kind == "node_finished":
                self._waiting.pop(key, None)
                self._running.pop(key, None)

    def snapshot(self) -> tuple[dict[str, RunningCall], dict[str, str]]:
        """The named run's running calls (node → call) and waiting nodes (node → why)."""
        with self._lock:
            running = {node: call for (run, node), call in self._running.items() if run == self.run_id}
            waiting = {node: why for (run, node), why in self._waiting.items() if run == self.run_id}
        return running, waiting


def event_line(event: Mapping[str, Any]) -> Text:
    """One event as one line: time, kind, run, node, and what happened (``fluksio watch``)."""
    at = event.get("at")
    clock = datetime.fromtimestamp(at).strftime("%H:%M:%S.%f")[:-3] if isinstance(at, (int, float)) else "--:--:--"
    kind = str(event.get("event", "?"))
    text = Text.assemble((clock, "dim"), "  ", (f"{kind:<13}", EVENT_STYLE.get(kind, "")), "  ",
                         str(event.get("run_id", "?")))
    subject = event.get("node") or event.get("flow")
    if subject:
        text.append(f"  {subject}", style="bold")
    detail = event_detail(kind, event)
    if detail:
        text.append("  ")
        text.append_text(detail)
    return text


def event_detail(kind: str, event: Mapping[str, Any]) -> Text:
    status = str(event.get("status") or "")
    if kind in ("node_queued", "run_queued"):
        return Text(f"waits: {event.get('reason') or '?'}", style="yellow")
    if kind == "node_started":
        gpus = event.get("gpus") or []
        return Text(f"on {event.get('machine')}" + (f" · gpus {','.join(map(str, gpus))}" if gpus else "")
                    + f" · attempt {event.get('attempt', 1)}")
    if kind == "node_finished":
        text = render.styled(status)
        if event.get("cached_from"):
            text.append(f" · from run {event['cached_from']}")
        elif event.get("machine"):
            text.append(f" on {event['machine']}")
        if event.get("error"):
            text.append(f" · {render.short(str(event['error']).splitlines()[0], 100)}", style="red")
        return text
    if kind == "run_finished":
        text = render.styled(status)
        if event.get("reason"):
            text.append(f" · {render.short(str(event['reason']), 120)}", style="dim")
        return text
    return Text("")
