"""``GET /metrics`` on the explorer: the installation in Prometheus's text format (``ui/exporter.py``).

It asks for the explorer's password like every page does (a scrape config takes ``basic_auth``). The format
follows the scraper's ``Accept`` header (Prometheus asks for OpenMetrics), as prometheus-client's own server
does. Without prometheus-client installed the path answers 503, saying what to install; a source that cannot
be read answers ``fluksio_up 0``, never an error.
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from tornado.web import HTTPError

from fluksio.ui.base import ExplorerHandler
from fluksio.ui.context import Explorer

if TYPE_CHECKING:
    from prometheus_client.registry import CollectorRegistry

MISSING = ("/metrics needs prometheus-client, which is not installed where the explorer runs; install it with "
           "pip install 'fluksio[metrics]'")


class ScrapeEndpoint(ExplorerHandler):
    """``GET /metrics``: every fluksio metric of the installation, read now."""

    registry: CollectorRegistry | None

    def initialize(self, explorer: Explorer, registry: CollectorRegistry | None = None) -> None:  # type: ignore[override]
        super().initialize(explorer)
        self.registry = registry

    async def get(self) -> None:
        if self.registry is None:
            raise HTTPError(503, MISSING)
        from prometheus_client.exposition import choose_encoder

        encode, content_type = choose_encoder(self.request.headers.get("Accept", ""))
        body = await self.explorer.call(encode, self.registry)
        self.set_header("Content-Type", content_type)
        self.finish(body)


def scrape_route(pattern: str, explorer: Explorer) -> tuple[Any, ...]:
    """The route of ``/metrics``, with the explorer's own collector (``None`` without prometheus-client)."""
    registry = None
    if importlib.util.find_spec("prometheus_client") is not None:
        from fluksio.ui.exporter import registry_of

        registry = registry_of(explorer.client)
    return (pattern, ScrapeEndpoint, {"explorer": explorer, "registry": registry})
