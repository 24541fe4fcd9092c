"""``fluksio beat``: Celery beat firing the installation's schedules."""

from __future__ import annotations

import click

from fluksio.settings import load_settings


@click.command()
@click.option("--loglevel", default="info", show_default=True,
              type=click.Choice(["debug", "info", "warning", "error"], case_sensitive=False))
def beat(loglevel: str) -> None:
    """Fire the schedules (`fluksio schedule add`): Celery beat over the run store's schedules table.

    Run one or several (each tick starts one run however many run). With a shared broker, ticks go to the
    drivers' queue; in the embedded default the runs also run in this process.
    """
    from fluksio.client import connect
    from fluksio.worker.beat import run_beat, start_beat

    settings = load_settings()
    if not settings.embedded:
        run_beat(settings, loglevel)
        return
    with connect(settings) as client:
        start_beat(client.app, loglevel)
