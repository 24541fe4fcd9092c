"""Where a cached node's outputs came from has a column of its own, in `fluksio show` and on the explorer's run
page, apart from the errors."""

from __future__ import annotations

from datetime import datetime, timezone

from rich.console import Console
from tornado import template

from fluksio.cli import render
from fluksio.schemas import NodeRecord, NodeStatus, RunRecord, RunStatus
from fluksio.ui import views
from fluksio.ui.base import TEMPLATES

NOW = datetime(2025, 1, 2, 3, 4, 5, tzinfo=timezone.utc)
SOURCE = "01JSOURCE0000000000000000A"


def shown(renderable: object) -> str:
    console = Console(record=True, width=220)
    console.print(renderable)
    return console.export_text()


def cached_run() -> RunRecord:
    return RunRecord(id="r2", flow="train", status=RunStatus.ERROR, created_at=NOW, nodes=[
        NodeRecord(node="load", status=NodeStatus.CACHED, cached_from=SOURCE, duration_ms=0),
        NodeRecord(node="fit", status=NodeStatus.CACHED, index=0, cached_from=SOURCE),
        NodeRecord(node="fit", status=NodeStatus.ERROR, index=1, error="ValueError: bad lr"),
        NodeRecord(node="evaluate", status=NodeStatus.ERROR, error="RuntimeError: boom"),
    ])


def cells(text: str, name: str) -> dict[str, str]:
    """The cells of the row of node ``name`` in a printed table, by its column's header."""
    lines = text.splitlines()
    header = [cell.strip() for cell in next(line for line in lines if "┃" in line).split("┃")]
    row = next(line for line in lines if line.split("│")[0].strip() == name)
    return dict(zip(header, (cell.strip() for cell in row.split("│"))))


def test_show_has_a_cached_from_column_and_leaves_the_error_column_to_errors() -> None:
    text = shown(render.nodes_table(cached_run()))
    load = cells(text, "load")
    assert load["cached from"] == SOURCE and load["error"] == ""
    evaluate = cells(text, "evaluate")
    assert evaluate["cached from"] == "" and evaluate["error"] == "RuntimeError: boom"
    assert cells(text, "fit")["cached from"] == SOURCE  # the mapped node's row: its elements' source
    assert "cached from 01J" not in text


def test_show_has_no_cached_from_column_when_nothing_was_cached() -> None:
    fresh = cached_run().model_copy(update={"nodes": [NodeRecord(node="load", status=NodeStatus.OK)]})
    assert "cached from" not in shown(render.nodes_table(fresh))


def test_the_explorer_s_node_rows_have_a_cached_from_cell_before_the_error() -> None:
    loader = template.Loader(str(TEMPLATES), autoescape="xhtml_escape")
    run_page = (TEMPLATES / "live_run.html").read_text()
    assert "<th>duration</th><th>cached from</th><th>error · logs</th>" in run_page
    node = cached_run().nodes[0]
    html = loader.load("node_row.html").generate(
        c=views.Call(node="load", index=None, latest=node), base="/ui", views=views, flower_link=lambda _: None,
    ).decode()
    assert f'<td class="cached-from mono"><a href="/ui/runs/{SOURCE}">{SOURCE}</a></td>' in html
    error_cell = html[html.index('<td class="err">'):]
    assert "cached from" not in error_cell and SOURCE not in error_cell
    assert html.count("<td") == 8  # as many cells as the run page's table has columns
