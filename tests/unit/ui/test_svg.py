"""The explorer's SVG: one line per series with its data, a lane per machine, usage bars; text escaped."""

from __future__ import annotations

import xml.etree.ElementTree as ET

from fluksio.ui.svg import Bar, Line, gpu_cells, line_chart, nice_ticks, timeline, usage_bar

NS = {"s": "http://www.w3.org/2000/svg"}


def parse(markup: str) -> ET.Element:
    return ET.fromstring(markup)  # also proves the markup is well-formed XML


def test_a_line_per_series_carrying_its_steps_and_values() -> None:
    loss = [(0, 1.0), (1, 0.5), (2, 0.25)]
    root = parse(line_chart([Line("loss[0]", loss, 0), Line("loss[1]", [(0, 2.0), (3, 0.1)], 1)], "loss", "c1"))
    assert root.get("data-metric") == "loss" and root.get("class") == "chart"
    series = root.findall(".//s:g[@class]", NS)
    lines = {g.get("data-series"): g for g in series if "series" in g.get("class", "")}
    assert set(lines) == {"loss[0]", "loss[1]"}
    first = lines["loss[0]"].find("s:polyline", NS)
    assert first is not None and first.get("data-steps") == "0 1 2"
    assert [float(v) for v in first.get("data-values", "").split()] == [1.0, 0.5, 0.25]
    assert len(first.get("points", "").split()) == 3
    assert len(lines["loss[0]"].findall("s:circle", NS)) == 3  # few points: a dot each
    assert "s1" in lines["loss[1]"].get("class", "")
    # Steps 0..3 span the plot from its left edge to its right.
    assert root.get("data-x0") == "0" and root.get("data-x1") == "3"


def test_a_flat_line_and_an_empty_chart_still_draw() -> None:
    flat = parse(line_chart([Line("acc", [(0, 0.9), (1, 0.9)])], "acc", "c2"))
    ys = {p.split(",")[1] for p in flat.find(".//s:polyline", NS).get("points", "").split()}  # type: ignore[union-attr]
    assert len(ys) == 1
    empty = parse(line_chart([], "nothing", "c3"))
    assert "no points" in "".join(empty.itertext())


def test_names_are_escaped() -> None:
    markup = line_chart([Line("<script>", [(0, 1.0)])], 'a"b<c', "c4")
    parse(markup)
    assert "<script>" not in markup and "&lt;script&gt;" in markup


def test_timeline_has_a_lane_per_machine_and_overlapping_calls_in_rows_of_their_own() -> None:
    bars = [Bar("box-a", "fit", 0.0, 2.0, "ok", "fit on box-a"), Bar("box-a", "eval", 1.0, 3.0, "error", "eval"),
            Bar("box-b", "load", 0.5, 1.0, "ok", "load", href="http://flower/task/x")]
    root = parse(timeline(bars))
    lanes = {g.get("data-machine"): g for g in root.findall("s:g", NS)}
    assert set(lanes) == {"box-a", "box-b"}
    calls_a = lanes["box-a"].findall(".//s:g[@data-node]", NS)
    assert sorted(c.get("data-node") for c in calls_a) == ["eval", "fit"]
    tops = {c.find("s:rect", NS).get("y") for c in calls_a}  # type: ignore[union-attr]
    assert len(tops) == 2  # they overlap in time: two rows
    assert lanes["box-b"].find("s:a", NS) is not None


def test_usage_bars_and_gpu_cells() -> None:
    bar = parse(usage_bar("cpus", 3, 4, "3 of 4"))
    used = [r for r in bar.findall("s:rect", NS) if r.get("class") == "usage-used"][0]
    assert float(used.get("width", 0)) == 0.75 * 220
    cells = parse(gpu_cells([0, 1, 2], free=[2]))
    states = {g.get("data-gpu"): g.get("class") for g in cells.findall("s:g", NS)}
    assert states == {"0": "gpu gpu-busy", "1": "gpu gpu-busy", "2": "gpu gpu-free"}


def test_ticks_are_round() -> None:
    assert nice_ticks(0, 1) == [0, 0.2, 0.4, 0.6, 0.8, 1.0]
    assert nice_ticks(3, 97, 5) == [20, 40, 60, 80]
    assert nice_ticks(5, 5) == [5]
