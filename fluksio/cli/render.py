"""How runs look in a terminal: tables, a live progress line, summaries."""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

import click
from pydantic import BaseModel
from rich.cells import cell_len
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from fluksio.schemas import NodeRecord, Resources, RunRecord

R = TypeVar("R", bound=BaseModel)

STATUS_STYLE = {
    "ok": "green", "cached": "cyan", "running": "yellow", "queued": "blue", "error": "red",
    "skipped": "dim", "cancelled": "magenta", "abandoned": "red",
}
#: How ``fluksio runs`` shows when a run was created.
CREATED = "%m-%d %H:%M:%S"
#: Columns a table cell's padding and the rule before it take.
COLUMN_GAP = 3
#: Params narrower than this make ``fluksio runs`` shorten ids; narrower than ``PARAMS_LEAST``, they are left out.
PARAMS_ROOMY, PARAMS_LEAST = 30, 8
#: Longest flow name ``fluksio runs`` shows when it shortens ids, and when it does not; the least it cuts
#: one to, in columns.
FLOW_NARROW, FLOW_WIDE, FLOW_LEAST = 20, 60, 10


def styled(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def size_text(size: int) -> str:
    """``512 B``, ``1.5 kB``, ``200.0 MB``: a size in bytes as people read it (powers of 1000)."""
    if size < 1000:
        return f"{size} B"
    scaled = float(size)
    for unit in ("kB", "MB", "GB", "TB"):
        scaled /= 1000
        if scaled < 1000 or unit == "TB":
            break
    return f"{scaled:.1f} {unit}"


def display_value(value: Any) -> Any:
    """Artifact references shown as ``artifact name (size, digest…)``; a codec's value also names its codec:
    ``numpy arr.npy (8.0 MB, blake3:ab12…)``."""
    if isinstance(value, dict) and set(value) == {"$artifact"}:
        body = value["$artifact"]
        kind = body.get("codec") or "artifact"
        return f"{kind} {body.get('name') or ''} ({size_text(body['size'])}, {body['digest'][:19]}…)"
    if isinstance(value, dict):
        return {k: display_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [display_value(v) for v in value]
    return value


def runs_table(records: list[RunRecord], metrics: dict[str, dict[str, float]] | None = None,
               width: int = 80) -> Table:
    """Runs, one row each, that fit a terminal ``width`` columns wide.

    The id, flow, status, created time and duration stay readable at any width from 80 up: when
    whole ids would leave the params less than :data:`PARAMS_ROOMY` columns, each id is shortened to
    the shortest prefix that tells the listed runs apart (any unique prefix works with ``fluksio
    show``) and flow names to :data:`FLOW_NARROW` (or less, down to :data:`FLOW_LEAST`, to leave
    the params some room). The params get what is left, elided with ``…`` (or no column, under
    :data:`PARAMS_LEAST`); a sweep's seeds and metrics (``metrics``) come before them.
    """
    metric_names = sorted({n for m in (metrics or {}).values() for n in m})
    seeded = any(r.seed is not None for r in records)
    prioritised = any(r.priority for r in records)  # fair sharing: a column only when some run has a priority

    def cells(record: RunRecord, run_id: str, flow_width: int) -> list[str]:
        duration = f"{record.duration_ms / 1000:.2f}s" if record.duration_ms is not None else ""
        row = [run_id, short(record.flow, flow_width), record.status.value, record.created_at.strftime(CREATED),
               duration]
        if seeded:
            row.append("" if record.seed is None else str(record.seed))
        if prioritised:
            row.append(str(record.priority))
        last = (metrics or {}).get(record.id, {})
        return row + [f"{last[n]:.4g}" if n in last else "" for n in metric_names]

    headers = ["run", "flow", "status", "created", "duration", *(["seed"] if seeded else []),
               *(["prio"] if prioritised else []), *metric_names]
    rows = [cells(r, r.id, FLOW_WIDE) for r in records]
    if width - _row_width(headers, rows) - COLUMN_GAP < PARAMS_ROOMY:
        ids = short_ids([r.id for r in records])
        rows = [cells(r, ids[r.id], FLOW_WIDE) for r in records]
        # The flow name gives way before anything else whole does (down to FLOW_LEAST), so that the params
        # keep PARAMS_LEAST if they can.
        others = _row_width([h for i, h in enumerate(headers) if i != 1], [r[:1] + r[2:] for r in rows])
        names = max([cell_len(row[1]) for row in rows], default=0)
        flow_width = max(FLOW_LEAST, min(names, FLOW_NARROW, width - others - 2 * COLUMN_GAP - PARAMS_LEAST))
        rows = [cells(r, ids[r.id], flow_width) for r in records]
    room = width - _row_width(headers, rows) - COLUMN_GAP
    table = Table(show_edge=False, header_style="bold")
    for index, header in enumerate(headers):
        table.add_column(header, no_wrap=True, justify="right" if index >= 5 else "left")
    if room >= PARAMS_LEAST:
        table.add_column("params", no_wrap=True, overflow="ellipsis", max_width=room)
    for record, row in zip(records, rows):
        shown: list[str | Text] = [*row]
        shown[2] = styled(record.status.value)
        if room >= PARAMS_LEAST:
            shown.append(short(dict(record.params), room))
        table.add_row(*shown)
    return table


def _row_width(headers: list[str], rows: list[list[str]]) -> int:
    """Columns a table of these cells takes (rich's default padding, one rule between columns)."""
    widths = [max([cell_len(h), *(cell_len(row[i]) for row in rows)]) for i, h in enumerate(headers)]
    return sum(widths) + COLUMN_GAP * len(widths) - 1


def short_ids(ids: list[str], least: int = 8) -> dict[str, str]:
    """The shortest prefix (at least ``least`` characters) that tells each id from the others.

    Run ids start with their creation time, so a sweep's ids share a long prefix.
    """
    width = least
    while width < max(map(len, ids), default=0) and len({i[:width] for i in ids}) < len(set(ids)):
        width += 1
    return {i: i[:width] for i in ids}


#: Failed elements of one mapped node that ``fluksio show`` lists one by one.
FAILED_ELEMENTS_SHOWN = 10


def nodes_table(record: RunRecord) -> Table:
    """A row per node call; a mapped node's elements folded into one row (``38/40 ok, 2 error``), its
    failed elements listed under it. The run a cached node's outputs came from has a column of its own (there
    when some node was cached), apart from the errors."""
    table = Table(show_edge=False, header_style="bold")
    cached = any(n.cached_from for n in record.nodes)
    for column in ("node", "status", "machine", "gpus", "granted", "attempt", "duration",
                   *(["cached from"] if cached else []), "error"):
        table.add_column(column)
    elements: dict[str, dict[int, NodeRecord]] = {}
    for n in record.nodes:
        if n.index is not None:
            latest = elements.setdefault(n.node, {})
            if n.index not in latest or n.attempt >= latest[n.index].attempt:
                latest[n.index] = n
    last: dict[tuple[str, int | None], int] = {}  # (node, element) → its last attempt: earlier ones were retried
    for n in record.nodes:
        last[(n.node, n.index)] = max(n.attempt, last.get((n.node, n.index), 0))
    shown: set[str] = set()
    for n in record.nodes:
        if n.index is None:
            _node_row(table, n.node, n, retried=n.attempt < last[(n.node, None)], cached=cached)
        elif n.node not in shown:
            shown.add(n.node)
            _mapped_rows(table, n.node, elements[n.node], cached=cached)
    return table


def _node_row(table: Table, name: str, n: NodeRecord, retried: bool = False, cached: bool = False) -> None:
    """One call's row; ``retried``: a later attempt followed it (its error is why); ``cached``: the table has the
    column "cached from"."""
    duration = f"{n.duration_ms / 1000:.3f}s" if n.duration_ms is not None else ""
    error = (n.error or "").splitlines()[0] if n.error else ""
    if n.child_run and not error:
        error = f"child run {n.child_run}"
    elif retried:
        error = f"retried after: {error or n.status.value}"
    table.add_row(name, styled(n.status.value), n.machine or "", ",".join(map(str, n.gpus)), granted_text(n.granted),
                  str(n.attempt), duration, *([n.cached_from or ""] if cached else []), short(error, 70))


def granted_text(granted: Resources | None) -> str:
    """``1 cpu · 1 gpu · 8000 MB``: what an attempt held."""
    if granted is None:
        return ""
    parts = [f"{granted.cpus} cpu"] + ([f"{granted.gpus} gpu"] if granted.gpus else [])
    return " · ".join(parts + ([f"{granted.ram_mb} MB"] if granted.ram_mb else []))


def _mapped_rows(table: Table, node: str, latest: dict[int, NodeRecord], cached: bool = False) -> None:
    counts = Counter(n.status.value for n in latest.values())
    ok = counts.pop("ok", 0) + counts.pop("cached", 0)
    status = ", ".join([f"{ok}/{len(latest)} ok", *(f"{count} {word}" for word, count in sorted(counts.items()))])
    machines = sorted({n.machine for n in latest.values() if n.machine})
    starts = [n.started_at for n in latest.values() if n.started_at]
    ends = [n.finished_at for n in latest.values() if n.finished_at]
    span = f"{(max(ends) - min(starts)).total_seconds():.3f}s" if starts and ends else ""
    failed = [latest[i] for i in sorted(latest) if latest[i].status.value == "error"]
    note = f"failed: {', '.join(f'{node}[{n.index}]' for n in failed[:FAILED_ELEMENTS_SHOWN])}" if failed else ""
    if len(failed) > FAILED_ELEMENTS_SHOWN:
        note += f" and {len(failed) - FAILED_ELEMENTS_SHOWN} more"
    sources = sorted({n.cached_from for n in latest.values() if n.cached_from})
    source = sources[0] if len(sources) == 1 else f"{len(sources)} runs" if sources else ""
    table.add_row(node, Text(status, style="red" if failed else "green"), short(", ".join(machines), 30), "", "",
                  str(max(n.attempt for n in latest.values())), span, *([source] if cached else []), note)
    for n in failed[:FAILED_ELEMENTS_SHOWN]:
        _node_row(table, f"  {node}[{n.index}]", n, cached=cached)


def cache_misses(record: RunRecord) -> Text | None:
    """Why the nodes that ran were not restored from the run cache, a line per node and reason (``train: code of
    `train` changed (4 of 4 elements)``); ``None`` when every node was cached, or none was looked up."""
    reasons: dict[tuple[str, str], int] = {}
    elements: dict[str, set[int]] = {}
    for n in record.nodes:
        if n.index is not None:
            elements.setdefault(n.node, set()).add(n.index)
        if n.cache_miss:
            reasons[(n.node, n.cache_miss)] = reasons.get((n.node, n.cache_miss), 0) + 1
    if not reasons:
        return None
    lines = ["not from the cache:"]
    for (node, reason), count in reasons.items():
        of = f" ({count} of {len(elements[node])} elements)" if node in elements else ""
        lines.append(f"  {node}: {reason}{of}")
    return Text("\n".join(lines), style="dim")


def metrics_table(series: dict[str, list[tuple[int, float]]]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for column in ("metric", "steps", "last", "min", "max"):
        table.add_column(column, justify="right" if column != "metric" else "left")
    for name, points in series.items():
        values = [v for _, v in points]
        table.add_row(name, str(len(points)), f"{values[-1]:.6g}", f"{min(values):.6g}", f"{max(values):.6g}")
    return table


def run_summary(record: RunRecord, series: dict[str, list[tuple[int, float]]], artifacts: list[Any],
                code_files: Sequence[Any] | None = None) -> Group:
    head = Text.assemble(("run ", "bold"), (record.id, "bold"), "  ", (record.flow, "cyan"), "  ",
                         styled(record.status.value))
    parts: list[Any] = [head]
    if record.status_reason:
        parts.append(Text(record.status_reason, style="yellow" if record.status.value != "error" else "red"))
    details = [f"params {short(record.params, 100)}"]
    if record.seed is not None:
        details.append(f"seed {record.seed}")
    if record.priority:
        details.append(f"priority {record.priority}")
    if record.duration_ms is not None:
        details.append(f"took {record.duration_ms / 1000:.2f}s")
    if record.group_id:
        details.append(f"group {record.group_id}")
    if record.parent_id:
        details.append(f"child of {record.parent_id} ({record.parent_node})")
    parts.append(Text(" · ".join(details), style="dim"))
    if record.drives:
        parts.append(drives_text(record))
    if record.code_digest:
        parts.append(code_line(record, code_files))
    if record.nodes:
        parts.append(nodes_table(record))
        misses = cache_misses(record)
        if misses is not None:
            parts.append(misses)
    if series:
        parts.append(metrics_table(series))
    if artifacts:
        table = Table(show_edge=False, header_style="bold")
        for column in ("artifact", "node", "message", "codec", "size", "digest"):
            table.add_column(column)
        for a in artifacts:
            node = a.node if getattr(a, "element", -1) < 0 else f"{a.node}[{a.element}]"
            table.add_row(a.name or "", node, a.message, a.codec or "", size_text(a.size), a.digest)
        parts.append(table)
    if record.result is not None:
        parts.append(Text("result " + json.dumps(display_value(record.result), indent=2, default=str,
                                                 ensure_ascii=False)))
    return Group(*parts)


def drives_text(record: RunRecord) -> Text:
    """A resumed run's drives, a line each: where, from when to its last lease, how it ended, and how long the
    run then went without a driver."""
    from fluksio.ui.views import drive_rows, fmt_time

    lines = []
    for drive in drive_rows(record):
        ended = f"{drive.ended_as}: {short(drive.reason or '', 90)}" if drive.ended_as else "driving now"
        gap = f"; then {drive.driverless_s:.1f}s without a driver" if drive.driverless_s is not None else ""
        lines.append(f"drive {drive.epoch} on {drive.driver} from {fmt_time(drive.started_at)} to "
                     f"{fmt_time(drive.last_lease_at)} ({ended}){gap}")
    return Text("\n".join(lines), style="dim")


def code_line(record: RunRecord, files: Sequence[Any] | None) -> Text:
    """The run's code: its package digest and files (``fluksio code get`` writes them), or that it did not travel."""
    if record.code_entry is None:
        return Text(f"code {record.code_digest} (registered on the workers; not shipped)", style="dim")
    lines = [f"code {record.code_digest} · runs {record.code_entry} · {len(files or ())} file(s)"]
    lines += [f"  {f.path}  {size_text(f.size)}" for f in files or ()]
    return Text("\n".join(lines), style="dim")


def print_listing(records: Sequence[R], as_json: bool, empty: str, columns: Sequence[str],
                  row: Callable[[R], Sequence[str | Text]]) -> None:
    """What a command that lists records prints: with ``as_json``, the records as one JSON array; else the line
    ``empty`` when there are none, or a table of ``columns`` with one ``row(record)`` per record."""
    if as_json:
        click.echo(json.dumps([json.loads(r.model_dump_json()) for r in records], indent=2))
        return
    if not records:
        click.echo(empty)
        return
    table = Table(show_edge=False, header_style="bold")
    for column in columns:
        table.add_column(column)
    for record in records:
        table.add_row(*row(record))
    console().print(table)


def name_list(names: list[str], shown: int = 3) -> str:
    """``a, b, c +4``: a few names and how many more."""
    head = ", ".join(names[:shown])
    return head if len(names) <= shown else f"{head} +{len(names) - shown}"


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)
