"""What the pages and the JSON API read, through the client and the run store. Blocking: handlers run
these on the explorer's threads (``Explorer.call``).

The JSON shapes are those of the command line: a run as ``fluksio show --json`` prints it, a list entry
as ``fluksio runs --json`` does (the record without nodes, plus ``metrics``: each one's newest value).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, BinaryIO

from fluksio.artifacts.digests import validate_digest
from fluksio.client import Client
from fluksio.errors import ArtifactError, FluksioError, InvalidRequest, RunNotFound, RunRejected
from fluksio.messages import CallRef, parse_call_id
from fluksio.schemas import RunRecord, RunStatus
from fluksio.store.models import RunArtifact
from fluksio.ui.downsample import downsample

#: Runs one page lists when the request does not say, and the most it may ask for.
PAGE_SIZE, PAGE_MAX = 50, 1_000
#: Child runs a run page lists, and runs one comparison holds.
CHILDREN_MAX, COMPARE_MAX = 200, 50
#: Series drawn in one chart (a mapped node's elements each have one); the rest are counted, not drawn.
LINES_MAX = 40
#: Points of a series a chart draws (the chart is 640 px wide: about one min and max per pixel pair).
CHART_POINTS = 600
#: A mapped element's series: ``<message>[<index>]``.
_ELEMENT_SERIES = re.compile(r"^(?P<metric>.+)\[(?P<index>\d+)\]$")


@dataclass(frozen=True)
class RunFilters:
    flow: str | None = None
    status: str | None = None
    group: str | None = None
    parent: str | None = None
    limit: int = PAGE_SIZE
    offset: int = 0

    def __post_init__(self) -> None:
        if self.status is not None and self.status not in {s.value for s in RunStatus}:
            raise InvalidRequest(f"status {self.status!r} is not one of {', '.join(s.value for s in RunStatus)}")

    def query(self, **changes: Any) -> dict[str, str]:
        """These filters (with ``changes``) as query arguments, the empty ones left out."""
        values = {**self.__dict__, **changes}
        return {k: str(v) for k, v in values.items()
                if v not in (None, "") and not (k == "limit" and v == PAGE_SIZE) and not (k == "offset" and v == 0)}


@dataclass
class RunListing:
    """A page of runs as :func:`list_runs` finds them."""

    filters: RunFilters
    records: list[RunRecord]
    #: Each run's newest value of each metric.
    latest: dict[str, dict[str, float]]
    total: int
    #: Every flow name in the store, for the filter's suggestions (only the whole page shows them).
    flows: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {"runs": [{**json.loads(r.model_dump_json()), "metrics": self.latest.get(r.id, {})}
                         for r in self.records],
                "total": self.total, "limit": self.filters.limit, "offset": self.filters.offset}


def list_runs(client: Client, filters: RunFilters, flow_names: bool = False) -> RunListing:
    """A page of runs as ``filters`` ask; with ``flow_names``, every flow's name too (a ``SELECT DISTINCT`` over
    all runs that the API and the page's live refresh every 2 s do not need)."""
    records = client.runs(flow=filters.flow, status=filters.status, group=filters.group, limit=filters.limit,
                          parent=filters.parent, offset=filters.offset)
    return RunListing(filters, records, client.latest_metrics([r.id for r in records]),
                      client.count_runs(filters.flow, filters.status, filters.group, parent=filters.parent),
                      client.flows_with_runs() if flow_names else [])


@dataclass
class RunDetail:
    record: RunRecord
    resumed_at: datetime | None
    artifacts: list[dict[str, Any]]
    children: list[RunRecord]
    #: Calls of this run running now (from the placer's grants) and those waiting, with why.
    running: list[dict[str, Any]] = field(default_factory=list)
    waiting: list[dict[str, Any]] = field(default_factory=list)
    #: Each metric series: the run holding its points and how many there are.
    sources: dict[str, tuple[str, int]] = field(default_factory=dict)
    #: The files of the run's code package (``path``, ``size``), when its code travelled with it; ``None``
    #: when it did not, or when the package cannot be read (``code_error`` says why).
    code_files: list[dict[str, Any]] | None = None
    code_error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {**json.loads(self.record.model_dump_json()), "artifacts": self.artifacts,
                "children": [r.id for r in self.children], "running": self.running, "waiting": self.waiting,
                "code_files": self.code_files}


