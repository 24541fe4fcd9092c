"""The explorer's pictures as SVG markup: metric lines, a Gantt chart of node calls, resource bars. Pure.

Drawn here rather than by a JavaScript library: nothing is fetched from a CDN or copied in, and a
page is complete as the server sends it. Colours come from CSS classes (``s0``…``s9`` per series,
``st-<status>`` per call), never inline styles, so the pages' Content-Security-Policy can forbid those.
Every piece of text is escaped. Each line carries its data (``data-steps``, ``data-values``) for
the page's script, which shows the values under the pointer and zooms into a dragged range.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from html import escape

#: Series colours (CSS classes ``s0``…): a series' colour is its position modulo this.
PALETTE = 10
#: Legend entries shown before "+N more".
LEGEND_MAX = 8
#: A series with at most this many points also gets a dot per point.
MARKERS_MAX = 60
#: Maps a step, value or second to a pixel coordinate.
Scale = Callable[[float], float]
#: Pixel sizes of a line chart.
CHART_W, CHART_H = 640, 240
MARGIN_L, MARGIN_R, MARGIN_T, MARGIN_B = 58, 14, 26, 30
#: Pixel sizes of the timeline: the lane label column, one row of bars, the axis below.
LANE_LABEL_W, ROW_H, TIMELINE_W, AXIS_H = 130, 22, 900, 26


def _attr(value: object) -> str:
    return escape(str(value), quote=True)


def _num(value: float) -> str:
    """A coordinate with one decimal (enough for a pixel), without a trailing ``.0``."""
    text = f"{value:.1f}"
    return text[:-2] if text.endswith(".0") else text


def label(value: float) -> str:
    """A tick or tooltip number, short: ``0.0125``, ``1.5e+06``, ``42``."""
    if value == 0:
        return "0"
    return f"{value:.4g}"


def nice_ticks(low: float, high: float, count: int = 5) -> list[float]:
    """Round tick values covering ``[low, high]`` (about ``count`` of them): steps of 1, 2 or 5 × 10^k."""
    if not (math.isfinite(low) and math.isfinite(high)) or high <= low:
        return [low]
    raw = (high - low) / max(1, count)
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw)
    first = math.ceil(low / step) * step
    ticks = []
    value = first
    while value <= high + step * 1e-9:
        ticks.append(round(value, 12))
        value += step
    return ticks


def _span(values: Sequence[float], pad: float = 0.0) -> tuple[float, float]:
    low, high = min(values), max(values)
    if high == low:  # a flat line still needs a height to be drawn in
        delta = abs(low) * 0.1 or 1.0
        return low - delta, high + delta
    extra = (high - low) * pad
    return low - extra, high + extra


@dataclass(frozen=True)
class Line:
    """One series of a line chart: its name, its ``(step, value)`` points in step order, its colour slot."""

    name: str
    points: Sequence[tuple[int, float]]
    colour: int = 0
    #: How many points the series has in the store (more than ``points`` when downsampled).
    total: int | None = None


def line_chart(lines: Sequence[Line], title: str, chart_id: str, x_range: tuple[int, int] | None = None,
               width: int = CHART_W, height: int = CHART_H) -> str:
    """One chart: a line per series against the step, axes with round ticks, a legend when several.

    ``x_range`` fixes the step axis (a zoomed chart); otherwise it spans the points. The root ``<svg>``
    says how pixels map back to steps (``data-x0``, ``data-x1``, ``data-left``, ``data-plot-width``).
    """
    drawn = [line for line in lines if line.points]
    plot_w, plot_h = width - MARGIN_L - MARGIN_R, height - MARGIN_T - MARGIN_B
    head = (f'<svg class="chart" id="{_attr(chart_id)}" data-metric="{_attr(title)}" '
            f'xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" height="{height}" '
            f'role="img" aria-label="{_attr(title)}"')
    if not drawn:
        return (f'{head}><text class="title" x="{MARGIN_L}" y="16">{escape(title)}</text>'
                f'<text class="empty" x="{width / 2}" y="{height / 2}" text-anchor="middle">no points</text></svg>')
    steps = [float(step) for line in drawn for step, _ in line.points]
    values = [value for line in drawn for _, value in line.points]
    x0, x1 = (float(x_range[0]), float(x_range[1])) if x_range else (min(steps), max(steps))
    if x1 <= x0:
        x0, x1 = x0 - 0.5, x1 + 0.5
    y0, y1 = _span(values, pad=0.05)

    def px(step: float) -> float:
        return MARGIN_L + (step - x0) / (x1 - x0) * plot_w

    def py(value: float) -> float:
        return MARGIN_T + (y1 - value) / (y1 - y0) * plot_h

    parts = [f'{head} data-x0="{x0:g}" data-x1="{x1:g}" data-left="{MARGIN_L}" data-plot-width="{plot_w}" '
             f'data-top="{MARGIN_T}" data-plot-height="{plot_h}">',
             f'<text class="title" x="{MARGIN_L}" y="16">{escape(title)}</text>',
             f'<clipPath id="{_attr(chart_id)}-clip"><rect x="{MARGIN_L}" y="{MARGIN_T}" width="{plot_w}" '
             f'height="{plot_h}"/></clipPath>']
    parts += _axes(x0, x1, y0, y1, px, py, width, height)
    parts.append(f'<g clip-path="url(#{_attr(chart_id)}-clip)">')
    for line in drawn:
        parts.append(_polyline(line, px, py))
    parts.append("</g>")
    if len(drawn) > 1:
        parts.append(_legend(drawn, width))
    parts.append(f'<rect class="overlay" x="{MARGIN_L}" y="{MARGIN_T}" width="{plot_w}" height="{plot_h}"/>')
    parts.append("</svg>")
    return "".join(parts)


def _axes(x0: float, x1: float, y0: float, y1: float, px: Scale, py: Scale, width: int, height: int) -> list[str]:
    bottom, right = height - MARGIN_B, width - MARGIN_R
    parts = [f'<line class="axis" x1="{MARGIN_L}" y1="{bottom}" x2="{right}" y2="{bottom}"/>',
             f'<line class="axis" x1="{MARGIN_L}" y1="{MARGIN_T}" x2="{MARGIN_L}" y2="{bottom}"/>']
    for tick in nice_ticks(y0, y1):
        y = _num(py(tick))
        parts.append(f'<line class="grid" x1="{MARGIN_L}" y1="{y}" x2="{right}" y2="{y}"/>'
                     f'<text class="tick" x="{MARGIN_L - 6}" y="{y}" text-anchor="end" dy="0.32em">'
                     f'{label(tick)}</text>')
    for tick in nice_ticks(x0, x1, 6):
        if x1 - x0 >= 5 and tick != int(tick):
            continue  # steps are whole numbers: no 2.5 on a long axis
        x = _num(px(tick))
        parts.append(f'<line class="tickmark" x1="{x}" y1="{bottom}" x2="{x}" y2="{bottom + 4}"/>'
                     f'<text class="tick" x="{x}" y="{bottom + 16}" text-anchor="middle">{label(tick)}</text>')
    parts.append(f'<text class="axis-label" x="{right}" y="{height - 2}" text-anchor="end">step</text>')
    return parts


def _polyline(line: Line, px: Scale, py: Scale) -> str:
    colour = f"s{line.colour % PALETTE}"
    coords = " ".join(f"{_num(px(step))},{_num(py(value))}" for step, value in line.points)
    steps = " ".join(str(step) for step, _ in line.points)
    values = " ".join(repr(float(value)) for _, value in line.points)
    total = line.total if line.total is not None else len(line.points)
    parts = [f'<g class="series {colour}" data-series="{_attr(line.name)}" data-total="{total}">',
             f'<polyline class="line" points="{coords}" data-steps="{steps}" data-values="{values}"/>']
    if len(line.points) <= MARKERS_MAX:
        for step, value in line.points:
            parts.append(f'<circle class="dot" cx="{_num(px(step))}" cy="{_num(py(value))}" r="2.5">'
                         f'<title>{escape(line.name)} · step {step}: {label(value)}</title></circle>')
    parts.append("</g>")
    return "".join(parts)


def _legend(lines: Sequence[Line], width: int) -> str:
    parts = ['<g class="legend">']
    x = width - MARGIN_R
    shown = list(lines[:LEGEND_MAX])
    texts = [line.name for line in shown]
    if len(lines) > LEGEND_MAX:
        texts.append(f"+{len(lines) - LEGEND_MAX} more")
    # Right-aligned, one row: each entry about 7 px per character plus its swatch.
    for index in range(len(texts) - 1, -1, -1):
        text = texts[index]
        x -= 7 * len(text) + 4
        parts.append(f'<text class="legend-text" x="{_num(x)}" y="16">{escape(text)}</text>')
        if index < len(shown):
            x -= 14
            parts.append(f'<rect class="swatch s{shown[index].colour % PALETTE}" x="{_num(x)}" y="8" width="10" '
                         f'height="10"/>')
        x -= 10
    parts.append("</g>")
    return "".join(parts)


@dataclass(frozen=True)
class Bar:
    """One node call on the timeline: its machine (lane), label, start and end in seconds from the run's start."""

    lane: str
    label: str
    start: float
    end: float
    status: str
    #: What the pointer shows (a tooltip).
    title: str
    #: Where clicking the bar leads (the call's Flower task page), if anywhere.
    href: str | None = None


