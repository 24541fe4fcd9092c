"""``fluksio metrics-server``: the installation's Prometheus metrics, for installations that run no explorer.

The same metrics as the explorer's ``/metrics`` (``ui/exporter.py``), served by prometheus-client's own small
HTTP server (``pip install 'fluksio[metrics]'``; no Tornado needed). It listens on 127.0.0.1 unless told
otherwise: the metrics hold machine, flow and node names, never runs, parameters or values, so another
address is allowed (Prometheus usually scrapes from another host), and said when it is one other hosts reach.
"""

from __future__ import annotations

import signal
import threading

import click

from fluksio.errors import ConfigError

MISSING = ("fluksio metrics-server needs prometheus-client, which is not installed here; install it with "
           "pip install 'fluksio[metrics]' (or pip install prometheus-client)")


@click.command("metrics-server")
@click.option("--port", type=click.IntRange(0, 65535), default=9808, show_default=True,
              help="Port to listen on (0: any free one, printed when listening).")
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0: every interface, for a Prometheus on another host).")
def metrics_server(port: int, host: str) -> None:
    """Serve the installation's metrics for Prometheus at http://HOST:PORT/metrics until stopped.

    Machines (cpus, GPUs, RAM: total and free), calls running and waiting (and why), pools, runs by status,
    call durations by flow and node. README "Monitoring" lists them.
    """
    try:
        from prometheus_client import start_http_server
    except ImportError:
        raise ConfigError(MISSING) from None  # one line, exit 2 (FluksioGroup)
    from fluksio.cli.connection import open_client
    from fluksio.settings import is_loopback, load_settings, redact_url
    from fluksio.ui.exporter import registry_of

    settings = load_settings()
    with open_client(settings) as client:  # an installation it cannot reach is said now, in one line
        try:
            server, _thread = start_http_server(port, host, registry_of(client))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
        try:
            where = "the embedded store" if settings.embedded else f"broker {redact_url(settings.broker_url)}"
            shown = f"[{host}]" if ":" in host else host
            click.echo(f"metrics on http://{shown}:{server.server_port}/metrics ({where}, store "
                       f"{redact_url(settings.database_url)}); Ctrl-C stops it", err=True)
            if settings.embedded:
                click.echo("note: with no broker configured, the machines and waiting calls are this process's own; "
                           "set FLUKSIO_BROKER_URL to watch a shared installation", err=True)
            if not is_loopback(host):
                click.echo(f"note: {host} is reached by other hosts; the metrics name machines, flows and nodes",
                           err=True)
            _until_stopped()
        finally:
            server.shutdown()
            server.server_close()


def _until_stopped() -> None:
    """Block until SIGINT or SIGTERM (a service manager's stop), then return so the client closes."""
    stopped = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stopped.set())
    stopped.wait()