def run_detail(client: Client, run_id: str) -> RunDetail:
    record = client.get(run_id)
    artifacts = [artifact_json(a) for a in client.artifacts(record.id)]
    children = client.runs(parent=record.id, limit=CHILDREN_MAX)
    detail = RunDetail(record, client.resumed_at(record.id), artifacts, children,
                       sources=client.series.sources(record.id))
    if record.code_entry is not None:
        try:
            detail.code_files = [{"path": f.path, "size": f.size} for f in client.code_files(record.id)]
        except FluksioError as exc:  # a package gone from the store: the page says so, and shows the rest
            detail.code_error = str(exc)
    if not record.status.is_terminal():
        snapshot = client.placement()
        for machine in snapshot["machines"]:
            for grant in machine.get("grants", []):
                ref = parse_call_id(grant["id"])
                if ref is not None and ref.run_id == record.id:
                    detail.running.append({**_call_json(ref, grant["id"]), "machine": machine["name"],
                                           "gpus": grant["gpus"], "cpus": grant["cpus"], "ram_mb": grant["ram_mb"]})
        detail.waiting = [w for w in snapshot["waiting"] if w["run_id"] == record.id]
    return detail


def _call_json(ref: CallRef, call_id: str) -> dict[str, Any]:
    return {"call_id": call_id, "node": ref.node, "attempt": ref.attempt, "epoch": ref.epoch}


def artifact_json(artifact: RunArtifact) -> dict[str, Any]:
    return {"digest": artifact.digest, "name": artifact.name, "node": artifact.node,
            "index": None if artifact.element is None or artifact.element < 0 else artifact.element,
            "message": artifact.message, "size": artifact.size, "media_type": artifact.media_type,
            "codec": artifact.codec}


def metrics(client: Client, run_id: str, points: int, name: str | None = None, start: int | None = None,
            end: int | None = None) -> dict[str, Any]:
    """The run's series (or the one named), each downsampled to at most ``points``, between steps ``start``
    and ``end`` when given; ``sizes``: how many points each has in the store (in that range)."""
    run = client.get(run_id, nodes=False)
    sources = client.series.sources(run.id)
    if name is not None and name not in sources:
        known = ", ".join(sources) or "none"
        raise RunNotFound(f"run {run.id} has no metric {name!r} (it has: {known})")
    series, sizes = {}, {}
    for series_name, (source, _count) in sources.items():
        if name is not None and series_name != name:
            continue
        full = client.series.read(source, series_name, start, end)
        sizes[series_name] = len(full)
        series[series_name] = [list(p) for p in downsample(full, points)]
    return {"run_id": run.id, "points": points, "start": start, "end": end, "series": series, "sizes": sizes}


def metric_sources(client: Client, run_id: str) -> dict[str, tuple[str, int]]:
    """Each series of the run: the run holding its points and how many there are (``client.series.sources``)."""
    return client.series.sources(run_id)


def metric_of(series_name: str) -> str:
    """The metric a series belongs to: ``loss[3]`` (mapped element 3's) is of ``loss``."""
    match = _ELEMENT_SERIES.match(series_name)
    return match["metric"] if match else series_name


@dataclass
class ChartData:
    """One chart's lines: ``(series name, points, total points)``; ``hidden``: series past :data:`LINES_MAX`."""

    metric: str
    lines: list[tuple[str, list[tuple[int, float]], int]]
    hidden: int = 0


def run_charts(client: Client, detail_sources: dict[str, tuple[str, int]], metric: str | None = None,
               start: int | None = None, end: int | None = None) -> list[ChartData]:
    """One chart per metric (a line per series: the node's, or each mapped element's), downsampled."""
    charts: dict[str, ChartData] = {}
    for series_name, (source, _count) in detail_sources.items():
        name = metric_of(series_name)
        if metric is not None and name != metric:
            continue
        chart = charts.setdefault(name, ChartData(name, []))
        if len(chart.lines) >= LINES_MAX:
            chart.hidden += 1
            continue
        full = client.series.read(source, series_name, start, end)
        chart.lines.append((series_name, downsample(full, CHART_POINTS), len(full)))
    return list(charts.values())