def _pack(bars: Sequence[Bar]) -> list[list[Bar]]:
    """Bars of one lane in rows, so that bars that overlap in time sit in different rows (first fit)."""
    rows: list[list[Bar]] = []
    ends: list[float] = []
    for bar in sorted(bars, key=lambda b: (b.start, b.end)):
        for index, end in enumerate(ends):
            if bar.start >= end:
                rows[index].append(bar)
                ends[index] = bar.end
                break
        else:
            rows.append([bar])
            ends.append(bar.end)
    return rows


def timeline(bars: Sequence[Bar], width: int = TIMELINE_W) -> str:
    """A Gantt chart: one lane per machine (named at the left), a bar per call, time in seconds below."""
    if not bars:
        return '<svg class="timeline" xmlns="http://www.w3.org/2000/svg" width="300" height="24"><text x="0" ' \
               'y="16" class="empty">no calls ran on a machine</text></svg>'
    lanes = {lane: _pack([b for b in bars if b.lane == lane]) for lane in sorted({b.lane for b in bars})}
    span = max(max(b.end for b in bars), 1e-3)
    plot_w = width - LANE_LABEL_W - 10
    height = sum(len(rows) for rows in lanes.values()) * ROW_H + AXIS_H + 4 * len(lanes)

    def px(seconds: float) -> float:
        return LANE_LABEL_W + seconds / span * plot_w

    parts = [f'<svg class="timeline" xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" '
             f'width="{width}" height="{height}" role="img" aria-label="node calls per machine">']
    y = 0
    for lane, rows in lanes.items():
        lane_h = len(rows) * ROW_H
        parts.append(f'<g class="lane" data-machine="{_attr(lane)}">'
                     f'<rect class="lane-bg" x="0" y="{y}" width="{width}" height="{lane_h}"/>'
                     f'<text class="lane-label" x="6" y="{y + lane_h / 2}" dy="0.32em">{escape(lane)}</text>')
        for row_index, row in enumerate(rows):
            top = y + row_index * ROW_H + 3
            for bar in row:
                parts.append(_bar(bar, px, top))
        parts.append("</g>")
        y += lane_h + 4
    for tick in nice_ticks(0.0, span, 8):
        x = _num(px(tick))
        parts.append(f'<line class="tickmark" x1="{x}" y1="{y}" x2="{x}" y2="{y + 4}"/>'
                     f'<text class="tick" x="{x}" y="{y + 16}" text-anchor="middle">{label(tick)}s</text>')
    parts.append("</svg>")
    return "".join(parts)


