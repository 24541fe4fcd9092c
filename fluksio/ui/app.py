"""The explorer as Tornado routes: served alone by ``fluksio ui``, or added to Flower by ``fluksio flower``."""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from typing import Any

from tornado.httpserver import HTTPServer
from tornado.netutil import bind_sockets
from tornado.web import Application

from fluksio.ui import api, pages
from fluksio.ui.base import STATIC, NotFound, static_files
from fluksio.ui.context import Explorer, check_bind
from fluksio.ui.scrape import scrape_route

#: A run id or a unique prefix of one, as a path segment.
_RUN = r"([0-9A-Za-z]+)"


def routes(explorer: Explorer) -> list[tuple[Any, ...]]:
    """Every page and API endpoint under ``explorer.base``, the JSON 404 for anything else under it last."""
    base = re.escape(explorer.base)
    given = {"explorer": explorer}
    return [
        (rf"{base}/?", pages.RunsPage, given),
        (rf"{base}/runs/{_RUN}", pages.RunPage, given),
        (rf"{base}/runs/{_RUN}/chart", pages.RunChart, given),
        (rf"{base}/compare", pages.ComparePage, given),
        (rf"{base}/compare/chart", pages.CompareChart, given),
        (rf"{base}/machines", pages.MachinesPage, given),
        (rf"{base}/api/runs", api.RunsApi, given),
        (rf"{base}/api/runs/{_RUN}", api.RunApi, given),
        (rf"{base}/api/runs/{_RUN}/metrics", api.MetricsApi, given),
        (rf"{base}/api/runs/{_RUN}/(cancel|resume)", api.RunActionApi, given),
        (rf"{base}/api/machines", api.MachinesApi, given),
        (rf"{base}/api/artifacts/([^/]+)", api.ArtifactApi, given),
        scrape_route(rf"{base}/metrics", explorer),
        (rf"{base}/static/(.*)", static_files(explorer), {"path": str(STATIC)}),
        (rf"{base}(?:/.*)?", NotFound, given),
    ]


def make_app(explorer: Explorer) -> Application:
    """The explorer alone: its routes, a JSON 404 anywhere else, never a traceback (``serve_traceback``)."""
    return Application(routes(explorer), default_handler_class=NotFound, default_handler_args={"explorer": explorer},
                       xsrf_cookies=True, xsrf_cookie_kwargs={"samesite": "Strict", "httponly": False},
                       serve_traceback=False, compress_response=True)


async def serve(explorer: Explorer, port: int, address: str, ready: Callable[[int], None] | None = None) -> None:
    """Listen on ``address:port`` (port 0: any free one) until cancelled; ``ready(port)`` once listening.

    Refuses an address other hosts reach unless the explorer asks for a password.
    """
    check_bind(address, explorer.credentials)
    sockets = bind_sockets(port, address)
    server = HTTPServer(make_app(explorer), xheaders=False)
    server.add_sockets(sockets)
    if ready is not None:
        ready(sockets[0].getsockname()[1])
    try:
        await asyncio.Event().wait()
    finally:
        server.stop()
        await server.close_all_connections()