@dataclass
class Comparison:
    records: list[RunRecord]
    finals: dict[str, dict[str, float]]
    metrics: list[str]
    metric: str | None
    #: The chosen metric of each run: ``(run, points, total)``.
    lines: list[tuple[RunRecord, list[tuple[int, float]], int]]
    group: str | None = None
    #: How many runs the group has (only its newest :data:`COMPARE_MAX` are compared).
    in_group: int = 0


def compare(client: Client, run_ids: list[str], group: str | None, metric: str | None,
            start: int | None = None, end: int | None = None) -> Comparison:
    """The runs named (ids or prefixes), or a group's, oldest first: params, final metrics, one metric's lines."""
    if not run_ids and not group:
        raise InvalidRequest("name the runs to compare: /compare?runs=ID,ID,… or /compare?group=GROUP")
    if len(run_ids) > COMPARE_MAX:
        raise InvalidRequest(f"at most {COMPARE_MAX} runs can be compared at once, got {len(run_ids)}")
    records = [client.get(r, nodes=False) for r in run_ids]
    in_group = 0
    if group:
        members = client.runs(group=group, limit=COMPARE_MAX)
        if not members:
            raise RunNotFound(f"no runs in group {group!r}")
        records += members[::-1]
        in_group = client.count_runs(group=group)
    records = list({r.id: r for r in records}.values())
    finals = client.latest_metrics([r.id for r in records])
    names = sorted({n for m in finals.values() for n in m})
    if metric is not None and metric not in names:
        raise InvalidRequest(f"none of these runs has a metric {metric!r} (they have: {', '.join(names) or 'none'})")
    chosen = metric or (names[0] if names else None)
    lines = []
    if chosen is not None:
        for record in records:
            source = client.series.sources(record.id).get(chosen)
            if source is not None:
                full = client.series.read(source[0], chosen, start, end)
                lines.append((record, downsample(full, CHART_POINTS), len(full)))
    return Comparison(records, finals, names, chosen, lines, group, in_group)


def artifact_file(client: Client, digest: str) -> tuple[RunArtifact, BinaryIO]:
    """The row of an artifact some run made and its bytes, opened (close the file).

    Only a well-formed digest (checked before it touches a path) that the run store holds; the file comes
    from the artifact store (for an object store, this host's copy). A copy another process evicts between
    its fetch and its opening is fetched once more: opened, it stays readable whatever happens to its name.
    """
    try:
        validate_digest(digest)
    except ArtifactError as exc:
        raise InvalidRequest(str(exc)) from None
    return client.artifact(digest), client.open_artifact(digest)


def machines(client: Client) -> dict[str, Any]:
    """``client.placement()``, each machine's grants with the run, node and attempt of their calls."""
    snapshot = client.placement()
    for machine in snapshot["machines"]:
        for grant in machine.get("grants", []):
            ref = parse_call_id(grant["id"])
            grant.update(_call_json(ref, grant["id"]) if ref else {"call_id": grant["id"]})
            grant["run_id"] = ref.run_id if ref else None
    snapshot["embedded"] = client.settings.embedded
    return snapshot


def cancel_run(client: Client, run_id: str) -> dict[str, Any]:
    """Cancel a queued or running run (a running one stops once its driver hears it); ``{run_id, status}``."""
    run = client.get(run_id, nodes=False)
    if run.status.is_terminal():
        raise RunRejected(f"run {run.id} already ended {run.status.value}: nothing to cancel")
    status = client.cancel(run.id, "cancelled in the explorer")
    return {"run_id": run.id, "status": status.value}


def resume_run(client: Client, run_id: str) -> dict[str, Any]:
    """Re-drive a run that ended error, cancelled or abandoned; ``{run_id, status}``."""
    handle = client.resume(run_id)
    return {"run_id": handle.id, "status": handle.status.value}
