"""``fluksio ui``: the run explorer in a browser — runs, their curves, comparisons and machines.

Tornado serves it (``pip install 'fluksio[ui]'``; Flower brings it too); without it the command says so
and exits 2. It listens on 127.0.0.1 unless told otherwise, and refuses an address other hosts reach
without a password.
"""

from __future__ import annotations

import asyncio
import signal
import sys
from collections.abc import Coroutine
from typing import Any
from urllib.parse import urlsplit

import click
from rich.text import Text

from fluksio.cli import render
from fluksio.errors import ConfigError
from fluksio.settings import load_settings, redact_url

#: Exit code when the explorer cannot be started as asked.
EXIT_BAD_INPUT = 2

MISSING_TORNADO = ("fluksio ui is served by Tornado, which is not installed here; install it with "
                   "pip install 'fluksio[ui]' (or pip install tornado)")


@click.command()
@click.option("--port", type=click.IntRange(0, 65535), default=8585, show_default=True,
              help="Port to listen on (0: any free one, printed when listening).")
@click.option("--address", default="127.0.0.1", show_default=True,
              help="Address to listen on; another than loopback needs --basic-auth.")
@click.option("--flower", "flower_url", metavar="URL", help="Flower's URL: each node call links to its task page.")
@click.option("--basic-auth", "basic_auth", multiple=True, metavar="USER:PASSWORD",
              help="Ask for this user and password (default: FLUKSIO_UI_BASIC_AUTH). Repeatable.")
def ui(port: int, address: str, flower_url: str | None, basic_auth: tuple[str, ...]) -> None:
    """Serve the run explorer: runs, metric curves, comparisons and machines in a browser."""
    try:
        import tornado  # noqa: F401 - only to say clearly that it is missing
    except ImportError:
        render.console(stderr=True).print(Text.assemble(("error:", "red"), " ", MISSING_TORNADO))
        sys.exit(EXIT_BAD_INPUT)
    from fluksio.cli.connection import open_client
    from fluksio.ui.app import serve
    from fluksio.ui.context import Explorer, check_bind, parse_credentials

    settings = load_settings()
    credentials = parse_credentials(basic_auth or ((settings.ui_basic_auth,) if settings.ui_basic_auth else ()))
    check_bind(address, credentials)  # before connecting: a refusal starts nothing
    if flower_url is not None and (urlsplit(flower_url).scheme not in ("http", "https")
                                   or not urlsplit(flower_url).netloc):
        raise ConfigError(f"--flower must be Flower's http:// or https:// URL, got {flower_url!r}")
    with open_client(settings) as client:  # an installation it cannot reach is said now, in one line
        explorer = Explorer(client, flower=flower_url, credentials=credentials)
        where = "the embedded store" if settings.embedded else f"broker {redact_url(settings.broker_url)}"

        def ready(bound: int) -> None:
            host = f"[{address}]" if ":" in address else address
            click.echo(f"run explorer on http://{host}:{bound}/ ({where}, store "
                       f"{redact_url(settings.database_url)}); Ctrl-C stops it", err=True)

        try:
            asyncio.run(_until_stopped(serve(explorer, port, address, ready)))
        except OSError as exc:
            raise ConfigError(f"cannot listen on {address}:{port}: {exc.strerror or exc}") from None
        finally:
            explorer.close()


async def _until_stopped(serving: Coroutine[Any, Any, None]) -> None:
    """Serve until SIGINT or SIGTERM, then return (so the client closes and an embedded run hands over)."""
    task = asyncio.ensure_future(serving)
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        await task
    except asyncio.CancelledError:
        pass
