"""How runs look in a terminal: tables, a live progress line, summaries."""

from __future__ import annotations

import json
from typing import Any

from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from fluksio.schemas import RunRecord

STATUS_STYLE = {
    "ok": "green", "cached": "cyan", "running": "yellow", "queued": "blue", "error": "red",
    "skipped": "dim", "cancelled": "magenta", "abandoned": "red",
}


def styled(status: str) -> Text:
    return Text(status, style=STATUS_STYLE.get(status, ""))


def short(value: Any, width: int = 60) -> str:
    text = value if isinstance(value, str) else json.dumps(value, default=str, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


def display_value(value: Any) -> Any:
    """Artifact references shown as ``artifact name (size, digest…)``."""
    if isinstance(value, dict) and set(value) == {"$artifact"}:
        body = value["$artifact"]
        return f"artifact {body.get('name') or ''} ({body['size']} B, {body['digest'][:19]}…)"
    if isinstance(value, dict):
        return {k: display_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [display_value(v) for v in value]
    return value


def runs_table(records: list[RunRecord], metrics: dict[str, dict[str, float]] | None = None) -> Table:
    table = Table(show_edge=False, header_style="bold")
    table.add_column("run", no_wrap=True, min_width=26)
    for column in ("flow", "status", "created", "duration"):
        table.add_column(column, no_wrap=True)
    table.add_column("params", overflow="fold", min_width=24)
    metric_names = sorted({n for m in (metrics or {}).values() for n in m})
    for name in metric_names:
        table.add_column(name, justify="right")
    for r in records:
        duration = f"{r.duration_ms / 1000:.2f}s" if r.duration_ms is not None else ""
        row = [r.id, r.flow, styled(r.status.value), r.created_at.strftime("%m-%d %H:%M:%S"), duration,
               short({k: v for k, v in r.params.items()}, 50)]
        last = (metrics or {}).get(r.id, {})
        row += [f"{last[n]:.4g}" if n in last else "" for n in metric_names]
        table.add_row(*row)
    return table


def nodes_table(record: RunRecord) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for column in ("node", "status", "machine", "gpus", "attempt", "duration", "error"):
        table.add_column(column)
    for n in record.nodes:
        duration = f"{n.duration_ms / 1000:.3f}s" if n.duration_ms is not None else ""
        error = (n.error or "").splitlines()[0] if n.error else ""
        if n.cached_from:
            error = f"cached from {n.cached_from}"
        table.add_row(n.node, styled(n.status.value), n.machine or "", ",".join(map(str, n.gpus)),
                      str(n.attempt), duration, short(error, 70))
    return table


def metrics_table(series: dict[str, list[tuple[int, float]]]) -> Table:
    table = Table(show_edge=False, header_style="bold")
    for column in ("metric", "steps", "last", "min", "max"):
        table.add_column(column, justify="right" if column != "metric" else "left")
    for name, points in series.items():
        values = [v for _, v in points]
        table.add_row(name, str(len(points)), f"{values[-1]:.6g}", f"{min(values):.6g}", f"{max(values):.6g}")
    return table


def run_summary(record: RunRecord, series: dict[str, list[tuple[int, float]]], artifacts: list[Any]) -> Group:
    head = Text.assemble(("run ", "bold"), (record.id, "bold"), "  ", (record.flow, "cyan"), "  ",
                         styled(record.status.value))
    parts: list[Any] = [head]
    if record.status_reason:
        parts.append(Text(record.status_reason, style="yellow" if record.status.value != "error" else "red"))
    details = [f"params {short(record.params, 100)}"]
    if record.seed is not None:
        details.append(f"seed {record.seed}")
    if record.duration_ms is not None:
        details.append(f"took {record.duration_ms / 1000:.2f}s")
    if record.group_id:
        details.append(f"group {record.group_id}")
    parts.append(Text(" · ".join(details), style="dim"))
    if record.nodes:
        parts.append(nodes_table(record))
    if series:
        parts.append(metrics_table(series))
    if artifacts:
        table = Table(show_edge=False, header_style="bold")
        for column in ("artifact", "node", "message", "size", "digest"):
            table.add_column(column)
        for a in artifacts:
            table.add_row(a.name or "", a.node, a.message, f"{a.size} B", a.digest)
        parts.append(table)
    if record.result is not None:
        parts.append(Text("result " + json.dumps(display_value(record.result), indent=2, default=str,
                                                 ensure_ascii=False)))
    return Group(*parts)


def progress_line(record: RunRecord, total: int, latest: dict[str, tuple[int, float]]) -> Text:
    done = sum(1 for n in record.nodes if n.status.value in ("ok", "cached", "error", "skipped", "cancelled"))
    text = Text.assemble(styled(record.status.value), f"  {done}/{total} nodes done")
    if record.status_reason and not record.status.is_terminal():
        text.append(f"  · {record.status_reason}", style="yellow")
    for name, (step, value) in sorted(latest.items()):
        text.append(f"  · {name}={value:.4g} (step {step})", style="cyan")
    return text


def console(stderr: bool = False) -> Console:
    return Console(stderr=stderr, highlight=False)
