"""What the pages show, worked out from records: node rows grouped, calls on a timeline, a comparison. Pure.

No I/O and no web framework here: the handlers fetch records, these functions shape them, the
templates print the result.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any
from urllib.parse import quote

from fluksio import errors
from fluksio.schemas import NodeRecord, RunRecord, unit_of
from fluksio.ui.svg import Bar

#: Statuses of a call that did not do its work: shown first, and what a group's summary leads with.
FAILED = ("error", "cancelled")
def epoch_of(node: NodeRecord, resume_count: int, resumed_at: datetime | None) -> int | None:
    """Which drive of the run made this row (its calls are named with it), ``None`` when that is unknown.

    Rows are not stamped with their drive: a row that started after the last resume is of the current
    drive; one from before is of the first drive when the run was resumed once, and unknown after more.
    """
    if resume_count == 0:
        return 0
    if resumed_at is not None and node.started_at is not None and node.started_at >= resumed_at:
        return resume_count
    return 0 if resume_count == 1 else None


def flower_task_url(flower: str, task_id: str) -> str:
    return f"{flower.rstrip('/')}/task/{quote(task_id, safe='')}"


@dataclass
class Call:
    """One call of a node (one element of a mapped node): its latest attempt and the attempts before it."""

    node: str
    index: int | None
    latest: NodeRecord
    earlier: list[NodeRecord] = field(default_factory=list)

    @property
    def label(self) -> str:
        return unit_of(self.node, self.index)

    @property
    def failed(self) -> bool:
        return self.latest.status.value in FAILED


@dataclass
class NodeGroup:
    """A node's rows: one call for a plain node, one per element for a mapped node (failed elements first)."""

    node: str
    calls: list[Call]
    mapped: bool

    @property
    def counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for call in self.calls:
            counts[call.latest.status.value] = counts.get(call.latest.status.value, 0) + 1
        return dict(sorted(counts.items(), key=lambda item: (item[0] not in FAILED, item[0])))

    @property
    def status(self) -> str:
        """The worst status among the calls: what the group's row is coloured by."""
        counts = self.counts
        return next((s for s in (*FAILED, "ok", "cached", "skipped") if s in counts), next(iter(counts), "ok"))

    @property
    def summary(self) -> str:
        return " · ".join(f"{n} {status}" for status, n in self.counts.items())

    @property
    def machines(self) -> list[str]:
        return sorted({c.latest.machine for c in self.calls if c.latest.machine})


def group_nodes(nodes: Sequence[NodeRecord]) -> list[NodeGroup]:
    """Rows grouped by (node, index): each group is a node in the order its first row was written.

    The attempts of one (node, index) form one :class:`Call` (the highest attempt is the one shown).
    A node with any row of an element (``index`` not ``None``) is mapped: its calls are sorted failed
    first, then by index.
    """
    by_call: dict[tuple[str, int | None], list[NodeRecord]] = {}
    order: list[str] = []
    for row in nodes:
        if row.node not in order:
            order.append(row.node)
        by_call.setdefault((row.node, row.index), []).append(row)
    groups = []
    for node in order:
        calls = []
        for (name, index), rows in by_call.items():
            if name != node:
                continue
            rows = sorted(rows, key=lambda r: r.attempt)
            calls.append(Call(name, index, rows[-1], rows[:-1]))
        mapped = any(call.index is not None for call in calls)
        if mapped:
            calls.sort(key=lambda c: (not c.failed, -1 if c.index is None else c.index))
        groups.append(NodeGroup(node, calls, mapped))
    return groups


def timeline_bars(record: RunRecord, href: Callable[[NodeRecord], str | None] | None = None) -> list[Bar]:
    """A bar per node call that ran on a machine (not those restored from the cache or skipped),
    timed in seconds from the earliest call's start."""
    ran = [n for n in record.nodes if n.machine and n.started_at is not None and n.finished_at is not None]
    if not ran:
        return []
    origin = min(n.started_at for n in ran if n.started_at is not None)
    bars = []
    for n in ran:
        assert n.started_at is not None and n.finished_at is not None
        name = unit_of(n.node, n.index)
        took = fmt_duration(n.duration_ms)
        gpus = f", GPUs {','.join(map(str, n.gpus))}" if n.gpus else ""
        attempt = f", attempt {n.attempt}" if n.attempt > 1 else ""
        bars.append(Bar(lane=n.machine or "?", label=name, start=(n.started_at - origin).total_seconds(),
                        end=(n.finished_at - origin).total_seconds(), status=n.status.value,
                        title=f"{name} on {n.machine}{gpus}: {n.status.value} in {took}{attempt}",
                        href=href(n) if href else None))
    return bars


@dataclass(frozen=True)
class CompareRow:
    """One row of the comparison: a name, one cell per run, and whether the cells differ."""

    kind: str  # "param", "metric" or "run"
    name: str
    cells: list[str]
    differs: bool


