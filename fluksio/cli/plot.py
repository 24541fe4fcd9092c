"""``fluksio plot``: one metric of several runs in one picture, one line per run.

matplotlib is an optional extra (``pip install 'fluksio[plot]'``); without it
the command says so and exits 2 instead of failing with a traceback.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import click
from rich.text import Text

from fluksio.cli import render
from fluksio.cli.connection import open_client
from fluksio.schemas import RunRecord

#: Exit code when the picture cannot be drawn as asked (no matplotlib, no such metric).
EXIT_BAD_INPUT = 2
#: Size of the picture, in inches, and its resolution, in dots per inch.
FIGSIZE_IN, DPI = (8.0, 4.5), 120
#: Most runs of a group plotted when none is named one by one.
GROUP_LIMIT = 200

MISSING_MATPLOTLIB = ("fluksio plot draws with matplotlib, which is not installed here; install it with "
                      "pip install 'fluksio[plot]' (or pip install matplotlib)")


@click.command()
@click.argument("args", nargs=-1, required=True, metavar="RUN... METRIC")
@click.option("-o", "--output", type=click.Path(dir_okay=False, writable=True), required=True,
              help="The picture to write; its suffix picks the format (.png, .svg, .pdf).")
@click.option("--group", help="Also plot every run of this group (a sweep).")
@click.option("--title", help="Title of the picture (default: the metric's name).")
@click.option("--log-y", is_flag=True, help="A logarithmic y axis.")
def plot(args: tuple[str, ...], output: str, group: str | None, title: str | None, log_y: bool) -> None:
    """Draw METRIC of each RUN (ids or unique prefixes) against its step, one line per run."""
    *run_ids, metric = args
    if not run_ids and not group:
        raise click.UsageError("name at least one RUN before METRIC, or a --group")
    try:
        from matplotlib.figure import Figure
    except ImportError:
        render.console(stderr=True).print(Text.assemble(("error:", "red"), " ", MISSING_MATPLOTLIB))
        sys.exit(EXIT_BAD_INPUT)
    with open_client() as client:
        records = [client.get(r) for r in run_ids]
        if group:
            records += client.runs(group=group, limit=GROUP_LIMIT)[::-1]
        records = list({r.id: r for r in records}.values())
        series = {r.id: client.metrics(r.id).get(metric) for r in records}
    lines = [(r, points) for r in records if (points := series[r.id])]
    _report_missing(metric, [r for r in records if not series[r.id]], bool(lines))
    figure = Figure(figsize=FIGSIZE_IN, dpi=DPI, layout="constrained")
    _draw(figure.subplots(), metric, lines, title, log_y)
    try:
        figure.savefig(output)
    except ValueError as exc:  # an unknown suffix: matplotlib names the formats it has
        raise click.BadParameter(str(exc), param_hint="--output") from None
    click.echo(f"wrote {output} ({len(lines)} run(s), {Path(output).stat().st_size} bytes)", err=True)


def _report_missing(metric: str, missing: list[RunRecord], any_drawn: bool) -> None:
    if not missing:
        return
    names = ", ".join(r.id for r in missing)
    if any_drawn:
        click.echo(f"warning: no {metric!r} series in run(s) {names}; left out", err=True)
        return
    raise click.UsageError(f"no run named has a metric {metric!r} (run(s) {names}); "
                           "`fluksio show RUN` lists a run's metrics")


def _draw(axes: Any, metric: str, lines: list[tuple[RunRecord, list[tuple[int, float]]]], title: str | None,
          log_y: bool) -> None:
    labels = run_labels([r for r, _ in lines])
    for record, points in lines:
        steps, values = zip(*points)
        axes.plot(steps, values, label=labels[record.id], marker="." if len(points) < 30 else None)
    from matplotlib.ticker import MaxNLocator

    axes.xaxis.set_major_locator(MaxNLocator(integer=True))  # steps are counts: no 0.5 between two of them
    axes.set_xlabel("step")
    axes.set_ylabel(metric)
    axes.set_title(title or metric)
    if log_y:
        axes.set_yscale("log")
    axes.grid(True, alpha=0.3)
    axes.legend(fontsize="small", loc="best")


def run_labels(records: list[RunRecord]) -> dict[str, str]:
    """A legend entry per run: a short id, plus the parameters (and seed) in which the runs differ.

    Parameters every run shares say nothing about which line is which, so a sweep's
    legend reads ``01J9… lr=0.1 seed=2``.
    """
    params = [{**r.params, **({"seed": r.seed} if r.seed is not None else {})} for r in records]
    names = sorted({k for p in params for k in p})
    varying = [k for k in names if len({repr(p.get(k)) for p in params}) > 1]
    ids = render.short_ids([r.id for r in records])
    return {r.id: " ".join([ids[r.id], *(f"{k}={render.short(p.get(k), 16)}" for k in varying)])
            for r, p in zip(records, params)}