def _bar(bar: Bar, px: Scale, top: float) -> str:
    x = px(bar.start)
    w = max(2.0, px(bar.end) - x)
    inner = (f'<rect class="st-{_attr(bar.status)}" x="{_num(x)}" y="{_num(top)}" width="{_num(w)}" '
             f'height="{ROW_H - 6}" rx="2"/><title>{escape(bar.title)}</title>')
    if w > 7 * len(bar.label) + 6:
        inner += f'<text class="bar-label" x="{_num(x + 4)}" y="{_num(top + (ROW_H - 6) / 2)}" dy="0.32em">' \
                 f'{escape(bar.label)}</text>'
    body = f'<g class="call" data-node="{_attr(bar.label)}" data-status="{_attr(bar.status)}">{inner}</g>'
    return f'<a href="{_attr(bar.href)}">{body}</a>' if bar.href else body


def usage_bar(kind: str, used: float, total: float, text: str, width: int = 220) -> str:
    """One resource of a machine as a bar: the part in use filled, with ``text`` beside it."""
    share = 0.0 if total <= 0 else min(1.0, max(0.0, used / total))
    return (f'<svg class="usage" data-kind="{_attr(kind)}" data-used="{used:g}" data-total="{total:g}" '
            f'xmlns="http://www.w3.org/2000/svg" width="{width}" height="14" viewBox="0 0 {width} 14">'
            f'<rect class="usage-bg" x="0" y="1" width="{width}" height="12" rx="2"/>'
            f'<rect class="usage-used" x="0" y="1" width="{_num(width * share)}" height="12" rx="2"/>'
            f'<title>{escape(text)}</title></svg>')


def gpu_cells(ids: Sequence[int], free: Sequence[int], cell: int = 22) -> str:
    """A machine's GPUs, one cell per id, filled when the id is granted to a call."""
    if not ids:
        return '<span class="none">no GPUs</span>'
    free_set = set(free)
    width = cell * len(ids)
    parts = [f'<svg class="gpus" xmlns="http://www.w3.org/2000/svg" width="{width}" height="18" '
             f'viewBox="0 0 {width} 18">']
    for index, gpu in enumerate(ids):
        state = "free" if gpu in free_set else "busy"
        parts.append(f'<g class="gpu gpu-{state}" data-gpu="{gpu}"><rect x="{index * cell + 1}" y="1" '
                     f'width="{cell - 2}" height="16" rx="2"/><text x="{index * cell + cell / 2}" y="9" dy="0.32em" '
                     f'text-anchor="middle">{gpu}</text><title>GPU {gpu}: {state}</title></g>')
    parts.append("</svg>")
    return "".join(parts)
