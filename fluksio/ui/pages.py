"""The explorer's pages, rendered on the server: runs, a run, a comparison, the machines.

A page asked for with ``?live=1`` answers only the part that changes (the ``live_*`` template), which the
page's script fetches every few seconds and swaps in: runs appear and finish without a reload.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any
from urllib.parse import urlencode

from fluksio.errors import RunNotFound
from fluksio.messages import call_id
from fluksio.schemas import NodeRecord, RunStatus, unit_of
from fluksio.ui import queries, svg, views
from fluksio.ui.api import run_filters
from fluksio.ui.base import ExplorerHandler

#: How often a live page asks for its changes, in milliseconds.
LIVE_EVERY_MS = 2_000
#: Elements of one mapped node listed on a run page (failed ones first); the rest are counted.
ELEMENTS_SHOWN = 200


def chart_id(name: str) -> str:
    """A stable element id for a metric's chart (the name may hold any character)."""
    return "c" + hashlib.sha1(name.encode()).hexdigest()[:12]


class Page(ExplorerHandler):
    def render_page(self, name: str, **values: Any) -> None:
        """``name``.html, or only its ``live_``part when the page's script asks for its changes."""
        live = self.arg("live") is not None
        # decode_argument answers 400 for bytes that are no UTF-8, as get_query_argument does.
        query = {k: self.decode_argument(v[-1], name=k) for k, v in self.request.query_arguments.items() if k != "live"}
        live_url = f"{self.request.path}?{urlencode({**query, 'live': '1'})}"
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.render(f"live_{name}.html" if live else f"{name}.html", views=views, live_url=live_url,
                    live_every=LIVE_EVERY_MS, statuses=[s.value for s in RunStatus], **values)


class RunsPage(Page):
    async def get(self) -> None:
        filters = run_filters(self)
        whole = self.arg("live") is None  # the live refresh replaces the table, not the filter's suggestions
        page = await self.explorer.call(queries.list_runs, self.explorer.client, filters, whole)
        newer = filters.offset > 0
        older = filters.offset + len(page.records) < page.total
        base = f"{self.explorer.base}/?"
        self.render_page(
            "runs", tab="runs", page=page, f=filters,
            prev_url=base + urlencode(filters.query(offset=max(0, filters.offset - filters.limit))) if newer else None,
            next_url=base + urlencode(filters.query(offset=filters.offset + filters.limit)) if older else None)


class RunPage(Page):
    async def get(self, run_id: str) -> None:
        client = self.explorer.client
        detail = await self.explorer.call(queries.run_detail, client, run_id)
        charts = await self.explorer.call(queries.run_charts, client, detail.sources)
        record = detail.record
        bars = views.timeline_bars(record, self._flower_link(detail))
        self.render_page(
            "run", tab="runs", d=detail, r=record, groups=views.group_nodes(record.nodes),
            timeline=svg.timeline(bars), charts=[(c, chart_svg(c)) for c in charts],
            flower_link=self._flower_link(detail), elements_shown=ELEMENTS_SHOWN,
            final=record.status.is_terminal(), machines_used=sorted({b.lane for b in bars}))

    def _flower_link(self, detail: queries.RunDetail) -> Callable[[NodeRecord], str | None]:
        """Each node's call in Flower (with ``--flower``), when its task id can be told."""
        flower = self.explorer.flower
        record = detail.record

        def link(node: NodeRecord) -> str | None:
            if not flower or not node.machine or node.status.value in ("cached", "skipped"):
                return None  # cached calls never ran
            epoch = views.epoch_of(node, record.resume_count, detail.resumed_at)
            if epoch is None:
                return None
            unit = unit_of(node.node, node.index)
            return views.flower_task_url(flower, call_id(record.id, epoch, unit, node.attempt))

        return link


def chart_svg(chart: queries.ChartData, x_range: tuple[int, int] | None = None) -> str:
    lines = [svg.Line(name, points, index, total) for index, (name, points, total) in enumerate(chart.lines)]
    return svg.line_chart(lines, chart.metric, chart_id(chart.metric), x_range)


class RunChart(ExplorerHandler):
    """``GET /runs/<id>/chart?metric=&start=&end=``: one chart again, for a zoomed step range."""

    async def get(self, run_id: str) -> None:
        client = self.explorer.client
        metric = self.arg("metric")
        start, end = self.int_arg("start", None, 0), self.int_arg("end", None, 0)
        detail_sources = await self.explorer.call(queries.metric_sources, client, run_id)
        charts = await self.explorer.call(queries.run_charts, client, detail_sources, metric, start, end)
        if not charts:
            raise RunNotFound(f"run {run_id} has no metric {metric!r}")
        x_range = (start, end) if start is not None and end is not None else None
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(chart_svg(charts[0], x_range))


class ComparePage(Page):
    async def get(self) -> None:
        runs = [r for r in (self.arg("runs") or "").replace(" ", ",").split(",") if r]
        group = self.arg("group")
        if not runs and not group:
            self.render_page("compare", tab="compare", c=None, rows=[], chart="", runs_text="", group="")
            return
        comparison = await self.explorer.call(queries.compare, self.explorer.client, runs, group, self.arg("metric"))
        chart_query = urlencode({k: v for k, v in (("runs", ",".join(runs)), ("group", group),
                                                   ("metric", comparison.metric)) if v})
        self.render_page("compare", tab="compare", c=comparison, rows=views.compare_rows(
            comparison.records, comparison.finals), chart=compare_svg(comparison), runs_text=",".join(runs),
            group=group or "", chart_query=chart_query)


def compare_svg(comparison: queries.Comparison, x_range: tuple[int, int] | None = None) -> str:
    if comparison.metric is None:
        return ""
    differing = [row.name for row in views.compare_rows(comparison.records, {}) if row.kind == "param" and row.differs]
    lines = []
    for index, (record, points, total) in enumerate(comparison.lines):
        label = " ".join(f"{name}={views.fmt_value(record.params.get(name), 12)}" for name in differing[:3])
        lines.append(svg.Line(label or record.id[-6:], points, comparison.records.index(record), total))
    return svg.line_chart(lines, comparison.metric, chart_id("compare " + comparison.metric), x_range)


class CompareChart(ExplorerHandler):
    """``GET /compare/chart?runs=|group=&metric=&start=&end=``: the overlay again, for a zoomed step range."""

    async def get(self) -> None:
        runs = [r for r in (self.arg("runs") or "").split(",") if r]
        start, end = self.int_arg("start", None, 0), self.int_arg("end", None, 0)
        comparison = await self.explorer.call(queries.compare, self.explorer.client, runs, self.arg("group"),
                                              self.arg("metric"), start, end)
        x_range = (start, end) if start is not None and end is not None else None
        self.set_header("Content-Type", "text/html; charset=utf-8")
        self.finish(compare_svg(comparison, x_range))


class MachinesPage(Page):
    async def get(self) -> None:
        snapshot = await self.explorer.call(queries.machines, self.explorer.client)
        self.render_page("machines", tab="machines", s=snapshot, usage_bar=svg.usage_bar, gpu_cells=svg.gpu_cells)