def compare_rows(records: Sequence[RunRecord], finals: Mapping[str, Mapping[str, float]]) -> list[CompareRow]:
    """Params (the union of their names, in order of first appearance), then each metric's final value.

    A row ``differs`` when its cells are not all the same (a param a run lacks counts as different).
    """
    rows = [CompareRow("run", "flow", [r.flow for r in records], len({r.flow for r in records}) > 1),
            CompareRow("run", "status", [r.status.value for r in records], False),
            CompareRow("run", "duration", [fmt_duration(r.duration_ms) for r in records], False)]
    names: list[str] = []
    for record in records:
        names += [name for name in record.params if name not in names]
    for name in names:
        raw = [json.dumps(r.params[name], sort_keys=True, default=str) if name in r.params else None
               for r in records]
        cells = [fmt_value(r.params[name]) if name in r.params else "—" for r in records]
        rows.append(CompareRow("param", name, cells, len(set(raw)) > 1))
    metrics = sorted({name for run_id in (r.id for r in records) for name in finals.get(run_id, {})})
    for name in metrics:
        values = [finals.get(r.id, {}).get(name) for r in records]
        rows.append(CompareRow("metric", name, ["—" if v is None else fmt_value(v) for v in values],
                               len(set(values)) > 1))
    return rows


def fmt_duration(ms: int | None) -> str:
    """``850 ms``, ``12.3 s``, ``4 min 05 s``, ``2 h 03 min``; empty when unknown."""
    if ms is None:
        return ""
    if ms < 1000:
        return f"{ms} ms"
    seconds = ms / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    minutes, secs = divmod(int(seconds), 60)
    if minutes < 60:
        return f"{minutes} min {secs:02d} s"
    hours, minutes = divmod(minutes, 60)
    return f"{hours} h {minutes:02d} min"


def fmt_value(value: Any, width: int = 80) -> str:
    """A param, metric or output as short text: numbers as themselves, artifacts by name, the rest as JSON."""
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, dict) and set(value) == {"$artifact"}:
        body = value["$artifact"]
        return f"artifact {body.get('name') or body.get('digest', '')[:19]}"
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= width else text[:width - 1] + "…"


def metric_summary(latest: Mapping[str, float], shown: int = 4) -> list[tuple[str, str]]:
    """A few ``(name, value)`` of a run's newest metric values, and ``("+N", "more")`` past ``shown``."""
    items = [(name, fmt_value(value)) for name, value in sorted(latest.items())]
    if len(items) > shown:
        return items[:shown] + [(f"+{len(items) - shown}", "more")]
    return items


def artifact_refs(value: Any) -> list[dict[str, Any]]:
    """The ``$artifact`` bodies inside a result, in order (what gets a download link)."""
    if isinstance(value, dict) and set(value) == {"$artifact"}:
        return [value["$artifact"]]
    if isinstance(value, dict):
        return [ref for item in value.values() for ref in artifact_refs(item)]
    if isinstance(value, list):
        return [ref for item in value for ref in artifact_refs(item)]
    return []


@dataclass(frozen=True)
class DriveRow:
    """One drive of a run as its page lists it: the earlier ones, then the one now (``ended_as`` ``None``)."""

    epoch: int
    driver: str
    started_at: datetime | None
    last_lease_at: datetime | None
    ended_as: str | None
    reason: str | None
    #: Seconds from its last sign of life to the next drive's start (``None``: the last drive, or unknown).
    driverless_s: float | None


def drive_rows(record: RunRecord) -> list[DriveRow]:
    """A resumed run's drives, oldest first, each with the time the run then spent without a driver; empty for
    a run never resumed."""
    if not record.drives:
        return []
    rows = []
    starts = [d.started_at for d in record.drives[1:]] + [record.drive_started_at]
    for drive, next_start in zip(record.drives, starts, strict=True):
        gap = (next_start - drive.last_lease_at).total_seconds() if next_start and drive.last_lease_at else None
        rows.append(DriveRow(drive.epoch, drive.driver or "?", drive.started_at, drive.last_lease_at,
                             drive.ended_as, drive.reason, None if gap is None else max(0.0, gap)))
    now = record.resume_count
    rows.append(DriveRow(now, record.driver or "?", record.drive_started_at, record.lease_at, None, None, None))
    return rows


def fmt_time(moment: datetime | None) -> str:
    """``2026-11-30 05:48:12`` (UTC, as the store keeps it); empty when unknown."""
    return moment.strftime("%Y-%m-%d %H:%M:%S") if moment is not None else ""


def first_line(text: str | None, width: int = 160) -> str:
    """The first line of an error, cut to ``width`` characters."""
    line = errors.first_line(text)
    return line if len(line) <= width else line[:width - 1] + "…"
